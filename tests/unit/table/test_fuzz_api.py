"""Every public entry point of the Python API, fuzzed (issue 26).

Hypothesis throws types and extremes (:func:`fuzz_support.anything`) and
plausible values at each argument of each entry point, on a fresh copy of
a small table with some history. The property: the call succeeds or raises
a :class:`ctfile.CtfileError`; and a call that raises leaves the table
directory byte-identical (no entry, no data file, no stream state, no
rewritten file). Lazy results are forced (a snapshot is read, a
transaction committed), so their errors count too.

The entry points are enumerated from ``ctfile.__all__`` and the public
methods of :class:`ctfile.Table`, :class:`ctfile.WriteTransaction`,
:class:`ctfile.Stream` and the ``update_schema()`` builder: a new one that
is neither fuzzed here nor excluded with a reason fails
:func:`test_every_entry_point_is_fuzzed_or_excluded`.

A few examples per entry point by default (the suite's time budget); the
``slow`` variant runs many more.
"""

from __future__ import annotations

import datetime as dt
import inspect
import sys
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctfile
from ctfile.table.maintenance import UpdateSchema

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_support import (  # noqa: E402
    ROWS,
    SCHEMA,
    Copies,
    anything,
    changed_files,
    either,
    fingerprint,
    long_run,
    make_template,
    options,
    public_methods,
)

A = anything()
VERSION = either(st.integers(-2, 8))
NAME = either("s", "t2", "bad name", "x" * 129)
PREDICATE = either(pc.field("id") > 10, pc.field("s") == "u", pc.field("st", "a") == 1)
DATA = either(ROWS, ROWS.slice(0, 1), ROWS.drop_columns(["st"]), ROWS.to_batches()[0], pa.table({"id": [1.5]}))
WINDOW = either(0, 3600, dt.timedelta(days=1), dt.timedelta.max)
ARROW_TYPE = either(pa.int64(), pa.string(), pa.int8(), pa.struct([("q", pa.bool_())]), pa.null())
PATH = either("s", "x", "st.a", "n", "st", "nope")


class CommitArgs:
    """Stands for ``ctfile.CommitOptions(**kwargs)``, built at the call (so
    the refusals of its constructor are fuzzed too: a bad option is refused
    without a trace like any argument)."""

    def __init__(self, kwargs: dict):
        self.kwargs = kwargs

    def __repr__(self) -> str:
        return f"CommitOptions(**{self.kwargs!r})"


#: ``commit=``: options built from plausible and extreme values, or anything.
COMMIT = either(st.builds(CommitArgs, options(
    app_id=either("job", "", "ctfile-stream:x"), app_version=either(st.integers(0, 3), 2**63, True),
)))
#: Every call that commits takes ``commit=`` and its shorthand (both at once is refused).
APP_ARGS = {"app_id": either("job", ""), "app_version": either(st.integers(0, 3)), "commit": COMMIT}
BODY = either(lambda tx: tx.insert(ROWS), lambda tx: None, lambda tx: tx.delete(pc.field("id") == 10))


class Call:
    """An entry point: ``run(table, kwargs, ctx)`` calls it and forces its
    result; ``args`` draws its keyword arguments."""

    def __init__(self, args: st.SearchStrategy, run: Callable[..., Any]):
        self.args = args
        self.run = run


def _method(name: str, force: Callable[[Any], Any] = lambda r: r) -> Callable[..., Any]:
    return lambda t, kw, ctx: force(getattr(t, name)(**kw))


def _read(result: Any) -> Any:
    return result.to_arrow()


class Built:
    """Stands for ``factory(*args)`` built at the call (so the refusals of a
    value object's constructor are fuzzed too, like any argument's)."""

    def __init__(self, factory: Callable[..., Any], *args: Any):
        self.factory, self.args = factory, args

    def build(self) -> Any:
        return self.factory(*(a.build() if isinstance(a, Built) else a for a in self.args))

    def __repr__(self) -> str:
        return f"{getattr(self.factory, '__name__', self.factory)}{self.args!r}"


def _build_value(value: Any) -> Any:
    return value.build() if isinstance(value, Built) else value


