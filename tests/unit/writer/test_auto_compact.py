"""Automatic compaction (``ctfile.autoCompact``, SPEC §Clustering): a
follow-up ``dataChange: false`` commit after a commit that leaves small
partitions, attempted once, never failing that commit."""

from __future__ import annotations

import logging
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.writer import compaction

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def _rows(ids) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": ids, "v": [f"v{i}" for i in ids]}, schema=SCHEMA)


def _table(tmp_path, *, keys: str | None = "id", auto: bool = True, rows: int = 100, **extra) -> ctfile.Table:
    props = {"ctfile.partitionRows": str(rows), "ctfile.autoCompact": "true" if auto else "false", **extra}
    if keys:
        props["ctfile.clusterBy"] = keys
    return ctfile.create_table(tmp_path / "t", SCHEMA, properties=props)


def _data_files(t: ctfile.Table) -> set[str]:
    return set(os.listdir(os.path.join(t.uri, "data")))


def _ids(t: ctfile.Table, version=None) -> list[int]:
    return sorted(t.snapshot(version).to_arrow().column("id").to_pylist())


def test_off_by_default_and_when_false(tmp_path):
    t = ctfile.create_table(tmp_path / "t", SCHEMA)
    for i in range(6):
        assert t.insert(_rows([i])).auto_compaction is None
    assert len(t.snapshot().partitions) == 6


@pytest.mark.parametrize("keys", [None, "id"])
def test_the_fourth_small_partition_triggers_one_compaction(tmp_path, keys):
    t = _table(tmp_path, keys=keys)
    results = [t.insert(_rows(range(10 * i, 10 * i + 10))) for i in range(4)]
    assert [r.auto_compaction for r in results[:3]] == [None] * 3
    r = results[3]
    assert r.committed and r.version == 4 and r.operation == "INSERT"
    ac = r.auto_compaction
    assert ac.committed and ac.version == 5 and ac.operation == "COMPACT"
    assert (ac.num_removed_partitions, ac.num_added_partitions, ac.num_copied_rows) == (4, 1, 40)
    assert t.version == 5 and len(t.snapshot().partitions) == 1 and _ids(t) == list(range(40))
    # Invisible to change scans: the compaction changed no row.
    assert t.changes(start_version=5, end_version=5).to_arrow().num_rows == 0
    assert t.log.commit_info(5).data_change is False


def test_large_partitions_and_untouched_groups_are_left_alone(tmp_path):
    t = _table(tmp_path)
    t.insert(_rows(range(1000)))  # ten full partitions
    for start in (5000, 5010, 5020):
        t.insert(_rows(range(start, start + 10)))  # three small ones above them
    r = t.insert(_rows(range(2000, 2100)))  # a full partition: no small one added
    assert r.auto_compaction is None
    r = t.insert(_rows(range(5030, 5040)))  # the fourth small neighbour
    assert r.auto_compaction.num_removed_partitions == 4
    assert len(t.snapshot().partitions) == 12


