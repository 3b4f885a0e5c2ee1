"""``ctfile changes``: printing or exporting (CSV, JSON lines, Parquet) the
change rows of an interval; CSV and JSON-lines exports compressed by
fsspec when the output name ends in a compression suffix (``.gz``, ``.zst``,
...)."""

from __future__ import annotations

import contextlib
import enum
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional

import fsspec
import fsspec.utils
import typer
from rich.table import Table as RichTable
from rich.text import Text

import ctfile
from ctfile.tools import _output as out
from ctfile.tools._common import StorageOpt, UriArg, handle_errors, open_uri


class Format(str, enum.Enum):
    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"


# The output-name suffixes that name a format (what `--format` defaults to with --output).
SUFFIX_FORMATS = {".csv": Format.csv, ".json": Format.json, ".jsonl": Format.json, ".ndjson": Format.json,
                  ".parquet": Format.parquet}

DEFAULT_TABLE_ROWS = 100  # rows `changes --format table` prints without --limit


def _limited(batches: Iterator, limit: int | None) -> Iterator:
    """Batches holding at most ``limit`` rows in all; stops pulling input
    (and reading partitions) once the limit is reached."""
    left = limit
    for b in batches:
        if left is not None:
            if left <= 0:
                break
            if b.num_rows > left:
                b = b.slice(0, left)
            left -= b.num_rows
        if b.num_rows:
            yield b


@dataclass(frozen=True)
class OutputSpec:
    """How an export is written: its format and fsspec's compression (None: none)."""

    format: Format
    compression: str | None


def output_spec(output: Path, fmt: Format | None, *, default: Format | None = None) -> OutputSpec:
    """The format and compression of an export to ``output``.

    A last suffix fsspec knows as a compression (``.gz``, ``.zst``, ``.bz2``,
    ``.xz``, ...; ``fsspec.utils.compressions``) selects it; the suffix before
    it names the format (:data:`SUFFIX_FORMATS`) when ``fmt`` is None. Checked
    before anything is read or written.

    Raises
    ------
    ctfile.InvalidArgumentError
        The format cannot be told from the name and ``fmt`` is None; the name
        names another format than ``fmt``; Parquet with a compression suffix
        (a Parquet file compresses its pages itself and must stay seekable).

    Examples
    --------
    >>> output_spec(Path("c.jsonl.zst"), None)
    OutputSpec(format=<Format.json: 'json'>, compression='zstd')
    >>> output_spec(Path("c.out.gz"), Format.csv)
    OutputSpec(format=<Format.csv: 'csv'>, compression='gzip')
    """
    compression = fsspec.utils.infer_compression(output.name)
    stem = Path(output.stem) if compression else output
    named = SUFFIX_FORMATS.get(stem.suffix.lower())
    chosen = fmt or named or default
    if chosen is None:
        raise _unknown_format(output, stem)
    if _contradicts(fmt, named):
        raise ctfile.InvalidArgumentError(
            f"--format {fmt.value} but the --output name {output.name!r} says {named.value}"
        )
    if chosen is Format.parquet and compression:
        raise ctfile.InvalidArgumentError(
            f"--output {output.name!r}: Parquet cannot be compressed as a whole ({compression}); it compresses its "
            "pages itself: drop the compression suffix"
        )
    return OutputSpec(chosen, compression)


def _unknown_format(output: Path, stem: Path) -> ctfile.InvalidArgumentError:
    """The error for an ``--output`` name whose suffix names no format (and no ``--format``)."""
    return ctfile.InvalidArgumentError(
        f"cannot tell the format of --output {output.name!r} from its suffix {stem.suffix or '(none)'!r}: expected "
        f"{', '.join(SUFFIX_FORMATS)}, optionally followed by a compression suffix "
        f"({', '.join('.' + k for k in sorted(fsspec.utils.compressions))}), or give --format csv, json or parquet"
    )


def _contradicts(given: Format | None, named: Format | None) -> bool:
    """``--format`` and the format the ``--output`` name says are both there, and differ."""
    return given is not None and named is not None and named is not given


