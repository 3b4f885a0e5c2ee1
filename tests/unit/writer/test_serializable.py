"""Serializable DML (SPEC §Conflict detection): read predicates, blind
appends, isolation levels, statement re-runs, and application transactions.

Races are made deterministic in two ways: two transactions are opened on
the same version and committed one after the other; or a single-statement
method runs on a ``RacingStorage`` (tests/unit/conftest.py), a real local storage that lets
another writer commit just before the statement's log entry is put (the
moment a real race is lost).
"""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.actions import AddPartition
from ctfile.format.errors import CommitConflictError, ConflictKind

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.int64()), ("s", pa.string())])


def _rows(ids, x=None, s=None) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "x": pa.array(x if x is not None else [i * 10 for i in ids], pa.int64()),
            "s": pa.array(s if s is not None else [f"s{i}" for i in ids], pa.string()),
        }
    )


def _ids(t: ctfile.Table) -> Counter:
    return Counter(ctfile.open_table(t.uri).to_arrow().column("id").to_pylist())


def _by_id(t: ctfile.Table) -> dict[int, dict]:
    return {r["id"]: r for r in ctfile.open_table(t.uri).to_arrow().to_pylist()}


@pytest.fixture
def table(tmp_path):
    """Version 2: partitions ids 0..9 (x = 10 id) and 100..109."""
    t = ctfile.create_table(tmp_path / "t", SCHEMA)
    t.insert(_rows(range(10)))
    t.insert(_rows(range(100, 110)))
    return t


# ---------------------------------------------------------------- the defect


def test_concurrent_merges_of_a_new_key_do_not_duplicate_it(table):
    """The defect: each MERGE read a version without key 500 and inserted it.
    The loser's key predicate now finds the winner's row (rule 4)."""
    tx1, tx2 = table.transaction(), table.transaction()
    tx1.merge(_rows([500], x=[1]), "id")
    tx2.merge(_rows([500], x=[2]), "id")
    staged = tx2.staged_paths()
    tx1.commit()
    with pytest.raises(CommitConflictError) as ei:
        tx2.commit()
    assert ei.value.kind is ConflictKind.READ_PREDICATE
    assert (ei.value.read_version, ei.value.winning_version) == (2, 3)
    assert "source keys" in str(ei.value)
    assert not any(table.storage.exists(p) for p in staged)
    assert _ids(table)[500] == 1


def test_a_losing_merge_statement_is_re_run_against_the_winner(table, racing):
    """Table.merge re-reads and re-applies: the key is updated, not duplicated."""
    other = ctfile.open_table(table.uri)
    t = racing(table, lambda: other.merge(_rows([500], x=[1]), "id"))
    r = t.merge(_rows([500, 501], x=[2, 2]), "id")
    assert r.committed and r.version == 4 and r.attempts >= 2
    assert (r.num_inserted_rows, r.num_updated_rows) == (1, 1)
    ids = _ids(table)
    assert ids[500] == 1 and ids[501] == 1
    assert _by_id(table)[500]["x"] == 2


def test_merges_of_disjoint_keys_rebase_without_conflict(table):
    tx1, tx2 = table.transaction(), table.transaction()
    tx1.merge(_rows([500]), "id")
    tx2.merge(_rows([600]), "id")
    tx1.commit()
    r = tx2.commit()
    assert r.committed and r.version == 4 and r.attempts == 2


def test_interleaved_keys_read_the_winners_partition_to_rule_out_a_conflict(table):
    """Key ranges overlap (statistics cannot decide) but no key is shared:
    the loser reads the winner's key column and rebases."""
    tx1, tx2 = table.transaction(), table.transaction()
    tx1.merge(_rows([500, 502, 504]), "id")
    tx2.merge(_rows([501, 503]), "id")
    tx1.commit()
    assert tx2.commit().committed
    assert sum(_ids(table).values()) == 25


# ---------------------------------------------------------------- rule 4 for DELETE and UPDATE


