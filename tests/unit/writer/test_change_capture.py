"""Change capture, writer side (SPEC §Change capture): the exact change rows
each kind of statement writes, ``deletesAllRows``, the protocol feature,
multi-statement transactions, failures and conflicts."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import ctfile
from ctfile.format.actions import FEATURE_CHANGE_CAPTURE, ChangeFile, Protocol, RemovePartition
from ctfile.format.change_files import check_change_rows
from ctfile.format.errors import CommitConflictError, InvalidArgumentError
from ctfile.format.paths import CHANGES_DIR
from ctfile.log.transaction import StagedFile

CAPTURE = {"ctfile.changeCapture": "before_after"}


@pytest.fixture
def ct(new_table, make_rows):
    """Capture on, partition_rows=10; version 1 inserts ids 0..29 as three partitions."""
    t = new_table(partition_rows=10, properties=CAPTURE)
    t.insert(make_rows(30))
    return t


def _entry(t: ctfile.Table, version: int) -> list:
    return t.log.read_entry(version)


def _changes(t: ctfile.Table, version: int) -> list[ChangeFile]:
    return [a for a in _entry(t, version) if isinstance(a, ChangeFile)]


def _removes(t: ctfile.Table, version: int) -> list[RemovePartition]:
    return [a for a in _entry(t, version) if isinstance(a, RemovePartition)]


def change_rows(t: ctfile.Table, version: int) -> list[tuple]:
    """(id, x, s, row id, row version, change type) of the change files of
    ``version``, in file order; each file checked against the SPEC rules."""
    out = []
    for c in _changes(t, version):
        table = pq.read_table(pa.BufferReader(t.storage.read_bytes(c.path)))
        assert table.num_rows == c.num_records
        check_change_rows(table, uri=t.uri, path=c.path, version=version)
        out += [tuple(r.values()) for r in table.to_pylist()]
    return out


def _pairs(rows: list[tuple]) -> list[tuple]:
    """Update pairs (pre, post) sorted by row id; the order of partitions
    within a statement is not fixed (they are rewritten concurrently)."""
    return sorted(zip(rows[0::2], rows[1::2]), key=lambda p: p[0][3])


def _change_dir(t: ctfile.Table) -> set[str]:
    return {i.path for i in t.storage.list_dir(CHANGES_DIR)}


# ---------------------------------------------------------------- statements


def test_update_writes_pairs_of_the_rows_that_change_and_none_for_no_ops(ct):
    r = ct.update(pc.field("id").isin([3, 4, 12]), {"x": pc.if_else(pc.field("id") == 4, 40, 0)})
    assert r.num_updated_rows == 2  # id 4 already has x = 40: a no-op
    assert _pairs(change_rows(ct, 2)) == [
        ((3, 30, "s3", 3, 1, "update_preimage"), (3, 0, "s3", 3, None, "update_postimage")),
        ((12, 120, "s12", 12, 1, "update_preimage"), (12, 0, "s12", 12, None, "update_postimage")),
    ]
    assert not any(rm.deletes_all_rows for rm in _removes(ct, 2))


def test_update_of_non_nullable_columns_is_captured(tmp_path):
    """The new images of the columns an UPDATE sets are rebuilt as nullable
    arrays, the old images keep the file's non-null fields: the pairs must
    still concatenate (a regression found by the SF 0.01 benchmark, whose
    lineitem columns are all NOT NULL)."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("q", pa.int32(), nullable=False)])
    t = ctfile.create_table(tmp_path / "t", schema, properties=CAPTURE)
    t.insert(pa.table({"id": [1, 2, 3], "q": [10, 20, 30]}, schema=schema))
    t.update(pc.field("id") == 2, {"q": pc.add(pc.field("q"), pa.scalar(1, pa.int32()))})
    assert change_rows(t, 2) == [(2, 20, 1, 1, "update_preimage"), (2, 21, 1, None, "update_postimage")]


