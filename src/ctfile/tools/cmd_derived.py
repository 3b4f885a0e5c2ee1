"""``ctfile derived show``: a derived table's definition, frontier, lag and
refreshes (SPEC §Derived tables).

The report (:class:`DerivedReport`) is computed first, then printed as text
or JSON: the query, refresh mode and target lag; each source with the table
id and URI it is bound to, the version and schema id the frontier holds and
how far the source has moved on since (versions, and the time between the
frontier's commit and the source's latest, each source opened read-only);
and the last refreshes, newest first, with their action, reason, rows in and
out and duration (``commitInfo.refresh``). ``--plot FILE`` draws the lag and
the refreshes over time instead (:mod:`~ctfile.tools.derived_pictures`).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Annotated, Any, Optional

import typer
from rich.table import Table as RichTable
from rich.text import Text

import ctfile
from ctfile.tools import _output as out
from ctfile.tools._common import JsonOpt, StorageOpt, UriArg, handle_errors, open_uri, parse_storage_options
from ctfile.tools import _plot_render as render
from ctfile.tools._duration import format_duration
from ctfile.tools.cmd_inspect import PlotOpt, write_plot
from ctfile.tools.derived_pictures import gather_derived

DEFAULT_REFRESHES = 10


class SourceStatus(str, enum.Enum):
    """Whether a source could be compared with the frontier."""

    OK = "ok"
    UNREACHABLE = "unreachable"
    OTHER_TABLE = "other table"


@dataclass(frozen=True)
class SourceRow:
    """One source of a derived table and its lag behind the source."""

    name: str
    table_id: str
    uri: str
    frontier_version: int | None
    schema_id: int | None
    latest_version: int | None
    lag_versions: int | None
    #: Seconds between the commit of the frontier's version and the source's latest commit.
    lag_s: float | None
    status: str
    problem: str | None

    @classmethod
    def of(cls, binding: ctfile.SourceBinding, frontier: ctfile.SourceVersion | None,
           storage_options: dict | None) -> "SourceRow":
        base = dict(name=binding.name, table_id=binding.table_id, uri=binding.uri,
                    frontier_version=None if frontier is None else frontier.version,
                    schema_id=None if frontier is None else frontier.schema_id)
        try:
            source = ctfile.open_table(binding.uri, storage_options=storage_options)
        except ctfile.CtfileError as e:
            return cls(**base, latest_version=None, lag_versions=None, lag_s=None,
                       status=SourceStatus.UNREACHABLE.value, problem=str(e))
        if source.metadata.table_id != binding.table_id:
            problem = f"the table at {binding.uri} has table id {source.metadata.table_id}, not {binding.table_id}"
            return cls(**base, latest_version=source.version, lag_versions=None, lag_s=None,
                       status=SourceStatus.OTHER_TABLE.value, problem=problem)
        lag_versions, lag_s = _lag(source, frontier)
        return cls(**base, latest_version=source.version, lag_versions=lag_versions, lag_s=lag_s,
                   status=SourceStatus.OK.value, problem=None)

    def lag_text(self) -> str:
        if self.status != SourceStatus.OK.value:
            return f"{self.status}: {self.problem}"
        if self.lag_versions is None:
            return f"never refreshed ({self.latest_version} is the latest version)"
        time = "" if self.lag_s is None else f", {format_duration(round(self.lag_s, 3))}"
        return f"{self.lag_versions} versions{time}"


def _lag(source: ctfile.Table, frontier: ctfile.SourceVersion | None) -> tuple[int | None, float | None]:
    """Versions and seconds the source's latest version is past ``frontier``
    (None: never refreshed; seconds None: the frontier's entry was vacuumed).
    Two commit infos are read, whatever the lag."""
    if frontier is None:
        return None, None
    behind = max(source.version - frontier.version, 0)
    try:
        then = source.log.commit_info(min(frontier.version, source.version)).timestamp
    except (FileNotFoundError, ctfile.CtfileError):
        return behind, None
    return behind, (source.log.commit_info(source.version).timestamp - then) / 1000


@dataclass(frozen=True)
class RefreshRow:
    """One refresh commit (its ``commitInfo.refresh``)."""

    version: int
    timestamp: Any
    action: str
    reason: str
    rows_in: int
    rows_out: int
    duration_ms: int | None
    data_timestamp: Any

    @classmethod
    def of(cls, h: ctfile.HistoryEntry) -> "RefreshRow":
        r = h.refresh
        assert r is not None
        return cls(h.version, out.commit_time(h.timestamp_ms), r.action.value, r.reason, r.rows_in, r.rows_out,
                   r.duration_ms, out.commit_time(r.data_timestamp))


@dataclass(frozen=True)
class DerivedReport:
    """What ``ctfile derived show`` shows."""

    uri: str
    version: int
    query: str
    refresh_mode: str
    target_lag: str | None
    plan_version: int
    hidden_columns: list[str]
    data_timestamp: Any
    sources: list[SourceRow]
    refreshes: list[RefreshRow]

    @classmethod
    def of(cls, uri: str, table: ctfile.Table, *, limit: int, storage_options: dict | None) -> "DerivedReport":
        d = table.derived
        if d is None:
            raise ctfile.DerivedTableError(
                f"{uri} is not a derived table: expected metadata.derived (protocol feature derivedTables); "
                f"found a table without it"
            )
        sources = [SourceRow.of(b, d.frontier_of(b.name), storage_options) for b in d.sources]
        refreshes = _refreshes(table, limit)
        return cls(uri, table.version, d.query, d.refresh_mode.value, d.target_lag, d.plan_version,
                   list(d.hidden_columns), None if d.data_timestamp is None else out.commit_time(d.data_timestamp),
                   sources, refreshes)

    def as_json(self) -> dict:
        d = out.fields_dict(self)
        d["sources"] = [dataclasses.asdict(s) for s in self.sources]
        d["refreshes"] = [out.fields_dict(r) for r in self.refreshes]
        return d

    def print_text(self) -> None:
        con = out.console()
        con.print(Text(f"derived table {self.uri}  version {self.version}", style="bold"), soft_wrap=True)
        con.print(f"query: {self.query}", soft_wrap=True)
        lag = self.target_lag or "none"
        con.print(f"refresh mode {self.refresh_mode}, target lag {lag}, plan version {self.plan_version}")
        fresh = out.fmt_time(self.data_timestamp) if self.data_timestamp is not None else "never refreshed"
        con.print(f"data timestamp: {fresh}; hidden columns: {', '.join(self.hidden_columns)}", soft_wrap=True)
        con.print(self._sources_table())
        con.print(self._refreshes_table() if self.refreshes else "no refreshes")

    def _sources_table(self) -> RichTable:
        t = RichTable(title="sources", title_justify="left")
        for c, just in (("name", "left"), ("table id", "left"), ("uri", "left"), ("frontier", "right"),
                        ("latest", "right"), ("lag", "left")):
            t.add_column(c, justify=just, overflow="fold")
        for s in self.sources:
            t.add_row(s.name, s.table_id, s.uri, _num(s.frontier_version), _num(s.latest_version), s.lag_text())
        return t

    def _refreshes_table(self) -> RichTable:
        t = RichTable(title="refreshes, newest first", title_justify="left")
        for c, just in (("version", "right"), ("time (UTC)", "left"), ("action", "left"), ("reason", "left"),
                        ("rows in", "right"), ("rows out", "right"), ("duration", "right")):
            t.add_column(c, justify=just, overflow="fold")
        for r in self.refreshes:
            took = "" if r.duration_ms is None else format_duration(r.duration_ms / 1000)
            t.add_row(str(r.version), out.fmt_time(r.timestamp), r.action, r.reason, str(r.rows_in),
                      str(r.rows_out), took)
        return t


def _refreshes(table: ctfile.Table, limit: int) -> list[RefreshRow]:
    """The last ``limit`` refresh commits, newest first (a derived table's
    other commits are maintenance: compactions, properties)."""
    rows: list[RefreshRow] = []
    for h in table.history():
        if h.refresh is not None:
            rows.append(RefreshRow.of(h))
            if len(rows) == limit:
                break
    return rows


def _num(v: int | None) -> str:
    return "" if v is None else str(v)


derived_app = typer.Typer(help="Inspect derived tables (SPEC §Derived tables).", no_args_is_help=True)


@derived_app.command("show")
def show(
    uri: UriArg,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, help="Show the last N refreshes.")
    ] = DEFAULT_REFRESHES,
    json_: JsonOpt = False,
    storage_option: StorageOpt = None,
    plot: PlotOpt = None,
) -> None:
    """Show a derived table: its query, sources, frontier, lag and last refreshes.

    Each source is listed with the table id and URI it is bound to, the
    version the table's rows were last brought up to (the frontier), the
    source's latest version, and the lag between them in versions and in
    commit time (each source is opened read-only, with the same storage
    options). Then the last refreshes, newest first: action (NO_DATA,
    INCREMENTAL, FULL, REINITIALIZE), reason, rows in and out, duration.

    With --plot FILE, a figure instead: the lag behind each source over time
    against the target lag, and each refresh's duration coloured by its
    action, from the table's refresh commits and its sources' logs (every
    refresh, whatever --limit says).
    """
    if plot is not None:
        def gather() -> Any:
            options = parse_storage_options(storage_option)
            return gather_derived(open_uri(uri, storage_option), uri, storage_options=options)

        write_plot(plot, json_, gather, render.derived_figure)
        return
    with handle_errors(json_):
        options = parse_storage_options(storage_option)
        report = DerivedReport.of(uri, open_uri(uri, storage_option), limit=limit, storage_options=options)
    out.emit(report, json=json_)


GROUPS = ((derived_app, "derived"),)