def changes(
    uri: UriArg,
    start: Annotated[Optional[int], typer.Option("--start", "-s", help="First version (included; default 0).")] = None,
    end: Annotated[Optional[int], typer.Option("--end", "-e", help="Last version (included; default latest).")] = None,
    start_timestamp: Annotated[Optional[str], typer.Option("--start-timestamp", help="First commit time (ISO-8601), instead of --start.")] = None,
    end_timestamp: Annotated[Optional[str], typer.Option("--end-timestamp", help="Last commit time (ISO-8601), instead of --end.")] = None,
    information: Annotated[
        ctfile.ChangeMode, typer.Option("--information", "-i", help="default (minimum delta), append_only or audit.")
    ] = ctfile.ChangeMode.DEFAULT,
    format_: Annotated[
        Optional[Format],
        typer.Option("--format", "-f", help=(
            "table (default), csv, json (one object per line) or parquet (needs --output). "
            "With --output, default: told from the name (.csv, .json/.jsonl/.ndjson, .parquet)."
        )),
    ] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help=(
        "Write the rows to this file instead of stdout. A compression suffix after the format's "
        "(changes.jsonl.zst, changes.csv.gz; .bz2, .xz too) compresses CSV and JSON lines."
    ), dir_okay=False)] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", "-n", min=0, help=f"At most N rows (table format default: {DEFAULT_TABLE_ROWS}).")] = None,
    json_: Annotated[
        bool, typer.Option("--json", help="Rows as JSON lines (--format json); with --output, a JSON summary.")
    ] = False,
    storage_option: StorageOpt = None,
) -> None:
    """Print or export the change rows of an interval (both ends included)."""
    with handle_errors(json_):
        fmt, compression = _destination(format_, output, json_=json_)
        cs = open_uri(uri, storage_option).changes(
            start_version=start, end_version=end, start_timestamp=start_timestamp,
            end_timestamp=end_timestamp, information=information.value,
        )
        if fmt is Format.table:
            report = ChangeRowsReport.of(uri, cs, information=information.value, limit=limit)
        else:
            report = _export_rows(cs, fmt, output, compression=compression, limit=limit)
        if report is not None:  # None: the rows themselves went to stdout
            out.emit(report, json=json_)


def _export_rows(cs: Any, fmt: Format, output: Path | None, *, compression: str | None,
                 limit: int | None) -> "ExportReport | None":
    """Write the change rows of ``cs`` to ``output`` (stdout: None) as ``fmt``;
    what was written, or None when they went to stdout."""
    with out.progress_bar("exporting change rows", enabled=out.stdout_is_terminal() and output is not None) as prog:
        n = _export(cs.schema, _limited(cs.to_batches(), limit), fmt.value, output, prog, compression=compression)
    if output is None:
        return None
    return ExportReport(str(output), fmt.value, compression, n, cs.start_version, cs.end_version, str(cs.plan_shape))


def _destination(format_: Format | None, output: Path | None, *, json_: bool) -> tuple[Format, str | None]:
    """The format of the rows and the compression of ``output`` (None: none),
    checked before anything is read: ``--format``, else told from the
    ``--output`` name, else JSON lines with ``--json``, else a table.

    Raises
    ------
    ctfile.InvalidArgumentError
        The options contradict each other, or name no format an output can take.
    """
    compression = None
    if _names_an_export(format_, output):
        # --json alone meant JSON lines before formats were told from names: still so for other names.
        spec = output_spec(output, format_, default=Format.json if json_ else None)
        format_, compression = spec.format, spec.compression
    fmt = format_ or (Format.json if json_ else Format.table)
    _check_destination(fmt, output, json_=json_)
    return fmt, compression


def _names_an_export(format_: Format | None, output: Path | None) -> bool:
    """An ``--output`` file not contradicted by ``--format table``: its name may tell the format."""
    return output is not None and format_ is not Format.table


def _check_destination(fmt: Format, output: Path | None, *, json_: bool) -> None:
    """Refuse the combinations of ``--format``, ``--output`` and ``--json`` that cannot be written."""
    to_stdout = output is None
    if json_:
        _check_json_summary(fmt, to_stdout=to_stdout)
    if fmt is Format.parquet and to_stdout:
        raise ctfile.InvalidArgumentError("--format parquet needs --output FILE")
    if fmt is Format.table and not to_stdout:
        raise ctfile.InvalidArgumentError("--output needs --format csv, json or parquet")


def _check_json_summary(fmt: Format, *, to_stdout: bool) -> None:
    """``--json`` prints rows (``--format json`` to stdout) or a summary of
    rows written to a file: refuse it with a table, or with other rows on stdout."""
    if fmt is Format.table:
        raise ctfile.InvalidArgumentError("--json and --format table contradict each other")
    if fmt is not Format.json and to_stdout:
        raise ctfile.InvalidArgumentError(
            f"--json with --format {fmt.value} needs --output FILE (the rows go to the file, a JSON summary to stdout)"
        )


