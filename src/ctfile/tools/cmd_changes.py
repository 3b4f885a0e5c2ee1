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
    if fmt is None and named is None and default is None:
        raise ctfile.InvalidArgumentError(
            f"cannot tell the format of --output {output.name!r} from its suffix {stem.suffix or '(none)'!r}: expected "
            f"{', '.join(SUFFIX_FORMATS)}, optionally followed by a compression suffix "
            f"({', '.join('.' + k for k in sorted(fsspec.utils.compressions))}), or give --format csv, json or parquet"
        )
    if fmt is not None and named is not None and named is not fmt:
        raise ctfile.InvalidArgumentError(
            f"--format {fmt.value} but the --output name {output.name!r} says {named.value}"
        )
    fmt = fmt or named or default
    if fmt is Format.parquet and compression:
        raise ctfile.InvalidArgumentError(
            f"--output {output.name!r}: Parquet cannot be compressed as a whole ({compression}); it compresses its "
            "pages itself: drop the compression suffix"
        )
    return OutputSpec(fmt, compression)


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
    information = information.value
    with handle_errors(json_):
        spec = None
        if output is not None and format_ is not Format.table:
            # --json alone meant JSON lines before formats were told from names: still so for other names.
            spec = output_spec(output, format_, default=Format.json if json_ else None)
            format_ = spec.format
        fmt = format_.value if format_ is not None else ("json" if json_ else "table")
        if json_ and fmt == "table":
            raise ctfile.InvalidArgumentError("--json and --format table contradict each other")
        if json_ and fmt != "json" and output is None:
            raise ctfile.InvalidArgumentError(
                f"--json with --format {fmt} needs --output FILE (the rows go to the file, a JSON summary to stdout)"
            )
        if fmt == "parquet" and output is None:
            raise ctfile.InvalidArgumentError("--format parquet needs --output FILE")
        if fmt == "table" and output is not None:
            raise ctfile.InvalidArgumentError("--output needs --format csv, json or parquet")
        cs = open_uri(uri, storage_option).changes(
            start_version=start, end_version=end, start_timestamp=start_timestamp,
            end_timestamp=end_timestamp, information=information,
        )
        if fmt == "table":
            _changes_table(cs, uri, information, DEFAULT_TABLE_ROWS if limit is None else limit, explicit_limit=limit is not None)
            return
        with out.progress_bar("exporting change rows", enabled=out.stdout_is_terminal() and output is not None) as prog:
            batches = _limited(cs.to_batches(), limit)
            n = _export(cs.schema, batches, fmt, output, prog, compression=spec.compression if spec else None)
    if output is not None:
        summary = {"output": str(output), "format": fmt, "compression": spec.compression if spec else None, "rows": n,
                   "start_version": cs.start_version, "end_version": cs.end_version, "plan_shape": str(cs.plan_shape)}
        if json_:
            out.print_json(summary)
        else:
            out.console().print(f"wrote {n} change rows ({cs.start_version}..{cs.end_version}, {cs.plan_shape}) to {output}")


def _counting(batches: Iterator, prog) -> Iterator:
    n = 0
    for b in batches:
        n += b.num_rows
        if prog is not None:
            prog("rows", n, 0)
        yield b


def _export(schema, batches: Iterator, fmt: str, output: Path | None, prog, *, compression: str | None = None) -> int:
    import pyarrow as pa

    n = 0
    batches = _counting(batches, prog)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        with pq.ParquetWriter(str(output), schema) as w:
            for b in batches:
                w.write_batch(b)
                n += b.num_rows
        return n
    if fmt == "csv":
        import pyarrow.csv as pacsv

        bad = [f.name for f in schema if pa.types.is_nested(f.type)]
        if bad:
            raise ctfile.InvalidArgumentError(f"CSV cannot hold the nested columns {bad}; use --format json or parquet")
        with _sink(output, binary=True, compression=compression) as sink, pacsv.CSVWriter(sink, schema) as w:
            for b in batches:
                w.write_batch(b)
                n += b.num_rows
        return n
    # json: one object per line
    with _sink(output, binary=False, compression=compression) as sink:
        for b in batches:
            for row in b.to_pylist():
                sink.write(out.json_line(row) + "\n")
            n += b.num_rows
    return n


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


def _changes_table(cs, uri: str, information: str, limit: int, *, explicit_limit: bool) -> None:
    rows: list[dict] = []
    more = False
    for b in _limited(cs.to_batches(), limit + 1):
        rows.extend(b.to_pylist())
    if len(rows) > limit:
        rows, more = rows[:limit], True
    con = out.console()
    con.print(Text(f"changes {cs.start_version}..{cs.end_version} of {uri} (information={information}, "
                   f"plan shape {cs.plan_shape}): {len(rows)}{'+' if more else ''} rows", style="bold"))
    if not rows:
        return
    t = RichTable()
    for f in cs.schema:
        t.add_column(f.name, overflow="fold")
    for r in rows:
        t.add_row(*(_cell(r[f.name]) for f in cs.schema))
    con.print(t)
    if more:
        hint = "raise --limit" if explicit_limit else "use --limit N"
        con.print(f"... more rows not shown ({hint}, or --format csv/json/parquet to export them all)")


COMMANDS = (changes,)