def test_delete_conflicts_with_an_update_that_makes_a_row_match(table):
    """DELETE x >= 1000 reads only the second partition (statistics prune the
    first); a concurrent UPDATE moves row 3 into the predicate. Serially the
    DELETE would remove it, so the DELETE must not commit past it."""
    tx_del, tx_upd = table.transaction(), table.transaction()
    assert tx_del.delete(pc.field("x") >= 1000) == 10
    tx_upd.update(pc.field("id") == 3, {"x": 5000})
    tx_upd.commit()
    with pytest.raises(CommitConflictError) as ei:
        tx_del.commit()
    assert ei.value.kind is ConflictKind.READ_PREDICATE


def test_a_re_run_delete_removes_the_row_the_winner_moved_into_its_predicate(table, racing):
    other = ctfile.open_table(table.uri)
    t = racing(table, lambda: other.update(pc.field("id") == 3, {"x": 5000}))
    r = t.delete(pc.field("x") >= 1000)
    assert r.committed and r.num_deleted_rows == 11
    assert 3 not in _ids(table)


def test_no_lost_update_for_concurrent_increments(table, racing):
    other = ctfile.open_table(table.uri)
    t = racing(table, lambda: other.update(pc.field("id") == 4, {"x": pc.add(pc.field("x"), 1)}))
    t.update(pc.field("id") == 4, {"x": pc.add(pc.field("x"), 1)})
    assert _by_id(table)[4]["x"] == 42


def test_predicate_excluded_by_statistics_reads_nothing_and_rebases(table):
    tx_del, tx_upd = table.transaction(), table.transaction()
    tx_del.delete(pc.field("id") == 105)
    tx_upd.update(pc.field("id") == 3, {"x": 7})  # new partition: ids 0..9
    r = tx_upd.commit()
    # The winner's partition is not opened: its file can be gone.
    (added,) = [a.path for a in table.log.read_entry(r.version) if isinstance(a, AddPartition)]
    os.remove(table.storage.arrow_path(added))
    assert tx_del.commit().committed


# ---------------------------------------------------------------- blind appends and isolation levels


def test_blind_appends_never_conflict(table):
    txs = [table.transaction() for _ in range(4)]
    for i, tx in enumerate(txs):
        tx.insert(_rows([1, 2, 3]))  # the same ids: appends do not check keys
    assert [tx.commit().version for tx in txs] == [3, 4, 5, 6]
    for v in (3, 4, 5, 6):
        assert table.log.commit_info(v).is_blind_append is True


def test_write_serializable_orders_a_concurrent_insert_after_the_merge(table):
    """At WriteSerializable a blind INSERT is not checked against a MERGE's
    keys: both commit (a plain INSERT of an existing key duplicates it, as
    in every format without constraints)."""
    tx_merge, tx_ins = table.transaction(), table.transaction()
    tx_merge.merge(_rows([500], x=[1]), "id")
    tx_ins.insert(_rows([500], x=[2]))
    tx_ins.commit()
    assert tx_merge.commit().committed
    assert _ids(table)[500] == 2
    assert table.log.commit_info(4).isolation_level == "WriteSerializable"


def test_serializable_checks_blind_appends_too(tmp_path):
    t = ctfile.create_table(tmp_path / "t", SCHEMA, properties={"ctfile.isolationLevel": "Serializable"})
    t.insert(_rows(range(10)))
    tx_merge, tx_ins = t.transaction(), t.transaction()
    tx_merge.merge(_rows([500], x=[1]), "id")
    tx_ins.insert(_rows([500], x=[2]))
    tx_ins.commit()
    with pytest.raises(CommitConflictError) as ei:
        tx_merge.commit()
    assert ei.value.kind is ConflictKind.READ_PREDICATE
    assert _ids(t)[500] == 1


def test_commit_info_records_blind_append_and_level(table):
    table.delete(pc.field("id") == 1)
    table.merge(_rows([2], x=[0]), "id")
    table.set_properties({"owner": "me"})
    infos = [table.log.commit_info(v) for v in range(1, table.version + 1)]
    assert [i.is_blind_append for i in infos] == [True, True, False, False, False]
    assert {i.isolation_level for i in infos} == {"WriteSerializable"}


# ---------------------------------------------------------------- compaction


