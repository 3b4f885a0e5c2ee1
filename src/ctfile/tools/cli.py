"""``ctfile``: offline inspection, verification and maintenance of ctfile tables.

No Spark or JVM: every command reads the manifest log (and, where it must,
data files) through ctfile's public Python API. URIs are local paths or
object-store URLs (``s3://bucket/prefix``) with ``--storage-option key=value``
for the filesystem (``endpoint_url``, ``key``, ``secret``, ``anon=true``;
``client_kwargs.region_name=...`` sets a nested option).

Exit codes: 0 success; 1 an error (missing table, bad version ...) or, for
``verify``, problems found; 2 a usage error (bad option) or, for ``verify``,
a check that could not run.
"""

from __future__ import annotations

import enum
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional

import typer
from rich.table import Table as RichTable
from rich.text import Text
from typer.core import TyperGroup

import ctfile
from ctfile.tools import _output as out
from ctfile.tools._duration import parse_duration


class Information(str, enum.Enum):
    default = "default"
    append_only = "append_only"
    audit = "audit"


class Format(str, enum.Enum):
    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"


DEFAULT_TABLE_ROWS = 100  # rows `changes --format table` prints without --limit
DEFAULT_SHOWN_PARTITIONS = 50


class _Group(TyperGroup):
    """Click errors (unknown option, bad value ...) as one line on stderr
    instead of click's usage block; exit code 2 as click's."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            rv = super().main(args, prog_name or "ctfile", complete_var, standalone_mode=False, **extra)
        except typer.TyperException as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # help was printed
                if standalone_mode:
                    sys.exit(getattr(e, "exit_code", 2))
                raise
            format_message = getattr(e, "format_message", None)
            msg = format_message() if format_message else str(e)
            ctx = getattr(e, "ctx", None)
            if ctx is not None:
                msg = f"{msg} (see '{ctx.command_path} --help')"
            sys.stderr.write(f"ctfile: error: {out.one_line(msg)}\n")
            if standalone_mode:
                sys.exit(getattr(e, "exit_code", 2))
            raise
        except typer.Abort:
            sys.stderr.write("ctfile: aborted\n")
            if standalone_mode:
                sys.exit(1)
            raise
        if standalone_mode:
            sys.exit(rv if isinstance(rv, int) else 0)
        return rv


app = typer.Typer(
    cls=_Group,
    name="ctfile",
    help=__doc__.split("\n\n")[0].replace("``", "") + "\n\nRun 'ctfile COMMAND --help' for a command's options.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"ctfile {ctfile.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the ctfile version and exit.")
    ] = False,
) -> None:
    """Offline inspection, verification and maintenance of ctfile tables."""


# ---------------------------------------------------------------- shared options

UriArg = Annotated[
    str, typer.Argument(metavar="URI", help="The table: a local path or a URL such as s3://bucket/prefix.", show_default=False)
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]
StorageOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--storage-option",
        metavar="KEY=VALUE",
        help="A filesystem option for object-store URIs (repeatable), e.g. endpoint_url=http://localhost:9000.",
        show_default=False,
    ),
]


def parse_storage_options(items: list[str] | None) -> dict[str, Any] | None:
    """``["key=value", "client_kwargs.region_name=x", "anon=true"]`` ->
    ``{"key": "value", "client_kwargs": {"region_name": "x"}, "anon": True}``."""
    if not items:
        return None
    opts: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=VALUE, found {item!r}", param_hint="'--storage-option'")
        val: Any = {"true": True, "false": False}.get(value.lower(), value)
        parts = key.split(".")
        if any(not p for p in parts):
            raise typer.BadParameter(f"bad key {key!r}", param_hint="'--storage-option'")
        target = opts
        for p in parts[:-1]:
            nxt = target.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise typer.BadParameter(f"{key!r} conflicts with an earlier option", param_hint="'--storage-option'")
            target = nxt
        target[parts[-1]] = val
    return opts


@contextmanager
def _errors(json_mode: bool, *, code: int = 1) -> Iterator[None]:
    """Turn errors into one line on stderr and exit ``code``."""
    try:
        yield
    except (typer.Exit, typer.Abort, typer.TyperException):
        raise
    except ctfile.CtfileError as e:
        raise out.fail(str(e), code=code, json_mode=json_mode, kind=type(e).__name__) from None
    except BrokenPipeError:  # the reader went away (`ctfile changes ... | head`): stop quietly
        out.silence_stdout()
        raise typer.Exit(1) from None
    except FileNotFoundError as e:
        raise out.fail(f"not found: {e}", code=code, json_mode=json_mode, kind="FileNotFoundError") from None
    except PermissionError as e:
        raise out.fail(f"permission denied: {e}", code=code, json_mode=json_mode, kind="PermissionError") from None
    except OSError as e:
        raise out.fail(f"storage error: {e}", code=code, json_mode=json_mode, kind=type(e).__name__) from None
    except ImportError as e:
        raise out.fail(f"{e} (install the filesystem package for this URL scheme)", code=code, json_mode=json_mode, kind="ImportError") from None
    except Exception as e:  # anything else, e.g. a botocore credentials error
        raise out.fail(f"{type(e).__name__}: {e}", code=code, json_mode=json_mode, kind=type(e).__name__) from None


def _open(uri: str, storage_option: list[str] | None) -> ctfile.Table:
    return ctfile.open_table(uri, storage_options=parse_storage_options(storage_option))


def _partition_dict(p: Any, schema: Any = None) -> dict:
    d = {
        "path": p.path,
        "num_records": p.num_records,
        "size_bytes": p.size_bytes,
        "first_row_id": p.first_row_id,
        "default_row_version": p.default_row_version,
        "modification_time": out.fmt_ms(p.modification_time) or None,
        "checksum": p.checksum,
    }
    if schema is not None:
        d["stats"] = _stats_dict(p, schema)
    return d


# ---------------------------------------------------------------- history


def _history_row(h: ctfile.HistoryEntry) -> dict:
    m = h.operation_metrics
    return {
        "version": h.version,
        "timestamp": h.timestamp,
        "operation": h.operation,
        "parameters": h.operation_parameters,
        "partitions_added": m.get("numAddedPartitions"),
        "partitions_removed": m.get("numRemovedPartitions"),
        "rows_inserted": m.get("numInsertedRows"),
        "rows_updated": m.get("numUpdatedRows"),
        "rows_deleted": m.get("numDeletedRows"),
        "rows_copied": m.get("numCopiedRows"),
        "data_change": h.data_change,
        "read_version": h.read_version,
    }


def _num(v: Any) -> str:
    return "" if v is None else str(v)


@app.command()
def history(
    uri: UriArg,
    limit: Annotated[Optional[int], typer.Option("--limit", "-n", min=1, help="Only the newest N versions.")] = None,
    json_: JsonOpt = False,
    storage_option: StorageOpt = None,
) -> None:
    """List the versions of a table, newest first.

    One row per version: commit time (UTC), operation and its parameters,
    partitions added/removed, rows inserted/updated/deleted, data change.
    """
    with _errors(json_):
        entries = _open(uri, storage_option).history(limit=limit)
    rows = [_history_row(h) for h in entries]
    if json_:
        out.print_json({"uri": uri, "versions": rows})
        return
    t = RichTable(title=f"history of {uri}", title_justify="left")
    for name, just in (
        ("version", "right"), ("time (UTC)", "left"), ("operation", "left"), ("parameters", "left"),
        ("+parts", "right"), ("-parts", "right"), ("inserted", "right"), ("updated", "right"),
        ("deleted", "right"), ("data change", "left"),
    ):
        t.add_column(name, justify=just, overflow="fold")
    for r in rows:
        params = out.json_line(r["parameters"]) if r["parameters"] else ""
        t.add_row(
            str(r["version"]), out.fmt_time(r["timestamp"]), r["operation"], params,
            _num(r["partitions_added"]), _num(r["partitions_removed"]), _num(r["rows_inserted"]),
            _num(r["rows_updated"]), _num(r["rows_deleted"]), "yes" if r["data_change"] else "no",
        )
    out.console().print(t)


# ---------------------------------------------------------------- show


def _type_str(t: Any) -> str:
    """A ctfile type as text (duck-typed over the schema model)."""
    if isinstance(t, str):
        return t
    if hasattr(t, "element_type"):
        return f"array<{_type_str(t.element_type)}>"
    if hasattr(t, "key_type"):
        return f"map<{_type_str(t.key_type)}, {_type_str(t.value_type)}>"
    if hasattr(t, "fields"):
        return "struct<" + ", ".join(f"{f.name}: {_type_str(f.type)}" for f in t.fields) + ">"
    return str(t)


def _schema_rows(fields: Any, prefix: str = "") -> list[dict]:
    """Every field with its id, nested ones (list element, map key/value,
    struct fields) as dotted names."""
    rows = []
    for f in fields:
        name = f"{prefix}{f.name}"
        rows.append({"id": f.id, "name": name, "type": _type_str(f.type), "nullable": f.nullable})
        rows.extend(_nested_rows(f.type, name))
    return rows


def _nested_rows(t: Any, name: str) -> list[dict]:
    if hasattr(t, "element_type"):
        return [{"id": t.element_id, "name": f"{name}.element", "type": _type_str(t.element_type), "nullable": t.contains_null}] + _nested_rows(t.element_type, f"{name}.element")
    if hasattr(t, "key_type"):
        return (
            [{"id": t.key_id, "name": f"{name}.key", "type": _type_str(t.key_type), "nullable": False}]
            + _nested_rows(t.key_type, f"{name}.key")
            + [{"id": t.value_id, "name": f"{name}.value", "type": _type_str(t.value_type), "nullable": t.value_contains_null}]
            + _nested_rows(t.value_type, f"{name}.value")
        )
    if hasattr(t, "fields"):
        return _schema_rows(t.fields, f"{name}.")
    return []


def _column_names(schema: Any) -> dict[int, str]:
    names = {f.id: f.name for f in schema.fields}
    names[ctfile.ROW_ID_FIELD_ID] = ctfile.ROW_ID_COLUMN
    names[ctfile.ROW_VERSION_FIELD_ID] = ctfile.ROW_VERSION_COLUMN
    return names


def _stats_dict(p: Any, schema: Any) -> dict | None:
    s = p.stats
    if s is None:
        return None
    names = _column_names(schema)
    out_: dict[str, dict] = {}
    for fid in sorted(set(s.min_values) | set(s.max_values) | set(s.null_count) | set(s.nan_count)):
        col = names.get(fid, f"field {fid}")
        d: dict[str, Any] = {"field_id": fid}
        if fid in s.min_values:
            d["min"] = s.min_values[fid]
        if fid in s.max_values:
            d["max"] = s.max_values[fid]
        if fid in s.null_count:
            d["null_count"] = s.null_count[fid]
        if fid in s.nan_count:
            d["nan_count"] = s.nan_count[fid]
        out_[col] = d
    return out_


def _hidden_summary(partitions: list, next_row_id: int) -> dict:
    rid, rv = ctfile.ROW_ID_FIELD_ID, ctfile.ROW_VERSION_FIELD_ID
    known = [p for p in partitions if p.stats is not None and rid in p.stats.null_count and rv in p.stats.null_count]
    fresh = sum(p.stats.null_count[rid] for p in known)
    null_rv = sum(p.stats.null_count[rv] for p in known)
    n_known = sum(p.num_records for p in known)
    lo_versions, hi_versions = [], []
    for p in known:
        if p.stats.null_count[rv]:  # some rows take the partition's version
            lo_versions.append(p.default_row_version)
            hi_versions.append(p.default_row_version)
        if p.stats.null_count[rv] < p.num_records and rv in p.stats.min_values:
            lo_versions.append(p.stats.min_values[rv])
            hi_versions.append(p.stats.max_values[rv])
    return {
        "next_row_id": next_row_id,
        "rows": sum(p.num_records for p in partitions),
        "partitions_without_stats": len(partitions) - len(known),
        "partitions_all_inherited": sum(
            1 for p in known if p.stats.null_count[rid] == p.num_records and p.stats.null_count[rv] == p.num_records
        ),
        "rows_fresh": fresh,  # stored (null, null): inserted by the partition's own commit
        "rows_updated": null_rv - fresh,  # stored (id, null): changed by the partition's commit
        "rows_copied": n_known - null_rv,  # stored (id, version): copied unchanged
        "min_row_version": min(lo_versions) if lo_versions else None,
        "max_row_version": max(hi_versions) if hi_versions else None,
    }


def _stats_text(stats: dict | None) -> str:
    if stats is None:
        return "(no stats)"
    parts = []
    for col, d in stats.items():
        if col.startswith("_ct_"):
            continue
        s = col
        if "min" in d:
            s += f" [{out.json_line(d['min'])}..{out.json_line(d['max'])}]"
        if d.get("null_count"):
            s += f" nulls={d['null_count']}"
        if d.get("nan_count"):
            s += f" nans={d['nan_count']}"
        parts.append(s)
    return "; ".join(parts)


@app.command()
def show(
    uri: UriArg,
    version: Annotated[Optional[int], typer.Option("--version", "-v", help="Show this version (default: latest).")] = None,
    timestamp: Annotated[
        Optional[str], typer.Option("--timestamp", "-t", help="Show the version current at this ISO-8601 time (UTC if no zone).")
    ] = None,
    all_partitions: Annotated[
        bool, typer.Option("--all-partitions", help=f"List every partition (default: the first {DEFAULT_SHOWN_PARTITIONS}).")
    ] = False,
    json_: JsonOpt = False,
    storage_option: StorageOpt = None,
) -> None:
    """Describe one version: schema, protocol, partitions, statistics.

    Schema with field ids, protocol and features, properties, every partition
    with its row count, size and per-column statistics, and a summary of the
    hidden row-lineage columns.
    """
    with _errors(json_):
        if version is not None and timestamp is not None:
            raise ctfile.InvalidArgumentError("give --version or --timestamp, not both")
        snap = _open(uri, storage_option).snapshot(version, timestamp=timestamp)
        md, proto, schema = snap.metadata, snap.protocol, snap.table_schema
        parts = snap.partitions
        info = {
            "uri": uri,
            "version": snap.version,
            "timestamp": snap.timestamp,
            "table_id": md.table_id,
            "name": md.name,
            "description": md.description,
            "created_time": out.fmt_ms(md.created_time),
            "num_records": snap.num_records,
            "num_partitions": len(parts),
            "size_bytes": sum(p.size_bytes for p in parts),
            "protocol": {
                "min_reader_version": proto.min_reader_version,
                "min_writer_version": proto.min_writer_version,
                "reader_features": list(proto.reader_features),
                "writer_features": list(proto.writer_features),
            },
            "properties": dict(md.properties),
            "schema": _schema_rows(schema.fields),
            "hidden_columns": _hidden_summary(parts, snap.state.next_row_id),
            "partitions": [_partition_dict(p, schema) for p in parts],
        }
    if json_:
        out.print_json(info)
        return
    con = out.console()
    con.print(Text(f"{uri}  version {info['version']}  ({out.fmt_time(info['timestamp'])})", style="bold"))
    con.print(
        f"table id {info['table_id']}"
        + (f", name {info['name']!r}" if info["name"] else "")
        + f", created {info['created_time']}"
    )
    if info["description"]:
        con.print(f"description: {info['description']}")
    con.print(
        f"{info['num_records']} rows in {info['num_partitions']} partitions, {out.fmt_bytes(info['size_bytes'])}"
    )
    pr = info["protocol"]
    con.print(
        f"protocol: reader v{pr['min_reader_version']} {pr['reader_features'] or '[]'}, "
        f"writer v{pr['min_writer_version']} {pr['writer_features'] or '[]'}"
    )
    if info["properties"]:
        con.print("properties: " + ", ".join(f"{k}={v}" for k, v in sorted(info["properties"].items())))
    st = RichTable(title="schema", title_justify="left")
    for c in ("field id", "column", "type", "nullable"):
        st.add_column(c, overflow="fold")
    for r in info["schema"]:
        st.add_row(str(r["id"]), r["name"], r["type"], "yes" if r["nullable"] else "no")
    con.print(st)
    h = info["hidden_columns"]
    ht = RichTable(
        title=f"hidden columns ({ctfile.ROW_ID_COLUMN} field id {ctfile.ROW_ID_FIELD_ID}, "
        f"{ctfile.ROW_VERSION_COLUMN} field id {ctfile.ROW_VERSION_FIELD_ID})",
        title_justify="left",
    )
    ht.add_column("measure")
    ht.add_column("value", justify="right")
    for label, key in (
        ("row-id counter (nextRowId)", "next_row_id"),
        ("rows inserted by their partition's commit (ids inherited)", "rows_fresh"),
        ("rows updated by their partition's commit (id stored)", "rows_updated"),
        ("rows copied unchanged (id and version stored)", "rows_copied"),
        ("partitions storing no hidden values", "partitions_all_inherited"),
        ("partitions without statistics", "partitions_without_stats"),
        ("oldest row version", "min_row_version"),
        ("newest row version", "max_row_version"),
    ):
        ht.add_row(label, _num(h[key]))
    con.print(ht)
    shown = info["partitions"] if all_partitions else info["partitions"][:DEFAULT_SHOWN_PARTITIONS]
    pt = RichTable(title="partitions", title_justify="left")
    for c, just in (("path", "left"), ("rows", "right"), ("size", "right"), ("firstRowId", "right"),
                    ("version", "right"), ("fresh", "right"), ("statistics", "left")):
        pt.add_column(c, justify=just, overflow="fold")
    for p in shown:
        stats = p["stats"]
        fresh = (stats or {}).get(ctfile.ROW_ID_COLUMN, {}).get("null_count")
        pt.add_row(
            p["path"], str(p["num_records"]), out.fmt_bytes(p["size_bytes"]), str(p["first_row_id"]),
            str(p["default_row_version"]), _num(fresh), _stats_text(stats),
        )
    con.print(pt)
    if len(shown) < len(info["partitions"]):
        con.print(f"... {len(info['partitions']) - len(shown)} more partitions (--all-partitions or --json to list them)")


# ---------------------------------------------------------------- diff


@app.command()
def diff(
    uri: UriArg,
    start: Annotated[int, typer.Argument(metavar="START", help="First version of the interval (included).", show_default=False)],
    end: Annotated[int, typer.Argument(metavar="END", help="Last version of the interval (included).", show_default=False)],
    information: Annotated[Information, typer.Option("--information", "-i", help="Change-scan mode.")] = Information.default,
    json_: JsonOpt = False,
    storage_option: StorageOpt = None,
) -> None:
    """Plan a change scan of START..END without reading data files.

    Shows the partitions added and removed in the interval (net), the plan
    shape and the bytes a change scan would read.
    """
    information = information.value
    with _errors(json_):
        cs = _open(uri, storage_option).changes(start_version=start, end_version=end, information=information)
        plan = cs.plan
        to_read = plan.partitions_to_read()
        info = {
            "uri": uri,
            "start_version": cs.start_version,
            "end_version": cs.end_version,
            "information": information,
            "plan_shape": str(cs.plan_shape),
            "partitions_added": [_partition_dict(p) for p in plan.added],
            "partitions_removed": [_partition_dict(p) for p in plan.removed],
            "rows_added": sum(p.num_records for p in plan.added),
            "rows_removed": sum(p.num_records for p in plan.removed),
            "partitions_to_read": [p.path for p in to_read],
            "bytes_to_read": plan.bytes_to_read,
            "commits": [
                {"version": c.version, "timestamp": out.fmt_ms(c.timestamp),
                 "partitions_added": len(c.added), "partitions_removed": len(c.removed)}
                for c in plan.commits
            ],
        }
    if json_:
        out.print_json(info)
        return
    con = out.console()
    con.print(Text(f"changes {info['start_version']}..{info['end_version']} of {uri} "
                   f"(information={information})", style="bold"))
    con.print(f"plan shape: {info['plan_shape']}")
    con.print(
        f"net added: {len(info['partitions_added'])} partitions, {info['rows_added']} rows; "
        f"net removed: {len(info['partitions_removed'])} partitions, {info['rows_removed']} rows"
    )
    con.print(f"a change scan reads {len(to_read)} partitions, {info['bytes_to_read']} bytes "
              f"({out.fmt_bytes(info['bytes_to_read'])})")
    if info["partitions_added"] or info["partitions_removed"]:
        t = RichTable(title_justify="left")
        for c, just in (("", "left"), ("path", "left"), ("rows", "right"), ("size", "right"),
                        ("firstRowId", "right"), ("added in", "right"), ("read", "left")):
            t.add_column(c, justify=just, overflow="fold")
        read = set(info["partitions_to_read"])
        for side, items in (("+", info["partitions_added"]), ("-", info["partitions_removed"])):
            for p in items:
                t.add_row(side, p["path"], str(p["num_records"]), out.fmt_bytes(p["size_bytes"]),
                          str(p["first_row_id"]), f"v{p['default_row_version']}", "yes" if p["path"] in read else "")
        con.print(t)


# ---------------------------------------------------------------- changes


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


@app.command()
def changes(
    uri: UriArg,
    start: Annotated[Optional[int], typer.Option("--start", "-s", help="First version (included; default 0).")] = None,
    end: Annotated[Optional[int], typer.Option("--end", "-e", help="Last version (included; default latest).")] = None,
    start_timestamp: Annotated[Optional[str], typer.Option("--start-timestamp", help="First commit time (ISO-8601), instead of --start.")] = None,
    end_timestamp: Annotated[Optional[str], typer.Option("--end-timestamp", help="Last commit time (ISO-8601), instead of --end.")] = None,
    information: Annotated[
        Information, typer.Option("--information", "-i", help="default (minimum delta), append_only or audit.")
    ] = Information.default,
    format_: Annotated[
        Optional[Format],
        typer.Option("--format", "-f", help="table (default), csv, json (one object per line) or parquet (needs --output)."),
    ] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the rows to this file instead of stdout.", dir_okay=False)] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", "-n", min=0, help=f"At most N rows (table format default: {DEFAULT_TABLE_ROWS}).")] = None,
    json_: Annotated[
        bool, typer.Option("--json", help="Rows as JSON lines (--format json); with --output, a JSON summary.")
    ] = False,
    storage_option: StorageOpt = None,
) -> None:
    """Print or export the change rows of an interval (both ends included)."""
    fmt = format_.value if format_ is not None else ("json" if json_ else "table")
    information = information.value
    with _errors(json_):
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
        cs = _open(uri, storage_option).changes(
            start_version=start, end_version=end, start_timestamp=start_timestamp,
            end_timestamp=end_timestamp, information=information,
        )
        if fmt == "table":
            _changes_table(cs, uri, information, DEFAULT_TABLE_ROWS if limit is None else limit, explicit_limit=limit is not None)
            return
        with out.progress_bar("exporting change rows", enabled=out.stdout_is_terminal() and output is not None) as prog:
            batches = _limited(cs.to_batches(), limit)
            n = _export(cs.schema, batches, fmt, output, prog)
    if output is not None:
        summary = {"output": str(output), "format": fmt, "rows": n, "start_version": cs.start_version,
                   "end_version": cs.end_version, "plan_shape": str(cs.plan_shape)}
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


def _export(schema, batches: Iterator, fmt: str, output: Path | None, prog) -> int:
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
        sink = open(output, "wb") if output is not None else sys.stdout.buffer
        try:
            with pacsv.CSVWriter(sink, schema) as w:
                for b in batches:
                    w.write_batch(b)
                    n += b.num_rows
        finally:
            if output is not None:
                sink.close()
            else:
                sys.stdout.flush()
        return n
    # json: one object per line
    sink = open(output, "w", encoding="utf-8") if output is not None else sys.stdout
    try:
        for b in batches:
            for row in b.to_pylist():
                sink.write(out.json_line(row) + "\n")
            n += b.num_rows
    finally:
        if output is not None:
            sink.close()
        else:
            sys.stdout.flush()
    return n


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


# ---------------------------------------------------------------- verify


@app.command()
def verify(
    uri: UriArg,
    all_versions: Annotated[
        bool, typer.Option("--all-versions", help="Check the data files and row ids of every version, not only the latest.")
    ] = False,
    json_: JsonOpt = False,
    storage_option: StorageOpt = None,
) -> None:
    """Check a table's integrity (fsck); exit 0 healthy, 1 problems, 2 could not run.

    Checks that the log parses and is dense, every referenced file exists with
    its recorded size and checksum, statistics match the data, row ids are
    unique in each snapshot, and no path escapes the table root. Each problem
    is printed with its version and path.
    """
    with _errors(json_, code=2):
        so = parse_storage_options(storage_option)
        with out.progress_bar("verifying") as prog:
            report = ctfile.verify_table(uri, storage_options=so, all_versions=all_versions, progress=prog)
    if json_:
        out.print_json(report.to_dict())
    else:
        con = out.console()
        versions = report.snapshots_checked
        which = (
            f"version {versions[0]}" if len(versions) == 1
            else f"{len(versions)} versions ({versions[0]}..{versions[-1]})" if versions else "no version"
        )
        con.print(
            f"checked {report.entries_checked} log entries (versions {report.oldest_version}..{report.latest_version}) "
            f"and {report.files_checked} data files ({out.fmt_bytes(report.bytes_checked)}, {report.rows_checked} rows) "
            f"of {which}"
        )
        for p in report.problems:  # one line each, whatever the width: easy to grep
            con.print(Text("PROBLEM ", style="bold red") + Text(_problem_text(p)), soft_wrap=True)
        for w in report.warnings:
            con.print(Text("warning ", style="yellow") + Text(_problem_text(w)), soft_wrap=True)
        if report.unreferenced_files:
            con.print(f"{len(report.unreferenced_files)} files under data/ are referenced by no version (vacuum removes them)")
        if report.healthy:
            con.print(Text("healthy", style="bold green"))
        else:
            con.print(Text(f"{len(report.problems)} problems found", style="bold red"))
    raise typer.Exit(0 if report.healthy else 1)


def _problem_text(p: Any) -> str:
    where = []
    if p.version is not None:
        where.append(f"version {p.version}")
    if p.path is not None:
        where.append(p.path)
    return f"{p.check}: {', '.join(where)}: {p.message}" if where else f"{p.check}: {p.message}"


# ---------------------------------------------------------------- maintenance


@app.command()
def vacuum(
    uri: UriArg,
    retain: Annotated[
        Optional[str],
        typer.Option("--retain", "-r", metavar="DURATION",
                     help="Keep every version committed within this age, e.g. 7d, 12h, 1w2d. [default: 7d]"),
    ] = None,
    grace_period: Annotated[
        Optional[str],
        typer.Option("--grace-period", metavar="DURATION",
                     help="Delete unreferenced files only once this old (they may belong to a running writer). [default: 24h]"),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be deleted; delete nothing.")] = False,
    json_: JsonOpt = False,
    storage_option: StorageOpt = None,
) -> None:
    """Expire old history and delete the files no retained version needs.

    Versions committed within --retain stay readable (snapshots, time travel,
    change scans starting there); older log entries, checkpoints and data
    files only they used are deleted, as are unreferenced files older than
    --grace-period.
    """
    durations = {}
    for name, value in (("--retain", retain), ("--grace-period", grace_period)):
        try:
            durations[name] = None if value is None else parse_duration(value)
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint=f"'{name}'") from None
    with _errors(json_):
        table = _open(uri, storage_option)
        vac = getattr(table, "vacuum", None)
        if vac is None:
            raise ctfile.UnsupportedFeatureError("vacuum is not available in this build of ctfile (Table.vacuum is missing)")
        with out.progress_bar("vacuuming", enabled=out.stdout_is_terminal() and not dry_run) as prog:
            if prog is not None:
                prog("deleting expired files", 0, 0)
            r = vac(retain=durations["--retain"], grace_period=durations["--grace-period"], dry_run=dry_run)
    info = {
        "uri": uri,
        "dry_run": r.dry_run,
        "version": r.version,
        "oldest_version": r.oldest_version,
        "checkpoint_version": r.checkpoint_version,
        "deleted_log_files": list(r.deleted_log_files),
        "deleted_data_files": list(r.deleted_data_files),
        "deleted_temp_files": list(r.deleted_temp_files),
        "bytes_freed": r.bytes_freed,
    }
    if json_:
        out.print_json(info)
        return
    con = out.console()
    verb = "would delete" if dry_run else "deleted"
    con.print(
        f"{verb} {len(info['deleted_data_files'])} data files ({out.fmt_bytes(info['bytes_freed'])}), "
        f"{len(info['deleted_log_files'])} log files and {len(info['deleted_temp_files'])} temporary files"
    )
    con.print(
        f"versions {info['oldest_version']}..{info['version']} {'would remain' if dry_run else 'remain'} readable"
        + (f" (checkpoint {'to write' if dry_run else 'written'} at version {info['checkpoint_version']})"
           if info["checkpoint_version"] is not None else "")
    )
    for f in info["deleted_log_files"] + info["deleted_data_files"] + info["deleted_temp_files"]:
        con.print(f"  {f}", soft_wrap=True)


@app.command()
def compact(
    uri: UriArg,
    target_rows: Annotated[
        Optional[int], typer.Option("--target-rows", min=1, help="Rows per output partition (default: the table's ctfile.partitionRows).")
    ] = None,
    json_: JsonOpt = False,
    storage_option: StorageOpt = None,
) -> None:
    """Merge small partitions (a dataChange=false commit).

    Row ids and row versions are kept, so change scans show nothing for it.
    """
    with _errors(json_):
        table = _open(uri, storage_option)
        with out.progress_bar("compacting", enabled=out.stdout_is_terminal()) as prog:
            if prog is not None:
                prog("rewriting small partitions", 0, 0)
            r = table.compact(target_rows=target_rows)
    info = {
        "uri": uri,
        "committed": r.committed,
        "version": r.version,
        "partitions_removed": r.num_removed_partitions,
        "partitions_added": r.num_added_partitions,
        "rows_copied": r.num_copied_rows,
    }
    if json_:
        out.print_json(info)
    elif r.committed:
        out.console().print(
            f"compacted {r.num_removed_partitions} partitions into {r.num_added_partitions} "
            f"({r.num_copied_rows} rows) in version {r.version}"
        )
    else:
        out.console().print(f"nothing to compact (fewer than two small partitions); the table stays at version {r.version}")



@app.command()
def checkpoint(
    uri: UriArg,
    version: Annotated[
        Optional[int], typer.Option("--version", "-v", min=0, help="Checkpoint this version (default: latest).")
    ] = None,
    json_: JsonOpt = False,
    storage_option: StorageOpt = None,
) -> None:
    """Write a checkpoint of the latest version now.

    A checkpoint is one Parquet file listing every live partition, so that
    opening the table reads it and the log entries after it instead of
    replaying the whole log. Writers already write one every
    ctfile.checkpointInterval versions (default 100).
    """
    with _errors(json_):
        table = _open(uri, storage_option)
        with out.progress_bar("checkpointing", enabled=out.stdout_is_terminal()) as prog:
            if prog is not None:
                prog("writing the checkpoint", 0, 0)
            r = table.checkpoint(version=version)
    info = {
        "uri": uri,
        "version": r.version,
        "path": r.path,
        "num_partitions": r.num_partitions,
        "size_bytes": r.size_bytes,
    }
    if json_:
        out.print_json(info)
        return
    out.console().print(
        f"wrote the checkpoint of version {r.version}: {r.num_partitions} live partitions, "
        f"{out.fmt_bytes(r.size_bytes)} ({r.path})",
        soft_wrap=True,
    )