_SOURCE = Built(ctfile.SourceBinding, "src", "t-1", "/src")
#: ``derived=``: definitions with plausible and extreme fields (SPEC §Derived tables), built at the call.
DERIVED = either(*(Built(ctfile.DerivedDefinition, q, srcs, mode, lag, plan, hidden) for q, srcs, mode, lag, plan, hidden in (
    ("SELECT id FROM src", (_SOURCE,), "auto", None, 1, ("_ct_dt_key",)),
    ("", (_SOURCE,), "auto", None, 1, ("_ct_dt_key",)),
    ("q", (), "full", "5 minutes", 1, ("_ct_dt_key",)),
    ("q", (_SOURCE,), "sometimes", None, 1, ("_ct_dt_key",)),
    ("q", (_SOURCE,), "incremental", 5, 0, ("_ct_dt_key",)),
    ("q", (_SOURCE, _SOURCE), "full", None, 1, ("_ct_dt_rows",)),
    ("q", (Built(ctfile.SourceBinding, "1x", "", None),), "full", None, 1, ("_ct_dt_key",)),
)))
_VERSION_ITEM = Built(ctfile.SourceVersion, "src", "t-1", 1, 2)
#: ``refresh=``: refresh records, built at the call (the fuzzed tables are not derived: refused).
REFRESH = either(*(Built(ctfile.RefreshInfo, *args) for args in (
    ("FULL", "r", (_VERSION_ITEM,), 1000, 1, 1),
    ("SOMETIMES", "r", (_VERSION_ITEM,), 1000, 1, 1),
    ("NO_DATA", "r", (), 1000, 0, 0),
    ("FULL", "r", (Built(ctfile.SourceVersion, "src", "t-1", -1, 2**63),), -5, True, 1),
)))


def _tx(kw: dict, t: ctfile.Table) -> None:
    consuming = kw.pop("consuming", None)
    kw = {k: _build_value(v) for k, v in kw.items()}
    with t.transaction(consuming=t.stream("s") if consuming is True else consuming, **kw) as tx:
        tx.insert(ROWS)


def _schema_builder(method: str):
    def run(t: ctfile.Table, kw: dict, ctx) -> None:
        with t.update_schema() as u:
            getattr(u, method)(**kw)

    return run


def _in_transaction(method: str):
    def run(t: ctfile.Table, kw: dict, ctx) -> None:
        with t.transaction() as tx:
            getattr(tx, method)(**kw)

    return run


def _stream(method: str, force: Callable[[Any], Any] = lambda r: r):
    return lambda t, kw, ctx: force(getattr(t.stream("s"), method)(**kw))


