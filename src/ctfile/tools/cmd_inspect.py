"""``ctfile history``, ``ctfile show`` and ``ctfile diff``: reading a table's
log and describing its versions without reading data files.

Each command gathers a frozen report (:class:`HistoryReport`,
:class:`ShowReport`, :class:`DiffReport`; :class:`PlotWritten` for
``--plot``) and prints it with :func:`~ctfile.tools._output.emit`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Mapping, Optional

import typer
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

import ctfile
from ctfile.tools import _output as out
from ctfile.tools import _plot_render as render
from ctfile.tools import pictures
from ctfile.tools._clustering import ClusteringReport, parse_columns
from ctfile.tools._common import JsonOpt, StorageOpt, UriArg, handle_errors, open_uri
from ctfile.tools._partitions import HiddenSummary, PartitionRow
from ctfile.tools.cmd_schema import FieldRow, change_summary, field_rows, fields_table, visible_changes

DEFAULT_SHOWN_PARTITIONS = 50


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


@dataclass(frozen=True)
class PlotWritten:
    """What ``--plot FILE`` reports: the file written."""

    path: str

    def as_json(self) -> dict:
        return {"plot": self.path}

    def print_text(self) -> None:
        out.console().print(f"wrote {self.path}")


def write_plot(path: str, json_: bool, gather: Callable[[], Any], draw: Callable[[Any], Any]) -> None:
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
    out.emit(PlotWritten(path), json=json_)


# ---------------------------------------------------------------- history


@dataclass(frozen=True)
class HistoryRow:
    """One version as ``ctfile history`` lists it (from a ``ctfile.HistoryEntry``)."""

    version: int
    timestamp: Any
    operation: str
    parameters: Mapping[str, Any]
    # The writer's metrics (None where it wrote none).
    partitions_added: int | None
    partitions_removed: int | None
    rows_inserted: int | None
    rows_updated: int | None
    rows_deleted: int | None
    rows_copied: int | None
    # From the entry's add and remove actions (the live table changes by
    # rows_added - rows_removed), not from the writer's metrics.
    rows_added: int
    rows_removed: int
    bytes_added: int
    bytes_removed: int
    data_change: bool
    read_version: int | None
    isolation_level: Any
    blind_append: bool
    captured: bool | None
    change_files: int
    change_bytes: int
    schema_changed: bool | None
    schema_changes: tuple[ctfile.SchemaChange, ...]
    #: SPEC §Derived tables: a refresh commit's action, reason, rows in and
    #: out and duration (in JSON only for refresh commits).
    refresh: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, h: ctfile.HistoryEntry) -> "HistoryRow":
        m = h.operation_metrics
        return cls(
            version=h.version, timestamp=out.commit_time(h.timestamp_ms), operation=h.operation,
            parameters=h.operation_parameters,
            partitions_added=m.get("numAddedPartitions"), partitions_removed=m.get("numRemovedPartitions"),
            rows_inserted=m.get("numInsertedRows"), rows_updated=m.get("numUpdatedRows"),
            rows_deleted=m.get("numDeletedRows"), rows_copied=m.get("numCopiedRows"),
            rows_added=h.rows_added, rows_removed=h.rows_removed,
            bytes_added=h.bytes_added, bytes_removed=h.bytes_removed,
            data_change=h.data_change, read_version=h.read_version, isolation_level=h.isolation_level,
            blind_append=h.is_blind_append, captured=h.captured,
            change_files=h.change_files, change_bytes=h.change_bytes,
            schema_changed=h.schema_changed, schema_changes=visible_changes(h.schema_changes),
            refresh=None if h.refresh is None else _refresh_fields(h.refresh),
        )

    def as_json(self) -> dict:
        d = out.fields_dict(self)
        d["schema_changes"] = [c.to_json() for c in self.schema_changes]
        if self.refresh is None:
            del d["refresh"]
        return d

    def operation_text(self) -> str:
        """The operation; a refresh commit's with its action (``REFRESH INCREMENTAL``)."""
        return self.operation if self.refresh is None else f"{self.operation} {self.refresh['action']}"

    def schema_text(self) -> str:
        """The commit's schema changes in short (SPEC §Schema evolution); empty
        when it changed none."""
        if self.schema_changed is None:
            return "set (the schema before was vacuumed)"
        return change_summary(self.schema_changes) if self.schema_changed else ""

    def captured_text(self) -> str:
        """``yes``/``no`` (SPEC §Change capture), with the change files if any;
        ``not needed`` for a data change that removes no partition (an append:
        its change rows are the rows it added); empty for a commit that changes
        no data."""
        if self.captured is None and not self.data_change:
            return ""
        if not self.captured or not self.change_files:
            return _yes_no(self.captured)
        return f"yes, {self.change_files} files ({out.fmt_bytes(self.change_bytes)})"

    def cells(self) -> tuple[str, ...]:
        """The row of the text table, in :data:`_HISTORY_COLUMNS` order."""
        return (
            str(self.version), out.fmt_time(self.timestamp), self.operation_text(),
            out.json_line(self.parameters) if self.parameters else "",
            _num(self.partitions_added), _num(self.partitions_removed), _num(self.rows_inserted),
            _num(self.rows_updated), _num(self.rows_deleted), "yes" if self.data_change else "no",
            self.captured_text(), self.schema_text(),
        )


