"""INSERT: accepted inputs, partition splitting, schema conformance, atomicity."""

from __future__ import annotations

import datetime as dt
import decimal

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ctfile
from ctfile.format.errors import InvalidArgumentError, SchemaMismatchError
from ctfile.format.schema import PARQUET_FIELD_ID_KEY

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.int64()), ("s", pa.string())])


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by("id")


@pytest.mark.parametrize("kind", ["table", "record_batch", "reader", "pandas", "c_stream"])
def test_insert_input_kinds(new_table, make_rows, kind):
    t = new_table()
    data = make_rows(25)
    if kind == "record_batch":
        arg = data.combine_chunks().to_batches()[0]
    elif kind == "reader":
        arg = pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=7))
    elif kind == "pandas":
        arg = data.to_pandas()
        assert isinstance(arg, pd.DataFrame)
    elif kind == "c_stream":
        class Stream:  # any object exporting the Arrow C stream interface
            def __arrow_c_stream__(self, requested_schema=None):
                return data.__arrow_c_stream__(requested_schema)

        arg = Stream()
    else:
        arg = data
    r = t.insert(arg)
    assert (r.version, r.committed, r.operation, r.num_inserted_rows) == (1, True, "INSERT", 25)
    got = _sorted(t.to_arrow())
    assert got.equals(data.cast(got.schema))


def test_insert_rejects_other_inputs(new_table, file_tree):
    t = new_table()
    before = file_tree(t.storage.root)
    for bad in ([{"id": 1}], {"id": [1]}, "id", None):
        with pytest.raises(InvalidArgumentError, match="must be a pyarrow Table"):
            t.insert(bad)
    assert file_tree(t.storage.root) == before


def test_partition_splitting(new_table, make_rows):
    t = new_table(partition_rows=100)
    data = make_rows(1050)
    r = t.insert(pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=33)))
    assert r.num_added_partitions == 11
    parts = sorted(t.snapshot().partitions, key=lambda p: p.first_row_id)
    assert [p.num_records for p in parts] == [100] * 10 + [50]
    assert [p.first_row_id for p in parts] == list(range(0, 1050, 100))
    assert all(p.default_row_version == 1 for p in parts)
    assert len({p.path for p in parts}) == 11
    # Files hold consecutive id ranges in input order; row ids are positions.
    hidden = t.to_arrow(include_hidden=True)
    assert sorted(zip(hidden.column("_ct_row_id").to_pylist(), hidden.column("id").to_pylist())) == [
        (i, i) for i in range(1050)
    ]
    assert set(hidden.column("_ct_row_version").to_pylist()) == {1}
    for p in parts:
        assert pq.ParquetFile(t.storage.arrow_path(p.path)).metadata.num_rows == p.num_records
        assert len(t.storage.read_bytes(p.path)) == p.size_bytes


def test_partition_files_carry_field_ids_and_no_hidden_columns(new_table, make_rows):
    t = new_table()
    t.insert(make_rows(3))
    (p,) = t.snapshot().partitions
    schema = pq.read_schema(t.storage.arrow_path(p.path))
    assert schema.names == ["id", "x", "s"]  # a plain insert stores no hidden columns
    assert [schema.field(n).metadata[PARQUET_FIELD_ID_KEY] for n in schema.names] == [b"1", b"2", b"3"]


def test_column_reorder_and_missing_nullable(new_table):
    t = new_table()
    t.insert(pa.table({"s": ["b", "a"], "id": pa.array([2, 1], pa.int32())}))
    got = _sorted(t.to_arrow())
    assert got.schema.equals(SCHEMA)
    assert got.to_pydict() == {"id": [1, 2], "x": [None, None], "s": ["a", "b"]}


def test_compatible_casts_accepted(new_table):
    schema = pa.schema([("i", pa.int32()), ("f", pa.float64()), ("d", pa.decimal128(10, 2)),
                        ("ts", pa.timestamp("us", tz="UTC")), ("s", pa.string())])
    t = new_table(schema)
    t.insert(pa.table({
        "i": pa.array([1, None], pa.int8()),
        "f": pa.array([1, 2], pa.int64()),
        "d": pa.array([decimal.Decimal("1.5"), None], pa.decimal128(5, 1)),
        "ts": pa.array([dt.datetime(2024, 1, 1), None], pa.timestamp("ns", tz="UTC")),
        "s": pa.array(["a", "b"], pa.large_string()).dictionary_encode(),
    }))
    got = t.to_arrow()
    assert got.schema.equals(schema)
    assert got.column("d").to_pylist() == [decimal.Decimal("1.50"), None]
    assert got.column("s").to_pylist() == ["a", "b"]


