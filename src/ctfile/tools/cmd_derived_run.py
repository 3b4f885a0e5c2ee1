"""``ctfile derived run``: keep derived tables within their target lags
(:func:`ctfile.spark.derived.run`, SPEC §Derived tables, target lag).

The one command of the tool that needs Spark: the refreshes run on a
SparkSession, ``SparkSession.builder.getOrCreate()`` with the ``--conf``
settings, so the session is whatever PySpark's environment says: the
running one (a notebook, a test), Spark Connect when ``SPARK_REMOTE`` is
set, ``spark-submit``'s, or a local one (``--conf spark.master=local[4]``).
PySpark is imported only when the command runs, so the other commands stay
free of it.

The report (:class:`RunSummary`) is gathered first, then printed as text or
JSON: each refresh with its outcome, action, reason, duration and lag
against the target, and each table's status at the last cycle.

Exit codes: 0 success (refreshes that fell behind are reported and logged
as warnings); 1 an error, or a refresh that failed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
from dataclasses import dataclass
from typing import Annotated, Any, Iterator, Optional

import typer
from rich.table import Table as RichTable

import ctfile

from ctfile.tools import _output as out
from ctfile.tools._common import JsonOpt, StorageOpt, handle_errors, parse_storage_options
from ctfile.tools._duration import format_duration, parse_duration
from ctfile.tools.cmd_derived import derived_app

UrisArg = Annotated[
    list[str], typer.Argument(metavar="URI...", help="The derived tables to keep current.", show_default=False)
]


def _when(seconds: float | None) -> str | None:
    """A clock time (seconds since the epoch) as ISO 8601, UTC."""
    if seconds is None:
        return None
    return dt.datetime.fromtimestamp(seconds, tz=dt.timezone.utc).isoformat(timespec="milliseconds")


def _took(seconds: float | None) -> str:
    return "" if seconds is None else format_duration(round(max(seconds, 0.0), 3))


@dataclass(frozen=True)
class RunSummary:
    """What ``ctfile derived run`` reports (from a ``RunReport``)."""

    cycles: int
    outcomes: dict
    behind: int
    stopped: bool
    refreshes: list[dict]
    tables: list[dict]

    @classmethod
    def of(cls, report: Any) -> "RunSummary":
        refreshes = [_refresh_row(r) for r in report.refreshes()]
        last = report.last[-1].statuses if report.last else ()
        return cls(report.cycles, dict(report.outcomes), report.behind, report.stopped, refreshes,
                   [_status_row(s) for s in last])

    @property
    def failed(self) -> int:
        return int(self.outcomes.get("failed", 0))

    def as_json(self) -> dict:
        return out.fields_dict(self)

    def print_text(self) -> None:
        con = out.console()
        counts = ", ".join(f"{n} {k}" for k, n in sorted(self.outcomes.items())) or "no refresh"
        stop = ", stopped" if self.stopped else ""
        con.print(f"{self.cycles} cycle(s): {counts}; {self.behind} behind{stop}", soft_wrap=True)
        if self.refreshes:
            con.print(self._refreshes_table())
        con.print(self._tables_table())

    def _refreshes_table(self) -> RichTable:
        t = RichTable(title="refreshes", title_justify="left")
        for c, just in (("table", "left"), ("outcome", "left"), ("action", "left"), ("took", "right"),
                        ("lag", "right"), ("target", "right"), ("reason", "left")):
            t.add_column(c, justify=just, overflow="fold")
        for r in self.refreshes:
            lag = _took(r["lag_s"]) + (" BEHIND" if r["behind"] else "")
            t.add_row(r["uri"], r["outcome"], r["action"] or "", _took(r["duration_s"]), lag, _took(r["target_s"]),
                      r["reason"])
        return t

    def _tables_table(self) -> RichTable:
        t = RichTable(title="tables at the last cycle", title_justify="left")
        for c, just in (("table", "left"), ("target lag", "left"), ("lag", "right"), ("refreshed", "left"),
                        ("why", "left")):
            t.add_column(c, justify=just, overflow="fold")
        for s in self.tables:
            t.add_row(s["uri"], s["target_lag"] or "", _took(s["lag_s"]), "yes" if s["due"] else "no", s["reason"])
        return t


def _refresh_row(r: Any) -> dict:
    d = dataclasses.asdict(r)
    d.update(outcome=r.outcome.value, action=None if r.action is None else r.action.value, started=_when(r.started))
    return d


def _status_row(s: Any) -> dict:
    d = dataclasses.asdict(s)
    d.update(pending_since=_when(s.pending_since), start_by=_when(s.start_by))
    return d


def _conf_pairs(conf: list[str] | None) -> list[tuple[str, str]]:
    pairs = []
    for item in conf or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected KEY=VALUE, found {item!r}", param_hint="'--conf'")
        pairs.append((key.strip(), value))
    return pairs


def _poll_seconds(poll: str | None) -> float | None:
    if poll is None:
        return None
    try:
        seconds = parse_duration(poll).total_seconds()
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="'--poll'") from None
    if seconds <= 0:
        raise typer.BadParameter(f"expected a duration > 0, found {poll!r}", param_hint="'--poll'")
    return seconds


def _spark_session(conf: list[tuple[str, str]]) -> Any:
    """``SparkSession.builder.getOrCreate()`` with the ``--conf`` settings."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as e:
        raise ImportError(f"ctfile derived run needs PySpark: pip install 'ctfile[spark]' ({e})") from None
    builder = SparkSession.builder.appName("ctfile derived run")
    for key, value in conf:
        builder = builder.config(key, value)
    return builder.getOrCreate()