_HISTORY_COLUMNS = (
    ("version", "right"), ("time (UTC)", "left"), ("operation", "left"), ("parameters", "left"),
    ("+parts", "right"), ("-parts", "right"), ("inserted", "right"), ("updated", "right"),
    ("deleted", "right"), ("data change", "left"), ("captured", "left"), ("schema", "left"),
)


@dataclass(frozen=True)
class HistoryReport:
    """What ``ctfile history`` shows: the versions, newest first."""

    uri: str
    versions: tuple[HistoryRow, ...]

    @classmethod
    def of(cls, uri: str, table: ctfile.Table, *, limit: int | None) -> "HistoryReport":
        return cls(uri, tuple(HistoryRow.of(h) for h in table.history(limit=limit)))

    def as_json(self) -> dict:
        return {"uri": self.uri, "versions": [r.as_json() for r in self.versions]}

    def print_text(self) -> None:
        t = RichTable(title=f"history of {self.uri}", title_justify="left")
        for name, just in _HISTORY_COLUMNS:
            t.add_column(name, justify=just, overflow="fold")
        for r in self.versions:
            t.add_row(*r.cells())
        out.console().print(t)


def _refresh_fields(r: ctfile.RefreshInfo) -> dict[str, Any]:
    """What ``history`` shows of a refresh commit's ``commitInfo.refresh``."""
    return {"action": r.action.value, "reason": r.reason, "rows_in": r.rows_in, "rows_out": r.rows_out,
            "duration_ms": r.duration_ms, "frontier": {v.name: v.version for v in r.frontier}}


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
        write_plot(plot, json_, gather, render.history_figure)
        return
    with handle_errors(json_):
        report = HistoryReport.of(uri, open_uri(uri, storage_option), limit=limit)
    out.emit(report, json=json_)


# ---------------------------------------------------------------- show


@dataclass(frozen=True)
class ProtocolInfo:
    """The reader and writer versions and features a version requires."""

    min_reader_version: int
    min_writer_version: int
    reader_features: list[str]
    writer_features: list[str]

    @classmethod
    def of(cls, proto: Any) -> "ProtocolInfo":
        return cls(proto.min_reader_version, proto.min_writer_version,
                   list(proto.reader_features), list(proto.writer_features))

    def text(self) -> str:
        return (f"protocol: reader v{self.min_reader_version} {self.reader_features or '[]'}, "
                f"writer v{self.min_writer_version} {self.writer_features or '[]'}")


# The measures of the hidden-columns table, by the HiddenSummary field they show.
_HIDDEN_MEASURES = (
    ("row-id counter (nextRowId)", "next_row_id"),
    ("rows inserted by their partition's commit (ids inherited)", "rows_fresh"),
    ("rows updated by their partition's commit (id stored)", "rows_updated"),
    ("rows copied unchanged (id and version stored)", "rows_copied"),
    ("partitions storing no hidden values", "partitions_all_inherited"),
    ("partitions without statistics", "partitions_without_stats"),
    ("oldest row version", "min_row_version"),
    ("newest row version", "max_row_version"),
)

_NO_CLUSTERING = "clustering: none (no ctfile.clusterBy; --cluster-by COLS reports it by other columns)"