TABLE_CALLS: dict[str, Call] = {
    "app_version": Call(options({"app_id": either("job", "ctfile-stream:x")}), _method("app_version")),
    "changes": Call(options(
        start_version=VERSION, end_version=VERSION, start_timestamp=either(dt.datetime(2000, 1, 1), "2000-01-01"),
        end_timestamp=A, information=either("default", "audit", "append_only"), initial_rows=either(True),
        changelog=either("op"), filter=PREDICATE, read_schema=A,
    ), _method("changes", _read)),
    "checkpoint": Call(options(version=VERSION), _method("checkpoint")),
    "clustering_info": Call(options(version=VERSION, keys=either("id", ["id", "s"], "st")), _method("clustering_info")),
    "compact": Call(options(target_rows=either(st.integers(1, 4)), max_rows=either(st.integers(1, 4))),
                    _method("compact")),
    "create_stream": Call(options(
        {"name": either("n2")}, information=either("audit"), start_version=VERSION, initial_rows=either(True),
    ), _method("create_stream")),
    "delete": Call(options({"where": PREDICATE}, **APP_ARGS), _method("delete")),
    "drop_stream": Call(options({"name": NAME}), _method("drop_stream")),
    "history": Call(options(limit=either(st.integers(1, 3))), _method("history")),
    "insert": Call(options({"data": DATA}, **APP_ARGS), _method("insert")),
    "introduced_versions": Call(options(version=VERSION), _method("introduced_versions")),
    "merge": Call(options(
        {"source": DATA, "on": either("id", ["id", "s"], "st.a")}, when_matched=either("update", "delete", None),
        when_not_matched=either("insert", None), **APP_ARGS,
    ), _method("merge")),
    "overwrite": Call(options({"data": DATA}, **APP_ARGS), _method("overwrite")),
    "refresh": Call(st.just({}), _method("refresh")),
    "restore": Call(options(version=VERSION, timestamp=either(dt.datetime(2000, 1, 1), dt.datetime.now(), "2000-01-01")),
                    _method("restore")),
    "merge_builder": Call(options(
        {"source": DATA, "on": either("id", ["id", "s"], {"id": "id"}, {"id": "nope"}, "st.a")},
        on_condition=either(pc.field("s.s") == pc.field("t.s"), pc.field("nope") > 1),
        source_alias=either("src", "", "t"), target_alias=either("tgt", "s"),
    ), lambda t, kw, ctx: t.merge_builder(**kw).when_matched_update_all().when_not_matched_insert_all().execute()),
    "run_statement": Call(options(
        {"operation": either("X"), "body": BODY}, parameters=either({"a": [1]}), max_runs=either(1, 2), **APP_ARGS,
    ), _method("run_statement")),
    "schema_at": Call(options(version=VERSION), _method("schema_at")),
    "schema_history": Call(options(limit=either(st.integers(1, 3))), _method("schema_history")),
    "set_properties": Call(options({"properties": either(
        st.dictionaries(
            st.sampled_from([
                "owner", "ctfile.partitionRows", "ctfile.checkpointInterval", "ctfile.changeCapture",
                "ctfile.clusterBy", "ctfile.maxRetentionExtension", "ctfile.autoCompact", "ctfile.nope",
            ]),
            either(st.sampled_from(["1", "0", "-1", "9" * 25, "before_after", "id", "st.a", "true", "7 days"])),
            max_size=2,
        ),
    )}), _method("set_properties")),
    "snapshot": Call(options(version=VERSION, timestamp=either(dt.datetime(2000, 1, 1), dt.datetime.now())),
                     _method("snapshot", _read)),
    "stream": Call(options({"name": NAME}), _method("stream")),
    "streams": Call(options(retain=WINDOW, grace_period=WINDOW), _method("streams")),
    "to_arrow": Call(options(columns=either(["id"], ["st", "n"], ["nope"]), filter=PREDICATE,
                             include_hidden=either(True)), _method("to_arrow")),
    "transaction": Call(options(
        operation=either("T"), parameters=either({"k": [1, 2.5, None]}), consuming=either(True), **APP_ARGS,
        refresh=REFRESH, refresh_definition=DERIVED,
    ), lambda t, kw, ctx: _tx(kw, t)),
    "truncate": Call(options(**APP_ARGS), _method("truncate")),
    "update": Call(options(
        {"where": PREDICATE, "set": either({"s": "z"}, {"x": pc.field("x") * 2}, {"nope": 1})}, **APP_ARGS,
    ), _method("update")),
    "update_schema": Call(st.just({}), lambda t, kw, ctx: t.update_schema().commit()),
    "vacuum": Call(options(retain=WINDOW, grace_period=WINDOW, dry_run=either(True)), _method("vacuum")),
    "write_job": Call(options(mode=either("append", "overwrite"), schema=either(SCHEMA), schema_mode=either("merge")),
                      _method("write_job")),
}