@contextlib.contextmanager
def _progress_to_stderr() -> Iterator[None]:
    """The scheduler's progress (logger ``ctfile.derived``, INFO) on stderr
    while the command runs, unless the application configured logging."""
    logger = logging.getLogger("ctfile.derived")
    if logger.handlers or logging.getLogger().handlers:
        yield
        return
    handler, level = logging.StreamHandler(), logger.level
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@derived_app.command("run")
def run(
    uris: UrisArg,
    once: Annotated[bool, typer.Option("--once", help="Refresh what is due now and exit (for cron).")] = False,
    poll: Annotated[
        Optional[str],
        typer.Option("--poll", metavar="DURATION", help="How often to read the logs (30s, 1m); default a quarter "
                     "of the smallest target lag, from 1s to 1m.", show_default=False),
    ] = None,
    conf: Annotated[
        Optional[list[str]],
        typer.Option("--conf", metavar="KEY=VALUE", help="A Spark setting for the session (repeatable).",
                     show_default=False),
    ] = None,
    json_: JsonOpt = False,
    storage_option: StorageOpt = None,
) -> None:
    """Keep derived tables within their target lags until stopped.

    Each table is refreshed, in dependency order, when waiting longer would
    let its lag (how long its rows have missed a source change) pass its
    target lag; a 'downstream' table only when a table reading it is. The
    logs alone decide, so tables whose sources are quiet cost no Spark job.
    Progress goes to stderr; SIGINT or SIGTERM stops after the refresh
    under way (a second one at once). With --once, refresh what is due and
    exit. Two schedulers may keep one table: the log lets one refresh
    commit per frontier and the other finds it done.
    """
    options, every, pairs = parse_storage_options(storage_option), _poll_seconds(poll), _conf_pairs(conf)
    with handle_errors(json_), _progress_to_stderr():
        from ctfile.spark import derived, derived_schedule

        for uri in uris:  # before a session starts: a bad table costs no JVM
            derived_schedule.required_lag(uri, ctfile.open_table(uri, storage_options=options).derived)
        report = derived.run(_spark_session(pairs), uris, once=once, poll=every, storage_options=options)
    summary = RunSummary.of(report)
    out.emit(summary, json=json_)
    if summary.failed:
        raise typer.Exit(1)
