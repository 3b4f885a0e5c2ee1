"""Helpers of the ``ctfile.spark`` DML tests (``test_spark_dml*.py``).

Each comparison starts two byte-identical copies of one table (the second a
``shutil.copytree`` of the first, so row ids, row versions and table id
agree), runs the statement through Spark on one and through
``Table.merge/update/delete`` on the other, and compares
(:func:`assert_same`):

- the snapshots: rows that existed before the statement with their
  ``_ct_row_id`` and ``_ct_row_version``; rows the statement inserted with
  their ``_ct_row_version`` (their row ids depend on the order in which the
  inserted files are committed, which differs between one process and many
  tasks; they must only be fresh and distinct);
- the ``CommitResult`` counts;
- for a table with change capture, the change scans of the statement's
  version in every mode (fresh inserts' ``METADATA$ROW_ID`` aside, for the
  same reason).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

import ctfile

ROW_ID, ROW_VERSION = ctfile.ROW_ID_COLUMN, ctfile.ROW_VERSION_COLUMN
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("qty", pa.int64())])
SPARK_SCHEMA = "id long, name string, qty long"
RESULT_FIELDS = (
    "version", "committed", "operation", "num_inserted_rows", "num_updated_rows", "num_deleted_rows",
    "num_copied_rows", "num_removed_partitions", "app_transaction_replayed",
)


def people_data(n: int = 12) -> pa.Table:
    """Rows ``id`` 1..n, ``name`` "n<id>", ``qty`` 10 * id."""
    return pa.table(
        {"id": range(1, n + 1), "name": [f"n{i}" for i in range(1, n + 1)], "qty": range(10, 10 * n + 1, 10)},
        schema=SCHEMA,
    )


def twins(
    tmp_path: Path, schema: pa.Schema = SCHEMA, data: pa.Table | None = None, **create
) -> tuple[ctfile.Table, ctfile.Table]:
    """Two identical tables (``spark``, ``python``): created with ``create``
    (3 rows per partition unless given), ``data`` inserted in two commits."""
    create.setdefault("partition_rows", 3)
    data = people_data() if data is None else data
    t = ctfile.create_table(str(tmp_path / "spark"), schema, **create)
    half = data.num_rows // 2
    t.insert(data.slice(0, half))
    t.insert(data.slice(half))
    shutil.copytree(tmp_path / "spark", tmp_path / "python")
    return ctfile.open_table(str(tmp_path / "spark")), ctfile.open_table(str(tmp_path / "python"))


def _key(row: tuple) -> tuple:
    return tuple((v is not None, repr(v)) for v in row)


def table_state(t: ctfile.Table, old_ids: set[int]) -> tuple[list, list]:
    """(rows that existed before with all columns, fresh rows without their row id)."""
    rows = t.refresh().snapshot().to_arrow(include_hidden=True).to_pylist()
    ids = [r[ROW_ID] for r in rows]
    assert len(ids) == len(set(ids)), f"row ids repeat in {t.uri}: {ids}"
    old = sorted((tuple(sorted(r.items())) for r in rows if r[ROW_ID] in old_ids), key=_key)
    fresh = (tuple(sorted((k, v) for k, v in r.items() if k != ROW_ID)) for r in rows if r[ROW_ID] not in old_ids)
    new = sorted(fresh, key=_key)
    return old, new


def row_ids(t: ctfile.Table) -> set[int]:
    return set(t.refresh().snapshot().to_arrow(include_hidden=True).column(ROW_ID).to_pylist())


def counts(r: ctfile.CommitResult) -> dict:
    return {f: getattr(r, f) for f in RESULT_FIELDS}


def change_rows(t: ctfile.Table, version: int, mode: str) -> list:
    """The change scan of ``version`` alone; a fresh insert's row id is replaced
    by a marker (see the module docstring), the commit time dropped."""
    out = []
    for r in t.changes(start_version=version, end_version=version, information=mode).to_arrow().to_pylist():
        r.pop("METADATA$COMMIT_TIMESTAMP", None)
        if r.get("METADATA$ACTION") == "INSERT" and not r.get("METADATA$ISUPDATE"):
            r["METADATA$ROW_ID"] = "fresh"
        out.append(tuple(sorted(r.items())))
    return sorted(out, key=_key)


def commit_info(t: ctfile.Table, version: int) -> dict:
    """What the log says of ``version``, apart from what depends on how the
    rows were split into files or spelled (SQL or Arrow expressions)."""
    (entry,) = [h for h in t.history() if h.version == version]
    keep = ("operation", "data_change", "read_version", "isolation_level", "is_blind_append", "captured",
            "partitions_removed", "rows_added", "rows_removed")
    return {k: getattr(entry, k) for k in keep} | {"parameters": sorted(set(entry.operation_parameters) - {"engine"})}


def assert_same(spark_t: ctfile.Table, py_t: ctfile.Table, spark_r, py_r, old_ids: set[int], *, modes=()) -> None:
    assert counts(spark_r) == counts(py_r)
    assert table_state(spark_t, old_ids) == table_state(py_t, old_ids)
    if spark_r.committed:
        assert commit_info(spark_t, spark_r.version) == commit_info(py_t, py_r.version)
    for mode in modes:
        assert change_rows(spark_t, spark_r.version, mode) == change_rows(py_t, py_r.version, mode), mode


def files(t: ctfile.Table) -> set[str]:
    """Every file under the table's directory (relative paths)."""
    root = Path(t.uri.removeprefix("file://"))
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def source(spark, rows, schema: str = SPARK_SCHEMA, partitions: int = 2):
    return spark.createDataFrame(rows, schema).repartition(partitions)