TRANSACTION_CALLS: dict[str, Call] = {
    "insert": Call(options({"data": DATA}), _in_transaction("insert")),
    "delete": Call(options({"where": PREDICATE}), _in_transaction("delete")),
    "update": Call(options({"where": PREDICATE, "set": either({"s": "z"})}), _in_transaction("update")),
    "merge": Call(options({"source": DATA, "on": either("id")}, when_matched=either(None),
                          when_not_matched=either(None)), _in_transaction("merge")),
    "truncate": Call(st.just({}), _in_transaction("truncate")),
    "compact": Call(options(target_rows=either(2), max_rows=either(3)), _in_transaction("compact")),
    "replace_schema": Call(options({"schema": either(SCHEMA, pa.schema([("id", pa.string())]), pa.schema([]))}),
                           _in_transaction("replace_schema")),
    "evolve_schema": Call(options({"edit": either(lambda e: e.add_column("q", pa.int8()), lambda e: None)}),
                          _in_transaction("evolve_schema")),
    "set_app_transaction": Call(options({"app_id": either("job"), "version": either(st.integers(0, 3))}),
                                _in_transaction("set_app_transaction")),
    "add_app_marker": Call(options({"app_id": either("marker"), "version": either(st.integers(0, 3))}),
                           _in_transaction("add_app_marker")),
    "restore": Call(options({"version": VERSION}), _in_transaction("restore")),
    # The fuzzed tables are not derived: refused (DerivedTableError); tests/spark/test_derived_alter.py runs it.
    "alter_derived": Call(options({"refresh_mode": either("full", "sometimes", None),
                                   "target_lag": either(None, "1 hour", "", 5)}), _in_transaction("alter_derived")),
    "merge_builder": Call(options({"source": DATA, "on": either("id", ["id", "s"])}, target_alias=either("x")),
                          lambda t, kw, ctx: _merge_in_transaction(t, kw)),
    "commit": Call(st.just({}), _in_transaction("commit")),
    "abort": Call(st.just({}), _in_transaction("abort")),
}

def _merge_in_transaction(t: ctfile.Table, kw: dict) -> None:
    with t.transaction() as tx:
        tx.merge_builder(**kw).when_matched_delete().execute()


def _builder(method: str):
    """Run one clause method of a MERGE builder (of the template's rows into
    the table on ``id``) and execute the statement."""

    def run(t: ctfile.Table, kw: dict, ctx) -> None:
        builder = t.merge_builder(ROWS.slice(0, 2), "id")
        result = getattr(builder, method)(**kw)
        if isinstance(result, ctfile.MergeBuilder):
            result.execute()

    return run


SET = either({"s": pc.field("s.s")}, {"s": "z"}, {"x": pc.field("t.x") + 1}, {"nope": 1}, {"s": pc.field("q.s")}, {})
CONDITION = either(pc.field("s.id") > 1, pc.field("t.s") == "u", pc.field("nope") == 1, pc.scalar(True))
MERGE_BUILDER_CALLS: dict[str, Call] = {
    "when_matched_update": Call(options({"set": SET}, condition=CONDITION), _builder("when_matched_update")),
    "when_matched_update_all": Call(options(condition=CONDITION), _builder("when_matched_update_all")),
    "when_matched_delete": Call(options(condition=CONDITION), _builder("when_matched_delete")),
    "when_not_matched_insert": Call(options({"values": SET}, condition=CONDITION), _builder("when_not_matched_insert")),
    "when_not_matched_insert_all": Call(options(condition=CONDITION), _builder("when_not_matched_insert_all")),
    "when_not_matched_by_source_update": Call(options({"set": SET}, condition=CONDITION),
                                              _builder("when_not_matched_by_source_update")),
    "when_not_matched_by_source_delete": Call(options(condition=CONDITION),
                                              _builder("when_not_matched_by_source_delete")),
    "with_schema_evolution": Call(st.just({}), _builder("with_schema_evolution")),
    "execute": Call(options(**APP_ARGS), _builder("execute")),
}

