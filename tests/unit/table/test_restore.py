"""RESTORE (SPEC §Restore): ``Table.restore``, ``WriteTransaction.restore``
and their change scans, metadata, errors and concurrency on local disk.
The random histories are in ``tests/property/test_restore_model.py``; the
golden table in ``tests/conformance/test_golden_restored.py``."""

from __future__ import annotations

import datetime as dt
import os
import threading

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format import actions as A
from ctfile.format.paths import commit_path

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
CAPTURE = {"ctfile.changeCapture": "before_after"}
ACTION, ISUPDATE = "METADATA$ACTION", "METADATA$ISUPDATE"


def _table(tmp_path, *, properties=None, rows=4) -> ctfile.Table:
    t = ctfile.create_table(str(tmp_path / "t"), SCHEMA, partition_rows=2, properties=properties)
    t.insert(pa.table({"id": list(range(1, rows + 1)), "v": [chr(96 + i) for i in range(1, rows + 1)]}, schema=SCHEMA))
    return t


def _hidden(t: ctfile.Table, v: int | None = None) -> list[dict]:
    return t.snapshot(v).to_arrow(include_hidden=True).sort_by("id").to_pylist()


def _changes(t: ctfile.Table, a: int, b: int | None = None, mode: str = "default", **kw) -> list[tuple]:
    rows = t.changes(start_version=a, end_version=b, information=mode, **kw).to_arrow().to_pylist()
    return sorted((r["id"], r["v"], r[ACTION], r[ISUPDATE]) for r in rows)


def _history(t: ctfile.Table) -> ctfile.Table:
    """Versions 2..5 after the insert of version 1: an UPDATE, a DELETE
    (partial), an INSERT, a DELETE of a whole partition."""
    t.update(pc.field("id") == 1, {"v": "A"})
    t.delete(pc.field("id") == 3)
    t.insert(pa.table({"id": [5], "v": ["e"]}, schema=SCHEMA))
    t.delete(pc.field("id").isin([1, 2]))
    return t


# ---------------------------------------------------------------- rows, lineage and change scans


@pytest.mark.parametrize("properties", [None, CAPTURE], ids=["partitions", "capture"])
def test_restore_brings_back_rows_with_their_lineage_and_its_change_is_the_difference(tmp_path, properties):
    t = _history(_table(tmp_path, properties=properties))
    before = _hidden(t, 5)
    r = t.restore(version=1)
    assert (r.committed, r.version, r.operation) == (True, 6, "RESTORE")
    assert _hidden(t) == _hidden(t, 1)  # values, row ids and row versions
    assert {x["id"] for x in before} == {4, 5}
    got = _changes(t, 6, 6)
    assert got == [
        (1, "a", "INSERT", False), (2, "b", "INSERT", False), (3, "c", "INSERT", False), (5, "e", "DELETE", False),
    ]
    assert _changes(t, 6, 6, "audit") == got
    assert _changes(t, 6, 6, "append_only") == []  # a RESTORE inserts no row
    ao = t.changes(start_version=6, end_version=6, information="append_only")
    # Not even read (Spark's native append_only reads plan.appended with its own Parquet reader).
    assert ao.plan.appended == () and ao.plan_shape is ctfile.PlanShape.EMPTY
    assert _changes(t, 2, 6) == []  # the snapshots at 1 and 6 are equal
    assert t.changes(start_version=6, end_version=6).plan_shape is ctfile.PlanShape.MINIMIZE
    info = t.log.commit_info(6)
    assert info.operation_parameters == {"version": 1} and info.data_change and not info.is_blind_append
    assert ctfile.verify_table(t.uri, all_versions=True).healthy


