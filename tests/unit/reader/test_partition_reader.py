"""Reading one micro-partition: field-id mapping and hidden-column inheritance."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctfile.format.actions import Partition
from ctfile.format.errors import CorruptDataFileError, MissingDataFileError
from ctfile.format.schema import Field, Schema, hidden_arrow_fields
from ctfile.log.storage import LocalStorage
from ctfile.log.transaction import PENDING
from ctfile.reader.partition_reader import materialize_hidden, read_partition, read_partition_table

SCHEMA = Schema((Field(1, "a", "long"), Field(2, "b", "string"), Field(3, "c", "double")))


def _write(storage: LocalStorage, path: str, table: pa.Table) -> Partition:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    data = sink.getvalue().to_pybytes()
    storage.put(path, data)
    return Partition(path, len(data), table.num_rows, first_row_id=100, default_row_version=7, modification_time=0)


def _ids(names_ids):
    return [pa.field(n, t, metadata={b"PARQUET:field_id": str(i).encode()}) for n, t, i in names_ids]


@pytest.fixture
def storage(tmp_path):
    return LocalStorage(str(tmp_path))


def test_columns_matched_by_field_id_not_name(storage):
    # The file calls field 1 "old_a" and lacks field 3; it has an unknown field 9.
    schema = pa.schema(_ids([("b", pa.string(), 2), ("old_a", pa.int64(), 1), ("zzz", pa.int64(), 9)]))
    p = _write(storage, "data/p.parquet", pa.table([["x", "y"], [1, 2], [5, 6]], schema=schema))
    got = read_partition_table(storage, p, SCHEMA)
    assert got.column_names == ["a", "b", "c"]
    assert got.to_pydict() == {"a": [1, 2], "b": ["x", "y"], "c": [None, None]}


def test_files_without_field_ids_matched_by_name(storage):
    p = _write(storage, "data/p.parquet", pa.table({"c": [1.5], "a": [3]}))
    got = read_partition_table(storage, p, SCHEMA, columns=["c", "b", "a"])
    assert got.to_pydict() == {"c": [1.5], "b": [None], "a": [3]}


def test_hidden_absent_means_inherited(storage):
    p = _write(storage, "data/p.parquet", pa.table({"a": [1, 2, 3]}))
    got = read_partition_table(storage, p, SCHEMA, columns=["a"], hidden=True)
    assert got.column("_ct_row_id").to_pylist() == [100, 101, 102]
    assert got.column("_ct_row_version").to_pylist() == [7, 7, 7]


def test_hidden_mixed_stored_and_inherited(storage):
    fields = _ids([("a", pa.int64(), 1)]) + hidden_arrow_fields()
    t = pa.table([[1, 2, 3, 4], [55, None, 57, None], [3, 4, None, None]], schema=pa.schema(fields))
    p = _write(storage, "data/p.parquet", t)
    # Small batches: inherited row ids depend on the absolute position.
    batches = list(read_partition(storage, p, SCHEMA, columns=["a"], hidden=True, batch_rows=1))
    got = pa.Table.from_batches(batches)
    assert got.column("_ct_row_id").to_pylist() == [55, 101, 57, 103]
    assert got.column("_ct_row_version").to_pylist() == [3, 4, 7, 7]


def test_pending_partition_keeps_nulls():
    p = Partition("data/x", 1, 2, PENDING, PENDING, 0)
    rid, rv = materialize_hidden(p, pa.array([None, 5], pa.int64()), pa.nulls(2, pa.int64()))
    assert rid.to_pylist() == [None, 5] and rv.to_pylist() == [None, None]


def test_row_count_mismatch_is_corrupt(storage):
    p = _write(storage, "data/p.parquet", pa.table({"a": [1, 2]}))
    import dataclasses

    with pytest.raises(CorruptDataFileError, match="the file holds 2 rows, the log records numRecords 5"):
        read_partition_table(storage, dataclasses.replace(p, num_records=5), SCHEMA)


def test_missing_or_unreadable_file_is_typed(storage):
    p = Partition("data/missing.parquet", 1, 1, 0, 1, 0)
    with pytest.raises(MissingDataFileError, match=r"data/missing.parquet .*\(added by version 1\) is missing"):
        read_partition_table(storage, p, SCHEMA)
    storage.put("data/junk.parquet", b"not parquet at all")
    with pytest.raises(CorruptDataFileError, match="data/junk.parquet .* does not decode as Parquet"):
        read_partition_table(storage, Partition("data/junk.parquet", 18, 1, 0, 1, 0), SCHEMA)
    with pytest.raises(CorruptDataFileError, match="the file holds 18 bytes, the log records sizeBytes 1"):
        read_partition_table(storage, Partition("data/junk.parquet", 1, 1, 0, 1, 0), SCHEMA)


def test_empty_partition(storage):
    p = _write(storage, "data/p.parquet", pa.table({"a": pa.array([], pa.int64())}))
    got = read_partition_table(storage, p, SCHEMA, hidden=True)
    assert got.num_rows == 0
    assert got.column_names == ["a", "b", "c", "_ct_row_id", "_ct_row_version"]