@dataclass(frozen=True)
class ShowReport:
    """What ``ctfile show`` shows: one version, from the log alone."""

    uri: str
    version: int
    timestamp: Any
    table_id: str
    name: str | None
    description: str | None
    created_time: str
    num_records: int
    num_partitions: int
    size_bytes: int
    protocol: ProtocolInfo
    properties: Mapping[str, str]
    change_capture: Any
    cluster_keys: list[str]
    auto_compact: bool
    clustering: ClusteringReport | None
    schema: tuple[FieldRow, ...]
    oldest_version: int
    hidden_columns: HiddenSummary
    partitions: tuple[PartitionRow, ...]
    #: Text only: list every partition, not the first DEFAULT_SHOWN_PARTITIONS.
    all_partitions: bool = False
    #: Text only (the JSON has it in ``properties``): ``ctfile.appendOnly``, SPEC §Append-only tables.
    append_only: bool = False

    @classmethod
    def of(cls, uri: str, table: ctfile.Table, *, version: int | None, timestamp: str | None,
           cluster_by: str | None, all_partitions: bool = False) -> "ShowReport":
        snap = table.snapshot(version, timestamp=timestamp)
        md, parts = snap.metadata, snap.partitions
        introduced = table.introduced_versions(version=snap.version)
        clustering = ClusteringReport.of(snap, keys=None if cluster_by is None else parse_columns(cluster_by))
        return cls(
            uri=uri, version=snap.version, timestamp=out.commit_time(snap.timestamp_ms), table_id=md.table_id,
            name=md.name, description=md.description, created_time=out.fmt_ms(md.created_time),
            num_records=snap.num_records, num_partitions=len(parts), size_bytes=sum(p.size_bytes for p in parts),
            protocol=ProtocolInfo.of(snap.protocol), properties=dict(md.properties),
            change_capture=snap.change_capture, cluster_keys=list(snap.cluster_keys), auto_compact=snap.auto_compact,
            clustering=clustering, schema=tuple(field_rows(snap.metadata.visible_schema, introduced)),
            oldest_version=introduced.oldest_version,
            hidden_columns=HiddenSummary.of(parts, snap.state.next_row_id),
            partitions=tuple(PartitionRow.of(p, snap.table_schema) for p in parts),
            all_partitions=all_partitions, append_only=snap.append_only,
        )

    def as_json(self) -> dict:
        d = out.fields_dict(self)
        del d["all_partitions"], d["append_only"]
        d["protocol"] = dataclasses.asdict(self.protocol)
        d["clustering"] = None if self.clustering is None else self.clustering.as_json()
        d["schema"] = [f.as_json() for f in self.schema]
        d["hidden_columns"] = self.hidden_columns.as_json()
        d["partitions"] = [p.as_json() for p in self.partitions]
        return d

    def print_text(self) -> None:
        con = out.console()
        self._print_summary(con)
        con.print(fields_table(self.schema, oldest=self.oldest_version))
        self._print_hidden(con)
        self._print_partitions(con)

    def _print_summary(self, con: Console) -> None:
        con.print(Text(f"{self.uri}  version {self.version}  ({out.fmt_time(self.timestamp)})", style="bold"))
        named = f", name {self.name!r}" if self.name else ""
        con.print(f"table id {self.table_id}{named}, created {self.created_time}")
        if self.description:
            con.print(f"description: {self.description}")
        con.print(f"{self.num_records} rows in {self.num_partitions} partitions, {out.fmt_bytes(self.size_bytes)}")
        con.print(self.protocol.text())
        if self.properties:
            con.print("properties: " + ", ".join(f"{k}={v}" for k, v in sorted(self.properties.items())))
        con.print(f"change capture: {self.change_capture}")
        con.print(f"automatic compaction: {'on' if self.auto_compact else 'off'}")
        if self.append_only:
            con.print("append-only: on (only inserts; DELETE, UPDATE, MERGE that changes rows, overwrite refused)")
        for line in self.clustering.lines() if self.clustering else [_NO_CLUSTERING]:
            con.print(line)

    def _print_hidden(self, con: Console) -> None:
        ht = RichTable(
            title=f"hidden columns ({ctfile.ROW_ID_COLUMN} field id {ctfile.ROW_ID_FIELD_ID}, "
            f"{ctfile.ROW_VERSION_COLUMN} field id {ctfile.ROW_VERSION_FIELD_ID})",
            title_justify="left",
        )
        ht.add_column("measure")
        ht.add_column("value", justify="right")
        for label, field in _HIDDEN_MEASURES:
            ht.add_row(label, _num(getattr(self.hidden_columns, field)))
        con.print(ht)

    def _print_partitions(self, con: Console) -> None:
        shown = self.partitions if self.all_partitions else self.partitions[:DEFAULT_SHOWN_PARTITIONS]
        pt = RichTable(title="partitions", title_justify="left")
        for c, just in (("path", "left"), ("rows", "right"), ("size", "right"), ("firstRowId", "right"),
                        ("version", "right"), ("fresh", "right"), ("statistics", "left")):
            pt.add_column(c, justify=just, overflow="fold")
        for p in shown:
            pt.add_row(
                p.path, str(p.num_records), out.fmt_bytes(p.size_bytes), str(p.first_row_id),
                str(p.default_row_version), _num(p.fresh_rows), p.stats_text(),
            )
        con.print(pt)
        if len(shown) < len(self.partitions):
            con.print(f"... {len(self.partitions) - len(shown)} more partitions "
                      "(--all-partitions or --json to list them)")


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
        write_plot(plot, json_, gather, render.layout_figure)
        return
    with handle_errors(json_):
        report = ShowReport.of(uri, open_uri(uri, storage_option), version=version, timestamp=timestamp,
                               cluster_by=cluster_by, all_partitions=all_partitions)
    out.emit(report, json=json_)


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

    @classmethod
    def of(cls, c: Any) -> "DiffCommit":
        """Commit ``c`` of a change plan (``ChangeSet.plan.commits``)."""
        removes_partitions = bool(c.removed)
        return cls(
            c.version, out.fmt_ms(c.timestamp), len(c.added), len(c.removed),
            c.captured is not None if removes_partitions else None,
            len(c.change_files), sum(f.size_bytes for f in c.change_files),
        )


