"""Output helpers of the ``ctfile`` command: the one output convention
(:class:`Report`, :func:`emit`), JSON encoding, rich consoles, progress
bars, one-line errors.

Every command (in the modules ``cmd_*`` of :mod:`ctfile.tools.cli`) first
gathers what it reports into a frozen report object, computed apart from its
rendering, then hands it to :func:`emit`, which prints it as JSON
(``as_json()``) or as text (``print_text()``, through rich). Only the change
rows of ``ctfile changes --format csv/json`` stream to stdout as they are
read, since a report would hold them all in memory.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import enum
import json
import math
import os
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Protocol

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

# Rich wraps at 80 columns when stdout is not a terminal; piped tables read
# better wider.
_PIPE_WIDTH = 200


def stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def console() -> Console:
    """A console on the current stdout (tests swap ``sys.stdout``)."""
    width = None if stdout_is_terminal() or os.environ.get("COLUMNS") else _PIPE_WIDTH
    return Console(file=sys.stdout, highlight=False, width=width, soft_wrap=False)


def silence_stdout() -> None:
    """Point stdout at /dev/null after EPIPE, so that the interpreter's final
    flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # no real file descriptor (tests)
        pass


def _json_float(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _json_datetime(value: dt.datetime) -> str:
    """ISO-8601, with ``Z`` for UTC."""
    if value.tzinfo is not None and value.utcoffset() == dt.timedelta(0):
        return value.replace(tzinfo=None).isoformat() + "Z"
    return value.isoformat()


# What jsonable does with a value of each type, first match wins: bool and
# int (and str enums) stay themselves, a datetime is matched before the date
# it is a subclass of.
_JSON_CONVERSIONS: tuple[tuple[type | tuple[type, ...], Callable[[Any], Any]], ...] = (
    ((bool, int, str), lambda v: v),
    (float, _json_float),
    (dict, lambda v: {str(k): jsonable(x) for k, x in v.items()}),
    ((list, tuple, set, frozenset), lambda v: [jsonable(x) for x in v]),
    (dt.datetime, _json_datetime),
    ((dt.date, dt.time), lambda v: v.isoformat()),
    (dt.timedelta, lambda v: v.total_seconds()),
    (decimal.Decimal, str),
    ((bytes, bytearray, memoryview), lambda v: base64.b64encode(bytes(v)).decode("ascii")),
    (enum.Enum, lambda v: jsonable(v.value)),
)


def _is_dataclass_instance(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def jsonable(value: Any) -> Any:
    """``value`` with everything JSON cannot hold turned into strings:
    datetimes to ISO-8601, decimals to strings, bytes to base64, non-finite
    floats to ``"NaN"``/``"Infinity"``/``"-Infinity"``.

    >>> jsonable({1: [float("inf"), b"ab", dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc)]})
    {'1': ['Infinity', 'YWI=', '2026-01-02T00:00:00Z']}
    """
    if value is None:
        return None
    for types, convert in _JSON_CONVERSIONS:
        if isinstance(value, types):
            return convert(value)
    if _is_dataclass_instance(value):
        return jsonable(dataclasses.asdict(value))
    return str(value)


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(jsonable(obj), indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


class Report(Protocol):
    """What a command reports, gathered before anything is printed."""

    def as_json(self) -> Any:
        """The report as JSON values (:func:`jsonable` finishes the job)."""

    def print_text(self) -> None:
        """Print the report for people, on :func:`console`."""


def fields_dict(report: Any) -> dict[str, Any]:
    """A dataclass's fields by name, in order, the values as they are (not
    converted as :func:`dataclasses.asdict` converts them): the start of an
    ``as_json`` that renders some fields its own way."""
    return {f.name: getattr(report, f.name) for f in dataclasses.fields(report)}


class FieldsAsJson:
    """Mixin of a frozen-dataclass report whose JSON document is its fields,
    in their order (nested dataclasses as objects)."""

    def as_json(self) -> dict:
        return dataclasses.asdict(self)  # type: ignore[call-overload]


def emit(report: Report, *, json: bool) -> None:
    """Print ``report``: its JSON document with ``json``, its text otherwise.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Wrote:
    ...     path: str
    ...     def as_json(self): return {"plot": self.path}
    ...     def print_text(self): console().print(f"wrote {self.path}")
    >>> emit(Wrote("h.png"), json=True)
    {
      "plot": "h.png"
    }
    >>> emit(Wrote("h.png"), json=False)
    wrote h.png
    """
    if json:
        print_json(report.as_json())
    else:
        report.print_text()


def json_line(obj: Any) -> str:
    return json.dumps(jsonable(obj), ensure_ascii=False, separators=(",", ":"))


def fmt_time(ts: dt.datetime | int | None) -> str:
    """UTC, millisecond precision: ``2026-01-02 03:04:05.678Z``; an int is
    a time in milliseconds no datetime can hold (:func:`commit_time`),
    printed as such.

    >>> fmt_time(commit_time(0)), fmt_time(commit_time(2**63 - 1))
    ('1970-01-01 00:00:00.000Z', '9223372036854775807 ms after the epoch')
    """
    if ts is None:
        return ""
    if isinstance(ts, int):
        return f"{ts} ms after the epoch"
    ts = ts.astimezone(dt.timezone.utc)
    return f"{ts.year:04d}" + ts.strftime("-%m-%d %H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


def commit_time(ms: int) -> dt.datetime | int:
    """A time of the log (milliseconds since the epoch, any ``long``) as a
    UTC datetime, or as ``ms`` itself where a datetime cannot hold it
    (before year 1 or after 9999)."""
    try:
        return _EPOCH + dt.timedelta(milliseconds=ms)
    except OverflowError:
        return ms


def fmt_ms(ms: int | None) -> str:
    return "" if ms is None else fmt_time(commit_time(ms))


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return ""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def fail(message: str, *, code: int, json_mode: bool, kind: str = "error") -> "typer.Exit":
    """Print a one-line error on stderr and return the Exit to raise."""
    msg = one_line(message)
    if json_mode:
        sys.stderr.write(json.dumps({"error": msg, "type": kind}) + "\n")
    else:
        sys.stderr.write(f"ctfile: error: {msg}\n")
    sys.stderr.flush()
    return typer.Exit(code)


ProgressFn = Callable[[str, int, int], None]


@contextmanager
def progress_bar(description: str, *, enabled: bool | None = None) -> Iterator[ProgressFn | None]:
    """A rich progress bar on stderr, shown only when stdout is a terminal.

    Yields ``update(phase, done, total)`` (``total`` 0: unknown), or None when
    disabled.
    """
    if enabled is None:
        enabled = stdout_is_terminal()
    if not enabled:
        yield None
        return
    prog = Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    tasks: dict[str, Any] = {}

    def update(phase: str, done: int, total: int) -> None:
        if phase not in tasks:
            tasks[phase] = prog.add_task(f"{description}: {phase}", total=total or None)
        prog.update(tasks[phase], completed=done, total=total or None)

    with prog:
        yield update