#: Methods of the transaction that are the writer's interface to engines
#: (``ctfile.spark``, ``WriteJob``), not a user's: they take ctfile's own
#: objects (a StagedFile, a Partition, a Metadata, a ReadPredicate) made by
#: the writer, or return its state.
TRANSACTION_EXCLUDED = {
    "merge_candidates": "takes a MergeStatement; reads and writes nothing (ctfile.spark sizes a statement with it)",
    "stage": "takes StagedFile objects the writer made",
    "stage_changes": "takes StagedFile objects the writer made",
    "replace_changes": "takes StagedFile objects the writer made",
    "staged_changes": "no arguments; returns the writer's state",
    "staged_data_paths": "no arguments; returns the writer's state",
    "staged_paths": "no arguments; returns the writer's state",
    "remove": "takes a live Partition of the state read",
    "mark_read": "takes a Partition of the state read",
    "mark_reads_whole_table": "no arguments; records a read for conflict detection",
    "re_add": "takes a Partition of an earlier snapshot (RESTORE's; restore is fuzzed)",
    "execute_merge": "takes the MergeStatement a MergeBuilder made (merge_builder is fuzzed)",
    "prepare_merge": "takes a MergeStatement, as merge_candidates does; reads and writes nothing",
    "execute_prepared_merge": "takes the PreparedMerge prepare_merge made",
    "holds_prepared": "takes the PreparedMerge prepare_merge made",
    "record_read_predicate": "takes a ReadPredicate the writer made",
    "set_metadata": "takes a Metadata built from the transaction's own (schema changes go through "
                    "evolve_schema/replace_schema, properties through Table.set_properties)",
    "require_feature": "takes a protocol feature name the writer chooses",
    "add_metrics": "counts the writer's statements",
    "next_file_path": "no arguments; names the writer's next file",
    "next_change_path": "no arguments; names the writer's next file",
    "live_partitions": "no arguments; returns the writer's state",
    "statement": "the writer's context manager around one statement",
    "compact_plan": "takes a CompactionPlan the writer made (compact() is fuzzed)",
    "begin_refresh": "called by Table.transaction(refresh=), which is fuzzed",
    "check_row_change": "an engine's check before it stages files (names the engine's statement)",
    "check_keeps_rows": "an engine's check before it stages files for a statement that removes rows (names it)",
    "update_refresh": "a refresh's own record (its values are RefreshInfo's, fuzzed as Table.transaction's refresh=)",
}

SCHEMA_BUILDER_CALLS: dict[str, Call] = {
    "add_column": Call(options({"path": PATH, "type": ARROW_TYPE}, doc=either("d"), after=either("id"),
                               first=either(True)), _schema_builder("add_column")),
    "drop_column": Call(options({"path": PATH}), _schema_builder("drop_column")),
    "rename_column": Call(options({"path": PATH, "new_name": either("y", "st", "")}), _schema_builder("rename_column")),
    "widen_column": Call(options({"path": PATH, "type": ARROW_TYPE}), _schema_builder("widen_column")),
    "make_nullable": Call(options({"path": PATH}), _schema_builder("make_nullable")),
    "move_column": Call(options({"path": PATH}, after=either("id", "nope"), first=either(True)),
                        _schema_builder("move_column")),
    "commit": Call(st.just({}), lambda t, kw, ctx: t.update_schema().commit()),
}

STREAM_CALLS: dict[str, Call] = {
    "advance": Call(options({"to_version": either(st.integers(-2, 8))}), _stream("advance")),
    "info": Call(options(retain=WINDOW, grace_period=WINDOW), _stream("info")),
    "pending": Call(options(changelog=either("op"), filter=PREDICATE, pin=A), _stream("pending", _read)),
    "pin": Call(options(state=A), _stream("pin")),
    "pin_from_token": Call(options({"token": either("x:1:2", "a" * 32 + ":0:1", st.text(max_size=40))}),
                           _stream("pin_from_token")),
    "state": Call(st.just({}), _stream("state")),
}
STREAM_EXCLUDED = {
    "consumption": "called by Table.transaction(consuming=), which is fuzzed",
    "begin_consumption": "called by Table.transaction(consuming=), which is fuzzed",
    "end_consumption": "called by Table.transaction(consuming=), which is fuzzed",
}


class _SchemaOfTable:
    """Stands for the table's schema (with field ids), resolved at the call."""


SCHEMA_OF_TABLE = _SchemaOfTable()


def _resolved(t: ctfile.Table, kw: dict) -> dict:
    return {k: t.schema_at() if v is SCHEMA_OF_TABLE else v for k, v in kw.items()}


def _snapshot(method: str, force: Callable[[Any], Any] = lambda r: r):
    return lambda t, kw, ctx: force(getattr(t.snapshot(), method)(**kw))


