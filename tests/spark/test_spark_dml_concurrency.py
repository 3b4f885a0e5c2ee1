"""``ctfile.spark`` statements exactly once (application transactions) and
under concurrent commits, interleaved for real: a source DataFrame or a
condition whose first evaluation, in a Spark worker, commits to the same
table with the Python API, after the statement read its version and before
it commits. Results are compared with the serial order on a twin table
(:mod:`dml_helpers`).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F

import ctfile
from ctfile.spark import CtfileTable
from dml_helpers import (
    SCHEMA, SPARK_SCHEMA, check_pruned_delete_race, counts, files, once, racing_update_condition, row_ids, source,
    table_state, twins, watching,
)


# ---------------------------------------------------------------- exactly once


def test_app_transaction_makes_a_merge_exactly_once(spark, tmp_path):
    st, pt = twins(tmp_path)
    t = CtfileTable.for_path(spark, st.uri)
    src = source(spark, [(1, "one", 1), (50, "fifty", 500)])
    first = t.merge(src, "id", app_id="q", app_version=3)
    assert first.committed and st.refresh().app_version("q") == 3
    version, before, rows = st.version, files(st), st.snapshot().to_arrow(include_hidden=True).to_pylist()
    for v in (3, 2):
        again = t.merge(source(spark, [(1, "other", 2), (51, "new", 1)]), "id", app_id="q", app_version=v)
        assert (again.committed, again.app_transaction_replayed, again.version) == (False, True, version)
    assert st.refresh().version == version and files(st) == before
    assert st.snapshot().to_arrow(include_hidden=True).to_pylist() == rows
    # UPDATE and DELETE take application transactions too.
    assert t.update("id = 2", {"qty": 0}, app_id="q", app_version=4).committed
    version = st.refresh().version
    replays = (t.update("id = 3", {"qty": 0}, app_id="q", app_version=4), t.delete(None, app_id="q", app_version=1))
    for replayed in replays:
        assert (replayed.committed, replayed.app_transaction_replayed, replayed.version) == (False, True, version)
    assert st.refresh().version == version
    # The Python helper agrees on the first commit and on the replay.
    py_first = pt.merge(src.toArrow(), "id", app_id="q", app_version=3)
    assert counts(py_first) == counts(first)
    assert counts(pt.merge(src.toArrow(), "id", app_id="q", app_version=3)) == counts(again)


def test_batch_committed_concurrently_is_a_replay(spark, tmp_path):
    """Another writer commits the same application batch while the Spark
    MERGE runs: the MERGE finds it at commit, commits nothing and deletes
    the files its executors wrote (SPEC §Conflict detection, application
    transactions)."""
    st, _ = twins(tmp_path)
    racing = pa.table({"id": [2], "name": ["python"], "qty": [0]}, schema=SCHEMA)
    rows = [(2, "spark two", 2), (3, "spark three", 3), (90, "spark ninety", 9)]
    src = _committing_source(spark, rows, st.uri, tmp_path / "committed", racing, "merge", app_id="q", app_version=5)
    start, before = st.version, files(st)
    with watching(st) as seen:
        r = CtfileTable.for_path(spark, st.uri).merge(src, "id", app_id="q", app_version=5)
    assert (r.committed, r.app_transaction_replayed) == (False, True)
    st.refresh()
    assert st.version == start + 1 and st.history(limit=1)[0].operation == "MERGE"  # only the Python batch
    python_files = files(st) - before
    assert [p for p in seen - before - python_files if p.startswith("data/")], "the executors wrote files"
    live = {p.path for p in st.snapshot().partitions} | {p.path for p in st.snapshot(start).partitions}
    assert {p for p in files(st) if p.startswith("data/")} <= live  # nothing of the Spark MERGE is left
    assert sorted(st.to_arrow().column("name").to_pylist()).count("python") == 1


def test_batches_that_change_nothing_still_record_their_app_version(spark, tmp_path):
    """An empty micro-batch, or one whose rows are already there, commits a
    version holding only its ``txn`` (as the Python helper does), so that
    Spark replaying it later is recognised as a replay."""
    st, pt = twins(tmp_path)
    t = CtfileTable.for_path(spark, st.uri)
    empty = spark.createDataFrame([], SPARK_SCHEMA)
    same = source(spark, [(1, "n1", 10), (2, "n2", 20)])
    batches = [(empty, 0), (same, 1)]
    for df, batch_id in batches:
        r1 = t.merge(df, "id", app_id="q", app_version=batch_id)
        r2 = pt.merge(df.toArrow(), "id", app_id="q", app_version=batch_id)
        assert counts(r1) == counts(r2)
        assert r1.committed and st.refresh().app_version("q") == batch_id
    r1 = t.update("id = 1", {"qty": "qty"}, app_id="q", app_version=2)
    r2 = pt.update(pc.field("id") == 1, {"qty": pc.field("qty")}, app_id="q", app_version=2)
    assert counts(r1) == counts(r2) and st.refresh().app_version("q") == 2
    assert st.changes(start_version=r1.version - 2).to_arrow().num_rows == 0


# ---------------------------------------------------------------- conflicts


def _committing_source(spark, rows, uri: str, marker: Path, racing: pa.Table, how: str, **app):
    """A source DataFrame whose first evaluation (in a Python worker) commits
    ``racing`` to the table at ``uri`` with the Python API (``how``:
    ``"insert"`` or ``"merge"`` on ``id``; ``app``: its ``app_id`` and
    ``app_version``). The statement reads the source
    after it opened its transaction (to check its keys), so the commit
    lands between its planning and its commit. ``marker`` (created
    exclusively) makes the commit happen once, whatever the evaluations."""
    payload, schema = racing.to_pylist(), racing.schema

    def commit():
        t, data = ctfile.open_table(uri), pa.Table.from_pylist(payload, schema=schema)
        t.insert(data, **app) if how == "insert" else t.merge(data, "id", **app)

    commit_once = once(marker, commit)

    def evaluate(batches):
        commit_once()
        yield from batches

    df = spark.createDataFrame(rows, SPARK_SCHEMA).repartition(2)
    return df.mapInArrow(evaluate, df.schema)


def _race(spark, tmp_path, caplog, racing: pa.Table, how: str, **create):
    """MERGE ``RACE_ROWS`` through Spark while ``racing`` commits (``how``)
    in between; the same serially through Python (racing first). Returns
    (Spark result, Python result, whether the statement was re-run, the
    read version of the Spark commit minus the start version)."""
    st, pt = twins(tmp_path, **create)
    src = _committing_source(spark, RACE_ROWS, st.uri, tmp_path / "committed", racing, how)
    start = st.version
    with caplog.at_level("INFO", logger="ctfile"):
        r1 = CtfileTable.for_path(spark, st.uri).merge(src, "id")
    assert (tmp_path / "committed").exists()
    merge, raced = st.refresh().history(limit=2)
    assert (raced.version, raced.operation, merge.version, r1.version) == (start + 1, how.upper(), start + 2, start + 2)
    re_run = any("re-running" in m for m in caplog.messages)

    getattr(pt, how)(racing, *(["id"] if how == "merge" else []))
    old = row_ids(pt)
    r2 = pt.merge(pa.table(list(zip(*RACE_ROWS)), schema=SCHEMA), "id")
    assert counts(r1) == counts(r2)
    assert table_state(st, old) == table_state(pt, old)  # the serial result
    assert ctfile.verify_table(st.uri).unreferenced_files == []  # a lost run's files are deleted
    return r1, re_run, merge.read_version - start


RACE_ROWS = [(17, "spark seventeen", 77), (3, "spark three", 33), (80, "spark eighty", 88)]
RACE_17 = pa.table({"id": [17, 70], "name": ["python seventeen", "python seventy"], "qty": [-17, -70]}, schema=SCHEMA)


@pytest.mark.parametrize(
    "how, level",
    [("merge", "WriteSerializable"), ("insert", "Serializable")],
    ids=["python-merge", "python-insert-serializable"],
)
def test_concurrent_commit_of_a_merged_key_re_runs_the_merge(spark, tmp_path, caplog, how, level):
    """A Python commit of the new key 17 lands between the Spark MERGE's read
    and its commit: the MERGE conflicts (SPEC §Conflict detection, rule 4),
    is re-run at the new version, and key 17 ends up once, updated by the
    MERGE (at the default level only a commit that is not a blind append
    conflicts: the Python MERGE; at Serializable an INSERT does too)."""
    r1, re_run, read_at = _race(spark, tmp_path, caplog, RACE_17, how, properties={"ctfile.isolationLevel": level})
    assert re_run and read_at == 1 and r1.attempts > 1, caplog.messages
    assert r1.num_updated_rows == 2 and r1.num_inserted_rows == 1  # 17 and 3 updated, 80 inserted


def test_concurrent_blind_append_does_not_re_run(spark, tmp_path, caplog):
    """WriteSerializable: a blind append is treated as committed after the
    MERGE, so it is not checked against the MERGE's keys; the commit is
    rebased over it (a second commit attempt), the statement not re-run."""
    racing = pa.table({"id": [1000], "name": ["python"], "qty": [1]}, schema=SCHEMA)
    r1, re_run, read_at = _race(spark, tmp_path, caplog, racing, "insert")
    assert not re_run and read_at == 0 and r1.attempts == 2, caplog.messages


def test_concurrent_update_re_runs_a_delete(spark, tmp_path, caplog):
    """A DELETE whose condition (a Python UDF) commits, on its first
    evaluation, a Python UPDATE that makes one more row match: the DELETE
    read the partitions the UPDATE rewrote, conflicts, and is re-run, so the
    updated row is deleted too, as in the serial order."""
    st, pt = twins(tmp_path)
    uri = st.uri
    update_once = once(tmp_path / "committed", lambda: ctfile.open_table(uri).update(pc.field("id") == 2, {"qty": 500}))

    def qty_after_racing_update(q):
        update_once()
        return q

    qty = F.udf(qty_after_racing_update, "long")(F.col("qty"))
    start = st.version
    with caplog.at_level("INFO", logger="ctfile"):
        r1 = CtfileTable.for_path(spark, st.uri).delete(qty > 100)
    delete, update = st.refresh().history(limit=2)
    assert (update.operation, update.version) == ("UPDATE", start + 1)
    assert (delete.version, delete.read_version) == (start + 2, start + 1)  # re-run at the UPDATE's version
    assert any("re-running" in m for m in caplog.messages), caplog.messages
    pt.update(pc.field("id") == 2, {"qty": 500})
    old = row_ids(pt)
    r2 = pt.delete(pc.field("qty") > 100)
    assert r1.num_deleted_rows == 3  # ids 11, 12 and the updated 2
    assert counts(r1) == counts(r2)
    assert table_state(st, old) == table_state(pt, old)
    assert ctfile.verify_table(st.uri).unreferenced_files == []



def test_update_of_a_pruned_partition_re_runs_a_delete(spark, tmp_path, caplog):
    st, pt = twins(tmp_path)
    start = st.version
    cond = racing_update_condition(st.uri, tmp_path / "committed")
    with caplog.at_level("INFO", logger="ctfile"):
        r1 = CtfileTable.for_path(spark, st.uri).delete(cond)
    check_pruned_delete_race(st, pt, r1, start, caplog.messages)
    assert ctfile.verify_table(st.uri).unreferenced_files == []
