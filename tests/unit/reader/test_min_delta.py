"""How the minimum-delta change scan reads partitions (reader/min_delta.py,
reader/read_ahead.py, reader/row_id_sets.py).

Each partition holding a needed row is decoded once for all its uses: its
lone DELETEs or INSERTs and its halves of update pairs; update pairs stream
through row-id buckets sized to a memory budget without decoding a partition
again; partitions decode on a thread pool, a bounded number ahead. Every
test compares the scan with the difference of two real snapshots (SPEC
§Change scans), so a read that drops, repeats or misaligns rows fails.
"""

from __future__ import annotations

import os
import threading
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.errors import MissingDataFileError
from ctfile.reader import min_delta, read_ahead, row_id_sets
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
        real_iter, real_rows = read_ahead.iter_rows, min_delta.read_rows

        def iter_rows(storage, p, schema, positions, **kw):
            cols = kw.get("columns")
            self.calls.append((p.path, len(positions), None if cols is None else tuple(cols)))
            return real_iter(storage, p, schema, positions, **kw)

        def read_rows(storage, p, schema, positions, **kw):
            cols = kw.get("columns")
            self.calls.append((p.path, len(positions), None if cols is None else tuple(cols)))
            return real_rows(storage, p, schema, positions, **kw)

        monkeypatch.setattr(read_ahead, "iter_rows", iter_rows)
        monkeypatch.setattr(min_delta, "read_rows", read_rows)

    def per_path(self) -> Counter:
        return Counter(p for p, _, _ in self.calls)

    @property
    def rows(self) -> int:
        return sum(n for _, n, _ in self.calls)


def count_buckets(monkeypatch) -> list[int]:
    sizes: list[int] = []
    real = min_delta.MinimumDelta._emit_pairs

    def emit(self, old, new, *a, **k):
        sizes.append(len(old[1]))
        return real(self, old, new, *a, **k)

    monkeypatch.setattr(min_delta.MinimumDelta, "_emit_pairs", emit)
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
    monkeypatch.setattr(min_delta, "PAIR_MEMORY_BUDGET", budget)
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
        monkeypatch.setattr(min_delta, "PAIR_MEMORY_BUDGET", budget)
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
    monkeypatch.setattr(min_delta, "PAIR_MEMORY_BUDGET", budget)
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


def test_pairs_out_of_id_order_reuse_columns(new_table, make_rows, monkeypatch):
    """The general path (pairs out of id order, several buckets) also takes
    the columns an update did not set from the new images: the old image
    decodes only the column set, and the output is that of a scan without
    column reuse."""
    t = new_table(partition_rows=100)
    for start in range(0, 40, 10):
        t.insert(make_rows(10, start=start))  # 4 partitions: ids 0-9, 10-19, 20-29, 30-39
    t.update(pc.field("id") < 10, {"x": 7})
    assert t.compact(target_rows=100).committed  # one partition, ids out of order
    v = t.update(mod(3, 0), {"s": "three"}).version  # rewrites it whole, rows in the same order
    monkeypatch.setattr(min_delta, "PAIR_MEMORY_BUDGET", 200)
    plain = t.changes(start_version=v, end_version=v).to_arrow()
    real_same = min_delta.same_columns
    monkeypatch.setattr(min_delta, "same_columns", lambda *a, **k: set())
    unshared = t.changes(start_version=v, end_version=v).to_arrow()
    monkeypatch.setattr(min_delta, "same_columns", real_same)
    d = Decodes(monkeypatch)
    buckets = count_buckets(monkeypatch)
    cs = t.changes(start_version=v, end_version=v)
    out = cs.to_arrow()
    assert len(buckets) > 1
    assert got(out) == expected(t, v, v)
    assert out.equals(unshared) and out.equals(plain)
    assert_pairs_adjacent(out)
    (old,) = cs.plan.removed
    assert {c for p, _, c in d.calls if p == old.path} == {("s",)}
    assert d.per_path()[old.path] == len(buckets)  # its pair rows read again per bucket


