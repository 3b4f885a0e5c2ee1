"""The minimum delta of a change scan (SPEC §Change scans, `default`).

It works in two phases, so that rows copy-on-write copied unchanged cost only
their two hidden int64 values, and every other needed row is decoded once:

1. **Hidden columns only.** For each net-added partition read
   ``(row_id, row_version)``: rows with ``row_version >= a`` were written in
   the interval (candidate INSERTs), the others are unchanged copies whose ids
   form the set *U*. For each net-removed partition read ``row_id``: rows
   whose id is not in *U* were deleted or updated (candidate DELETEs). Across
   a RESTORE (``match_versions``) a row version below ``a`` does not mark a
   copy: an added row is a copy when a removed row has its row id and its
   row version (SPEC §Change scans, ``default``). Ids
   that are candidates on both sides are updates (pairs); the others are lone
   INSERTs or DELETEs (:mod:`ctfile.reader.row_id_sets`). A plain insert
   partition needs no read at all: its hidden values follow from the log.
2. **Needed rows, each partition decoded once.** Each partition holding a
   needed row is read once for all of them, its lone rows and its halves of
   update pairs together, only the row groups that hold them, each file
   batch decoded once and only the needed rows kept (string columns with a
   small dictionary are decoded as indices and only the kept rows turned into
   strings). Lone rows are emitted as they come. Update pairs are aligned by
   row id in buckets of row-id ranges sized to a memory budget: when each
   partition's pair ids ascend in file order (copy-on-write keeps row order),
   a bucket takes the next rows of each partition's stream, so no partition
   is decoded twice however many buckets there are; otherwise (and only with
   several buckets) pair rows are read again per bucket. Pairs are compared
   (a pair whose values are all equal is dropped: a no-op update produces no
   change) and emitted DELETE-then-INSERT, adjacent. When a removed
   partition's copy-on-write successor holds the same row ids in the same
   order, the columns whose column chunks are byte-identical in the two files
   (the columns the statement did not set) are decoded once, from the new
   file, and serve as both images; only the other columns of the old file are
   read.

Partitions decode in parallel on a thread pool (:mod:`ctfile.reader.read_ahead`),
started in the order they are consumed, a few ahead, each running a bounded
number of rows ahead of its consumer, so memory stays bounded.

Each side of the delta (the net added partitions, new images; the net
removed ones, old images) is a :class:`~ctfile.reader.row_id_sets.Side`; each
partition read is a :class:`_Read`.

A ``filter`` on data columns is applied to every output row; an update whose
old or new image fails the filter becomes a lone DELETE or INSERT with
``ISUPDATE`` false (Snowflake's rule that ``$ISUPDATE`` is computed last,
after everything that can split a pair).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator, NamedTuple, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.actions import Partition
from ctfile.format.schema import Schema
from ctfile.reader.change_events import emit_pairs
from ctfile.reader.change_rows import Chunk, filter_chunk
from ctfile.reader.integrity import DataFiles
from ctfile.reader.partition_reader import read_hidden, read_rows, same_columns
from ctfile.reader.read_ahead import Streams
from ctfile.reader.row_id_sets import Side, classify

PAIR_MEMORY_BUDGET = 128 << 20
_DECODED_BYTES_PER_STORED_BYTE = 8  # rough Parquet expansion for bucket sizing (lineitem: ~6)


class MinimumDelta:
    """The minimum-delta computation over one set of net added and net
    removed partitions (a whole interval, or one commit of an audit scan).

    ``workers`` threads decode partitions; with ``use_threads=False`` pyarrow
    decodes each file on its pool thread alone, without its own threads.
    ``files`` are the scan's data files (each verified on its first open).
    """

    def __init__(
        self,
        files: DataFiles,
        table_schema: Schema,
        *,
        filter: pc.Expression | None,
        batch_rows: int,
        workers: int,
        use_threads: bool = True,
    ):
        self._files = files
        self._table_schema = table_schema
        self._data_schema = table_schema.to_arrow(field_ids=False)
        self._filter = filter
        self._batch_rows = batch_rows
        self._workers = workers
        self._use_threads = use_threads

    def run(
        self,
        added: Sequence[Partition],
        removed: Sequence[Partition],
        a: int,
        *,
        version: int | None = None,
        timestamp_ms: int | None = None,
        match_versions: bool = False,
    ) -> Iterator[Chunk]:
        """The minimum delta between the state before version ``a`` and after
        the net ``added`` / ``removed`` partitions; ``version`` and
        ``timestamp_ms`` tag the rows of an audit scan. ``match_versions``:
        unchanged rows are told by row id and row version (an interval
        holding a RESTORE), not by a row version below ``a``."""
        kw = {"version": version, "timestamp_ms": timestamp_ms}
        with ThreadPoolExecutor(max_workers=self._workers) as pool:
            # Phase 1: hidden columns only. Row versions only decide which
            # added rows were written in the interval; only row ids are kept
            # after that (memory here grows with the interval's rows).
            def ids(p_insert):
                p, insert = p_insert
                rid, rv = read_hidden(self._files, p)
                if match_versions:
                    return rid, rv
                return rid, (rv >= a) if insert else None

            hidden = list(pool.map(ids, [(p, True) for p in added] + [(p, False) for p in removed]))
            a_rid = [rid for rid, _ in hidden[:len(added)]]
            r_rid = [rid for rid, _ in hidden[len(added):]]
            if match_versions:
                a_sel = unmatched_rows(a_rid, [rv for _, rv in hidden[:len(added)]], r_rid, [rv for _, rv in hidden[len(added):]])
            else:
                a_sel = [sel for _, sel in hidden[:len(added)]]
            del hidden
            new, old, pair_ids = classify(added, a_rid, a_sel, removed, r_rid)
            del a_rid, a_sel, r_rid
            edges = self._bucket_edges(new, old, pair_ids)
            del pair_ids
            reads = self._plan_reads(new, old, pool)
            # Planned: the selections are not needed any more (dropped here).
            new, old = new.pairs_only(), old.pairs_only()
            yield from self._run_reads(reads, new, old, edges, pool, **kw)

    # ------------------------------------------------------------ reading the needed rows once

    def _plan_reads(self, new: Side, old: Side, pool) -> list[_Read]:
        """One read per partition holding a needed row: its lone rows and its
        halves of update pairs together, so each partition is decoded once.
        A removed partition whose copy-on-write successor shares columns
        (:meth:`_column_reuse`) reads only the other columns."""
        reuse = self._column_reuse(new, old, pool)
        names = self._data_schema.names
        reads: list[_Read] = []
        for side in (new, old):
            for i, p in enumerate(side.parts):
                pos = side.positions(i)
                if not len(pos):
                    continue
                r = _Read(side.insert, i, p, pos, side.rids[i], side.pairs[i][pos])
                if not side.insert and i in reuse:
                    r.reuse = reuse[i]
                    r.columns = [c for c in names if c not in r.reuse.same]
                reads.append(r)
        return reads

    def _column_reuse(self, new: Side, old: Side, pool) -> dict[int, _Reuse]:
        """Removed partitions whose copy-on-write successor among the added
        ones holds the same row ids in the same order, all of its needed rows
        being update pairs with the same rows of the successor, with the
        table columns whose values the two files share
        (:func:`same_columns`), by removed index. The old images of those
        columns are then taken from the new images, not decoded again."""
        by_shape = _index_by_shape(new)
        candidates = []
        for i in range(len(old)):
            j = _successor_with_same_pairs(new, old, i, by_shape)
            if j is not None:
                candidates.append((i, j))
        sames = pool.map(lambda ij: same_columns(self._files, old.parts[ij[0]], new.parts[ij[1]], self._table_schema), candidates)
        return {i: _Reuse(j, frozenset(same)) for (i, j), same in zip(candidates, sames) if same}

    def _run_reads(self, reads, new: Side, old: Side, edges, pool, *, version, timestamp_ms) -> Iterator[Chunk]:
        """Emit the rows of ``reads``: update pairs bucket by bucket (each
        read streamed once across the buckets), then the lone rows."""
        kw = {"version": version, "timestamp_ms": timestamp_ms}
        buckets = len(edges) - 1
        pair_reads, lone_reads = _by_pairs(reads)
        for r in pair_reads:
            r.place(edges)
        tail: Iterator[Chunk] = iter(())
        if _rereads_pairs(pair_reads, buckets):
            # Pair rows out of id order in some partition and several buckets:
            # read each partition's lone rows once, and its pair rows again
            # per bucket (the general path).
            lone_reads += _lone_parts(pair_reads)
            pair_reads = []
            tail = self._pairs_by_rereading(new, old, edges, pool, **kw)
        pair_reads = _consumption_order(pair_reads, buckets)
        order = [r for r in pair_reads if r.decodes] + lone_reads  # reads with nothing to decode never start
        streams = Streams(pool, self._files, self._table_schema, order, self._batch_rows, use_threads=self._use_threads)
        try:
            yield from self._streamed(streams, pair_reads, lone_reads, buckets, **kw)
            yield from tail
        finally:
            streams.close_all()

    def _streamed(self, streams: Streams, pair_reads, lone_reads, buckets: int, *, version, timestamp_ms) -> Iterator[Chunk]:
        """Emit the pairs of ``pair_reads`` bucket by bucket, then the rows of ``lone_reads``."""
        for b in range(buckets if pair_reads else 0):
            yield from self._bucket(streams, pair_reads, b, buckets, version=version, timestamp_ms=timestamp_ms)
        for r in lone_reads:
            yield from self._lone_rows(streams, r, version=version, timestamp_ms=timestamp_ms)

    def _lone_rows(self, streams: Streams, r: _Read, *, version, timestamp_ms) -> Iterator[Chunk]:
        """Emit the rows of a read of lone rows, a batch at a time."""
        cur = streams.cursor(r)
        n = len(r.positions)
        while cur.taken < n:
            k0 = cur.taken
            tables = cur.take(min(n, k0 + self._batch_rows))
            c = self._lone_chunk(_concat(tables, self._data_schema), r.ids(slice(k0, cur.taken)), r.insert, version=version, timestamp_ms=timestamp_ms)
            if c is not None:
                yield c
        streams.close(r)

    def _bucket(self, streams, pair_reads, b, buckets, *, version, timestamp_ms) -> Iterator[Chunk]:
        """Emit the pairs of bucket ``b`` and the lone rows read with them."""
        kw = {"version": version, "timestamp_ms": timestamp_ms}
        sides: dict[bool, list[tuple[_Read, pa.Table, np.ndarray]]] = {True: [], False: []}
        new_piece: dict[int, tuple[pa.Table, np.ndarray]] = {}
        for r in sorted(pair_reads, key=lambda r: not r.insert):  # new images first (stable: in consumption order)
            lone, piece = self._take_bucket(streams, r, b, buckets, **kw)
            if lone is not None:
                yield lone
            if piece is None:
                continue
            data, ids = piece
            if r.insert:
                new_piece[r.index] = (data, ids)
            else:
                data = self._old_images(r, data, ids, new_piece)
            sides[r.insert].append((r, data, ids))
        if not sides[True] and not sides[False]:
            return
        new = _assemble_side(sides[True], self._data_schema)
        old = _assemble_side(sides[False], self._data_schema)
        # Columns every old image of the bucket took from its new image need
        # no comparison.
        skip = _shared_by_all([r for r, _, _ in sides[False]])
        yield from self._emit_pairs(old, new, version, timestamp_ms, skip=skip)

    def _old_images(self, r: _Read, data: pa.Table | None, ids: np.ndarray, new_piece: dict) -> pa.Table:
        """The old images of removed read ``r``'s pairs in a bucket: ``data``
        (the columns it read, rows with ids ``ids``), with the columns it
        reuses taken from its successor's new images in ``new_piece``."""
        if r.reuse is None:
            return data
        src, src_ids = new_piece[r.reuse.source]
        if not np.array_equal(src_ids, ids):
            raise AssertionError("change scan: reused columns do not align")  # pragma: no cover
        return self._merge_columns(src, data, r.reuse.same)

    def _take_bucket(self, streams, r: _Read, b, buckets, *, version, timestamp_ms) -> tuple[Chunk | None, tuple[pa.Table | None, np.ndarray] | None]:
        """Advance read ``r`` to the end of bucket ``b``: the lone rows passed
        on the way (a chunk, or None) and its pair rows in the bucket
        ``(table columns it reads, row ids)`` (None when it has none there).
        The rows are split piece by piece, so no take runs over a many-chunk
        table (which would concatenate it first)."""
        if r.finished:
            return None, None
        end, last = r.bucket_end(b, buckets)
        if end <= r.taken:
            return None, None
        k0 = r.taken
        is_pair = r.pair[k0:end]
        ids = r.ids(slice(k0, end))
        lone = None
        if not r.decodes:  # every column shared with the new image: nothing to read
            data = None
        else:
            lone_t, pair_t = _split(streams.cursor(r).take(end), is_pair)
            if lone_t:
                lone = self._lone_chunk(_concat(lone_t, self._data_schema), ids[~is_pair], r.insert, version=version, timestamp_ms=timestamp_ms)
            data = _concat(pair_t, self._read_schema(r))
            ids = ids[is_pair]
        r.taken = end
        if last:
            r.finished = True
            streams.close(r)
        return lone, ((data, ids) if len(ids) else None)

    def _merge_columns(self, shared: pa.Table, rest: pa.Table | None, same: frozenset[str]) -> pa.Table:
        """An old image: the columns ``same`` from its new image ``shared``,
        the others from ``rest`` (the old file's other columns)."""
        return pa.Table.from_arrays(
            [shared.column(c) if c in same else rest.column(c) for c in self._data_schema.names],
            schema=self._data_schema,
        )

    def _read_schema(self, r: _Read) -> pa.Schema:
        if r.columns is None:
            return self._data_schema
        return pa.schema([self._data_schema.field(c) for c in r.columns])

    def _lone_chunk(self, data: pa.Table, ids: np.ndarray, insert: bool, *, version, timestamp_ms) -> Chunk | None:
        return filter_chunk(data, ids, insert, self._filter, version=version, timestamp_ms=timestamp_ms)

    def _bucket_edges(self, new: Side, old: Side, pair_ids) -> np.ndarray:
        """Row-id bucket bounds ``[lo, hi)`` for the update pairs, so that the
        pairs of one bucket fit the memory budget."""
        if not len(pair_ids):
            return np.empty(1, np.int64)
        parts = list(new.parts) + list(old.parts)
        bytes_per_row = max(
            (p.size_bytes / p.num_records for p in parts if p.num_records), default=64
        ) * _DECODED_BYTES_PER_STORED_BYTE
        buckets = max(1, math.ceil(2 * len(pair_ids) * bytes_per_row / PAIR_MEMORY_BUDGET))
        buckets = min(buckets, len(pair_ids))
        edges = [int(pair_ids[(i * len(pair_ids)) // buckets]) for i in range(buckets)]
        edges.append(int(pair_ids[-1]) + 1)
        return np.unique(np.array(edges, dtype=np.int64))

    # ------------------------------------------------------------ general path: pairs out of id order

    def _pairs_by_rereading(self, new: Side, old: Side, edges, pool, *, version, timestamp_ms) -> Iterator[Chunk]:
        """Update pairs in row-id buckets, each bucket reading the pair rows
        with ids in its range from every partition (a partition is decoded
        once per bucket that needs it)."""
        new, old = new.pairs_only(), old.pairs_only()  # lone rows are read apart
        reuse = self._column_reuse(new, old, pool)
        for lo, hi in zip(edges[:-1], edges[1:]):
            new_pieces = self._read_pieces(new, lo, hi)
            old_pieces = self._read_pieces(old, lo, hi, reuse=reuse, new_pieces=new_pieces)
            new_t = _assemble_side([(None, t, ids) for t, _, ids in new_pieces.values()], self._data_schema)
            old_t = _assemble_side([(None, t, ids) for t, _, ids in old_pieces.values()], self._data_schema)
            del new_pieces, old_pieces
            yield from self._emit_pairs(old_t, new_t, version, timestamp_ms)
            del new_t, old_t

    def _read_pieces(self, side: Side, lo, hi, *, reuse=None, new_pieces=None) -> dict[int, tuple[pa.Table, np.ndarray, np.ndarray]]:
        """Per partition index of ``side``, the pair rows with ids in
        ``[lo, hi)``: ``(table columns, positions, row ids)``, in file order."""
        pieces: dict[int, tuple[pa.Table, np.ndarray, np.ndarray]] = {}
        for i, p in enumerate(side.parts):
            pos = side.pairs_in(i, lo, hi)
            if not len(pos):
                continue
            match = reuse.get(i) if reuse else None
            if _reads_same_rows(match, new_pieces, pos):
                t = self._reusing(p, pos, match, new_pieces[match.source][0])
            else:
                t = read_rows(self._files, p, self._table_schema, pos, use_threads=self._use_threads)
            pieces[i] = (t, pos, side.rids[i][pos])
        return pieces

    def _reusing(self, p: Partition, pos: np.ndarray, match: _Reuse, shared: pa.Table) -> pa.Table:
        """The rows at ``pos`` of ``p``: the columns ``match`` shares from
        ``shared`` (its successor's new images of the same rows, at the same
        positions), the others read."""
        diff = [c for c in self._data_schema.names if c not in match.same]
        old_t = read_rows(self._files, p, self._table_schema, pos, columns=diff, use_threads=self._use_threads) if diff else None
        return self._merge_columns(shared, old_t, match.same)

    # ------------------------------------------------------------ pairs

    def _emit_pairs(self, old_t: _Images, new_t: _Images, version, timestamp_ms, *, skip: frozenset = frozenset()) -> Iterator[Chunk]:
        """Emit the update pairs of one bucket (both sides in row-id order)
        with :func:`~ctfile.reader.change_events.emit_pairs`: a pair whose
        values are all equal is dropped (the columns ``skip`` are known
        equal, taken from the new images, and not compared); an image
        failing the filter splits its pair."""
        (old, old_ids), (new, new_ids) = old_t, new_t
        if len(old_ids) != len(new_ids) or not np.array_equal(old_ids, new_ids):
            raise AssertionError("change scan: update pairs do not align by row id")  # pragma: no cover
        yield from emit_pairs(
            old, new, old_ids, filter=self._filter, batch_rows=self._batch_rows, version=version,
            timestamp_ms=timestamp_ms, skip=skip,
        )


def unmatched_rows(
    a_rid: Sequence[np.ndarray], a_rv: Sequence[np.ndarray], r_rid: Sequence[np.ndarray], r_rv: Sequence[np.ndarray],
) -> list[np.ndarray]:
    """Per added partition, which of its rows no removed row matches by row
    id and row version: the candidate INSERTs of a minimum delta across a
    RESTORE (SPEC §Change scans, ``default``; lineage identity makes a match
    an unchanged row). Row ids are distinct on each side.

    >>> unmatched_rows([np.array([1, 2, 3])], [np.array([4, 9, 4])], [np.array([3, 2])], [np.array([4, 4])])
    [array([ True,  True, False])]
    """
    ids = np.concatenate(list(r_rid)) if r_rid else np.empty(0, np.int64)
    versions = np.concatenate(list(r_rv)) if r_rv else np.empty(0, np.int64)
    order = np.argsort(ids, kind="stable")
    ids, versions = ids[order], versions[order]
    out = []
    for rid, rv in zip(a_rid, a_rv):
        if not len(ids):
            out.append(np.ones(len(rid), dtype=bool))
            continue
        i = np.minimum(np.searchsorted(ids, rid), len(ids) - 1)
        out.append(~((ids[i] == rid) & (versions[i] == rv)))
    return out


@dataclass(frozen=True)
class _Reuse:
    """The columns of an old image taken from its copy-on-write successor's
    new image (byte-identical column chunks) instead of being decoded."""

    source: int  # the successor's index among the added partitions
    same: frozenset[str]  # the shared columns (never empty)


class _Images(NamedTuple):
    """One side of a bucket's update pairs, in row-id order."""

    table: pa.Table  # table columns
    ids: np.ndarray  # row ids


@dataclass(eq=False)
class _Read:
    """The rows of one partition a minimum delta needs, decoded once, and,
    for a read holding update pairs, how far the bucket-by-bucket
    consumption has taken it."""

    insert: bool  # an added partition (new images, INSERTs) or a removed one
    index: int  # the partition's index among the added or removed ones
    part: Partition
    positions: np.ndarray  # needed rows, ascending
    rid: np.ndarray  # row ids of every row of the partition
    pair: np.ndarray  # per needed row: half of an update pair (else a lone row)
    columns: list[str] | None = None  # None: every table column
    reuse: _Reuse | None = None  # where the other columns come from
    monotone: bool = True  # pair ids ascend in file order (set by place)
    ends: np.ndarray | None = None  # per bucket: needed-row index past its last pair (set by place)
    taken: int = 0  # needed rows consumed so far
    finished: bool = False

    @property
    def has_pairs(self) -> bool:
        """Whether a needed row is half of an update pair."""
        return bool(self.pair.any())

    @property
    def decodes(self) -> bool:
        """Whether the read decodes a column (an old image may take every
        column from its new image)."""
        return self.columns != []

    def ids(self, k) -> np.ndarray:
        """Row ids of needed rows ``k`` (an index, array or slice)."""
        return self.rid[self.positions[k]]

    def place(self, edges: np.ndarray) -> None:
        """Place the read's pairs in the row-id buckets ``edges``: whether its
        pair ids ascend (then each bucket takes the next rows of its stream)
        and where each bucket ends."""
        pk = np.flatnonzero(self.pair)
        pid = self.ids(pk)
        self.monotone = bool(np.all(pid[1:] > pid[:-1]))
        n_before = np.searchsorted(pid, edges[1:]) if self.monotone else None
        # Selected-row index just past the last pair of each bucket.
        self.ends = None if n_before is None else np.where(n_before > 0, pk[np.maximum(n_before, 1) - 1] + 1, 0)

    def first_bucket(self, buckets: int) -> int:
        """The first bucket holding one of the read's pairs."""
        return int(np.argmax(self.ends > 0)) if buckets > 1 else 0

    def bucket_end(self, b: int, buckets: int) -> tuple[int, bool]:
        """The needed-row index bucket ``b`` consumes the read up to, and
        whether that is the read's last bucket (which takes the lone rows
        after its last pair too)."""
        last = buckets == 1 or b == buckets - 1 or self.ends[b] == self.ends[-1]
        return (len(self.positions) if last else int(self.ends[b])), bool(last)

    def lone_rows(self) -> _Read | None:
        """A read of this read's lone rows alone (None when it has none)."""
        lone = ~self.pair
        if not lone.any():
            return None
        return _Read(self.insert, self.index, self.part, self.positions[lone], self.rid, self.pair[lone])


def _index_by_shape(side: Side) -> dict[tuple[int, int, int], int]:
    """The index of ``side``'s partitions by their :meth:`Side.shape
    <ctfile.reader.row_id_sets.Side.shape>` (those that have one)."""
    by_shape: dict[tuple[int, int, int], int] = {}
    for j in range(len(side)):
        shape = side.shape(j)
        if shape is not None:
            by_shape[shape] = j
    return by_shape


def _successor_with_same_pairs(new: Side, old: Side, i: int, by_shape: dict[tuple[int, int, int], int]) -> int | None:
    """The index of the added partition (found by shape in ``by_shape``)
    holding removed partition ``i``'s row ids in the same order, every
    needed row of both being an update pair with the same row of the other;
    None if there is none."""
    if not old.pairs[i].any():
        return None
    j = by_shape.get(old.shape(i))
    if j is None or not np.array_equal(old.rids[i], new.rids[j]):
        return None
    # Same ids in the same order: every needed row of both files is a
    # pair (a lone row would need every column), at the same position.
    if not (old.only_pairs(i) and new.only_pairs(j) and np.array_equal(old.pairs[i], new.pairs[j])):
        return None
    return j


def _reads_same_rows(match: _Reuse | None, new_pieces: dict | None, pos: np.ndarray) -> bool:
    """Whether a removed partition reusing columns per ``match`` reads the
    same rows, at the same positions, as its successor did in ``new_pieces``
    (then the columns the files share come from the new images already read)."""
    return match is not None and match.source in new_pieces and np.array_equal(new_pieces[match.source][1], pos)


def _by_pairs(reads: list[_Read]) -> tuple[list[_Read], list[_Read]]:
    """``reads`` split into those holding update pairs and the others."""
    return [r for r in reads if r.has_pairs], [r for r in reads if not r.has_pairs]


def _rereads_pairs(pair_reads: list[_Read], buckets: int) -> bool:
    """Whether the pairs must be read again per bucket: several buckets, and
    the pair ids of some partition out of id order (each read placed)."""
    return buckets > 1 and not all(r.monotone for r in pair_reads)


def _lone_parts(reads: list[_Read]) -> list[_Read]:
    """The reads of the lone rows alone of ``reads`` (those that have some)."""
    return [lone for lone in map(_Read.lone_rows, reads) if lone is not None]


def _shared_by_all(olds: list[_Read]) -> frozenset[str]:
    """The columns every old image of ``olds`` took from its new image
    (then known equal); empty unless each of them reuses columns."""
    if olds and all(r.reuse is not None for r in olds):
        return frozenset.intersection(*[r.reuse.same for r in olds])
    return frozenset()


def _consumption_order(pair_reads: list[_Read], buckets: int) -> list[_Read]:
    """The order the buckets consume ``pair_reads`` in: by first bucket, then
    new images before old (reused columns of an old image come from its new
    image), then by first pair id."""
    first: list[list[_Read]] = [[] for _ in range(buckets)]
    for r in pair_reads:
        first[r.first_bucket(buckets)].append(r)
    return [r for group in first for r in sorted(group, key=lambda r: (not r.insert, int(r.ids(np.argmax(r.pair)))))]


def _concat(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    if not tables:
        return schema.empty_table()
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def _split(tables: list[pa.Table], is_pair: np.ndarray) -> tuple[list[pa.Table], list[pa.Table]]:
    """Split consecutive ``tables`` (rows matching ``is_pair``) into lone rows and pair rows."""
    lone: list[pa.Table] = []
    pair: list[pa.Table] = []
    k = 0
    for t in tables:
        m = is_pair[k:k + t.num_rows]
        k += t.num_rows
        if m.all():
            pair.append(t)
        elif not m.any():
            lone.append(t)
        else:
            pair.append(t.take(pa.array(np.flatnonzero(m))))
            lone.append(t.take(pa.array(np.flatnonzero(~m))))
    return lone, pair


def _assemble_side(pieces, schema: pa.Schema) -> _Images:
    """Concatenate one side's ``(read, table, ids)`` pieces, sorted by row id."""
    pieces = sorted((x for x in pieces if len(x[2])), key=lambda x: int(x[2][0]))
    if not pieces:
        return _Images(schema.empty_table(), np.empty(0, np.int64))
    tables = [t for _, t, _ in pieces]
    all_ids = np.concatenate([ids for _, _, ids in pieces])
    if len(all_ids) < 2 or bool(np.all(all_ids[1:] > all_ids[:-1])):
        # Already in id order (partitions and rows in id order, the usual
        # case): no reordering copy.
        return _Images(_concat(tables, schema), all_ids)
    order = np.argsort(all_ids, kind="stable")
    return _Images(_concat(tables, schema).take(pa.array(order)), all_ids[order])
