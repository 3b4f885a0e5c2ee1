"""``METADATA$ROW_ID`` (SPEC §Change scans): the vectorized XXH3-64 of the
8-byte little-endian hidden row id, seeded per table, as 16 hex digits."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from ctfile.reader.row_ids import hex_strings, row_id_strings, table_seed, xxh3_64_int64

INT64 = st.integers(-(2**63), 2**63 - 1)
SEEDS = [0, 1, 2**32 - 1, 2**32, 0x0123456789ABCDEF, 2**63, 2**64 - 1]


def reference(x: int, seed: int) -> int:
    return xxhash.xxh3_64_intdigest(struct.pack("<q", x), seed=seed)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(INT64, min_size=1, max_size=50), seed=st.sampled_from(SEEDS) | st.integers(0, 2**64 - 1))
def test_vectorized_xxh3_matches_xxhash(values, seed):
    got = xxh3_64_int64(np.array(values, dtype=np.int64), seed)
    assert got.dtype == np.uint64
    assert [int(h) for h in got] == [reference(x, seed) for x in values]


def test_vectorized_xxh3_edge_values_every_seed():
    edge = [0, 1, -1, 2, 255, 256, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, -(2**63)]
    arr = np.array(edge, dtype=np.int64)
    for seed in SEEDS:
        got = xxh3_64_int64(arr, seed)
        assert [int(h) for h in got] == [reference(x, seed) for x in edge], seed


def test_vectorized_xxh3_empty_and_seed_changes_output():
    assert len(xxh3_64_int64(np.empty(0, dtype=np.int64), 0)) == 0
    a = xxh3_64_int64(np.arange(100, dtype=np.int64), 0)
    b = xxh3_64_int64(np.arange(100, dtype=np.int64), 2**64 - 1)
    assert len(set(a.tolist())) == 100
    assert not np.any(a == b)


def test_hex_strings_format():
    h = np.array([0, 1, 0xABCDEF, 0x0123456789ABCDEF, 2**64 - 1, 2**63], dtype=np.uint64)
    out = hex_strings(h)
    assert out.type == pa.string()
    assert out.null_count == 0
    assert out.to_pylist() == [
        "0000000000000000",
        "0000000000000001",
        "0000000000abcdef",
        "0123456789abcdef",
        "ffffffffffffffff",
        "8000000000000000",
    ]
    out.validate(full=True)
    assert hex_strings(np.empty(0, dtype=np.uint64)).to_pylist() == []


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=30))
def test_hex_strings_matches_format(values):
    out = hex_strings(np.array(values, dtype=np.uint64))
    out.validate(full=True)
    assert out.to_pylist() == [f"{v:016x}" for v in values]


def test_row_id_strings_accepts_arrow_and_numpy():
    seed = table_seed("some-table")
    ids = [0, 5, 2**40]
    expected = [f"{reference(x, seed):016x}" for x in ids]
    assert row_id_strings(np.array(ids, dtype=np.int64), seed).to_pylist() == expected
    assert row_id_strings(pa.array(ids, pa.int64()), seed).to_pylist() == expected


def test_table_seed_is_xxh3_of_table_id():
    assert table_seed("abc") == xxhash.xxh3_64_intdigest(b"abc")
    assert table_seed("abc") != table_seed("abd")


def test_row_ids_differ_between_tables_for_same_hidden_id(new_table, make_rows):
    t1, t2 = new_table(), new_table()
    for t in (t1, t2):
        t.insert(make_rows(3))
    id1 = t1.snapshot().metadata.table_id
    id2 = t2.snapshot().metadata.table_id
    assert id1 != id2
    r1 = t1.changes(start_version=1).to_arrow().column("METADATA$ROW_ID").to_pylist()
    r2 = t2.changes(start_version=1).to_arrow().column("METADATA$ROW_ID").to_pylist()
    # Both tables hold hidden ids 0, 1, 2; their public ids are disjoint.
    assert len(set(r1)) == 3 and not set(r1) & set(r2)
    # ... and each is the seeded XXH3-64 of the hidden id.
    hidden = t1.snapshot().to_arrow(include_hidden=True).column("_ct_row_id").to_pylist()
    assert sorted(r1) == sorted(f"{reference(h, table_seed(id1)):016x}" for h in hidden)
    assert row_id_strings(np.array([0]), table_seed(id1)).to_pylist() != row_id_strings(
        np.array([0]), table_seed(id2)
    ).to_pylist()
