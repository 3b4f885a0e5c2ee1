"""Output helpers of the ``ctfile`` command: JSON encoding, rich consoles,
progress bars, one-line errors.

Everything here works on plain Python values; the commands in
:mod:`ctfile.tools.cli` (in its command modules ``cmd_*``) turn ctfile's public
objects into such values.
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
from typing import Any, Callable, Iterator

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


def jsonable(value: Any) -> Any:
    """``value`` with everything JSON cannot hold turned into strings:
    datetimes to ISO-8601, decimals to strings, bytes to base64, non-finite
    floats to ``"NaN"``/``"Infinity"``/``"-Infinity"``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None and value.utcoffset() == dt.timedelta(0):
            return value.replace(tzinfo=None).isoformat() + "Z"
        return value.isoformat()
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    return str(value)


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(jsonable(obj), indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


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
