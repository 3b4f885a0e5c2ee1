"""``ctfile history``, ``ctfile show`` and ``ctfile diff``: reading a table's
log and describing its versions without reading data files."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Optional

import typer
from rich.table import Table as RichTable
from rich.text import Text

import ctfile
from ctfile.tools import _output as out
from ctfile.tools import _plot_render as render
from ctfile.tools import pictures
from ctfile.tools._clustering import ClusteringReport, parse_columns
from ctfile.tools._common import JsonOpt, StorageOpt, UriArg, handle_errors, open_uri
from ctfile.tools.cmd_schema import change_summary, field_rows, fields_table

DEFAULT_SHOWN_PARTITIONS = 50


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
    if p.restored_row_version is not None:  # re-added by a RESTORE (SPEC §Restore)
        d["restored_row_version"] = p.restored_row_version
    if schema is not None:
        d["stats"] = _stats_dict(p, schema)
    return d


# ---------------------------------------------------------------- --plot


def _plot_path(value: str | None) -> str | None:
    """``--plot FILE``: checked when the options are parsed, before any work."""
    if value is not None:
        try:
            pictures.PlotFormat.of(value)
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="'--plot'") from None
    return value


PlotOpt = Annotated[
    Optional[str],
    typer.Option(
        "--plot", metavar="FILE", callback=_plot_path, show_default=False,
        help="Draw a figure to FILE instead of printing: .png, .svg, or .html (the SVG inline in a page). "
        "Needs the ctfile[plot] extra (matplotlib).",
    ),
]


def _write_plot(path: str, json_: bool, gather: Callable[[], Any], draw: Callable[[Any], Any]) -> None:
    """Gather the series, draw them (a ``*_figure`` function of
    :mod:`~ctfile.tools._plot_render`) and save the figure to ``path``;
    matplotlib is looked for first, before the table is read."""
    try:
        render.load_matplotlib()
    except render.PlotExtraMissing as e:
        raise out.fail(str(e), code=2, json_mode=json_, kind="ImportError") from None
    with handle_errors(json_):
        series = gather()
        render.save(draw(series), path, pictures.PlotFormat.of(path), title=f"ctfile: {series.uri}")
    if json_:
        out.print_json({"plot": path})
    else:
        out.console().print(f"wrote {path}")


# ---------------------------------------------------------------- history


def _history_row(h: ctfile.HistoryEntry) -> dict:
    m = h.operation_metrics
    return {
        "version": h.version,
        "timestamp": out.commit_time(h.timestamp_ms),
        "operation": h.operation,
        "parameters": h.operation_parameters,
        "partitions_added": m.get("numAddedPartitions"),
        "partitions_removed": m.get("numRemovedPartitions"),
        "rows_inserted": m.get("numInsertedRows"),
        "rows_updated": m.get("numUpdatedRows"),
        "rows_deleted": m.get("numDeletedRows"),
        "rows_copied": m.get("numCopiedRows"),
        # From the entry's add and remove actions (the live table changes by
        # rows_added - rows_removed), not from the writer's metrics.
        "rows_added": h.rows_added,
        "rows_removed": h.rows_removed,
        "bytes_added": h.bytes_added,
        "bytes_removed": h.bytes_removed,
        "data_change": h.data_change,
        "read_version": h.read_version,
        "isolation_level": h.isolation_level,
        "blind_append": h.is_blind_append,
        "captured": h.captured,
        "change_files": h.change_files,
        "change_bytes": h.change_bytes,
        "schema_changed": h.schema_changed,
        "schema_changes": [c.to_json() for c in h.schema_changes],
    }


def _schema_cell(h: ctfile.HistoryEntry) -> str:
    """The commit's schema changes in short (SPEC §Schema evolution); empty
    when it changed none."""
    if h.schema_changed is None:
        return "set (the schema before was vacuumed)"
    return change_summary(h.schema_changes) if h.schema_changed else ""


def _captured_cell(r: dict) -> str:
    """``yes``/``no`` (SPEC §Change capture), with the change files if any;
    ``not needed`` for a data change that removes no partition (an append:
    its change rows are the rows it added); empty for a commit that changes
    no data."""
    if r["captured"] is None and not r["data_change"]:
        return ""
    if not r["captured"] or not r["change_files"]:
        return _yes_no(r["captured"])
    return f"yes, {r['change_files']} files ({out.fmt_bytes(r['change_bytes'])})"


def _yes_no(captured: bool | None) -> str:
    """A commit's capture as the text tables show it (SPEC §Change capture)."""
    return "not needed" if captured is None else "yes" if captured else "no"


