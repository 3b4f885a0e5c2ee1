"""Reading chosen rows of a micro-partition over several row groups
(``iter_rows``, ``read_rows``, ``read_hidden`` in reader/partition_reader.py):
the reads a change scan makes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ctfile
from ctfile.format.errors import CorruptDataFileError, CorruptLogError


def _write_groups(tmp_path, n=200, group=16):
    """A partition file of several row groups, with field ids: ``a`` stored as
    ``old_a`` (matched by id), a low-cardinality string ``k`` (small
    dictionary), a high-cardinality string ``s``, ``z`` absent (all null), and
    stored hidden columns with some nulls (inherited)."""
    from ctfile.format.actions import Partition
    from ctfile.format.schema import Field, Schema, hidden_arrow_fields
    from ctfile.log.storage import LocalStorage

    schema = Schema((Field(1, "a", "long"), Field(2, "k", "string"), Field(3, "s", "string"), Field(4, "z", "double")))
    fid = lambda n, t, i: pa.field(n, t, metadata={b"PARQUET:field_id": str(i).encode()})  # noqa: E731
    fields = [fid("old_a", pa.int32(), 1), fid("k", pa.string(), 2), fid("s", pa.string(), 3)] + hidden_arrow_fields()
    rng = np.random.default_rng(n)
    table = pa.table([
        pa.array(range(n), pa.int32()),
        pa.array([None if i % 7 == 0 else f"k{i % 3}" for i in range(n)], pa.string()),
        pa.array([f"s{rng.integers(10**9)}" if i % 5 else None for i in range(n)], pa.string()),
        pa.array([None if i % 4 == 0 else 1000 + i for i in range(n)], pa.int64()),
        pa.array([None if i % 3 == 0 else i // 10 for i in range(n)], pa.int64()),
    ], schema=pa.schema(fields))
    storage = LocalStorage(str(tmp_path))
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=group)
    data = sink.getvalue().to_pybytes()
    storage.put("data/g.parquet", data)
    part = Partition("data/g.parquet", len(data), n, first_row_id=5000, default_row_version=9, modification_time=0)
    return storage, schema, part, table


@pytest.mark.parametrize("seed", range(4))
def test_iter_rows_over_row_groups(tmp_path, seed):
    from ctfile.reader.partition_reader import iter_rows, read_rows

    storage, schema, part, table = _write_groups(tmp_path)
    rng = np.random.default_rng(seed)
    pos = np.sort(rng.choice(200, size=[1, 5, 37, 200][seed], replace=False))
    want = {
        "a": [int(x) for x in np.asarray(table.column("old_a"))[pos]],
        "k": table.column("k").take(pa.array(pos)).to_pylist(),
        "s": table.column("s").take(pa.array(pos)).to_pylist(),
        "z": [None] * len(pos),
    }
    for batch_rows in (7, 16, 65536):
        pieces = list(iter_rows(storage, part, schema, pos.astype(np.int32), batch_rows=batch_rows))
        ks = [k for k, _ in pieces]
        assert ks == sorted(ks) and ks[0] == 0
        assert [k + tb.num_rows for k, tb in pieces[:-1]] == ks[1:]  # contiguous, each position once
        got_t = pa.concat_tables([tb for _, tb in pieces])
        assert got_t.schema == schema.to_arrow(field_ids=False)
        assert got_t.to_pydict() == want
    assert read_rows(storage, part, schema, pos, columns=["s", "a"]).to_pydict() == {"s": want["s"], "a": want["a"]}


def test_iter_rows_reads_only_row_groups_holding_positions(tmp_path):
    """Without a checksum in the log (only the length can be checked), a
    corrupt row group breaks only reads that need it; with one, every read."""
    import dataclasses

    import xxhash

    from ctfile.reader.partition_reader import iter_rows

    storage, schema, part, _ = _write_groups(tmp_path)
    checked = dataclasses.replace(part, checksum=xxhash.xxh3_128_hexdigest((tmp_path / part.path).read_bytes()))
    path = tmp_path / part.path
    md = pq.ParquetFile(path).metadata
    raw = bytearray(path.read_bytes())
    for i in range(md.num_columns):  # garble every column chunk of row group 3 (rows 48..63)
        c = md.row_group(3).column(i)
        start = c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset
        raw[start:start + c.total_compressed_size] = b"\xff" * c.total_compressed_size
    path.write_bytes(bytes(raw))
    ok = np.array([0, 20, 47, 64, 150, 199])
    assert sum(tb.num_rows for _, tb in iter_rows(storage, part, schema, ok)) == len(ok)
    with pytest.raises(CorruptDataFileError, match="data/g.parquet .*added by version 9.* does not decode"):
        list(iter_rows(storage, part, schema, np.array([3, 50])))
    with pytest.raises(CorruptDataFileError, match="checksum mismatch"):
        list(iter_rows(storage, checked, schema, ok))


def test_iter_rows_rejects_positions_beyond_the_file(tmp_path):
    from ctfile.reader.partition_reader import iter_rows

    storage, schema, part, _ = _write_groups(tmp_path)
    with pytest.raises(CorruptLogError):
        list(iter_rows(storage, part, schema, np.array([5, 200])))


def test_read_hidden_over_row_groups(tmp_path):
    """Stored and inherited hidden values across several row groups (chunks)."""
    from ctfile.reader.partition_reader import read_hidden, read_partition_table

    storage, schema, part, _ = _write_groups(tmp_path)
    rid, rv = read_hidden(storage, part)
    ref = read_partition_table(storage, part, schema, columns=["a"], hidden=True)
    assert rid.dtype == rv.dtype == np.int64
    assert rid.tolist() == ref.column(ctfile.ROW_ID_COLUMN).to_pylist()
    assert rv.tolist() == ref.column(ctfile.ROW_VERSION_COLUMN).to_pylist()
    assert rid[0] == 5000 and rid[1] == 1001 and rv[0] == 9 and rv[10] == 1


def test_iter_rows_rejects_a_row_count_unlike_the_log(tmp_path):
    import dataclasses

    from ctfile.reader.partition_reader import iter_rows

    storage, schema, part, _ = _write_groups(tmp_path)
    with pytest.raises(CorruptDataFileError, match="holds 200 rows, the log records numRecords 150"):
        list(iter_rows(storage, dataclasses.replace(part, num_records=150), schema, np.array([5])))