def test_compaction_of_a_partition_a_statement_only_read_is_not_a_conflict(tmp_path):
    t = ctfile.create_table(tmp_path / "t", SCHEMA, partition_rows=100)
    for start in (0, 10, 20):
        t.insert(_rows(range(start, start + 10)))
    tx_upd, tx_compact = t.transaction(), t.transaction()
    assert tx_upd.update(pc.field("x") == -1, {"s": "never"}) == 0  # reads all three, matches none
    tx_upd.insert(_rows([99]))
    assert tx_compact.compact() == 3
    tx_compact.commit()
    assert tx_upd.commit().committed  # the rows it read are the same rows, moved


def test_compaction_of_a_partition_a_statement_rewrites_conflicts(tmp_path):
    t = ctfile.create_table(tmp_path / "t", SCHEMA, partition_rows=100)
    for start in (0, 10):
        t.insert(_rows(range(start, start + 10)))
    tx_upd, tx_compact = t.transaction(), t.transaction()
    tx_upd.update(pc.field("id") == 3, {"s": "changed"})
    tx_compact.compact()
    tx_compact.commit()
    with pytest.raises(CommitConflictError) as ei:
        tx_upd.commit()
    assert ei.value.kind is ConflictKind.REMOVED_READ


# ---------------------------------------------------------------- statements that cannot be re-run


def test_a_streamed_insert_is_not_re_run_after_a_conflict(table, racing):
    """A RecordBatchReader is read once: re-running would insert nothing, so
    the conflict (here: a concurrent schema/property change) is raised."""
    other = ctfile.open_table(table.uri)
    t = racing(table, lambda: other.set_properties({"owner": "me"}))
    data = _rows([700, 701])
    reader = pa.RecordBatchReader.from_batches(data.schema, data.to_batches())
    with pytest.raises(CommitConflictError) as ei:
        t.insert(reader)
    assert ei.value.kind is ConflictKind.METADATA
    assert 700 not in _ids(table)


def test_a_streamed_merge_source_is_read_once_and_re_run(table, racing):
    other = ctfile.open_table(table.uri)
    t = racing(table, lambda: other.merge(_rows([500], x=[1]), "id"))
    data = _rows([500, 501], x=[2, 2])
    r = t.merge(pa.RecordBatchReader.from_batches(data.schema, data.to_batches()), "id")
    assert r.committed and (r.num_inserted_rows, r.num_updated_rows) == (1, 1)
    assert _ids(table)[500] == 1 and _ids(table)[501] == 1


def test_explicit_transaction_conflicts_reach_the_caller(table, racing):
    other = ctfile.open_table(table.uri)
    t = racing(table, lambda: other.merge(_rows([500], x=[1]), "id"))
    with pytest.raises(CommitConflictError):
        with t.transaction() as tx:
            tx.merge(_rows([500], x=[2]), "id")
    assert _ids(table)[500] == 1


# ---------------------------------------------------------------- application transactions


def test_a_replayed_batch_commits_nothing(table):
    """The defect: committing (app_id, v) again later applied it twice."""
    r1 = table.merge(_rows([500], x=[1]), "id", app_id="bronze-to-silver", app_version=41)
    assert r1.committed and table.app_version("bronze-to-silver") == 41
    before = sorted(f.path for f in table.storage.list_dir("data"))
    for v in (41, 40):  # the same batch, and an older one
        r = table.insert(_rows([900]), app_id="bronze-to-silver", app_version=v)
        assert (r.committed, r.app_transaction_replayed, r.version) == (False, True, 3)
        assert r.num_inserted_rows == 0
    assert 900 not in _ids(table)
    assert sorted(f.path for f in table.storage.list_dir("data")) == before  # no file left behind
    r2 = table.insert(_rows([900]), app_id="bronze-to-silver", app_version=42)
    assert r2.committed and not r2.app_transaction_replayed and table.app_version("bronze-to-silver") == 42


def test_app_transactions_of_other_apps_are_independent(table):
    table.insert(_rows([900]), app_id="a", app_version=5)
    assert table.insert(_rows([901]), app_id="b", app_version=1).committed
    assert (table.app_version("a"), table.app_version("b"), table.app_version("c")) == (5, 1, None)