def test_preimage_row_version_is_the_version_that_last_wrote_the_row(ct):
    ct.update(pc.field("id") == 3, {"x": 1})  # version 2
    ct.update(pc.field("id").isin([3, 4]), {"s": "u"})  # version 3
    assert _pairs(change_rows(ct, 3)) == [
        ((3, 1, "s3", 3, 2, "update_preimage"), (3, 1, "u", 3, None, "update_postimage")),
        ((4, 40, "s4", 4, 1, "update_preimage"), (4, 40, "u", 4, None, "update_postimage")),
    ]


def test_partial_delete_writes_the_old_images(ct):
    ct.delete(pc.field("id").isin([1, 25]))
    assert sorted(change_rows(ct, 2)) == [(1, 10, "s1", 1, 1, "delete"), (25, 250, "s25", 25, 1, "delete")]
    assert not any(rm.deletes_all_rows for rm in _removes(ct, 2))


def test_metadata_only_delete_marks_deletes_all_rows_and_writes_no_change_file(ct):
    ct.delete(pc.field("id") < 10)  # statistics: the whole first partition
    (rm,) = _removes(ct, 2)
    assert rm.deletes_all_rows and rm.partition.num_records == 10
    assert _changes(ct, 2) == [] and _change_dir(ct) == set()


def test_rewrite_where_no_row_survives_marks_deletes_all_rows(ct):
    # Statistics cannot decide `x % 1 == 0`: the partitions are read, and no row survives.
    ct.delete(pc.equal(pc.field("x") - pc.field("x"), 0) & (pc.field("id") >= 20))
    removes = _removes(ct, 2)
    assert [rm.deletes_all_rows for rm in removes] == [True]
    assert _changes(ct, 2) == []


def test_merge_captures_updates_and_deletes_but_not_inserts(new_table, make_rows):
    t = new_table(partition_rows=10, properties=CAPTURE)
    t.insert(make_rows(10))
    src = pa.table({"id": pa.array([2, 5, 50], pa.int64()), "x": pa.array([21, 50, 500], pa.int64()),
                    "s": ["n2", "s5", "n50"]})
    r = t.merge(src, "id")
    assert (r.num_updated_rows, r.num_inserted_rows) == (1, 1)  # id 5 is a no-op
    assert change_rows(t, 2) == [(2, 20, "s2", 2, 1, "update_preimage"), (2, 21, "n2", 2, None, "update_postimage")]
    t.merge(pa.table({"id": pa.array([3, 50], pa.int64())}), "id", when_matched="delete", when_not_matched=None)
    # Row 50, inserted by version 2, is the only row of its partition: that
    # partition is removed with deletesAllRows instead.
    assert change_rows(t, 3) == [(3, 30, "s3", 3, 1, "delete")]
    assert sorted((rm.partition.num_records, rm.deletes_all_rows) for rm in _removes(t, 3)) == [(1, True), (10, False)]


def test_truncate_and_overwrite_mark_every_remove_and_write_no_rows(ct, make_rows):
    ct.overwrite(make_rows(5, start=100))
    assert [rm.deletes_all_rows for rm in _removes(ct, 2)] == [True, True, True]
    ct.truncate()
    assert [rm.deletes_all_rows for rm in _removes(ct, 3)] == [True]
    assert _change_dir(ct) == set()


def test_compact_writes_no_change_files(new_table, make_rows):
    t = new_table(partition_rows=10, properties=CAPTURE)
    for i in range(3):
        t.insert(make_rows(2, start=10 * i))
    t.compact()
    assert _changes(t, t.version) == [] and not any(rm.deletes_all_rows for rm in _removes(t, t.version))