@dataclass(frozen=True)
class DiffReport:
    """What ``ctfile diff`` shows: the plan of a change scan, from the log alone."""

    uri: str
    start_version: int
    end_version: int
    information: str
    plan_shape: str
    partitions_added: tuple[PartitionRow, ...]
    partitions_removed: tuple[PartitionRow, ...]
    rows_added: int
    rows_removed: int
    partitions_to_read: list[str]
    change_files_to_read: list[str]
    bytes_to_read: int
    commits: tuple[DiffCommit, ...]

    @classmethod
    def of(cls, uri: str, cs: ctfile.ChangeSet) -> "DiffReport":
        plan = cs.plan
        return cls(
            uri=uri,
            start_version=cs.start_version,
            end_version=cs.end_version,
            information=cs.scan.mode.value,
            plan_shape=str(cs.plan_shape),
            partitions_added=tuple(PartitionRow.of(p) for p in plan.added),
            partitions_removed=tuple(PartitionRow.of(p) for p in plan.removed),
            rows_added=sum(p.num_records for p in plan.added),
            rows_removed=sum(p.num_records for p in plan.removed),
            partitions_to_read=[p.path for p in plan.partitions_to_read()],
            change_files_to_read=[f.path for f in plan.change_files_to_read()],
            bytes_to_read=plan.bytes_to_read,
            commits=tuple(DiffCommit.of(c) for c in plan.commits),
        )

    def as_json(self) -> dict:
        d = out.fields_dict(self)
        d["partitions_added"] = [p.as_json() for p in self.partitions_added]
        d["partitions_removed"] = [p.as_json() for p in self.partitions_removed]
        d["commits"] = [dataclasses.asdict(c) for c in self.commits]
        return d

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
            con.print(self._commits_table())
        if self.partitions_added or self.partitions_removed:
            con.print(self._partitions_table())

    def _commits_table(self) -> RichTable:
        ct = RichTable(title="data-changing commits", title_justify="left")
        for c, just in (("version", "right"), ("timestamp", "left"), ("+parts", "right"), ("-parts", "right"),
                        ("captured", "left"), ("change files", "right")):
            ct.add_column(c, justify=just)
        for c in self.commits:
            files = f"{c.change_files} ({out.fmt_bytes(c.change_bytes)})" if c.change_files else ""
            ct.add_row(str(c.version), c.timestamp, str(c.partitions_added), str(c.partitions_removed),
                       _yes_no(c.captured), files)
        return ct

    def _partitions_table(self) -> RichTable:
        """The net partitions, ``+`` added and ``-`` removed, and whether a change scan reads each."""
        t = RichTable(title_justify="left")
        for c, just in (("", "left"), ("path", "left"), ("rows", "right"), ("size", "right"),
                        ("firstRowId", "right"), ("added in", "right"), ("read", "left")):
            t.add_column(c, justify=just, overflow="fold")
        read = set(self.partitions_to_read)
        for side, items in (("+", self.partitions_added), ("-", self.partitions_removed)):
            for p in items:
                t.add_row(side, p.path, str(p.num_records), out.fmt_bytes(p.size_bytes), str(p.first_row_id),
                          f"v{p.default_row_version}", "yes" if p.path in read else "")
        return t


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
    out.emit(report, json=json_)


COMMANDS = (history, show, diff)