def _num(v: Any) -> str:
    return "" if v is None else str(v)


def history(
    uri: UriArg,
    limit: Annotated[Optional[int], typer.Option("--limit", "-n", min=1, help="Only the newest N versions.")] = None,
    plot: PlotOpt = None,
    json_: JsonOpt = False,
    storage_option: StorageOpt = None,
) -> None:
    """List the versions of a table, newest first.

    One row per version: commit time (UTC), operation and its parameters,
    partitions added/removed, rows inserted/updated/deleted, data change,
    whether the commit is captured (a change scan needs none of the
    partitions it removed) with its change files ("not needed" for an append,
    which removes nothing), and the schema changes of
    the commits that changed the schema (a SCHEMA CHANGE, a mergeSchema
    write, the creation).

    With --plot FILE, a figure instead: live rows and bytes after each
    version, partitions added and removed, rows inserted/updated/deleted,
    and each commit's kind (data change, compaction, metadata only, schema
    change; a vacuum writes no log entry and shows only as history that
    starts after version 0).
    """
    if plot is not None:
        gather = lambda: pictures.gather_history(open_uri(uri, storage_option), uri, limit=limit)  # noqa: E731
        _write_plot(plot, json_, gather, render.history_figure)
        return
    with handle_errors(json_):
        entries = open_uri(uri, storage_option).history(limit=limit)
    rows = [_history_row(h) for h in entries]
    if json_:
        out.print_json({"uri": uri, "versions": rows})
        return
    t = RichTable(title=f"history of {uri}", title_justify="left")
    for name, just in (
        ("version", "right"), ("time (UTC)", "left"), ("operation", "left"), ("parameters", "left"),
        ("+parts", "right"), ("-parts", "right"), ("inserted", "right"), ("updated", "right"),
        ("deleted", "right"), ("data change", "left"), ("captured", "left"), ("schema", "left"),
    ):
        t.add_column(name, justify=just, overflow="fold")
    for h, r in zip(entries, rows):
        params = out.json_line(r["parameters"]) if r["parameters"] else ""
        t.add_row(
            str(r["version"]), out.fmt_time(r["timestamp"]), r["operation"], params,
            _num(r["partitions_added"]), _num(r["partitions_removed"]), _num(r["rows_inserted"]),
            _num(r["rows_updated"]), _num(r["rows_deleted"]), "yes" if r["data_change"] else "no",
            _captured_cell(r), _schema_cell(h),
        )
    out.console().print(t)


# ---------------------------------------------------------------- show


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
            lo_versions.append(p.inherited_row_version)
            hi_versions.append(p.inherited_row_version)
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


def show(
    uri: UriArg,
    version: Annotated[Optional[int], typer.Option("--version", "-v", help="Show this version (default: latest).")] = None,
    timestamp: Annotated[
        Optional[str], typer.Option("--timestamp", "-t", help="Show the version current at this ISO-8601 time (UTC if no zone).")
    ] = None,
    all_partitions: Annotated[
        bool, typer.Option("--all-partitions", help=f"List every partition (default: the first {DEFAULT_SHOWN_PARTITIONS}).")
    ] = False,
    cluster_by: Annotated[
        Optional[str],
        typer.Option("--cluster-by", metavar="COLS", show_default=False,
                     help="Report the clustering by these comma-separated columns instead of the table's "
                          "ctfile.clusterBy (e.g. to see how an unclustered table would prune by them)."),
    ] = None,
    plot: PlotOpt = None,
    column: Annotated[
        Optional[str], typer.Option("--column", "-c", help="With --plot: the column (default: the first with min/max statistics).")
    ] = None,
    json_: JsonOpt = False,
    storage_option: StorageOpt = None,
) -> None:
    """Describe one version: schema, protocol, clustering, partitions, statistics.

    Schema with field ids and the version that introduced each field,
    protocol and features, properties, every partition with its row count,
    size and per-column statistics, and a summary of the hidden row-lineage
    columns. With clustering keys (ctfile.clusterBy) or --cluster-by, the
    clustering information from statistics, as Snowflake's
    SYSTEM$CLUSTERING_INFORMATION: partitions (constant, without a key
    range), average overlaps, average and max depth, partitions by depth;
    and whether automatic compaction (ctfile.autoCompact) is on.

    With --plot FILE, a figure instead: the partitions as bars from their
    minimum to their maximum of --column, sorted by minimum, coloured by the
    version that wrote them, with the clustering depth in the title.
    """
    with handle_errors(json_):
        if version is not None and timestamp is not None:
            raise ctfile.InvalidArgumentError("give --version or --timestamp, not both")
        if column is not None and plot is None:
            raise ctfile.InvalidArgumentError("--column is for --plot; give --plot FILE as well")
        if cluster_by is not None and plot is not None:
            raise ctfile.InvalidArgumentError("--cluster-by is not for --plot (its figure is by --column)")
    if plot is not None:
        gather = lambda: pictures.gather_layout(  # noqa: E731
            open_uri(uri, storage_option).snapshot(version, timestamp=timestamp), uri, column=column
        )
        _write_plot(plot, json_, gather, render.layout_figure)
        return
    with handle_errors(json_):
        info, fields, clustering = _gather_show(uri, storage_option, version, timestamp, cluster_by)
    if json_:
        out.print_json(info)
        return
    con = out.console()
    _print_summary(con, info, clustering)
    con.print(fields_table(fields, oldest=info["oldest_version"]))
    _print_hidden(con, info["hidden_columns"])
    _print_partitions(con, info["partitions"], all_partitions)