def test_capture_off_writes_no_change_action_and_no_deletes_all_rows(new_table, make_rows):
    t = new_table(partition_rows=10)
    t.insert(make_rows(30))
    t.update(pc.field("id") == 1, {"x": 0})
    t.delete(pc.field("id") < 20)
    t.truncate()
    raw = "".join(t.storage.read_bytes(f"_ct_log/{v:020d}.json").decode() for v in range(t.version + 1))
    assert '"change"' not in raw and "deletesAllRows" not in raw
    assert _change_dir(t) == set()


def test_change_files_are_cut_near_partition_rows_without_splitting_a_pair(new_table, make_rows):
    t = new_table(partition_rows=5, properties=CAPTURE)
    t.insert(make_rows(20))
    t.update(None, {"x": -1})  # 20 pairs over 4 partitions
    sizes = [c.num_records for c in _changes(t, 2)]
    assert sum(sizes) == 40 and all(s % 2 == 0 and s <= 6 for s in sizes), sizes
    rows = change_rows(t, 2)
    assert sorted(r[3] for r in rows if r[5] == "update_preimage") == list(range(20))


def test_change_files_carry_size_checksum_and_stats(ct):
    ct.update(pc.field("id").isin([3, 12]), {"s": "u"})
    (c,) = _changes(ct, 2)
    data = ct.storage.read_bytes(c.path)
    import xxhash

    assert c.size_bytes == len(data) and c.checksum == xxhash.xxh3_128_hexdigest(data)
    assert c.stats.num_records == 4
    assert (c.stats.min_values[1], c.stats.max_values[1]) == (3, 12)
    assert (c.stats.min_values[2147483540], c.stats.max_values[2147483540]) == (3, 12)
    assert 2147483539 not in c.stats.null_count  # SPEC §change: table columns and _ct_row_id
    ids = {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in pq.read_schema(pa.BufferReader(data))}
    assert ids == {"id": 1, "x": 2, "s": 3, "_ct_row_id": 2147483540, "_ct_row_version": 2147483539,
                   "_ct_change_type": 2147483538}


# ---------------------------------------------------------------- turning it on


def _protocols(t: ctfile.Table) -> list[tuple[int, Protocol]]:
    return [(v, a) for v in range(t.version + 1) for a in _entry(t, v) if isinstance(a, Protocol)]


def test_create_table_with_capture_lists_the_feature(ct):
    (_, p), = _protocols(ct)
    assert FEATURE_CHANGE_CAPTURE in p.writer_features


def test_set_properties_adds_the_feature_once_and_never_removes_it(new_table, make_rows):
    t = new_table(partition_rows=10)
    t.insert(make_rows(10))
    t.update(pc.field("id") == 1, {"x": 0})
    assert FEATURE_CHANGE_CAPTURE not in _protocols(t)[0][1].writer_features
    t.set_properties({"owner": "me"})
    assert len(_protocols(t)) == 1  # other properties add nothing
    v_on = t.set_properties(CAPTURE).version
    assert [v for v, _ in _protocols(t)] == [0, v_on]
    assert FEATURE_CHANGE_CAPTURE in _protocols(t)[-1][1].writer_features
    t.update(pc.field("id") == 2, {"x": 0})
    assert _changes(t, 2) == [] and len(_changes(t, t.version)) == 1  # applies from the setting on
    t.set_properties({"ctfile.changeCapture": "none"})
    t.set_properties(CAPTURE)
    assert [v for v, _ in _protocols(t)] == [0, v_on]  # kept, not added twice
    t.set_properties({"ctfile.changeCapture": "none"})
    t.update(pc.field("id") == 3, {"x": 0})
    assert _changes(t, t.version) == []
    assert FEATURE_CHANGE_CAPTURE in ctfile.open_table(t.uri).log.load_state().protocol.writer_features


def test_write_job_creating_a_table_with_capture_lists_the_feature(tmp_path, make_rows):
    job = ctfile.WriteJob.for_new_table(str(tmp_path / "t"), make_rows(1).schema, properties=CAPTURE)
    job.commit(job.write(make_rows(3)))
    t = ctfile.open_table(tmp_path / "t")
    assert FEATURE_CHANGE_CAPTURE in _protocols(t)[0][1].writer_features


