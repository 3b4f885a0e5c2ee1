"""ctfile.log.transaction: optimistic commits, rebase, conflict detection.

Races are simulated deterministically: both transactions are created (and
their statements run) from the same base version before either commits.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.errors import CommitConflictError, InvalidArgumentError
from ctfile.format.paths import commit_path


def _log_files(t) -> list[str]:
    return sorted(i.path for i in t.storage.list_dir("_ct_log"))


def _data_files(t) -> set[str]:
    return {i.path for i in t.storage.list_dir("data")}


@pytest.fixture
def two_parts(new_table, make_rows):
    """A table at version 2 with two partitions: ids 0..9 and 10..19."""
    t = new_table()
    t.insert(make_rows(10))
    t.insert(make_rows(10, start=10))
    assert t.version == 2 and len(t.snapshot().partitions) == 2
    return t


def test_blind_inserts_both_commit_and_rebase(two_parts, make_rows):
    t = two_parts
    tx1, tx2 = t.transaction(), t.transaction()
    tx1.insert(make_rows(5, start=100))
    tx2.insert(make_rows(7, start=200))
    r1 = tx1.commit()
    r2 = tx2.commit()
    assert (r1.version, r1.committed, r1.attempts) == (3, True, 1)
    assert (r2.version, r2.committed) == (4, True)
    assert r2.attempts == 2  # lost the race for version 3, rebased onto it
    ci = t.log.commit_info(4)
    assert ci.read_version == 2  # the version it read, not the one it rebased onto
    assert ci.timestamp > t.log.commit_info(3).timestamp

    snap = ctfile.open_table(t.uri).snapshot()
    assert snap.version == 4
    by_version = {}
    for p in snap.partitions:
        by_version.setdefault(p.default_row_version, []).append(p)
    (p1,), (p2,) = by_version[3], by_version[4]
    r1_range = range(p1.first_row_id, p1.first_row_id + p1.num_records)
    r2_range = range(p2.first_row_id, p2.first_row_id + p2.num_records)
    assert not set(r1_range) & set(r2_range)
    assert p2.first_row_id >= p1.first_row_id + p1.num_records
    assert snap.state.next_row_id == p2.first_row_id + 7

    full = snap.to_arrow(include_hidden=True)
    assert full.num_rows == 20 + 5 + 7
    assert len(set(full.column("_ct_row_id").to_pylist())) == full.num_rows
    assert sorted(full.column("id").to_pylist()) == list(range(20)) + list(range(100, 105)) + list(range(200, 207))


def test_delete_vs_delete_same_partition_conflicts(two_parts):
    t = two_parts
    tx1, tx2 = t.transaction(), t.transaction()
    assert tx1.delete(pc.field("id") == 1) == 1
    assert tx2.delete(pc.field("id") == 2) == 1
    loser_files = tx2.staged_paths()
    assert loser_files and all(t.storage.exists(p) for p in loser_files)
    tx1.commit()
    logs_before = _log_files(t)
    with pytest.raises(CommitConflictError) as ei:
        tx2.commit()
    err = ei.value
    assert (err.read_version, err.winning_version) == (2, 3)
    assert "version 3" in str(err) and "read version 2" in str(err)
    # The loser's staged data files are gone and nothing was committed.
    assert not any(t.storage.exists(p) for p in loser_files)
    assert _log_files(t) == logs_before
    ids = ctfile.open_table(t.uri).to_arrow().column("id").to_pylist()
    assert 1 not in ids and 2 in ids and len(ids) == 19


def test_delete_vs_delete_different_partitions_both_commit(two_parts):
    t = two_parts
    tx1, tx2 = t.transaction(), t.transaction()
    tx1.delete(pc.field("id") == 3)
    tx2.delete(pc.field("id") == 13)
    assert tx1.commit().version == 3
    r2 = tx2.commit()
    assert r2.version == 4 and r2.committed and r2.attempts == 2
    ids = sorted(ctfile.open_table(t.uri).to_arrow().column("id").to_pylist())
    assert ids == [i for i in range(20) if i not in (3, 13)]


def test_update_vs_delete_same_partition_conflicts(two_parts):
    t = two_parts
    tx1, tx2 = t.transaction(), t.transaction()
    tx1.update(pc.field("id") == 4, {"x": -1})
    tx2.delete(pc.field("id") == 5)
    tx2.commit()
    with pytest.raises(CommitConflictError) as ei:
        tx1.commit()
    assert (ei.value.read_version, ei.value.winning_version) == (2, 3)


def test_truncate_vs_concurrent_insert_conflicts(two_parts, make_rows):
    t = two_parts
    tx_trunc, tx_ins = t.transaction(), t.transaction()
    tx_trunc.truncate()
    tx_ins.insert(make_rows(3, start=50))
    tx_ins.commit()
    with pytest.raises(CommitConflictError) as ei:
        tx_trunc.commit()
    assert (ei.value.read_version, ei.value.winning_version) == (2, 3)
    assert ctfile.open_table(t.uri).to_arrow().num_rows == 23


def test_insert_after_concurrent_truncate_commits(two_parts, make_rows):
    t = two_parts
    tx_trunc, tx_ins = t.transaction(), t.transaction()
    tx_trunc.truncate()
    tx_ins.insert(make_rows(3, start=50))
    tx_trunc.commit()
    assert tx_ins.commit().version == 4
    assert sorted(ctfile.open_table(t.uri).to_arrow().column("id").to_pylist()) == [50, 51, 52]


def test_metadata_change_conflicts_with_everything(two_parts, make_rows):
    t = two_parts
    tx_meta, tx_ins = t.transaction(), t.transaction()
    md = tx_meta.metadata
    from ctfile.format.actions import Metadata

    tx_meta.set_metadata(Metadata(md.table_id, md.schema, md.created_time, {"k": "v"}))
    tx_ins.insert(make_rows(1, start=99))
    staged = tx_ins.staged_paths()
    tx_meta.commit()
    with pytest.raises(CommitConflictError, match="metadata"):
        tx_ins.commit()
    assert not any(t.storage.exists(p) for p in staged)


def test_concurrent_duplicate_app_transaction_commits_nothing(two_parts, make_rows):
    """SPEC §txn: of two transactions racing to commit the same batch, one
    commits it and the other is a replay that commits nothing (no error)."""
    t = two_parts
    tx1, tx2 = t.transaction(), t.transaction()
    for tx in (tx1, tx2):
        tx.set_app_transaction("stream-a", 7)
        tx.insert(make_rows(1, start=500))
    loser_files = tx2.staged_paths()
    tx1.commit()
    r2 = tx2.commit()
    assert (r2.committed, r2.app_transaction_replayed, r2.version) == (False, True, 3)
    assert r2.num_inserted_rows == 0
    assert not any(t.storage.exists(p) for p in loser_files)
    table = ctfile.open_table(t.uri)
    assert table.version == 3 and table.app_version("stream-a") == 7
    assert table.to_arrow().column("id").to_pylist().count(500) == 1


def test_different_app_ids_do_not_conflict(two_parts, make_rows):
    t = two_parts
    tx1, tx2 = t.transaction(), t.transaction()
    tx1.set_app_transaction("a", 1)
    tx2.set_app_transaction("b", 1)
    tx1.commit()
    assert tx2.commit().version == 4


def test_no_match_commits_nothing(two_parts):
    t = two_parts
    logs_before, data_before = _log_files(t), _data_files(t)
    tx = t.transaction()
    assert tx.delete(pc.field("id") == 12345) == 0
    assert tx.update(pc.field("id") > 1000, {"x": 1}) == 0
    r = tx.commit()
    assert (r.committed, r.version, r.attempts) == (False, 2, 0)
    assert _log_files(t) == logs_before and _data_files(t) == data_before
    assert ctfile.open_table(t.uri).version == 2


def test_statements_in_one_transaction_see_each_other(two_parts, make_rows):
    t = two_parts
    with t.transaction() as tx:
        tx.insert(make_rows(5, start=100))
        assert tx.delete(pc.field("id") >= 102) == 3  # sees its own insert
        tx.update(pc.field("id") == 100, {"x": 7})
    r = tx.result
    assert r.version == 3 and r.committed
    got = ctfile.open_table(t.uri).to_arrow().sort_by("id")
    assert got.column("id").to_pylist() == list(range(20)) + [100, 101]
    assert got.column("x").to_pylist()[-2:] == [7, 1010]
    # Files written and dropped inside the transaction are not left behind.
    live = {p.path for p in ctfile.open_table(t.uri).snapshot().partitions}
    assert _data_files(t) == live


def test_exception_in_block_aborts_and_cleans_up(two_parts, make_rows):
    t = two_parts
    data_before, logs_before = _data_files(t), _log_files(t)
    with pytest.raises(RuntimeError):
        with t.transaction() as tx:
            tx.insert(make_rows(5, start=100))
            tx.delete(pc.field("id") == 1)
            assert tx.staged_paths()
            raise RuntimeError("boom")
    assert _data_files(t) == data_before and _log_files(t) == logs_before


def test_transaction_cannot_be_reused(two_parts, make_rows):
    tx = two_parts.transaction()
    tx.insert(make_rows(1, start=100))
    tx.commit()
    with pytest.raises(InvalidArgumentError, match="already been committed"):
        tx.insert(make_rows(1, start=101))
    with pytest.raises(InvalidArgumentError):
        tx.commit()


def test_rebase_over_many_winners(two_parts, make_rows):
    t = two_parts
    losers = [t.transaction() for _ in range(4)]
    for i, tx in enumerate(losers):
        tx.insert(make_rows(2, start=1000 + 10 * i))
    versions = [tx.commit().version for tx in losers]
    assert versions == [3, 4, 5, 6]
    assert [tx.result.attempts for tx in losers] == [1, 2, 2, 2]
    assert t.log.storage.exists(commit_path(6))
    snap = ctfile.open_table(t.uri).snapshot()
    rid = snap.to_arrow(include_hidden=True).column("_ct_row_id").to_pylist()
    assert len(rid) == len(set(rid)) == 28


def test_retry_delay_is_capped_full_jitter_exponential():
    from ctfile.log.transaction import RETRY_BASE_S, RETRY_CAP_S, retry_delay

    for n in (1, 3, 6, 10, 200, 10_000):
        bound = min(RETRY_CAP_S, RETRY_BASE_S * 2 ** min(n, 30))
        delays = [retry_delay(n) for _ in range(300)]
        assert all(0 <= d < bound for d in delays)
        # Full jitter: the draws spread over the whole window, not a fixed step.
        assert max(delays) > bound * 0.8 and min(delays) < bound * 0.2
    assert RETRY_BASE_S * 2**6 < RETRY_CAP_S <= RETRY_BASE_S * 2**8


def test_a_definite_local_refusal_of_the_entry_aborts_at_once(two_parts, make_rows, monkeypatch):
    """link(2) refusing (here ENOSPC, injected) is a definite answer: nothing
    was created, so the commit fails at once with StorageError and deletes its
    data file, instead of retrying it as an unknown outcome and raising a raw
    OSError with the file left behind (review finding)."""
    import errno
    import os

    from ctfile.log import storage as storage_module

    t = two_parts
    data_before = _data_files(t)
    tx = t.transaction()
    tx.insert(make_rows(2, start=100))
    assert _data_files(t) != data_before

    def full_disk(src, dst):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(storage_module.os, "link", full_disk)
    with pytest.raises(ctfile.StorageError, match="write of _ct_log/00000000000000000003.json .* failed"):
        tx.commit()
    monkeypatch.undo()
    assert _data_files(t) == data_before
    assert ctfile.open_table(t.uri).version == 2


def test_an_interrupted_put_keeps_the_data_files(two_parts, make_rows, monkeypatch):
    """An interrupt while the entry's put may still complete (on S3 the
    request runs on fsspec's IO thread) must not delete the files the entry
    names (review finding)."""
    t = two_parts
    tx = t.transaction()
    tx.insert(make_rows(2, start=100))
    staged = tx.staged_paths()

    def interrupted(path, data):
        raise KeyboardInterrupt

    monkeypatch.setattr(t.storage, "put_if_absent", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tx.commit()
    assert all(t.storage.exists(p) for p in staged)


def test_a_replay_is_recognised_before_an_earlier_winners_conflict(two_parts, make_rows):
    """Winners: a property change (a conflict) and then another writer's
    commit of the same batch. The batch is committed, so this is a replay,
    not a conflict (SPEC §Commit protocol, step 6; review finding)."""
    t = two_parts
    tx = t.transaction(app_id="job", app_version=5)
    tx.insert(make_rows(1, start=100))
    other = ctfile.open_table(t.uri)
    other.set_properties({"owner": "me"})
    other.insert(make_rows(1, start=200), app_id="job", app_version=5)
    r = tx.commit()
    assert (r.committed, r.app_transaction_replayed, r.version) == (False, True, 4)