def _change_set(method: str, force: Callable[[Any], Any] = lambda r: r):
    return lambda t, kw, ctx: force(getattr(t.changes(start_version=1), method)(**kw))


COLUMNS = either(["id"], ["st", "n"], ["nope"], ("s",))
SNAPSHOT_CALLS: dict[str, Call] = {
    "clustering_info": Call(options(keys=either("id", ["id", "s"], "st")), _snapshot("clustering_info")),
    "column_bounds": Call(options({"column": either("id", "s", "st", "nope", "_ct_row_id")}), _snapshot("column_bounds")),
    "misread_by_name": Call(options(partitions=either([], None), widening=either(True)), _snapshot("misread_by_name")),
    "scan_tasks": Call(options(columns=COLUMNS, filter=PREDICATE, max_rows_per_task=either(1, 2)),
                       _snapshot("scan_tasks")),
    "to_arrow": Call(options(columns=COLUMNS, filter=PREDICATE, include_hidden=either(True)), _snapshot("to_arrow")),
    "to_batches": Call(options(columns=COLUMNS, filter=PREDICATE, include_hidden=either(True), batch_rows=either(1, 2)),
                       _snapshot("to_batches", list)),
    "to_dataset": Call(st.just({}), _snapshot("to_dataset")),
    "to_pandas": Call(st.just({}), _snapshot("to_pandas")),  # its keyword arguments are pyarrow's, passed through
}
CHANGE_SET_CALLS: dict[str, Call] = {
    "tasks": Call(options(max_rows_per_task=either(1, 2)), _change_set("tasks")),
    "to_arrow": Call(options(use_threads=either(False)), _change_set("to_arrow")),
    "to_batches": Call(options(use_threads=either(False)), _change_set("to_batches", list)),
    "to_pandas": Call(st.just({}), _change_set("to_pandas")),
}

#: The classes of ``ctfile.__all__`` whose methods are not fuzzed here, and why.
CLASSES_EXCLUDED = {
    "VerifyReport": "a result (verify_table's)", "VerifyProblem": "a result", "ClusteringInfo": "a result",
    "CommitResult": "a result",
    "CommitOptions": "a value object: its constructor is fuzzed as the commit= argument of every call that commits",
    "HistoryEntry": "a result", "SchemaVersion": "a result",
    "IntroducedVersions": "a result (a read-only mapping)", "StreamInfo": "a result", "SchemaChange": "a result",
    "ChangeScan": "the plan inside a ChangeSet (Table.changes is fuzzed)",
    "ChangeMode": "an enum (parsed from the arguments fuzzed as information=)",
    "Changelog": "an enum (parsed from changelog=)", "PlanShape": "an enum", "SchemaMode": "an enum (schema_mode=)",
    "RewriteKind": "an enum", "SchemaChangeKind": "an enum",
    "ScanTask": "made by Snapshot.scan_tasks for an engine's workers",
    "ChangeTask": "made by ChangeSet.tasks for an engine's workers",
    "WriteJob": "an engine's interface: its commit takes files other processes wrote (Table.write_job is fuzzed)",
    "RewriteJob": "ctfile.spark's interface: planned inside a transaction from ctfile's own objects",
    "TableLocation": "the source every job carries (its checks: tests/unit/log/test_location.py)",
    "PartitionRewrite": "part of a RewriteJob", "MergeSpec": "part of a RewriteJob",
    "PreparedMerge": "made by WriteTransaction.prepare_merge from a MergeStatement; run by execute_prepared_merge",
    "SpreadMerge": "ctfile.spark's interface: planned by SpreadMerge.plan from a PreparedMerge",
    "MergeStatement": "the statement a MergeBuilder (fuzzed) describes", "MergeClause": "part of a MergeStatement",
    "MergePlan": "the MergeStatement's plan inside a RewriteJob", "MatchKind": "an enum (chosen by the builder's methods)",
    "MergeAction": "an enum (chosen by the builder's methods)", "RowAction": "an enum (a rewrite's per-row action)",
    "RefreshMode": "an enum (parsed from the refresh_mode of the DerivedDefinitions fuzzed as derived=)",
    "RefreshAction": "an enum (parsed from the action of the RefreshInfos fuzzed as refresh=)",
    "DerivedDefinition": "a value object: its constructor is fuzzed as create_table's derived= argument",
    "RefreshInfo": "a value object: its constructor is fuzzed as Table.transaction's refresh= argument",
    "SourceBinding": "part of a DerivedDefinition (fuzzed as derived=)",
    "SourceVersion": "part of a RefreshInfo and a DerivedDefinition (fuzzed as refresh= and derived=)",
}