@dataclass(frozen=True)
class ExportReport(out.FieldsAsJson):
    """What ``ctfile changes --output FILE`` reports once the rows are written."""

    output: str
    format: str
    compression: str | None
    rows: int
    start_version: int
    end_version: int
    plan_shape: str

    def print_text(self) -> None:
        out.console().print(f"wrote {self.rows} change rows ({self.start_version}..{self.end_version}, "
                            f"{self.plan_shape}) to {self.output}")


def _counting(batches: Iterator, prog) -> Iterator:
    n = 0
    for b in batches:
        n += b.num_rows
        if prog is not None:
            prog("rows", n, 0)
        yield b


def _export(schema, batches: Iterator, fmt: str, output: Path | None, prog, *, compression: str | None = None) -> int:
    """Write ``batches`` to ``output`` (None: stdout) as ``fmt``; the number of rows written."""
    return _WRITERS[fmt](schema, _counting(batches, prog), output, compression)


def _write_parquet(schema, batches: Iterator, output: Path | None, compression: str | None) -> int:
    import pyarrow.parquet as pq

    n = 0
    with pq.ParquetWriter(str(output), schema) as w:
        for b in batches:
            w.write_batch(b)
            n += b.num_rows
    return n


def _write_csv(schema, batches: Iterator, output: Path | None, compression: str | None) -> int:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    bad = [f.name for f in schema if pa.types.is_nested(f.type)]
    if bad:
        raise ctfile.InvalidArgumentError(f"CSV cannot hold the nested columns {bad}; use --format json or parquet")
    n = 0
    with _sink(output, binary=True, compression=compression) as sink, pacsv.CSVWriter(sink, schema) as w:
        for b in batches:
            w.write_batch(b)
            n += b.num_rows
    return n


def _write_json(schema, batches: Iterator, output: Path | None, compression: str | None) -> int:
    """One JSON object per line."""
    n = 0
    with _sink(output, binary=False, compression=compression) as sink:
        for b in batches:
            for row in b.to_pylist():
                sink.write(out.json_line(row) + "\n")
            n += b.num_rows
    return n


#: Each export format -> how rows are written in it.
_WRITERS = {"parquet": _write_parquet, "csv": _write_csv, "json": _write_json}


@contextlib.contextmanager
def _sink(output: Path | None, *, binary: bool, compression: str | None = None) -> Iterator[Any]:
    """The file ``output`` (closed afterwards), compressed by fsspec with
    ``compression`` (an fsspec compression name, or None), or stdout
    (flushed, left open, never compressed)."""
    if output is None:
        try:
            yield sys.stdout.buffer if binary else sys.stdout
        finally:
            sys.stdout.flush()
        return
    text = {} if binary else {"encoding": "utf-8"}
    with fsspec.open(str(output), "wb" if binary else "wt", compression=compression, **text) as f:
        yield f


def _cell(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, str):
        return v
    j = out.jsonable(v)
    return j if isinstance(j, str) else out.json_line(j)


@dataclass(frozen=True)
class ChangeRowsReport(out.FieldsAsJson):
    """What ``ctfile changes`` prints as a table: the first ``limit`` change
    rows, and whether there are more. (With ``--json`` the rows go out as JSON
    lines instead, streamed, so the CLI never prints :meth:`as_json`.)"""

    uri: str
    information: str
    start_version: int
    end_version: int
    plan_shape: str
    columns: tuple[str, ...]
    rows: tuple[dict, ...]
    more: bool
    #: The limit was --limit, not the default (the hint says how to see more).
    explicit_limit: bool

    @classmethod
    def of(cls, uri: str, cs: Any, *, information: str, limit: int | None) -> "ChangeRowsReport":
        shown = DEFAULT_TABLE_ROWS if limit is None else limit
        rows = [r for b in _limited(cs.to_batches(), shown + 1) for r in b.to_pylist()]
        return cls(uri, information, cs.start_version, cs.end_version, str(cs.plan_shape),
                   tuple(f.name for f in cs.schema), tuple(rows[:shown]), len(rows) > shown, limit is not None)

    def print_text(self) -> None:
        con = out.console()
        con.print(Text(f"changes {self.start_version}..{self.end_version} of {self.uri} "
                       f"(information={self.information}, plan shape {self.plan_shape}): "
                       f"{len(self.rows)}{'+' if self.more else ''} rows", style="bold"))
        if not self.rows:
            return
        t = RichTable()
        for name in self.columns:
            t.add_column(name, overflow="fold")
        for r in self.rows:
            t.add_row(*(_cell(r[name]) for name in self.columns))
        con.print(t)
        if self.more:
            hint = "raise --limit" if self.explicit_limit else "use --limit N"
            con.print(f"... more rows not shown ({hint}, or --format csv/json/parquet to export them all)")


COMMANDS = (changes,)