def test_a_statement_re_run_after_the_winner_committed_its_batch_is_a_replay(table, racing):
    """Two runs of one batch race: the loser finds the batch committed."""
    other = ctfile.open_table(table.uri)
    batch = _rows([500], x=[1])
    t = racing(table, lambda: other.merge(batch, "id", app_id="job", app_version=3))
    r = t.merge(batch, "id", app_id="job", app_version=3)
    assert (r.committed, r.app_transaction_replayed) == (False, True)
    assert _ids(table)[500] == 1


def test_app_transaction_arguments_are_checked(table):
    with pytest.raises(ctfile.InvalidArgumentError, match="both app_id and app_version"):
        table.insert(_rows([1]), app_id="x")
    with pytest.raises(ctfile.InvalidArgumentError, match="app_version must be an int in 0..9223372036854775807"):
        table.insert(_rows([1]), app_id="x", app_version=-1)
    with pytest.raises(ctfile.InvalidArgumentError, match="app_id must be a non-empty string"):
        table.app_version("")
    assert table.version == 2


def test_write_job_replay_deletes_its_files(table):
    job = table.write_job(mode="append", schema=SCHEMA)
    files = job.write(_rows([800]))
    assert job.commit(files, app_id="spark-q", app_version=0).committed
    job2 = table.write_job(mode="append", schema=SCHEMA)
    files2 = job2.write(_rows([801]))
    r = job2.commit(files2, app_id="spark-q", app_version=0)
    assert (r.committed, r.app_transaction_replayed) == (False, True)
    assert not any(table.storage.exists(f.path) for f in files2)
    assert 801 not in _ids(table)


# ---------------------------------------------------------------- the predicates themselves


def test_predicates_decide_from_statistics_without_reading(table):
    """A partition the statistics exclude is not opened: its file can even be gone."""
    from ctfile.writer.conflicts import KeyPredicate, RowPredicate

    snap = table.snapshot()
    low, high = sorted(snap.partitions, key=lambda p: p.first_row_id)
    os.remove(table.storage.arrow_path(high.path))
    schema = snap.table_schema
    keys = KeyPredicate.from_source(_rows([3, 5]), ["id"])
    assert keys.first_match(table.storage, schema, [high]) is None
    assert keys.first_match(table.storage, schema, [high, low]) is low
    assert RowPredicate(pc.field("x") < 50).first_match(table.storage, schema, [high, low]) is low
    assert RowPredicate(pc.field("x") > 5000).first_match(table.storage, schema, [high, low]) is None


def test_predicates_read_the_columns_when_statistics_cannot_decide(table):
    from ctfile.writer.conflicts import KeyPredicate, RowPredicate

    snap = table.snapshot()
    schema = snap.table_schema
    low = min(snap.partitions, key=lambda p: p.first_row_id)  # ids 0..9, x = 0, 10, ..., 90
    assert KeyPredicate.from_source(_rows([4, 5, 6]), ["id"]).first_match(table.storage, schema, [low]) is low
    gaps = KeyPredicate.from_source(_rows([2, 100]), ["id"])  # range 2..100 overlaps, but 2 is there
    assert gaps.first_match(table.storage, schema, [low]) is low
    absent = RowPredicate((pc.field("x") > 5) & (pc.field("x") < 10))  # in range, no such value
    assert absent.first_match(table.storage, schema, [low]) is None
    nulls = KeyPredicate.from_source(pa.table({"id": pa.array([None], pa.int64())}), ["id"])
    assert nulls.source_keys.num_rows == 0 and nulls.first_match(table.storage, schema, [low]) is None


def test_a_predicate_that_fails_on_the_winners_rows_is_a_conflict(table):
    """The DELETE's predicate divides by id - 500, which no row of its
    version makes zero; a concurrent MERGE adds id 500. That is a conflict
    that cannot be ruled out (the loser is told to re-run, and a re-run meets
    the error on its own read), not a bad-input error at commit (review
    finding)."""
    tx_del, tx_merge = table.transaction(), table.transaction()
    assert tx_del.delete((pc.field("id") == 3) | (pc.divide_checked(pc.field("x"), pc.subtract(pc.field("id"), 500)) > 100)) == 1
    tx_merge.merge(_rows([500]), "id")
    tx_merge.commit()
    with pytest.raises(CommitConflictError) as ei:
        tx_del.commit()
    assert ei.value.kind is ConflictKind.READ_PREDICATE