def _create_table(t, kw, ctx) -> None:
    kw = {k: _build_value(v) for k, v in kw.items()}
    ctfile.create_table(**{"uri": ctx.new_uri(), "schema": SCHEMA, **kw})


MODULE_CALLS: dict[str, Call] = {
    "create_table": Call(options(
        schema=either(SCHEMA, pa.schema([]), pa.schema([("_ct_row_id", pa.int64())]), pa.schema([("a", pa.uint64())])),
        partition_rows=either(st.integers(1, 5)), compression=either("zstd", "snappy", "lzma"),
        properties=either({"owner": "x"}, {"ctfile.checkpointInterval": "0"}), name=either("n"),
        description=either("d"), storage_options=either({}), derived=DERIVED,
    ), _create_table),
    "open_table": Call(options(storage_options=either({}, None)),
                       lambda t, kw, ctx: ctfile.open_table(t.uri, **kw).to_arrow()),
    "verify_table": Call(options(
        storage_options=either({}), all_versions=either(True), progress=either(lambda *a: None), workers=either(1, 4),
    ), lambda t, kw, ctx: ctfile.verify_table(t.uri, **kw)),
    "clustering_depth": Call(options({"ranges": either([(1, 2), (2, 3)], [(None, 1)], [("a", 1)])}),
                             lambda t, kw, ctx: ctfile.clustering_depth(**kw)),
    "diff_schemas": Call(options({"old": either(SCHEMA_OF_TABLE), "new": either(SCHEMA_OF_TABLE)}),
                         lambda t, kw, ctx: ctfile.diff_schemas(**_resolved(t, kw))),
    "field_paths": Call(options({"schema": either(SCHEMA_OF_TABLE)}),
                        lambda t, kw, ctx: ctfile.field_paths(**_resolved(t, kw))),
    "parse_field_path": Call(options({"text": either("a.b", "`a.b`.c", "`it``s`", "a..b", "`open")}),
                             lambda t, kw, ctx: ctfile.parse_field_path(**kw)),
    "format_field_path": Call(options({"parts": either(("a", "b"), ("a.b",), ("`",), ())}),
                              lambda t, kw, ctx: ctfile.format_field_path(**kw)),
    "schema_id": Call(options({"schema": either(SCHEMA_OF_TABLE)}), lambda t, kw, ctx: ctfile.schema_id(**_resolved(t, kw))),
    "validate_properties": Call(options({"properties": either({"ctfile.partitionRows": "2"})},
                                        schema=either(SCHEMA_OF_TABLE)),
                                lambda t, kw, ctx: ctfile.validate_properties(**_resolved(t, kw))),
}
MODULE_EXCLUDED = {}  # every function of ctfile.__all__ is fuzzed

#: Public methods of Table with no argument to fuzz.
TABLE_EXCLUDED: dict[str, str] = {}

GROUPS = {
    "Table": (TABLE_CALLS, TABLE_EXCLUDED),
    "Snapshot": (SNAPSHOT_CALLS, {}),
    "ChangeSet": (CHANGE_SET_CALLS, {}),
    "WriteTransaction": (TRANSACTION_CALLS, TRANSACTION_EXCLUDED),
    "UpdateSchema": (SCHEMA_BUILDER_CALLS, {}),
    "Stream": (STREAM_CALLS, STREAM_EXCLUDED),
    "MergeBuilder": (MERGE_BUILDER_CALLS, {"start": "called by Table.merge_builder (fuzzed) with the engine's runner",
                                         "method_for": "a lookup of the builder's own method names by enum"}),
    "ctfile": (MODULE_CALLS, MODULE_EXCLUDED),
}
CASES = [(group, name) for group, (calls, _) in GROUPS.items() for name in sorted(calls)]


