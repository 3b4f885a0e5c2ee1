"""Derived tables, the storage side (SPEC §Derived tables): creation, refresh
transactions, the frontier in the refresh's own entry, hidden derivation
columns on every read path, carried by every write path, and every other
write refused with DerivedTableError, nothing written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.paths import commit_path
sys.path.insert(0, str(Path(__file__).resolve().parent))
from derived_support import (  # noqa: E402
    DERIVED_SCHEMA, definition, frontier, full_refresh, make_pair, query_rows, refresh_info,
)

VISIBLE = ["id", "v"]
HIDDEN = ["_ct_dt_key", "_ct_dt_rows"]


@pytest.fixture
def pair(tmp_path):
    return make_pair(tmp_path)


@pytest.fixture
def refreshed(pair):
    source, derived = pair
    full_refresh(derived, source)
    return source, derived


def _entry(t: ctfile.Table, version: int) -> list[dict]:
    return [json.loads(line) for line in t.log.storage.read_bytes(commit_path(version)).decode().splitlines()]


def _files(root) -> set[str]:
    return {p.relative_to(root).as_posix() for p in Path(root).rglob("*") if p.is_file()}


# ---------------------------------------------------------------- creation


def test_creation_lists_the_feature_and_hides_the_derivation_columns(pair):
    source, derived = pair
    assert "derivedTables" in derived.protocol.reader_features and "derivedTables" in derived.protocol.writer_features
    assert "derivedTables" not in source.protocol.writer_features
    assert derived.schema.names == VISIBLE and derived.schema_at().names == VISIBLE + HIDDEN
    assert derived.derived == definition(source) and derived.derived.frontier == () and source.derived is None
    assert derived.to_arrow().num_rows == 0 and derived.snapshot().to_arrow(include_hidden=True).column_names == [
        *VISIBLE, *HIDDEN, ctfile.ROW_ID_COLUMN, ctfile.ROW_VERSION_COLUMN]
    (md,) = [a["metadata"] for a in _entry(derived, 0) if "metadata" in a]
    assert md["derived"]["hiddenColumns"] == HIDDEN and md["derived"]["frontier"] == []
    assert "dataTimestamp" not in md["derived"]


@pytest.mark.parametrize("schema, defn_kw, match", [
    (pa.schema([("id", pa.int64()), ("_ct_dt_key", pa.string())]), None, "reserved prefix"),  # not derived
    (pa.schema([("id", pa.int64())]), {}, "hiddenColumns: expected columns of the schema"),
    (pa.schema([("id", pa.int64()), ("_ct_dt_key", pa.int64()), ("_ct_dt_rows", pa.int64())]), {}, "of type string"),
    (pa.schema([("id", pa.int64()), ("_ct_dt_key", pa.string()), ("_ct_dt_rows", pa.int64()),
                ("_ct_dt_other", pa.int64())]), {}, "reserved prefix"),
])
def test_creation_refuses_schemas_that_do_not_fit(tmp_path, pair, schema, defn_kw, match):
    source, _ = pair
    kw = {} if defn_kw is None else {"derived": definition(source)}
    with pytest.raises(ctfile.CtfileError, match=match):
        ctfile.create_table(str(tmp_path / "bad"), schema, **kw)
    assert not (tmp_path / "bad").exists() or not any((tmp_path / "bad").rglob("*.json"))


def test_creation_refuses_a_definition_with_a_frontier(tmp_path, pair):
    source, _ = pair
    d = definition(source).with_frontier(frontier(source), 1)
    with pytest.raises(ctfile.InvalidArgumentError, match="derived.frontier: expected none"):
        ctfile.create_table(str(tmp_path / "bad"), DERIVED_SCHEMA, derived=d)
    with pytest.raises(ctfile.InvalidArgumentError, match="expected a ctfile.DerivedDefinition"):
        ctfile.create_table(str(tmp_path / "bad"), DERIVED_SCHEMA, derived={"query": "x"})


# ---------------------------------------------------------------- refresh commits


def test_a_refresh_records_the_frontier_in_the_entry_of_its_rows(refreshed):
    source, derived = refreshed
    assert derived.version == 1
    entry = _entry(derived, 1)
    info = entry[0]["commitInfo"]
    (md,) = [a["metadata"] for a in entry if "metadata" in a]
    assert info["operation"] == "REFRESH" and info["isBlindAppend"] is False
    assert info["refresh"]["action"] == "FULL" and info["refresh"]["rowsOut"] == 4
    assert md["derived"]["frontier"] == info["refresh"]["frontier"] == [
        {"name": "src", "tableId": source.metadata.table_id, "version": 1,
         "schemaId": ctfile.schema_id(source.schema_at(1))}]
    assert md["derived"]["dataTimestamp"] == info["refresh"]["dataTimestamp"]
    assert [a for a in entry if "add" in a]
    assert derived.derived.frontier == frontier(source) and derived.derived.data_timestamp == 1_795_000_000_000
    # delayed view semantics: the rows are the query at the frontier
    assert derived.to_arrow().sort_by("id").to_pylist() == query_rows(source, 1).select(VISIBLE).to_pylist()
    (h, *_) = derived.history()
    assert h.refresh == ctfile.RefreshInfo("FULL", "test FULL", frontier(source), 1_795_000_000_000, 4, 4)


def test_a_refresh_whose_frontier_is_recorded_commits_nothing(refreshed, file_tree):
    source, derived = refreshed
    before = file_tree(derived.uri)
    r = full_refresh(derived, source)  # same source version, same data timestamp: the MERGE changes nothing
    assert not r.committed and derived.refresh().version == 1 and file_tree(derived.uri) == before
    with pytest.raises(ctfile.DerivedTableError, match="frontier already recorded"):
        with derived.transaction(refresh=refresh_info(source, "FULL", 1, 1)) as tx:
            tx.insert(pa.table({"id": [9], "v": ["z"], "_ct_dt_key": ["k"], "_ct_dt_rows": [1]}, schema=DERIVED_SCHEMA))
    assert derived.refresh().version == 1 and file_tree(derived.uri) == before


def test_a_refresh_with_a_new_frontier_and_no_row_change_commits_metadata_only(refreshed):
    source, derived = refreshed
    source.set_properties({"owner": "me"})  # a new source version whose rows are the same
    r = full_refresh(derived, source)
    assert r.committed and r.num_added_partitions == 0 and derived.derived.frontier[0].version == 2
    assert derived.history()[0].refresh.frontier[0].version == 2


def test_an_incremental_refresh_carries_the_derivation_columns_of_copied_rows(tmp_path):
    source, derived = make_pair(tmp_path, partition_rows=2)
    full_refresh(derived, source)
    keys = {r["id"]: r["_ct_dt_key"] for r in derived.snapshot().to_arrow(include_hidden=True).to_pylist()}
    source.update(pc.field("id") == 1, {"v": "A"})
    source.delete(pc.field("id") == 4)
    with derived.transaction(refresh=refresh_info(source, "INCREMENTAL", 3, 2)) as tx:
        tx.update(pc.field("_ct_dt_key") == keys[1], {"v": "A"})  # a copy-on-write UPDATE copies id 2
        tx.delete(pc.field("_ct_dt_key") == keys[4])  # and a DELETE copies id 3
    rows = derived.snapshot().to_arrow(include_hidden=True).sort_by("id").to_pylist()
    assert [(r["id"], r["v"], r["_ct_dt_key"], r["_ct_dt_rows"]) for r in rows] == [
        (1, "A", keys[1], 1), (2, "b", keys[2], 1), (3, "c", keys[3], 1)]
    assert derived.to_arrow().sort_by("id").to_pylist() == query_rows(source, source.version).select(VISIBLE).to_pylist()
    # compaction and recluster keep rows and their derivation columns, outside a refresh
    before = {r["id"]: (r["_ct_dt_key"], r[ctfile.ROW_ID_COLUMN]) for r in rows}
    assert derived.compact(target_rows=10).committed
    derived.set_properties({"ctfile.clusterBy": "v"})
    derived.compact()
    after = derived.snapshot().to_arrow(include_hidden=True).to_pylist()
    assert {r["id"]: (r["_ct_dt_key"], r[ctfile.ROW_ID_COLUMN]) for r in after} == before
    assert derived.derived.frontier == frontier(source)  # maintenance keeps the definition and frontier


def test_refresh_definition_replaces_the_definition(refreshed):
    source, derived = refreshed
    new = ctfile.DerivedDefinition("SELECT id, v FROM src WHERE id > 0", definition(source).sources, "full", None, 2,
                                   ("_ct_dt_key", "_ct_dt_rows"))
    source.insert(pa.table({"id": [5], "v": ["e"]}))
    with derived.transaction(refresh=refresh_info(source, "REINITIALIZE", 5, 1), refresh_definition=new) as tx:
        tx.insert(pa.table({"id": [5], "v": ["e"], "_ct_dt_key": ["k5"], "_ct_dt_rows": [1]}, schema=DERIVED_SCHEMA))
    d = derived.derived
    assert d.same_definition(new) and d.plan_version == 2 and d.refresh_mode is ctfile.RefreshMode.FULL
    assert d.frontier == frontier(source)


def test_a_refresh_may_change_the_schema_it_needs(refreshed):
    source, derived = refreshed
    new = ctfile.DerivedDefinition("SELECT id, v, avg(id) FROM src", definition(source).sources, "full", None, 2,
                                   ("_ct_dt_key", "_ct_dt_rows", "_ct_dt_sum_0"))
    source.insert(pa.table({"id": [5], "v": ["e"]}))
    with derived.transaction(refresh=refresh_info(source, "REINITIALIZE", 5, 5), refresh_definition=new) as tx:
        tx.evolve_schema(lambda e: e.add_column("_ct_dt_sum_0", pa.int64()))
    assert derived.schema.names == VISIBLE and derived.schema_at().names[-1] == "_ct_dt_sum_0"
    with pytest.raises(ctfile.DerivedTableError, match="does not fit"):
        bad = ctfile.DerivedDefinition("q", definition(source).sources, "full", None, 3, ("_ct_dt_key", "_ct_dt_x"))
        with derived.transaction(refresh=refresh_info(source, "REINITIALIZE", 0, 0, data_timestamp=7),
                                 refresh_definition=bad):
            pass
    assert derived.refresh().version == 2


def test_refresh_arguments_are_checked(refreshed, tmp_path):
    source, derived = refreshed
    plain = ctfile.create_table(str(tmp_path / "plain"), pa.schema([("id", pa.int64())]))
    with pytest.raises(ctfile.DerivedTableError, match="expected a derived table.*found a table that is not derived"):
        plain.transaction(refresh=refresh_info(source, "FULL", 0, 0))
    assert plain.refresh().version == 0
    with pytest.raises(ctfile.InvalidArgumentError, match="expected a ctfile.RefreshInfo"):
        derived.transaction(refresh={"action": "FULL"})
    other = (ctfile.SourceVersion("other", "x", 1, 1),)
    with pytest.raises(ctfile.InvalidArgumentError, match=r"refresh.frontier: expected one item per source \['src'\]"):
        derived.transaction(refresh=ctfile.RefreshInfo("FULL", "r", other, 1, 0, 0))
    wrong_id = (ctfile.SourceVersion("src", "not-the-id", 1, 1),)
    with pytest.raises(ctfile.InvalidArgumentError, match="tableId: expected"):
        derived.transaction(refresh=ctfile.RefreshInfo("FULL", "r", wrong_id, 1, 0, 0))
    with pytest.raises(ctfile.InvalidArgumentError, match="give refresh too"):
        derived.transaction(refresh_definition=definition(source))
    assert derived.refresh().version == 1


# ---------------------------------------------------------------- writes outside a refresh


ROW = pa.table({"id": [9], "v": ["z"]})
FULL_ROW = pa.table({"id": [9], "v": ["z"], "_ct_dt_key": ["k"], "_ct_dt_rows": [1]}, schema=DERIVED_SCHEMA)
REFUSED = {
    "insert": lambda t: t.insert(ROW),
    "insert_hidden": lambda t: t.insert(FULL_ROW),
    "delete": lambda t: t.delete(pc.field("id") == 1),
    "update": lambda t: t.update(pc.field("id") == 1, {"v": "x"}),
    "merge": lambda t: t.merge(ROW, on="id"),
    "merge_builder": lambda t: t.merge_builder(ROW, on="id").when_not_matched_insert_all().execute(),
    "truncate": lambda t: t.truncate(),
    "overwrite": lambda t: t.overwrite(ROW),
    "restore": lambda t: t.restore(version=0),
    "schema": lambda t: t.update_schema().add_column("w", pa.int64()).commit(),
    "write_job": lambda t: t.write_job(schema=ROW.schema),
    "transaction": lambda t: t.transaction().insert(ROW),
}


@pytest.mark.parametrize("write", sorted(REFUSED))
def test_writes_outside_a_refresh_are_refused_and_write_nothing(refreshed, file_tree, write):
    _, derived = refreshed
    before = file_tree(derived.uri)
    with pytest.raises(ctfile.DerivedTableError, match="derivedTables") as e:
        REFUSED[write](derived)
    assert "derived table" in str(e.value) and "refresh" in str(e.value)
    assert file_tree(derived.uri) == before and derived.refresh().version == 1


# ---------------------------------------------------------------- reads


def test_every_read_path_hides_the_derivation_columns(refreshed):
    source, derived = refreshed
    snap = derived.snapshot()
    assert snap.schema.names == VISIBLE and snap.derived == derived.derived
    assert snap.to_arrow().column_names == VISIBLE
    assert all(b.schema.names == VISIBLE for b in snap.to_batches())
    assert [b.schema.names for b in snap.to_batches(include_hidden=True)][0][:4] == VISIBLE + HIDDEN
    assert snap.to_dataset().schema.names == VISIBLE
    assert {c for task in snap.scan_tasks() for c in task.columns} == set(VISIBLE)
    assert snap.to_pandas().columns.tolist() == VISIBLE
    with pytest.raises(ctfile.InvalidArgumentError, match="include_hidden=True"):
        snap.to_arrow(columns=["_ct_dt_key"])
    assert snap.to_arrow(columns=["_ct_dt_key"], include_hidden=True).column_names[0] == "_ct_dt_key"
    keyed = snap.to_arrow(filter=pc.field("_ct_dt_key") != "", include_hidden=True)
    assert keyed.num_rows == 4
    changes = derived.changes(start_version=1).to_arrow()
    assert changes.column_names == [*VISIBLE, "METADATA$ACTION", "METADATA$ISUPDATE", "METADATA$ROW_ID"]
    assert derived.changes(start_version=1, read_schema=derived.schema_at()).schema.names[:2] == VISIBLE


def test_a_change_of_derivation_columns_only_is_no_change_row(refreshed):
    source, derived = refreshed
    source.insert(pa.table({"id": [5], "v": ["e"]}))  # the frontier moves; the derived rows' states change only
    with derived.transaction(refresh=refresh_info(source, "INCREMENTAL", 1, 4)) as tx:
        tx.update(None, {"_ct_dt_rows": pc.field("_ct_dt_rows") + 1})
    assert derived.changes(start_version=2).to_arrow().num_rows == 0


def test_streams_on_a_derived_table_hide_the_derivation_columns(refreshed):
    source, derived = refreshed
    stream = derived.create_stream("gold", start_version=1)
    pending = stream.pending().to_arrow()
    assert pending.num_rows == 4 and pending.column_names[:2] == VISIBLE and "_ct_dt_key" not in pending.column_names


def test_checkpoints_and_replay_keep_the_definition(refreshed, tmp_path):
    source, derived = refreshed
    derived.checkpoint()
    fresh = ctfile.open_table(derived.uri)
    assert fresh.derived == derived.derived and fresh.log.read_checkpoint(1).metadata.derived == derived.derived
    assert ctfile.verify_table(derived.uri, all_versions=True).healthy


# ---------------------------------------------------------------- corrupt logs


def _rewrite_metadata(t: ctfile.Table, edit) -> None:
    path = Path(t.uri) / commit_path(1)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    for line in lines:
        if "metadata" in line:
            edit(line["metadata"])
        line.get("commitInfo", {}).pop("numActions", None)
        line.get("commitInfo", {}).pop("actionsChecksum", None)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


@pytest.mark.parametrize("edit, match", [
    (lambda md: md["derived"].update(refreshMode="sometimes"), "refreshMode: expected one of full, incremental, auto"),
    (lambda md: md["derived"].pop("query"), "field 'query': expected str; found nothing"),
    (lambda md: md["derived"].update(hiddenColumns=["_ct_dt_rows", "_ct_dt_key"]), "expected '_ct_dt_key' first"),
    (lambda md: md["derived"].update(hiddenColumns=["_ct_dt_key"]), r"only as listed in derived.hiddenColumns"),
    (lambda md: md["derived"].pop("dataTimestamp"), "dataTimestamp: expected a timestamp"),
    (lambda md: md["derived"]["frontier"][0].update(name="nope"), "frontier: expected names of sources"),
    (lambda md: md["derived"]["frontier"][0].update(version=-1), r"version: expected an integer from 0"),
    (lambda md: md.pop("derived"), r"only as listed in derived.hiddenColumns \[\]"),
])
def test_a_corrupt_derived_object_is_a_corrupt_log_error(refreshed, edit, match):
    _, derived = refreshed
    _rewrite_metadata(derived, edit)
    with pytest.raises(ctfile.CorruptLogError, match=match) as e:
        ctfile.open_table(derived.uri)
    assert "metadata" in str(e.value)


def test_a_corrupt_refresh_object_is_a_corrupt_log_error(refreshed):
    _, derived = refreshed
    path = Path(derived.uri) / commit_path(1)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    lines[0]["commitInfo"]["refresh"]["action"] = "SOMETIMES"
    for k in ("numActions", "actionsChecksum"):
        lines[0]["commitInfo"].pop(k)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with pytest.raises(ctfile.CorruptLogError, match="commitInfo.refresh: action: expected one of NO_DATA"):
        ctfile.open_table(derived.uri)


def test_verify_reports_rows_changed_outside_a_refresh(refreshed):
    """A writer that ignores the feature (simulated: an INSERT entry written
    over the refresh) is caught by verify (SPEC §Derived tables)."""
    source, derived = refreshed
    path = Path(derived.uri) / commit_path(1)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    del lines[0]["commitInfo"]["refresh"]
    lines[0]["commitInfo"]["operation"] = "INSERT"
    for k in ("numActions", "actionsChecksum"):
        lines[0]["commitInfo"].pop(k)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    report = ctfile.verify_table(derived.uri, all_versions=True)
    assert [(p.check, p.version) for p in report.problems] == [("replay", 1)]
    assert "INSERT changed the rows of a derived table outside a refresh commit" in report.problems[0].message


def test_update_refresh_records_what_the_statements_found(refreshed):
    source, derived = refreshed
    source.insert(pa.table({"id": [5], "v": ["e"]}))
    with derived.transaction(refresh=refresh_info(source, "INCREMENTAL", 0, 0)) as tx:
        tx.insert(pa.table({"id": [5], "v": ["e"], "_ct_dt_key": ["k5"], "_ct_dt_rows": [1]}, schema=DERIVED_SCHEMA))
        new = tx.update_refresh(rows_in=1, rows_out=1, duration_ms=42, reason="one insert")
        assert new.frontier == frontier(source)
        with pytest.raises(ctfile.InvalidArgumentError, match="rowsOut: expected an integer"):
            tx.update_refresh(rows_out=-1)
    assert derived.history()[0].refresh == ctfile.RefreshInfo("INCREMENTAL", "one insert", frontier(source),
                                                               1_795_000_000_000, 1, 1, 42)
    with pytest.raises(ctfile.DerivedTableError, match="expected a refresh transaction"):
        with derived.transaction() as tx:
            tx.update_refresh(rows_out=1)
