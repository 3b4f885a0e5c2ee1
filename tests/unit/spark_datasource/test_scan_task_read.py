"""ScanTask.to_batches (what every Spark snapshot task runs): the rows of the
snapshot, exactly, whichever decode path a column takes (small dictionaries
read as indices, row-group ranges, filters on columns not selected,
single-threaded decoding)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import ctfile
from ctfile.reader.partition_reader import small_dictionary_columns

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("flag", pa.string()),  # 3 values and nulls: a small dictionary
        ("code", pa.binary()),  # 2 values: a small dictionary
        ("comment", pa.string()),  # unique values: decoded as plain strings
        ("amount", pa.decimal128(12, 2)),
    ]
)


def data(n: int) -> pa.Table:
    from decimal import Decimal

    return pa.table(
        {
            "id": list(range(n)),
            "flag": [None if i % 11 == 0 else "ABC"[i % 3] for i in range(n)],
            "code": [b"\x00x" if i % 2 else b"yy" for i in range(n)],
            "comment": [f"comment number {i} " + "z" * (i % 13) for i in range(n)],
            "amount": [Decimal(i) / 100 for i in range(n)],
        },
        schema=SCHEMA,
    )


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> ctfile.Table:
    t = ctfile.create_table(
        str(tmp_path_factory.mktemp("scan") / "t"), SCHEMA, partition_rows=3000,
        properties={"ctfile.rowGroupRows": "500"},
    )
    t.insert(data(7000))  # partitions of 3000, 3000, 1000 rows, row groups of 500
    return t


def read(tasks, **kw) -> pa.Table:
    return pa.Table.from_batches([b for t in tasks for b in t.to_batches(**kw)])


def test_the_dictionary_path_is_taken_for_small_dictionaries_only(table):
    p = table.snapshot().partitions[0]
    pf = pq.ParquetFile(str(table.snapshot().to_dataset().files[0]))
    assert pf.metadata.num_row_groups == 6
    assert small_dictionary_columns(pf, range(6), SCHEMA.names) == ["flag", "code"]
    assert p.num_records == 3000


@pytest.mark.parametrize("use_threads", [True, False])
@pytest.mark.parametrize("max_rows_per_task", [None, 1000])
def test_scan_tasks_read_exactly_the_snapshot(table, use_threads, max_rows_per_task):
    snap = table.snapshot()
    tasks = snap.scan_tasks(max_rows_per_task=max_rows_per_task)
    assert len(tasks) == (3 if max_rows_per_task is None else 7)
    got = read(tasks, batch_rows=256, use_threads=use_threads)
    assert got.schema.equals(snap.schema)
    assert got.sort_by("id").equals(snap.to_arrow().sort_by("id"))
    assert got.column("flag").null_count == sum(1 for i in range(7000) if i % 11 == 0)


def test_columns_and_a_filter_on_other_columns(table):
    snap = table.snapshot()
    flt = (pc.field("flag") == "B") & (pc.field("amount") > pa.scalar(20, pa.decimal128(12, 2)))
    tasks = snap.scan_tasks(columns=["comment", "id"], filter=flt, max_rows_per_task=1000)
    got = read(tasks, use_threads=False)
    assert got.schema.names == ["comment", "id"]
    expected = snap.to_arrow(columns=["comment", "id"], filter=flt)
    assert got.num_rows == expected.num_rows > 0
    assert got.sort_by("id").equals(expected.sort_by("id"))
    # A filter that prunes every row group of a task yields no empty batches.
    none = snap.scan_tasks(filter=pc.field("id") < 0)
    assert all(b.num_rows for t in none for b in t.to_batches())