def _public_functions() -> set[str]:
    return {n for n in ctfile.__all__ if inspect.isfunction(getattr(ctfile, n))}


def test_every_entry_point_is_fuzzed_or_excluded():
    """A public entry point added later must be fuzzed here or excluded with a reason."""
    found = {
        "Table": public_methods(ctfile.Table), "WriteTransaction": public_methods(ctfile.WriteTransaction),
        "UpdateSchema": public_methods(UpdateSchema), "Stream": public_methods(ctfile.Stream),
        "MergeBuilder": public_methods(ctfile.MergeBuilder),
        "Snapshot": public_methods(ctfile.Snapshot), "ChangeSet": public_methods(ctfile.ChangeSet),
        "ctfile": _public_functions(),
    }
    classes = {n for n in ctfile.__all__ if isinstance(getattr(ctfile, n), type)
               and not issubclass(getattr(ctfile, n), BaseException)}
    unaccounted = classes - set(GROUPS) - set(CLASSES_EXCLUDED)
    assert not unaccounted, f"classes of ctfile.__all__ neither fuzzed nor excluded: {sorted(unaccounted)}"
    assert not set(CLASSES_EXCLUDED) - classes
    for group, (calls, excluded) in GROUPS.items():
        missing = found[group] - set(calls) - set(excluded)
        stale = (set(calls) | set(excluded)) - found[group]
        assert not missing, f"{group}: public entry points neither fuzzed nor excluded: {sorted(missing)}"
        assert not stale, f"{group}: fuzzed or excluded names that are not public entry points: {sorted(stale)}"
        assert all(reason for reason in excluded.values())


class Context:
    """Where an example may create tables: fresh directories under ``base``."""

    def __init__(self, base: Path):
        self.base = base
        self.uris: list[str] = []

    def new_uri(self) -> str:
        uri = str(self.base / f"new{len(list(self.base.iterdir()))}")
        self.uris.append(uri)
        return uri


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> Copies:
    base = tmp_path_factory.mktemp("fuzz_api")
    return Copies(make_template(base / "template"), base)


def _built(kwargs: dict) -> dict:
    """``kwargs`` with each :class:`CommitArgs` built (inside the call)."""
    return {k: ctfile.CommitOptions(**v.kwargs) if isinstance(v, CommitArgs) else v for k, v in kwargs.items()}


def check_call(copies: Copies, group: str, name: str, kwargs: dict) -> None:
    """The property: success, or a CtfileError that changed nothing on disk."""
    root = copies.fresh()
    ctx = Context(copies.base)
    table = ctfile.open_table(root)
    call = GROUPS[group][0][name]
    before = fingerprint(root)
    try:
        call.run(table, _built(kwargs), ctx)
    except ctfile.CtfileError:
        changed = changed_files(before, fingerprint(root))
        assert not changed, f"{group}.{name}({kwargs!r}) was refused but changed {changed}"
        for uri in ctx.uris:  # a refused create_table leaves nothing behind either
            assert not fingerprint(Path(uri)), f"{group}.{name}({kwargs!r}) was refused but left {fingerprint(Path(uri))}"
    except Exception as e:  # noqa: BLE001 -- the property under test
        raise AssertionError(f"{group}.{name}({kwargs!r}) raised {type(e).__name__}: {e}") from e


@pytest.mark.parametrize("group,name", CASES, ids=[f"{g}.{n}" for g, n in CASES])
@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_entry_point_succeeds_or_refuses_without_a_trace(copies, group, name, data):
    check_call(copies, group, name, data.draw(GROUPS[group][0][name].args, label="kwargs"))


@pytest.mark.long
@pytest.mark.parametrize("group,name", CASES, ids=[f"{g}.{n}" for g, n in CASES])
def test_entry_point_succeeds_or_refuses_without_a_trace_long(copies, group, name):
    """The long run: ``-m long`` selects it."""
    long_run(lambda data: check_call(copies, group, name, data.draw(GROUPS[group][0][name].args)),
             max_examples=150)