def _gather_show(uri: str, storage_option, version, timestamp, cluster_by):
    """What ``show`` reports: the JSON document, the schema rows and the
    clustering report (None without keys)."""
    table = open_uri(uri, storage_option)
    snap = table.snapshot(version, timestamp=timestamp)
    md, proto, schema = snap.metadata, snap.protocol, snap.table_schema
    introduced = table.introduced_versions(version=snap.version)
    fields = field_rows(schema, introduced)
    parts = snap.partitions
    clustering = ClusteringReport.of(snap, keys=None if cluster_by is None else parse_columns(cluster_by))
    info = {
        "uri": uri,
        "version": snap.version,
        "timestamp": out.commit_time(snap.timestamp_ms),
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
        "change_capture": snap.change_capture,
        "cluster_keys": list(snap.cluster_keys),
        "auto_compact": snap.auto_compact,
        "clustering": None if clustering is None else clustering.as_json(),
        "schema": [f.as_json() for f in fields],
        "oldest_version": introduced.oldest_version,
        "hidden_columns": _hidden_summary(parts, snap.state.next_row_id),
        "partitions": [_partition_dict(p, schema) for p in parts],
    }
    return info, fields, clustering


def _print_summary(con, info: dict, clustering) -> None:
    con.print(Text(f"{info['uri']}  version {info['version']}  ({out.fmt_time(info['timestamp'])})", style="bold"))
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
    con.print(f"change capture: {info['change_capture']}")
    con.print(f"automatic compaction: {'on' if info['auto_compact'] else 'off'}")
    for line in clustering.lines() if clustering else ["clustering: none (no ctfile.clusterBy; --cluster-by COLS "
                                                        "reports it by other columns)"]:
        con.print(line)


def _print_hidden(con, h: dict) -> None:
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


def _print_partitions(con, partitions: list, all_partitions: bool) -> None:
    shown = partitions if all_partitions else partitions[:DEFAULT_SHOWN_PARTITIONS]
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
    if len(shown) < len(partitions):
        con.print(f"... {len(partitions) - len(shown)} more partitions (--all-partitions or --json to list them)")


# ---------------------------------------------------------------- diff


@dataclass(frozen=True)
class DiffCommit:
    """One data-changing commit of a diff's interval."""

    version: int
    timestamp: str
    partitions_added: int
    partitions_removed: int
    #: Its change is known without reading the partitions it rewrote; None
    #: for a commit that removes none (an append needs no capture).
    captured: bool | None
    change_files: int
    change_bytes: int