def test_sparse_row_ids_use_sorted_sets(mixed, monkeypatch):
    """Ids spanning a range far larger than their number are matched with a
    sorted array instead of a table over the range: same output."""
    t = mixed
    want = t.changes(start_version=1).to_arrow()
    tables = []
    real_init = row_id_sets.IdSet.__init__

    def init(self, universe):
        real_init(self, universe)
        tables.append(self._table is not None)

    monkeypatch.setattr(row_id_sets.IdSet, "__init__", init)
    monkeypatch.setattr(row_id_sets, "ID_TABLE_SLACK", 0)
    monkeypatch.setattr(row_id_sets, "ID_TABLE_FACTOR", 0)
    for a, b in ((2, 4), (1, 5), (3, 3), (4, 5)):
        out = t.changes(start_version=a, end_version=b).to_arrow()
        assert got(out) == expected(t, a, b)
    assert tables and not any(tables)
    assert got(t.changes(start_version=1).to_arrow()) == got(want)


def test_missing_file_raises_from_a_worker(new_table, make_rows):
    """An error while decoding on the pool reaches the caller; no partial
    output, no hang."""
    t = new_table(partition_rows=50)
    t.insert(make_rows(200))
    v = t.update(mod(10, 0), {"s": "ten"}).version
    plan = t.changes(start_version=v).plan
    (victim,) = [p for p in plan.removed if p.first_row_id == 0]  # plain insert: no hidden read opens it
    os.remove(os.path.join(str(t.uri), victim.path))
    with pytest.raises(MissingDataFileError, match=f"{victim.path} .*added by version 1.* is missing"):
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


def test_update_of_every_row_in_many_buckets(new_table, make_rows, monkeypatch):
    """Dense pairs (every row updated) with column reuse, across buckets."""
    t = new_table(partition_rows=64)
    t.insert(make_rows(300))
    v = t.update(None, {"x": 1}).version
    d = Decodes(monkeypatch)
    buckets = count_buckets(monkeypatch)
    monkeypatch.setattr(min_delta, "PAIR_MEMORY_BUDGET", 20000)
    out = t.changes(start_version=v).to_arrow()
    assert got(out) == expected(t, v, v)
    assert out.num_rows == 600  # x was 10 * id, never 1: every row changes
    assert len(buckets) > 1
    assert_pairs_adjacent(out)
    # Old images decode only the column the update set; the others are shared.
    old_reads = {c for p, _, c in d.calls if p in {q.path for q in t.changes(start_version=v).plan.removed}}
    assert old_reads == {("x",)}
    assert set(d.per_path().values()) == {1}


@pytest.mark.parametrize("use_threads", [True, False])
def test_use_threads(mixed, monkeypatch, use_threads):
    """``use_threads=False`` decodes every partition on one pool thread, with
    pyarrow's own threads off (what an engine running a scan per core wants);
    the output is the same either way."""
    t = mixed
    want = expected(t, 2, 4)
    producers: set[str] = set()
    flags: list[bool] = []
    real_iter = read_ahead.iter_rows

    def iter_rows(storage, p, schema, positions, **kw):
        flags.append(kw.get("use_threads", True))
        for item in real_iter(storage, p, schema, positions, **kw):
            producers.add(threading.current_thread().name)
            yield item

    monkeypatch.setattr(read_ahead, "iter_rows", iter_rows)
    out = t.changes(start_version=2, end_version=4).to_arrow(use_threads=use_threads)
    assert got(out) == want
    assert_pairs_adjacent(out)
    assert len(flags) > 1 and set(flags) == {use_threads}
    assert producers and threading.current_thread().name not in producers
    if not use_threads:
        assert len(producers) == 1


def test_use_threads_must_be_a_bool(mixed):
    with pytest.raises(ctfile.InvalidArgumentError, match="use_threads"):
        mixed.changes(start_version=2).to_arrow(use_threads="no")
    with pytest.raises(ctfile.InvalidArgumentError, match="use_threads"):
        mixed.changes(start_version=2).to_batches(use_threads=1)  # raised at the call, not at the first batch