# ---------------------------------------------------------------- transactions


def test_transaction_keeps_first_old_image_and_last_new_image_per_row(ct, make_rows):
    with ct.transaction() as tx:
        tx.insert(make_rows(2, start=100))
        tx.update(pc.field("id").isin([0, 1, 2, 100]), {"s": "Z"})
        tx.update(pc.field("id") == 1, {"s": "s1"})  # back to its old value: no pair
        tx.delete(pc.field("id").isin([2, 3, 101]))  # 2 was updated first; 101 is fresh
        tx.update(pc.field("id") == 0, {"s": "W"})
    assert change_rows(ct, 2) == [  # in the order of each row's first event
        (0, 0, "s0", 0, 1, "update_preimage"), (0, 0, "W", 0, None, "update_postimage"),
        (2, 20, "s2", 2, 1, "delete"), (3, 30, "s3", 3, 1, "delete"),
    ]
    assert len(_changes(ct, 2)) == 1 and len(_change_dir(ct)) == 1  # the intermediate files are gone


def test_transaction_that_removes_a_partition_it_rewrote_captures_the_copied_rows(ct):
    with ct.transaction() as tx:
        tx.update(pc.field("id") == 5, {"s": "u"})  # rewrites the first partition
        tx.delete(pc.field("id") < 10)  # removes that rewritten (staged) partition whole
    (rm,) = _removes(ct, 2)
    assert not rm.deletes_all_rows  # the removed committed partition was rewritten, not deleted whole
    rows = change_rows(ct, 2)
    assert sorted((r[0], r[4], r[5]) for r in rows) == [(i, 1, "delete") for i in range(10)]
    assert (5, 50, "s5", 5, 1, "delete") in rows  # its value at the read version


def test_truncate_in_a_transaction_captures_rows_of_staged_partitions(ct, make_rows):
    with ct.transaction() as tx:
        tx.update(pc.field("id") == 15, {"x": 0})
        tx.insert(make_rows(1, start=200))
        tx.truncate()
    assert sorted((r[0], r[5]) for r in change_rows(ct, 2)) == [(i, "delete") for i in range(10, 20)]
    assert sorted(rm.deletes_all_rows for rm in _removes(ct, 2)) == [False, True, True]


def test_a_failing_statement_leaves_no_change_rows_in_its_transaction(ct):
    with ct.transaction() as tx:
        tx.update(pc.field("id") == 1, {"x": 0})
        with pytest.raises(InvalidArgumentError):
            # A division by zero on the row with id 25 (another partition than id 2's).
            tx.update(pc.field("id").isin([2, 25]), {"x": pc.divide_checked(pc.field("x"), pc.field("id") - 25)})
    assert [(r[0], r[5]) for r in change_rows(ct, 2)] == [(1, "update_preimage"), (1, "update_postimage")]
    assert len(_change_dir(ct)) == 1


def test_an_aborted_transaction_deletes_its_change_files(ct):
    with pytest.raises(RuntimeError):
        with ct.transaction() as tx:
            tx.update(pc.field("id") == 1, {"x": 0})
            assert len(tx.staged_changes()) == 1
            raise RuntimeError("give up")
    assert _change_dir(ct) == set() and ct.refresh().version == 1


def test_a_conflict_deletes_the_losers_change_files(ct):
    tx = ct.transaction()
    tx.update(pc.field("id") == 1, {"x": 0})
    (mine,) = [f.path for f in tx.staged_changes()]
    winner = ctfile.open_table(ct.uri).update(pc.field("id") == 1, {"x": 5})
    with pytest.raises(CommitConflictError):
        tx.commit()
    assert _change_dir(ct) == {c.path for c in _changes(ct, winner.version)}
    assert mine not in _change_dir(ct)