@dataclass(frozen=True)
class DiffReport:
    """What ``ctfile diff`` shows: the plan of a change scan, from the log alone."""

    uri: str
    start_version: int
    end_version: int
    information: str
    plan_shape: str
    partitions_added: list[dict]
    partitions_removed: list[dict]
    rows_added: int
    rows_removed: int
    partitions_to_read: list[str]
    change_files_to_read: list[str]
    bytes_to_read: int
    commits: list[DiffCommit]

    @classmethod
    def of(cls, uri: str, cs: ctfile.ChangeSet) -> "DiffReport":
        plan = cs.plan
        return cls(
            uri=uri,
            start_version=cs.start_version,
            end_version=cs.end_version,
            information=cs.scan.mode.value,
            plan_shape=str(cs.plan_shape),
            partitions_added=[_partition_dict(p) for p in plan.added],
            partitions_removed=[_partition_dict(p) for p in plan.removed],
            rows_added=sum(p.num_records for p in plan.added),
            rows_removed=sum(p.num_records for p in plan.removed),
            partitions_to_read=[p.path for p in plan.partitions_to_read()],
            change_files_to_read=[f.path for f in plan.change_files_to_read()],
            bytes_to_read=plan.bytes_to_read,
            commits=[
                DiffCommit(
                    c.version, out.fmt_ms(c.timestamp), len(c.added), len(c.removed),
                    c.captured is not None if c.removed else None,
                    len(c.change_files), sum(f.size_bytes for f in c.change_files),
                )
                for c in plan.commits
            ],
        )

    def as_json(self) -> dict:
        return dataclasses.asdict(self)

    def print_text(self) -> None:
        con = out.console()
        con.print(Text(f"changes {self.start_version}..{self.end_version} of {self.uri} "
                       f"(information={self.information})", style="bold"))
        con.print(f"plan shape: {self.plan_shape}")
        con.print(
            f"net added: {len(self.partitions_added)} partitions, {self.rows_added} rows; "
            f"net removed: {len(self.partitions_removed)} partitions, {self.rows_removed} rows"
        )
        files = f" and {len(self.change_files_to_read)} change files" if self.change_files_to_read else ""
        con.print(f"a change scan reads {len(self.partitions_to_read)} partitions{files}, {self.bytes_to_read} bytes "
                  f"({out.fmt_bytes(self.bytes_to_read)})")
        if self.commits:
            ct = RichTable(title="data-changing commits", title_justify="left")
            for c, just in (("version", "right"), ("timestamp", "left"), ("+parts", "right"), ("-parts", "right"),
                            ("captured", "left"), ("change files", "right")):
                ct.add_column(c, justify=just)
            for c in self.commits:
                files = f"{c.change_files} ({out.fmt_bytes(c.change_bytes)})" if c.change_files else ""
                ct.add_row(str(c.version), c.timestamp, str(c.partitions_added), str(c.partitions_removed),
                           _yes_no(c.captured), files)
            con.print(ct)
        if self.partitions_added or self.partitions_removed:
            t = RichTable(title_justify="left")
            for c, just in (("", "left"), ("path", "left"), ("rows", "right"), ("size", "right"),
                            ("firstRowId", "right"), ("added in", "right"), ("read", "left")):
                t.add_column(c, justify=just, overflow="fold")
            read = set(self.partitions_to_read)
            for side, items in (("+", self.partitions_added), ("-", self.partitions_removed)):
                for p in items:
                    t.add_row(side, p["path"], str(p["num_records"]), out.fmt_bytes(p["size_bytes"]),
                              str(p["first_row_id"]), f"v{p['default_row_version']}", "yes" if p["path"] in read else "")
            con.print(t)


def diff(
    uri: UriArg,
    start: Annotated[int, typer.Argument(metavar="START", help="First version of the interval (included).", show_default=False)],
    end: Annotated[int, typer.Argument(metavar="END", help="Last version of the interval (included).", show_default=False)],
    information: Annotated[ctfile.ChangeMode, typer.Option("--information", "-i", help="Change-scan mode.")] = ctfile.ChangeMode.DEFAULT,
    json_: JsonOpt = False,
    storage_option: StorageOpt = None,
) -> None:
    """Plan a change scan of START..END without reading data files.

    Shows the partitions added and removed in the interval (net), its
    data-changing commits and which are captured (their change files let a
    scan skip the partitions they rewrote), the plan shape and the bytes a
    change scan would read.
    """
    with handle_errors(json_):
        cs = open_uri(uri, storage_option).changes(start_version=start, end_version=end, information=information.value)
        report = DiffReport.of(uri, cs)
    if json_:
        out.print_json(report.as_json())
    else:
        report.print_text()


COMMANDS = (history, show, diff)