def test_an_update_since_comes_back_as_an_update_pair_and_a_filter_splits_it(tmp_path):
    t = _table(tmp_path)
    t.update(pc.field("id") == 2, {"v": "B"})
    t.restore(version=1)
    assert _changes(t, 3) == [(2, "B", "DELETE", True), (2, "b", "INSERT", True)]
    assert _changes(t, 3, filter=pc.field("v") == "b") == [(2, "b", "INSERT", False)]
    # The restored row keeps its row version of version 1: unchanged since, for a scan that starts after it.
    assert [x["_ct_row_version"] for x in _hidden(t)] == [1, 1, 1, 1]
    t.update(pc.field("id") == 4, {"v": "D"})
    assert _changes(t, 4) == [(4, "D", "INSERT", True), (4, "d", "DELETE", True)]


def test_rows_changed_and_changed_back_since_are_unchanged(tmp_path):
    t = _table(tmp_path)
    t.update(pc.field("id") == 2, {"v": "B"})
    t.update(pc.field("id") == 2, {"v": "b"})  # back to its value: row version 3
    r = t.restore(version=1)
    assert r.committed and _changes(t, r.version) == []
    assert _changes(t, 3, r.version) == [(2, "B", "DELETE", True), (2, "b", "INSERT", True)]


def test_a_restore_that_only_removes_needs_no_feature_and_is_captured(tmp_path):
    t = _table(tmp_path, properties=CAPTURE)
    t.insert(pa.table({"id": [9], "v": ["z"]}, schema=SCHEMA))
    r = t.restore(version=1)
    entry = t.log.read_entry(r.version)
    (rem,) = [a for a in entry if isinstance(a, A.RemovePartition)]
    assert rem.deletes_all_rows and not [a for a in entry if isinstance(a, (A.AddPartition, A.Protocol))]
    assert A.FEATURE_RESTORED_PARTITIONS not in t.snapshot().protocol.reader_features
    assert _changes(t, r.version) == [(9, "z", "DELETE", False)]


def test_re_adds_keep_first_row_id_and_next_row_id_never_goes_back(tmp_path):
    t = _history(_table(tmp_path))
    counter = t.log.load_state(5).next_row_id
    r = t.restore(version=1)
    adds = [a.partition for a in t.log.read_entry(r.version) if isinstance(a, A.AddPartition)]
    assert {(p.first_row_id, p.default_row_version, p.restored_row_version) for p in adds} == {(0, 6, 1), (2, 6, 1)}
    assert t.log.load_state(r.version).next_row_id == counter
    t.insert(pa.table({"id": [6], "v": ["f"]}, schema=SCHEMA))
    assert _hidden(t)[-1]["_ct_row_id"] == counter  # a fresh id, never one given before
    (feature,) = [f for f in t.snapshot().protocol.reader_features if f == A.FEATURE_RESTORED_PARTITIONS]
    assert feature in t.snapshot().protocol.writer_features


def test_restore_to_the_current_state_commits_nothing_and_twice_commits_once(tmp_path):
    t = _history(_table(tmp_path))
    assert t.restore(version=t.version).committed is False
    assert t.restore(version=3).committed
    latest = t.version
    again = t.restore(version=3)
    assert (again.committed, again.version, t.version) == (False, latest, latest)


def test_restore_then_dml_and_restore_again_keeps_exact_changes(tmp_path):
    t = _history(_table(tmp_path))
    t.restore(version=2)  # 6
    t.update(pc.field("id") == 2, {"v": "X"})  # 7: rewrites a re-added partition
    t.compact(target_rows=8)  # 8
    t.restore(version=6)  # 9
    assert _hidden(t) == _hidden(t, 6) == _hidden(t, 2)
    assert _changes(t, 7) == []
    assert _changes(t, 9) == [(2, "X", "DELETE", True), (2, "b", "INSERT", True)]
    assert ctfile.verify_table(t.uri, all_versions=True).healthy


def test_timestamp_resolves_as_a_read_as_of_it(tmp_path):
    t = _history(_table(tmp_path))
    ts = t.history()[-2].timestamp  # version 1's commit time
    r = t.restore(timestamp=ts)
    assert _hidden(t) == _hidden(t, 1)
    params = t.log.commit_info(r.version).operation_parameters
    assert params["version"] == 1 and dt.datetime.fromisoformat(params["timestamp"]) == ts
    with pytest.raises(ctfile.VersionNotFoundError, match="after the latest version"):
        t.restore(timestamp=dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1))