def _reader_with_bad_third_batch(bad_value_for_id, id_type=pa.int64()):
    schema = pa.schema([("id", id_type), ("x", pa.int64()), ("s", pa.string())])
    produced = []

    def gen():
        for i in range(5):
            ids = list(range(i * 10, i * 10 + 10))
            if i == 2:
                ids[3] = bad_value_for_id
            produced.append(i)
            yield pa.record_batch(
                [pa.array(ids, id_type), pa.array(ids, pa.int64()), pa.array([str(v) for v in ids])],
                schema=schema,
            )

    return pa.RecordBatchReader.from_batches(schema, gen()), produced


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda rows: rows(5).append_column("extra", pa.array([1] * 5)), r"\['extra'\] are not in the table"),
        (lambda rows: rows(5).set_column(1, "x", pa.array(["1"] * 5)), "column 'x' has type string, expected int64"),
        (lambda rows: rows(5).set_column(0, "id", pa.array([1, 2, None, 4, 5], pa.int64())), "not nullable"),
        (lambda rows: rows(5).drop_columns(["id"]), "column 'id' .* is missing"),
        (lambda rows: rows(5).append_column("_ct_row_id", pa.array([1] * 5)), "hidden columns"),
        (lambda rows: pa.table({"id": [1], "x": [2.5], "s": ["a"]}), "column 'x' has type double"),
        (lambda rows: pa.Table.from_arrays([pa.array([1]), pa.array([1]), pa.array([2]), pa.array(["a"])],
                                           names=["id", "x", "x", "s"]), "duplicate columns"),
    ],
    ids=["extra-column", "string-into-int64", "null-in-not-null", "missing-not-null", "hidden", "float-into-int",
         "duplicate"],
)
def test_insert_errors_write_nothing(new_table, make_rows, file_tree, make, match):
    t = new_table()
    t.insert(make_rows(3, start=1000))
    before = file_tree(t.storage.root)
    with pytest.raises(SchemaMismatchError, match=match):
        t.insert(make(make_rows))
    assert file_tree(t.storage.root) == before
    assert t.refresh().version == 1


def test_int_overflow_on_cast_writes_nothing(new_table, file_tree):
    t = new_table(pa.schema([("id", pa.int32()), ("x", pa.int64())]))
    before = file_tree(t.storage.root)
    with pytest.raises(SchemaMismatchError, match="cannot be cast from int64 to int32"):
        t.insert(pa.table({"id": pa.array([1, 2**40], pa.int64()), "x": [1, 2]}))
    assert file_tree(t.storage.root) == before


@pytest.mark.parametrize(
    "bad, id_type, match",
    [(None, pa.int64(), "not nullable"), (2**40, pa.int64(), "without loss")],
    ids=["null", "overflow"],
)
def test_bad_third_batch_of_stream_leaves_no_files(new_table, file_tree, bad, id_type, match):
    # Partitions of 10 rows: the first two batches are already written as
    # files (by the writer's thread pool) when the third one fails.
    schema = pa.schema([pa.field("id", pa.int32() if bad == 2**40 else pa.int64(), nullable=False),
                        ("x", pa.int64()), ("s", pa.string())])
    t = new_table(schema, partition_rows=10)
    before = file_tree(t.storage.root)
    for _ in range(5):  # repeat: the failure races with background writes
        reader, produced = _reader_with_bad_third_batch(bad, id_type)
        with pytest.raises(SchemaMismatchError, match=match):
            t.insert(reader)
        assert produced[:3] == [0, 1, 2]
        assert file_tree(t.storage.root) == before
    assert t.refresh().version == 0 and t.to_arrow().num_rows == 0


def test_empty_insert_commits_nothing(new_table):
    t = new_table()
    r = t.insert(pa.table({"id": pa.array([], pa.int64())}))
    assert (r.committed, r.version, r.num_inserted_rows) == (False, 0, 0)
    assert t.storage.list_dir("data") == []


def test_insert_statistics(new_table):
    schema = pa.schema([("i", pa.int64()), ("f", pa.float64()), ("s", pa.string()), ("b", pa.binary()),
                        ("l", pa.list_(pa.int64())), ("n", pa.int64())])
    t = new_table(schema)
    t.insert(pa.table({
        "i": [3, None, -7],
        "f": [float("nan"), 1.5, None],
        "s": ["a" * 40, "b", chr(0x10FFFF) * 40],
        "b": [b"x", b"y", None],
        "l": [[1], None, [2, 3]],
        "n": pa.array([None, None, None], pa.int64()),
    }, schema=schema))
    (p,) = t.snapshot().partitions
    st = p.stats
    assert st.num_records == 3
    assert (st.min_values[1], st.max_values[1], st.null_count[1]) == (-7, 3, 1)
    assert (st.min_values[2], st.max_values[2], st.null_count[2], st.nan_count[2]) == (1.5, 1.5, 1, 1)
    # The max string cannot be truncated to 32 chars: the column has no bounds.
    assert 3 not in st.min_values and 3 not in st.max_values and st.null_count[3] == 0
    assert 4 not in st.min_values and st.null_count[4] == 1  # binary: counts only
    assert 5 not in st.min_values and 5 not in st.null_count  # nested: no stats
    assert st.null_count[7] == 3 and 7 not in st.min_values  # all null
    assert st.null_count[2147483540] == 3 and st.null_count[2147483539] == 3
    assert p.checksum and len(p.checksum) == 32


def test_long_string_bounds_truncated(new_table):
    t = new_table(pa.schema([("s", pa.string())]))
    t.insert(pa.table({"s": ["m" * 50, "c" * 10, "x" * 33]}))
    st = t.snapshot().partitions[0].stats
    assert st.min_values[1] == "c" * 10
    assert st.max_values[1] == "x" * 31 + "y"


def test_checksum_is_xxh3_of_file(new_table, make_rows):
    import xxhash

    t = new_table()
    t.insert(make_rows(50))
    (p,) = t.snapshot().partitions
    data = t.storage.read_bytes(p.path)
    assert len(data) == p.size_bytes
    assert xxhash.xxh3_128_hexdigest(data) == p.checksum


def test_compression_property(new_table, make_rows):
    t = new_table(compression="snappy")
    t.insert(make_rows(10))
    (p,) = t.snapshot().partitions
    md = pq.ParquetFile(t.storage.arrow_path(p.path)).metadata
    assert md.row_group(0).column(0).compression == "SNAPPY"
    assert ctfile.open_table(t.uri).properties["ctfile.compression"] == "snappy"