def test_upserts_keep_the_partition_count_near_compacted(tmp_path):
    t = _table(tmp_path)
    t.insert(_rows(range(1000)))
    top = 1000
    for _ in range(12):  # each MERGE updates recent ids and inserts 15 new ones
        src = _rows(list(range(top - 30, top - 15)) + list(range(top, top + 15)))
        t.merge(src, on="id")
        top += 15
    live = t.snapshot().partitions
    assert sum(p.num_records for p in live) == top
    assert len(live) <= -(-top // 100) + 3  # a few small ones wait for the fourth
    assert t.clustering_info().average_depth == 1.0


def test_bounded_to_four_partitions_of_rows(tmp_path):
    t = _table(tmp_path, keys=None, rows=8)
    for i in range(40):
        t.insert(_rows([i]))  # compactions fire as small files accumulate
    with t.transaction() as tx:
        for i in range(40, 80):
            tx.insert(_rows([i]))  # one commit of forty one-row partitions
    assert tx.result.auto_compaction.num_copied_rows <= 4 * 8


def test_a_concurrent_commit_abandons_it_and_the_user_commit_stands(tmp_path, monkeypatch, caplog):
    t = _table(tmp_path)
    for i in range(3):
        t.insert(_rows(range(10 * i, 10 * i + 10)))
    other = ctfile.open_table(t.uri)
    real = compaction.plan_auto_compaction

    def race(tx, added):
        plan = real(tx, added)
        # Another process deletes rows of a partition the compaction is
        # about to rewrite, between the user's commit and the compaction's.
        other.delete(pc.field("id") == 5)
        return plan

    monkeypatch.setattr("ctfile.writer.transaction.plan_auto_compaction", race)
    before = _data_files(t)
    with caplog.at_level(logging.WARNING, logger="ctfile"):
        r = t.insert(_rows(range(30, 40)))
    assert r.committed and r.version == 4 and r.auto_compaction is None
    assert "automatic compaction after version 4" in caplog.text and "abandoned" in caplog.text
    latest = ctfile.open_table(t.uri)
    assert _ids(latest, 4) == list(range(40))
    assert _ids(latest) == [i for i in range(40) if i != 5]
    # Version 5 is the delete, version 6 the delete's own follow-up
    # compaction (its table auto-compacts too); none is the abandoned one.
    assert latest.version == 6 and [latest.log.commit_info(v).operation for v in (5, 6)] == ["DELETE", "COMPACT"]
    # The abandoned compaction's files are gone: every new file is one a version names.
    new = _data_files(t) - before
    referenced = {p.path.split("/")[-1] for v in (4, 5, 6) for p in latest.snapshot(v).partitions}
    assert new and new <= referenced


def test_damage_abandons_it_with_a_warning(tmp_path, monkeypatch, caplog):
    t = _table(tmp_path)
    for i in range(3):
        t.insert(_rows(range(10 * i, 10 * i + 10)))
    victim = t.snapshot().partitions[0].path
    real = compaction.plan_auto_compaction

    def lose_a_file(tx, added):
        os.remove(os.path.join(t.uri, victim))  # the file is lost before the compaction reads it
        return real(tx, added)

    monkeypatch.setattr("ctfile.writer.transaction.plan_auto_compaction", lose_a_file)
    with caplog.at_level(logging.WARNING, logger="ctfile"):
        r = t.insert(_rows(range(30, 40)))
    assert r.committed and r.auto_compaction is None and "abandoned" in caplog.text
    assert ctfile.open_table(t.uri).version == 4


def test_a_replayed_batch_compacts_nothing(tmp_path):
    t = _table(tmp_path)
    for i in range(3):
        t.insert(_rows([i]), app_id="job", app_version=i)
    again = t.insert(_rows([2]), app_id="job", app_version=2)
    assert not again.committed and again.auto_compaction is None


def test_after_a_stream_consumption_the_stream_is_resolved_first(tmp_path):
    src = ctfile.create_table(tmp_path / "src", SCHEMA)
    s = src.create_stream("feed")
    t = _table(tmp_path)
    for i in range(3):
        t.insert(_rows([100 + i]))
    src.insert(_rows([1, 2]))
    with t.transaction(consuming=s) as tx:
        tx.insert(s.pending().to_arrow().select(["id", "v"]))
    assert tx.result.auto_compaction is not None
    assert s.offset == src.version and not src.stream("feed").pending().to_arrow().num_rows
    assert _ids(t) == [1, 2, 100, 101, 102]


def test_with_change_capture_the_changes_are_those_of_the_statements(tmp_path):
    t = _table(tmp_path, **{"ctfile.changeCapture": "before_after"})
    t.insert(_rows(range(100)))
    versions = []
    for i in range(4):
        r = t.update(pc.field("id") == i, {"v": "new"}) if i % 2 else t.insert(_rows([1000 + i]))
        versions.append(r.version)
    changed = t.changes(start_version=2).to_arrow()
    assert sorted(changed.column("id").to_pylist()) == [1, 1, 3, 3, 1000, 1002]


# ---------------------------------------------------------------- the depth bound (issue 26)


def _random_upserts(t: ctfile.Table, rng, live: set[int], *, batches: int, top: int, check=None) -> None:
    """MERGEs of 20 existing and 20 new ids, both drawn uniformly over
    ``[0, top)`` (so every batch's inserts make a partition across every
    other); ``check(i)`` after each."""
    for i in range(batches):
        old = rng.choice(sorted(live), 20, replace=False).tolist()
        new = [x for x in dict.fromkeys(rng.integers(0, top, 60).tolist()) if x not in live][:20]
        t.merge(_rows(sorted(old + new)), on="id")
        live.update(new)
        if check is not None:
            check(i)


def _spaced_table(tmp_path, rng, **props) -> tuple[ctfile.Table, set[int]]:
    """2,000 rows, ids 0, 8, 16, ... (room for new ids in every partition's
    range), clustered by id in partitions of 100: depth 1."""
    t = _table(tmp_path, **props)
    ids = list(range(0, 16_000, 8))
    t.insert(_rows(rng.permutation(ids).tolist()))
    assert t.clustering_info().max_depth == 1
    return t, set(ids)


def test_random_key_upserts_keep_the_clustering_depth_bounded(tmp_path):
    """The drift of issue 26: each MERGE's inserts span every partition, and
    automatic compaction merged only small partitions among themselves, so
    the depth rose with the MERGEs (maximum 4 after the third, 10 after the
    thirtieth, average 8.2). ``ctfile.autoCompactMaxDepth`` (default 3) now
    bounds the maximum depth, so the average, after every commit."""
    rng = np.random.default_rng(26)
    t, live = _spaced_table(tmp_path, rng)
    seen = []

    def check(i):
        info = t.clustering_info()
        seen.append((info.average_depth, info.max_depth))
        assert info.max_depth <= 3 and info.average_depth <= 3, (i, seen)

    _random_upserts(t, rng, live, batches=30, top=16_000, check=check)
    assert _ids(t) == sorted(live)


def test_a_bound_of_one_keeps_the_table_fully_clustered(tmp_path):
    rng = np.random.default_rng(7)
    t, live = _spaced_table(tmp_path, rng, **{"ctfile.autoCompactMaxDepth": "1"})

    def check(i):
        info = t.clustering_info()
        assert (info.max_depth, info.average_overlaps) == (1, 0.0), i

    _random_upserts(t, rng, live, batches=8, top=16_000, check=check)
    assert _ids(t) == sorted(live)


def test_the_bound_is_restored_whatever_the_commits_before_left(tmp_path):
    """The check is of the whole version, not of what the commit added: a
    table deepened while automatic compaction was off (or one whose
    compaction was abandoned) is brought within the bound by the next
    commit's compaction, which rewrites the lightest runs."""
    rng = np.random.default_rng(3)
    t, live = _spaced_table(tmp_path, rng, auto=False)
    _random_upserts(t, rng, live, batches=12, top=16_000)
    deep = t.clustering_info()
    assert deep.max_depth > 3
    t.set_properties({"ctfile.autoCompact": "true"})
    r = t.insert(_rows([16_001]))  # one row: no small-partition trigger on its own
    assert r.auto_compaction is not None and r.auto_compaction.committed
    assert r.auto_compaction.num_copied_rows < t.snapshot().num_records  # the lightest runs, not the table
    assert t.clustering_info().max_depth <= 3
    assert _ids(t) == sorted(live | {16_001})


def test_the_bound_is_a_validated_table_property(tmp_path):
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(ctfile.InvalidArgumentError, match="ctfile.autoCompactMaxDepth must be a positive integer"):
            _table(tmp_path, **{"ctfile.autoCompactMaxDepth": bad})
    assert not (tmp_path / "t").exists()
