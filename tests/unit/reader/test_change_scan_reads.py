"""How the minimum-delta change scan reads partitions (reader/change_scan.py).

Each partition holding a needed row is decoded once for all its uses: its
lone DELETEs or INSERTs and its halves of update pairs; update pairs stream
through row-id buckets sized to a memory budget without decoding a partition
again; partitions decode on a thread pool, a bounded number ahead. Every
test compares the scan with the difference of two real snapshots (SPEC
§Change scans), so a read that drops, repeats or misaligns rows fails.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.errors import CorruptLogError
from ctfile.reader import change_scan
from ctfile.reader.row_ids import row_id_strings, table_seed

ACTION, ISUPDATE, ROW_ID = "METADATA$ACTION", "METADATA$ISUPDATE", "METADATA$ROW_ID"
COLS = ["id", "x", "s"]


def mod(k: int, r: int, n: int = 2000) -> pc.Expression:
    """``id % k == r`` for ids below ``n``."""
    return pc.field("id").isin([i for i in range(n) if i % k == r])


def expected(t: ctfile.Table, a: int, b: int, flt=None) -> Counter:
    """The minimum delta a..b from snapshots ``a - 1`` and ``b``, as a
    multiset of (ROW_ID, ACTION, ISUPDATE, values); a filter drops rows and
    turns a pair losing one image into a lone row."""
    seed = table_seed(t.snapshot().metadata.table_id)

    def state(v):
        if v < 0:
            return {}
        s = t.snapshot(v).to_arrow(include_hidden=True)
        rids = row_id_strings(s.column(ctfile.ROW_ID_COLUMN).combine_chunks(), seed).to_pylist()
        return {rid: tuple(r[c] for c in COLS) for rid, r in zip(rids, s.select(COLS).to_pylist())}

    old, new = state(a - 1), state(b)
    keep = (lambda v: True) if flt is None else flt
    out = Counter()
    for rid in old.keys() | new.keys():
        o, n = old.get(rid), new.get(rid)
        if o == n:
            continue
        o = o if o is not None and keep(o) else None
        n = n if n is not None and keep(n) else None
        pair = o is not None and n is not None
        if o is not None:
            out[(rid, "DELETE", pair, o)] += 1
        if n is not None:
            out[(rid, "INSERT", pair, n)] += 1
    return out


def got(table: pa.Table) -> Counter:
    return Counter(
        (r[ROW_ID], r[ACTION], r[ISUPDATE], tuple(r[c] for c in COLS)) for r in table.to_pylist()
    )


def assert_pairs_adjacent(table: pa.Table) -> None:
    rows = table.to_pylist()
    i = 0
    while i < len(rows):
        if rows[i][ISUPDATE]:
            nxt = rows[i + 1]
            assert rows[i][ACTION] == "DELETE" and nxt[ACTION] == "INSERT" and nxt[ISUPDATE], (rows[i], nxt)
            assert nxt[ROW_ID] == rows[i][ROW_ID]
            i += 2
        else:
            i += 1


class Decodes:
    """Counts the payload reads of a scan per partition path (wrapping the
    real reader the scan calls)."""

    def __init__(self, monkeypatch):
        self.calls: list[tuple[str, int, tuple | None]] = []
        real_iter, real_rows = change_scan.iter_rows, change_scan.read_rows

        def iter_rows(storage, p, schema, positions, **kw):
            cols = kw.get("columns")
            self.calls.append((p.path, len(positions), None if cols is None else tuple(cols)))
            return real_iter(storage, p, schema, positions, **kw)

        def read_rows(storage, p, schema, positions, **kw):
            cols = kw.get("columns")
            self.calls.append((p.path, len(positions), None if cols is None else tuple(cols)))
            return real_rows(storage, p, schema, positions, **kw)

        monkeypatch.setattr(change_scan, "iter_rows", iter_rows)
        monkeypatch.setattr(change_scan, "read_rows", read_rows)

    def per_path(self) -> Counter:
        return Counter(p for p, _, _ in self.calls)

    @property
    def rows(self) -> int:
        return sum(n for _, n, _ in self.calls)


def count_buckets(monkeypatch) -> list[int]:
    sizes: list[int] = []
    real = change_scan.ChangeSet._emit_pairs

    def emit(self, old, new, *a, **k):
        sizes.append(len(old[1]))
        return real(self, old, new, *a, **k)

    monkeypatch.setattr(change_scan.ChangeSet, "_emit_pairs", emit)
    return sizes


@pytest.fixture
def mixed(new_table, make_rows):
    """One interval (v2..v4) in which the same partitions lose rows (lone
    DELETEs) and have rows updated (pairs), plus inserted rows."""
    t = new_table(partition_rows=100)
    t.insert(make_rows(400))  # v1: 4 partitions
    assert t.update(mod(7, 0), {"s": "seven"}).version == 2
    assert t.delete(mod(11, 3)).version == 3
    assert t.update(mod(5, 1), {"x": -1}).version == 4
    t.insert(make_rows(30, start=1000))  # v5
    return t


def test_partition_with_lone_deletes_and_pairs_is_decoded_once(mixed, monkeypatch):
    t = mixed
    d = Decodes(monkeypatch)
    cs = t.changes(start_version=2, end_version=4)
    out = cs.to_arrow()
    assert got(out) == expected(t, 2, 4)
    assert_pairs_adjacent(out)
    kinds = Counter((r[ACTION], r[ISUPDATE]) for r in out.to_pylist())
    assert kinds[("DELETE", False)] > 0 and kinds[("DELETE", True)] > 0  # both kinds from the same partitions
    # Every partition read is read once, for exactly the rows that come out.
    assert set(d.per_path().values()) == {1}
    assert set(d.per_path()) <= {p.path for p in cs.plan.partitions_to_read()}
    assert d.rows == out.num_rows
    # Each removed partition holds both lone deletes and pair halves.
    removed = {p.path for p in cs.plan.removed}
    assert {p for p, _, _ in d.calls} >= removed


@pytest.mark.parametrize("budget", [10**9, 3000, 1])
def test_buckets_stream_through_partitions(mixed, monkeypatch, budget):
    """Under a tiny budget the pairs are aligned in many buckets, yet every
    partition is still decoded once and the output is the same."""
    t = mixed
    d = Decodes(monkeypatch)
    buckets = count_buckets(monkeypatch)
    monkeypatch.setattr(change_scan, "PAIR_MEMORY_BUDGET", budget)
    out = t.changes(start_version=2).to_arrow()
    assert got(out) == expected(t, 2, t.snapshot().version)
    assert_pairs_adjacent(out)
    if budget == 1:
        assert len(buckets) > 20  # one pair per bucket or so
    else:
        assert len(buckets) >= (1 if budget > 10**6 else 3)
    assert set(d.per_path().values()) == {1}
    assert d.rows == out.num_rows


def test_filter_with_pairs_and_lone_rows(mixed, monkeypatch):
    """A filter on data columns splits pairs whose images fall on either side
    and drops lone rows, with lone rows and pairs read together."""
    t = mixed
    flt = (pc.field("x") < 0) | (pc.field("s") == "seven") | (pc.field("id") < 120)
    py = lambda v: (v[1] is not None and v[1] < 0) or v[2] == "seven" or v[0] < 120  # noqa: E731
    for budget in (10**9, 2000):
        monkeypatch.setattr(change_scan, "PAIR_MEMORY_BUDGET", budget)
        out = t.changes(start_version=2, end_version=4, filter=flt).to_arrow()
        want = expected(t, 2, 4, py)
        assert got(out) == want
        assert any(not upd for (_, act, upd, v) in want if act == "INSERT" and v[1] == -1)  # a split pair
        assert_pairs_adjacent(out)


def _out_of_order(new_table, make_rows):
    """A partition whose row ids do not ascend in file order: compaction
    writes partitions in live-set order, and an earlier-id partition that was
    rewritten comes after a later-id one."""
    t = new_table(partition_rows=10)
    t.insert(make_rows(40))  # 4 partitions of 10: ids 0-9, 10-19, 20-29, 30-39
    t.update(pc.field("id") < 10, {"x": 7})  # rewrites the first: now last in the live set
    assert t.compact(target_rows=100).committed
    (p,) = t.snapshot().partitions
    rid = t.snapshot().to_arrow(include_hidden=True).column(ctfile.ROW_ID_COLUMN).to_numpy()
    assert p.num_records == 40 and not np.all(np.diff(rid) > 0)
    v = t.update(mod(3, 0), {"s": "three"}).version
    t.delete(mod(4, 1))
    return t, v


@pytest.mark.parametrize("budget", [10**9, 200])
def test_pairs_out_of_id_order(new_table, make_rows, monkeypatch, budget):
    t, v = _out_of_order(new_table, make_rows)
    buckets = count_buckets(monkeypatch)
    d = Decodes(monkeypatch)
    monkeypatch.setattr(change_scan, "PAIR_MEMORY_BUDGET", budget)
    out = t.changes(start_version=v).to_arrow()
    assert got(out) == expected(t, v, t.snapshot().version)
    assert_pairs_adjacent(out)
    assert d.rows == out.num_rows  # lone rows once, each pair half once
    if budget < 1000:
        assert len(buckets) > 1
        # Several buckets over an out-of-order partition: its pair rows are
        # read again per bucket (the general path), its lone rows once.
        assert max(d.per_path().values()) > 1
    else:
        assert set(d.per_path().values()) == {1}


def test_sparse_row_ids_use_sorted_sets(mixed, monkeypatch):
    """Ids spanning a range far larger than their number are matched with a
    sorted array instead of a table over the range: same output."""
    t = mixed
    want = t.changes(start_version=1).to_arrow()
    tables = []
    real_init = change_scan._IdSet.__init__

    def init(self, universe):
        real_init(self, universe)
        tables.append(self._table is not None)

    monkeypatch.setattr(change_scan._IdSet, "__init__", init)
    monkeypatch.setattr(change_scan, "_ID_TABLE_SLACK", 0)
    monkeypatch.setattr(change_scan, "_ID_TABLE_FACTOR", 0)
    for a, b in ((2, 4), (1, 5), (3, 3), (4, 5)):
        out = t.changes(start_version=a, end_version=b).to_arrow()
        assert got(out) == expected(t, a, b)
    assert tables and not any(tables)
    assert got(t.changes(start_version=1).to_arrow()) == got(want)


@pytest.mark.parametrize("n", [0, 1, 5, 200])
def test_id_set_matches_isin(n):
    rng = np.random.default_rng(n)
    universe = [rng.choice(10**7, size=n, replace=False) + 10**6, np.arange(50, 50 + n), np.array([7, 10**6 - 1, 3])]
    values = np.concatenate(universe)
    for rids, masks in (
        ([universe[0]], [np.arange(n) < n // 2]),
        ([universe[1], universe[2]], [np.arange(n) % 3 == 0, None]),
        ([universe[1]], [None]),
        ([], []),
    ):
        ref = np.concatenate([r if m is None else r[m] for r, m in zip(rids, masks)] or [np.empty(0, np.int64)])
        for slack in (0, 1 << 20):  # sorted arrays / a table over the range
            ids = change_scan._IdSet(universe)
            if not slack:
                ids._table = None
            ids.fill(rids, masks)
            assert np.array_equal(ids.contains(values), np.isin(values, ref))
            assert np.array_equal(ids.members(), np.unique(ref))
            # A run of consecutive ids answered by a slice.
            assert np.array_equal(ids.contains(universe[1], dense=True), np.isin(universe[1], ref))


def test_missing_file_raises_from_a_worker(new_table, make_rows):
    """An error while decoding on the pool reaches the caller; no partial
    output, no hang."""
    t = new_table(partition_rows=50)
    t.insert(make_rows(200))
    v = t.update(mod(10, 0), {"s": "ten"}).version
    plan = t.changes(start_version=v).plan
    (victim,) = [p for p in plan.removed if p.first_row_id == 0]  # plain insert: no hidden read opens it
    os.remove(os.path.join(str(t.uri), victim.path))
    with pytest.raises(CorruptLogError, match="missing"):
        t.changes(start_version=v).to_arrow()


def test_abandoned_stream_stops_its_workers(new_table, make_rows):
    t = new_table(partition_rows=100)
    t.insert(make_rows(1000))
    v = t.update(mod(2, 0), {"s": "even"}).version
    before = threading.active_count()
    cs = t.changes(start_version=v)
    cs._batch_rows = 10
    it = cs.to_batches()
    first = next(it)
    assert first.num_rows <= 10
    it.close()  # the scan's pool shuts down; nothing keeps decoding
    assert threading.active_count() <= before


def test_read_ahead_is_bounded():
    """A read runs ahead of its consumer by at most ``max_rows`` rows (at
    least one item), then stops until the consumer takes rows."""
    from concurrent.futures import ThreadPoolExecutor

    produced = itertools.count()
    seen = []

    def items():
        for k in range(0, 1000, 10):
            seen.append(next(produced))
            yield k, pa.table({"a": pa.array(range(10))})

    with ThreadPoolExecutor(2) as pool:
        ahead = change_scan._Ahead(pool, items(), 30)
        first = next(ahead)
        assert first[0] == 0
        for _ in range(200):  # let the worker run as far as it may
            if len(seen) >= 4:
                break
            threading.Event().wait(0.005)
        threading.Event().wait(0.05)
        assert 1 <= len(seen) <= 4  # 30 rows buffered = 3 items, + the one taken
        rest = list(ahead)
    assert [k for k, _ in [first, *rest]] == list(range(0, 1000, 10))


def test_update_of_every_row_in_many_buckets(new_table, make_rows, monkeypatch):
    """Dense pairs (every row updated) with column reuse, across buckets."""
    t = new_table(partition_rows=64)
    t.insert(make_rows(300))
    v = t.update(None, {"x": 1}).version
    d = Decodes(monkeypatch)
    buckets = count_buckets(monkeypatch)
    monkeypatch.setattr(change_scan, "PAIR_MEMORY_BUDGET", 20000)
    out = t.changes(start_version=v).to_arrow()
    assert got(out) == expected(t, v, v)
    assert out.num_rows == 600  # x was 10 * id, never 1: every row changes
    assert len(buckets) > 1
    assert_pairs_adjacent(out)
    # Old images decode only the column the update set; the others are shared.
    old_reads = {c for p, _, c in d.calls if p in {q.path for q in t.changes(start_version=v).plan.removed}}
    assert old_reads == {("x",)}
    assert set(d.per_path().values()) == {1}


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


import pyarrow.parquet as pq  # noqa: E402


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
    """A corrupt row group breaks only reads that need it."""
    from ctfile.reader.partition_reader import iter_rows

    storage, schema, part, _ = _write_groups(tmp_path)
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
    with pytest.raises((OSError, pa.ArrowException)):
        list(iter_rows(storage, part, schema, np.array([3, 50])))


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
    with pytest.raises(CorruptLogError, match="records 150 rows"):
        list(iter_rows(storage, dataclasses.replace(part, num_records=150), schema, np.array([5])))