def test_a_statement_re_run_after_a_conflict_discards_the_change_files_of_its_first_run(ct, racing):
    """Table.update loses the race to a concurrent UPDATE of the same row and
    is re-run at the winner's version: the commit names only the re-run's
    change file, whose old image is the winner's row, and the first run's
    file is gone."""
    other = ctfile.open_table(ct.uri)
    t = racing(ct, lambda: other.update(pc.field("id") == 7, {"x": 2}))
    r = t.update(pc.field("id") == 7, {"x": 3})
    assert r.committed and r.version == 3 and r.attempts >= 2
    assert change_rows(ct, 3) == [(7, 2, "s7", 7, 2, "update_preimage"), (7, 3, "s7", 7, None, "update_postimage")]
    assert _change_dir(ct) == {c.path for v in (2, 3) for c in _changes(ct, v)}


def test_staging_change_files_without_capture_is_refused(new_table, make_rows):
    t = new_table()
    tx = t.transaction()
    with pytest.raises(InvalidArgumentError, match="changeCapture none"):
        tx.stage_changes([StagedFile("_ct_changes/x.parquet", 1, 1, "0" * 32, None, 0)])


def test_entry_json_of_a_captured_update(ct):
    ct.update(pc.field("id") == 1, {"x": 0})
    lines = [json.loads(line) for line in ct.storage.read_bytes(f"_ct_log/{2:020d}.json").decode().splitlines()]
    assert [next(iter(obj)) for obj in lines] == ["commitInfo", "remove", "add", "change"]
    assert lines[3]["change"]["path"].startswith("_ct_changes/change-")


def test_capture_changes_no_snapshot(new_table, make_rows):
    """The same statements with capture on and off give the same snapshots,
    hidden columns included, at every version."""
    tables = [new_table(partition_rows=7), new_table(partition_rows=7, properties=CAPTURE)]
    src = pa.table({"id": pa.array([3, 9, 40], pa.int64()), "x": pa.array([1, 90, 2], pa.int64()), "s": ["m", "s9", "n"]})
    for t in tables:
        t.insert(make_rows(30))
        t.update(pc.field("id").isin([0, 4, 8, 12, 16, 20, 24, 28]), {"x": pc.field("x") + 1})
        t.delete(pc.field("id").isin([1, 2, 17, 29]))
        t.merge(src, "id")
        with t.transaction() as tx:
            tx.update(pc.field("id") < 10, {"s": "t"})
            tx.delete(pc.field("id") < 5)
        t.delete(pc.field("id") < 14)
        t.truncate()
    off, on = tables
    assert off.version == on.version == 7
    for v in range(1, 8):
        a, b = (x.snapshot(v).to_arrow(include_hidden=True).sort_by("id") for x in tables)
        assert a.equals(b), v
    assert len(_change_dir(on)) >= 4 and _change_dir(off) == set()


@pytest.mark.parametrize("compact_first", [False, True])
def test_compact_cannot_share_a_transaction_with_a_statement_that_changes_rows(new_table, make_rows, compact_first):
    """A compaction commits dataChange false for its whole entry: with a DML
    statement in the same transaction, change scans would skip the rows that
    statement changed. Either order is refused before anything is written."""
    t = new_table(partition_rows=4, properties=CAPTURE)
    for i in range(3):
        t.insert(make_rows(1, start=i))  # three one-row partitions: compact has work
    before = sorted(p.name for p in (Path(t.uri) / "data").iterdir())
    with pytest.raises(InvalidArgumentError, match="compact"):
        with t.transaction() as tx:
            if compact_first:
                assert tx.compact() == 3
                tx.delete(pc.field("id") == 0)
            else:
                tx.delete(pc.field("id") == 0)
                tx.compact()
    assert t.version == 3 and t.snapshot().num_records == 3
    assert sorted(p.name for p in (Path(t.uri) / "data").iterdir()) == before