def change_rows_all(t: ctfile.Table, mode: str) -> list:
    out = []
    for r in t.changes(information=mode).to_arrow().to_pylist():
        r.pop("METADATA$COMMIT_TIMESTAMP", None)
        r.pop("METADATA$ROW_ID", None)
        out.append(tuple(sorted(r.items())))
    return sorted(out, key=_key)


@contextlib.contextmanager
def watching(t: ctfile.Table):
    """Every file seen under the table's directory while the block runs
    (polled by a thread): the files a statement wrote and later deleted."""
    seen: set[str] = set()
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            try:
                seen.update(files(t))
            except OSError:  # a file deleted while listed
                pass
            time.sleep(0.005)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join()


def once(marker: Path | str, action):
    """A function running ``action()`` on its first call in any process
    (``marker`` is created exclusively), for Spark workers that may evaluate
    a source or a condition more than once. It is a closure, so cloudpickle
    ships it by value (this test module is not importable in the workers)."""
    path = str(marker)

    def run() -> None:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.close(fd)
        action()

    return run


def racing_update_condition(uri: str, marker: Path, storage_options: dict | None = None):
    """``qty > 100 AND <a UDF of qty>``: the comparison prunes the DELETE's
    candidates to the partition of ids 10-12; the UDF's first evaluation
    (on those candidates, in a worker) commits a Python UPDATE setting id
    2's qty to 500, in a partition the DELETE did not read."""
    def update():
        ctfile.open_table(uri, storage_options=storage_options).update(pc.field("id") == 2, {"qty": 500})

    update_once = once(marker, update)

    def qty_after_racing_update(q):
        update_once()
        return q

    return (F.col("qty") > 100) & (F.udf(qty_after_racing_update, "long")(F.col("qty")) > 0)


def check_pruned_delete_race(st: ctfile.Table, pt: ctfile.Table, r1: ctfile.CommitResult, start: int, messages) -> None:
    """The DELETE conflicted through its read predicate alone (the UPDATE
    rewrote a partition it had pruned, so not one it read), was re-run, and
    ended as the serial order UPDATE then DELETE does."""
    delete, update = st.refresh().history(limit=2)
    assert (update.operation, update.version) == ("UPDATE", start + 1)
    assert (delete.version, delete.read_version) == (start + 2, start + 1), messages
    assert any("re-running" in m for m in messages), messages
    pt.update(pc.field("id") == 2, {"qty": 500})
    old = row_ids(pt)
    r2 = pt.delete(pc.field("qty") > 100)
    assert r1.num_deleted_rows == 3 and r1.num_removed_partitions == 2  # ids 11, 12 and the updated 2
    assert counts(r1) == counts(r2)
    assert table_state(st, old) == table_state(pt, old)