# ---------------------------------------------------------------- metadata


def test_schema_and_properties_are_set_back_by_field_id(tmp_path):
    t = _table(tmp_path)
    with t.update_schema() as u:
        u.add_column("email", pa.string()).rename_column("v", "name")
    t.set_properties({"owner": "eve", "ctfile.clusterBy": "email"})
    t.insert(pa.table({"id": [7], "name": ["g"], "email": ["g@x"]}, schema=t.schema))
    r = t.restore(version=1)
    snap = t.snapshot()
    assert snap.schema.names == ["id", "v"] and [f.id for f in snap.table_schema.fields] == [1, 2]
    assert snap.metadata.properties == t.snapshot(1).metadata.properties
    assert snap.metadata.assigned_field_ids == 3  # lastFieldId never decreases: email's id is retired
    assert A.FEATURE_SCHEMA_EVOLUTION in snap.protocol.reader_features  # a drop and a rename
    assert _hidden(t) == _hidden(t, 1)
    assert _changes(t, r.version) == [(7, "g", "DELETE", False)]
    with t.update_schema() as u:
        u.add_column("email", pa.string())
    assert t.snapshot().table_schema.field("email").id == 4  # a new column, never the old values


def test_a_widening_is_kept_and_a_drop_since_is_refused(tmp_path):
    t = ctfile.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int32()), ("v", pa.string())]))
    t.insert(pa.table({"id": pa.array([1], pa.int32()), "v": ["a"]}))
    with t.update_schema() as u:
        u.widen_column("id", pa.int64()).make_nullable("id")
    t.insert(pa.table({"id": [2**40], "v": ["b"]}))
    t.restore(version=1)
    assert t.schema.field("id").type == pa.int64()  # narrowing would change values written since
    assert t.to_arrow().to_pylist() == [{"id": 1, "v": "a"}]
    assert [r["id"] for r in t.changes(start_version=t.version).to_arrow().to_pylist()] == [2**40]
    with t.update_schema() as u:
        u.drop_column("v")
    latest = t.version
    with pytest.raises(ctfile.SchemaMismatchError, match=r"field v \(id 2\).*dropped since"):
        t.restore(version=1)
    assert t.refresh().version == latest


def test_app_transactions_and_streams_are_left_as_they_are(tmp_path):
    t = _table(tmp_path)
    stream = t.create_stream("s")
    t.insert(pa.table({"id": [5], "v": ["e"]}, schema=SCHEMA), app_id="job", app_version=7)
    t.restore(version=1)
    assert t.app_version("job") == 7  # a batch committed since is still recorded
    r = t.insert(pa.table({"id": [5], "v": ["e"]}, schema=SCHEMA), app_id="job", app_version=7)
    assert r.app_transaction_replayed
    rows = stream.pending().to_arrow().to_pylist()
    assert rows == []  # inserted and removed again within the pending interval


# ---------------------------------------------------------------- refusals


def test_bad_arguments_are_refused_before_anything_is_written(tmp_path):
    t = _history(_table(tmp_path))
    latest = t.version
    for kw, err in (
        ({}, ctfile.InvalidArgumentError),
        ({"version": 1, "timestamp": dt.datetime.now()}, ctfile.InvalidArgumentError),
        ({"version": "1"}, ctfile.InvalidArgumentError),
        ({"version": True}, ctfile.InvalidArgumentError),
        ({"version": -1}, ctfile.InvalidArgumentError),
        ({"version": latest + 1}, ctfile.VersionNotFoundError),
        ({"timestamp": "yesterday"}, ctfile.InvalidArgumentError),
    ):
        with pytest.raises(err):
            t.restore(**kw)
    assert t.refresh().version == latest


def test_a_vacuumed_version_is_refused(tmp_path):
    t = _history(_table(tmp_path))
    t.vacuum(retain=0, grace_period=0)
    latest = t.version
    with pytest.raises(ctfile.VersionNotFoundError):
        t.restore(version=1)
    assert t.refresh().version == latest


def test_missing_files_are_named_and_nothing_is_written(tmp_path):
    t = _history(_table(tmp_path))
    gone = [p.path for p in t.snapshot(1).partitions if p.path not in {q.path for q in t.snapshot().partitions}]
    for path in gone:
        os.remove(os.path.join(t.uri, path))
    files = set(os.listdir(os.path.join(t.uri, "data")))
    with pytest.raises(ctfile.MissingDataFileError, match=f"{len(gone)} of the {len(gone)} files") as e:
        t.restore(version=1)
    assert all(p in str(e.value) for p in gone)
    assert t.refresh().version == 5 and set(os.listdir(os.path.join(t.uri, "data"))) == files


def test_a_restore_is_the_only_statement_of_its_transaction(tmp_path):
    t = _history(_table(tmp_path))
    with pytest.raises(ctfile.InvalidArgumentError, match="only statement"):
        with t.transaction() as tx:
            tx.insert(pa.table({"id": [8], "v": ["h"]}, schema=SCHEMA))
            tx.restore(1)
    with pytest.raises(ctfile.InvalidArgumentError, match="only statement"):
        with t.transaction() as tx:
            tx.restore(1)
            tx.delete(pc.field("id") == 1)
    assert t.refresh().version == 5
    with t.transaction(app_id="fix", app_version=1) as tx:
        plan = tx.restore(1)
    assert len(plan.re_added) == 2 and tx.result.committed and t.app_version("fix") == 1
    assert t.log.commit_info(tx.result.version).operation == "RESTORE"


# ---------------------------------------------------------------- concurrency


def test_a_concurrent_data_change_conflicts(tmp_path):
    t = _table(tmp_path, rows=6)  # partitions [1, 2], [3, 4], [5, 6]
    t.delete(pc.field("id") == 1)  # 2: rewrites [1, 2]
    other = ctfile.open_table(t.uri)
    for winner, kind in (
        (lambda: other.insert(pa.table({"id": [9], "v": ["z"]}, schema=SCHEMA)), "whole_table"),  # a blind append
        (lambda: other.update(pc.field("id") == 3, {"v": "C"}), "removed_read"),
        (lambda: other.set_properties({"owner": "eve"}), "metadata"),
        (lambda: other.compact(target_rows=8), "removed_read"),  # merges [2], which the RESTORE removes
    ):
        tx = t.refresh().transaction()
        tx.restore(1)
        winner()
        with pytest.raises(ctfile.CommitConflictError) as e:
            tx.commit()
        assert e.value.kind.value == kind
    assert t.refresh().restore(version=1).committed  # asked again, it restores
    assert _hidden(t) == _hidden(t, 1)


def test_a_compaction_of_partitions_the_restore_keeps_is_rebased_over(tmp_path):
    t = _table(tmp_path, rows=6)
    t.delete(pc.field("id") == 1)  # 2: [1, 2] becomes [2]; [3, 4] and [5, 6] stay
    tx = t.transaction()
    plan = tx.restore(1)
    assert [p.num_records for p in plan.removed] == [1]
    c = ctfile.open_table(t.uri).compact(target_rows=8, max_rows=4)  # merges only [3, 4] and [5, 6]
    assert c.committed and c.num_removed_partitions == 2
    r = tx.commit()
    assert r.committed and r.version == 4
    assert _hidden(t.refresh()) == _hidden(t, 1)
    assert _changes(t, 4) == [(1, "a", "INSERT", False)]
    assert ctfile.verify_table(t.uri, all_versions=True).healthy


def test_restore_does_not_re_run_after_a_conflict(tmp_path, monkeypatch):
    t = _table(tmp_path)
    calls = []
    real = ctfile.WriteTransaction.restore

    def racing(tx, version):
        calls.append(version)
        plan = real(tx, version)
        ctfile.open_table(t.uri).insert(pa.table({"id": [9], "v": ["z"]}, schema=SCHEMA))
        return plan

    t.delete(pc.field("id") == 1)
    monkeypatch.setattr(ctfile.WriteTransaction, "restore", racing)
    with pytest.raises(ctfile.CommitConflictError):
        t.restore(version=1)
    assert calls == [1]


def test_restores_racing_in_threads_commit_one_at_a_time(tmp_path):
    t = _history(_table(tmp_path))
    results, errors = [], []

    def run(v):
        try:
            results.append(ctfile.open_table(t.uri).restore(version=v))
        except ctfile.CommitConflictError as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(v,)) for v in (1, 2, 3, 1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    committed = [r for r in results if r.committed]
    assert committed and len(results) + len(errors) == 4
    assert len({r.version for r in committed}) == len(committed)  # one version each
    last = max(committed, key=lambda r: r.version)
    restored = t.log.commit_info(last.version).operation_parameters["version"]
    assert _hidden(t.refresh()) == _hidden(t, restored)
    assert ctfile.verify_table(t.uri, all_versions=True).healthy


# ---------------------------------------------------------------- checkpoints, Spark delegate


def test_a_checkpoint_after_a_restore_holds_the_lineage(tmp_path):
    t = _history(_table(tmp_path))
    t.restore(version=1)
    t.checkpoint()
    fresh = ctfile.open_table(t.uri)
    assert _hidden(fresh) == _hidden(t, 1)
    assert [p.restored_row_version for p in fresh.snapshot().partitions] == [1, 1]
    assert _changes(fresh, 6) == _changes(t, 6)
    assert os.path.exists(os.path.join(t.uri, commit_path(6)))


def test_spark_table_restore_delegates(tmp_path):
    from ctfile.spark.table import CtfileTable

    t = _history(_table(tmp_path))
    r = CtfileTable.for_path(None, t.uri).restore(version=1)
    assert r.operation == "RESTORE" and _hidden(t.refresh()) == _hidden(t, 1)


@pytest.mark.parametrize("mode", ["default", "audit", "append_only"])
def test_change_tasks_over_a_restore_add_up_to_the_scan(tmp_path, mode):
    """A parallel engine (the Spark data source) reads a change scan as
    tasks, each a part of the plan: their rows over a RESTORE are the
    serial scan's (the segments keep matching rows by row id and version)."""
    t = _history(_table(tmp_path, rows=8))
    t.restore(version=2)
    t.update(pc.field("id") == 5, {"v": "E"})
    for a in (2, 6):
        cs = t.changes(start_version=a, information=mode)
        serial = sorted(map(str, cs.to_arrow().to_pylist()))
        tasks = cs.tasks(max_rows_per_task=1)
        assert tasks or not serial
        parts = sorted(str(r) for task in tasks for b in task.to_batches() for r in b.to_pylist())
        assert parts == serial, (a, mode)


def test_vacuum_keeps_the_files_a_restore_re_added(tmp_path):
    t = _history(_table(tmp_path))
    t.restore(version=1)  # 6: re-adds files removed at 2, 3 and 5
    t.update(pc.field("id") == 4, {"v": "D"})  # 7: removes one of them again
    r = t.vacuum(retain=0, grace_period=0)
    assert r.oldest_version == 7
    fresh = ctfile.open_table(t.uri)
    assert [x["v"] for x in _hidden(fresh)] == ["a", "b", "c", "D"]
    assert ctfile.verify_table(t.uri, all_versions=True).healthy
    with pytest.raises(ctfile.VersionNotFoundError):
        fresh.restore(version=6)


def test_a_restore_writes_no_file_and_triggers_no_automatic_compaction(tmp_path):
    t = _table(tmp_path, properties={"ctfile.autoCompact": "true"})
    for i in range(5, 9):
        t.insert(pa.table({"id": [i], "v": ["x"]}, schema=SCHEMA))
    files = set(os.listdir(os.path.join(t.uri, "data")))
    r = t.restore(version=1)
    assert r.committed and r.auto_compaction is None
    assert set(os.listdir(os.path.join(t.uri, "data"))) == files
