"""Executing a change scan (SPEC §Change scans).

The default (minimum-delta) mode works in three phases, so that rows
copy-on-write copied unchanged cost only their two hidden int64 values:

1. **Hidden columns only.** For each net-added partition read
   ``(row_id, row_version)``: rows with ``row_version >= a`` were written in
   the interval (candidate INSERTs), the others are unchanged copies whose ids
   form the set *U*. For each net-removed partition read ``row_id``: rows
   whose id is not in *U* were deleted or updated (candidate DELETEs). A plain
   insert partition needs no read at all: its hidden values follow from the log.
2. **Unpaired rows.** A candidate INSERT whose id is not a candidate DELETE is
   a plain INSERT and vice versa; only their payload rows are read (only the
   row groups that hold them) and emitted, partition by partition.
3. **Update pairs.** Ids present on both sides are updates. Their old and new
   payloads are read in buckets of row-id ranges sized to a memory budget,
   aligned by id (a sort of int64 ids, no join of whole rows), compared
   (a pair whose values are all equal is dropped: a no-op update produces no
   change), and emitted DELETE-then-INSERT, adjacent. When a removed
   partition's copy-on-write successor holds the same row ids in the same
   order, the columns whose column chunks are byte-identical in the two files
   (the columns the statement did not set) are decoded once, from the new
   file, and serve as both images; only the other columns of the old file are
   read.

ADDED_ONLY and REMOVED_ONLY skip the phases they do not need. The
append-only mode is a filter over the appended partitions on the stored
``_ct_row_id`` being null: no join, and no removed partition is read. The
audit mode runs the minimum delta of each commit in turn.

A ``filter`` on data columns prunes partitions by their statistics and is
applied to every output row; an update whose old or new image fails the
filter becomes a lone DELETE or INSERT with ``ISUPDATE`` false (Snowflake's
rule that ``$ISUPDATE`` is computed last, after everything that can split a
pair).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.actions import Partition
from ctfile.format.schema import ROW_ID_COLUMN, ROW_ID_FIELD_ID, Schema
from ctfile.log.replay import TableState
from ctfile.log.storage import Storage
from ctfile.reader.change_plan import ChangePlan, PlanShape
from ctfile.reader.expressions import evaluate_mask
from ctfile.reader.partition_reader import (
    hidden_values_only_inherited,
    open_parquet,
    read_hidden,
    read_partition,
    read_rows,
    same_columns,
)
from ctfile.reader.pruning import prune
from ctfile.reader.row_ids import row_id_strings, table_seed

ACTION_COLUMN = "METADATA$ACTION"
ISUPDATE_COLUMN = "METADATA$ISUPDATE"
ROW_ID_OUT_COLUMN = "METADATA$ROW_ID"
COMMIT_VERSION_COLUMN = "METADATA$COMMIT_VERSION"
COMMIT_TIMESTAMP_COLUMN = "METADATA$COMMIT_TIMESTAMP"
OP_COLUMN = "op"
# ODF RFC-015 / Flink RowKind codes.
OP_APPEND, OP_RETRACT, OP_CORRECT_FROM, OP_CORRECT_TO = 0, 1, 2, 3

PAIR_MEMORY_BUDGET = 128 << 20
_DECODED_BYTES_PER_STORED_BYTE = 4  # rough Parquet expansion for bucket sizing
_READ_WORKERS = 4


def change_schema(data_schema: pa.Schema, *, information: str, changelog: str | None) -> pa.Schema:
    """The Arrow schema of a change scan's output."""
    fields = list(data_schema)
    if changelog == "op":
        fields.append(pa.field(OP_COLUMN, pa.uint8(), nullable=False))
    else:
        fields.append(pa.field(ACTION_COLUMN, pa.string(), nullable=False))
        fields.append(pa.field(ISUPDATE_COLUMN, pa.bool_(), nullable=False))
    fields.append(pa.field(ROW_ID_OUT_COLUMN, pa.string(), nullable=False))
    if information == "audit":
        fields.append(pa.field(COMMIT_VERSION_COLUMN, pa.int64(), nullable=False))
        fields.append(pa.field(COMMIT_TIMESTAMP_COLUMN, pa.timestamp("us", tz="UTC"), nullable=False))
    return pa.schema(fields)


@dataclass
class _Chunk:
    data: pa.Table  # table columns only
    insert: np.ndarray  # bool per row
    update: np.ndarray  # bool per row
    row_id: np.ndarray  # int64 hidden row ids
    version: int | None = None
    timestamp_ms: int | None = None


def _const(n: int, value: bool) -> np.ndarray:
    return np.full(n, value, dtype=bool)


def _differs(a: pa.ChunkedArray, b: pa.ChunkedArray) -> np.ndarray:
    """Null-aware "is distinct from", per row."""
    try:
        ne = pc.not_equal(a, b)
        if a.null_count or b.null_count:
            ne = pc.fill_null(ne, pc.xor(pc.is_null(a), pc.is_null(b)))
        return np.asarray(ne.to_numpy(zero_copy_only=False), dtype=bool)
    except pa.ArrowNotImplementedError:  # nested types: compare as Python values
        return np.array([x != y for x, y in zip(a.to_pylist(), b.to_pylist())], dtype=bool)


class ChangeSet:
    """The changes of a table over an interval. Obtain one with :meth:`ctfile.Table.changes`.

    Attributes
    ----------
    plan_shape : PlanShape
        EMPTY, ADDED_ONLY, REMOVED_ONLY, MINIMIZE or INITIAL_ROWS.
    start_version, end_version : int
        The interval, both ends included.
    schema : pyarrow.Schema
        Table columns plus the metadata columns.
    """

    def __init__(
        self,
        storage: Storage,
        table_schema: Schema,
        table_id: str,
        plan: ChangePlan,
        *,
        changelog: str | None = None,
        filter: pc.Expression | None = None,
        initial_state: TableState | None = None,
        batch_rows: int = 65536,
    ):
        self._storage = storage
        self._table_schema = table_schema
        self._data_schema = table_schema.to_arrow(field_ids=False)
        self._seed = table_seed(table_id)
        self.plan = plan
        self._changelog = changelog
        self._filter = filter
        self._initial = initial_state
        self._batch_rows = batch_rows
        self.schema = change_schema(self._data_schema, information=plan.information, changelog=changelog)

    def __repr__(self) -> str:
        return (
            f"ChangeSet({self._storage.uri!r}, {self.start_version}..{self.end_version}, "
            f"information={self.plan.information!r}, plan_shape={self.plan_shape})"
        )

    @property
    def plan_shape(self) -> PlanShape:
        if self._initial is not None and self.plan.information == "default":
            return PlanShape.INITIAL_ROWS
        return self.plan.shape

    @property
    def start_version(self) -> int:
        return self.plan.start_version

    @property
    def end_version(self) -> int:
        return self.plan.end_version

    # ------------------------------------------------------------ public reads

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """Stream the change rows; memory is bounded by a few partitions plus
        the int64 hidden values of the interval's partitions."""
        for chunk in self._chunks():
            yield from self._format(chunk)

    def to_arrow(self) -> pa.Table:
        return pa.Table.from_batches(list(self.to_batches()), schema=self.schema)

    def to_pandas(self):
        return self.to_arrow().to_pandas()

    # ------------------------------------------------------------ planning of chunks

    def _chunks(self) -> Iterator[_Chunk]:
        info = self.plan.information
        if self._initial is not None:
            yield from self._initial_rows(self._initial)
            if info == "default":
                return  # snapshot(end) as inserts is the whole minimum delta
        if self.plan.shape is PlanShape.EMPTY:
            return
        if info == "append_only":
            yield from self._append_only(self._prune(self.plan.appended))
        elif info == "audit":
            for c in self.plan.commits:
                yield from self._min_delta(
                    self._prune(c.added), self._prune(c.removed), c.version,
                    version=c.version, timestamp_ms=c.timestamp,
                )
        else:
            yield from self._min_delta(
                self._prune(self.plan.added), self._prune(self.plan.removed), self.plan.start_version
            )

    def _prune(self, parts: Sequence[Partition]) -> list[Partition]:
        return prune(list(parts), self._table_schema, self._filter)

    def _filter_mask(self, data: pa.Table) -> np.ndarray | None:
        if self._filter is None:
            return None
        return np.asarray(evaluate_mask(data, self._filter).to_numpy(zero_copy_only=False), dtype=bool)

    def _rows_chunk(self, p: Partition, positions: np.ndarray, ids: np.ndarray, *, insert: bool, version=None, timestamp_ms=None) -> _Chunk | None:
        if len(positions) == 0:
            return None
        if len(positions) == p.num_records:
            data = pa.Table.from_batches(
                list(read_partition(self._storage, p, self._table_schema)), schema=self._data_schema
            )
        else:
            data = read_rows(self._storage, p, self._table_schema, positions)
        keep = self._filter_mask(data)
        if keep is not None:
            data, ids = data.filter(pa.array(keep)), ids[keep]
            if data.num_rows == 0:
                return None
        n = data.num_rows
        return _Chunk(data, _const(n, insert), _const(n, False), ids, version, timestamp_ms)

    # ------------------------------------------------------------ modes

    def _initial_rows(self, state: TableState) -> Iterator[_Chunk]:
        parts = self._prune(list(state.partitions.values()))
        for p in parts:
            rid, _ = read_hidden(self._storage, p)
            c = self._rows_chunk(
                p, np.arange(p.num_records), rid, insert=True,
                version=state.version if self.plan.information == "audit" else None,
                timestamp_ms=state.timestamp,
            )
            if c is not None:
                yield c

    def _append_only(self, parts: Sequence[Partition]) -> Iterator[_Chunk]:
        for p in parts:
            fresh = self._fresh_positions(p)
            c = self._rows_chunk(p, fresh, p.first_row_id + fresh, insert=True)
            if c is not None:
                yield c

    def _fresh_positions(self, p: Partition) -> np.ndarray:
        """Positions of rows whose stored ``_ct_row_id`` is null (inserted by
        the partition's own commit)."""
        n = p.num_records
        s = p.stats
        if hidden_values_only_inherited(p):
            return np.arange(n, dtype=np.int64)
        if s is not None and s.null_count.get(ROW_ID_FIELD_ID) == 0:
            return np.empty(0, dtype=np.int64)
        pf = open_parquet(self._storage, p)
        if ROW_ID_COLUMN not in pf.schema_arrow.names:
            return np.arange(n, dtype=np.int64)
        col = pf.read(columns=[ROW_ID_COLUMN]).column(0)
        return np.flatnonzero(np.asarray(pc.is_null(col).to_numpy(zero_copy_only=False), dtype=bool))

    def _hidden_all(self, parts: Sequence[Partition]) -> list[tuple[np.ndarray, np.ndarray]]:
        if len(parts) <= 1:
            return [read_hidden(self._storage, p) for p in parts]
        with ThreadPoolExecutor(max_workers=_READ_WORKERS) as pool:
            return list(pool.map(lambda p: read_hidden(self._storage, p), parts))

    def _min_delta(
        self,
        added: Sequence[Partition],
        removed: Sequence[Partition],
        a: int,
        *,
        version: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Iterator[_Chunk]:
        """The minimum delta between the state before version ``a`` and after
        the given net added/removed partitions."""
        kw = {"version": version, "timestamp_ms": timestamp_ms}
        # Phase 1: hidden columns only. Row versions only decide which added
        # rows were written in the interval; only row ids are kept after that
        # (memory here grows with the interval's rows, so nothing is held
        # longer than needed).
        a_hidden = self._hidden_all(added)
        a_rid = [rid for rid, _ in a_hidden]
        a_sel = [rv >= a for _, rv in a_hidden]
        del a_hidden
        r_rid = [rid for rid, _ in self._hidden_all(removed)]
        # Set membership is computed once over all partitions of a side (one
        # hash or lookup table), not once per partition.
        if removed:
            unchanged = np.concatenate([rid[~sel] for rid, sel in zip(a_rid, a_sel)] or [np.empty(0, np.int64)])
            r_sel = [~m for m in _isin_split(r_rid, unchanged)]
            del unchanged
        else:
            r_sel = []
        ins_ids = np.concatenate([rid[sel] for rid, sel in zip(a_rid, a_sel)] or [np.empty(0, np.int64)])
        del_ids = np.concatenate([rid[sel] for rid, sel in zip(r_rid, r_sel)] or [np.empty(0, np.int64)])
        # Ids on both sides, sorted (ids are unique on each side).
        pair_ids = np.sort(ins_ids[_isin(ins_ids, del_ids)]) if len(ins_ids) and len(del_ids) else np.empty(0, np.int64)
        del ins_ids, del_ids
        # Rows of each partition that belong to an update pair.
        if len(pair_ids):
            a_pair = [sel & m for sel, m in zip(a_sel, _isin_split(a_rid, pair_ids))]
            r_pair = [sel & m for sel, m in zip(r_sel, _isin_split(r_rid, pair_ids))]
        else:
            a_pair = r_pair = None
        # Phase 2: unpaired rows, partition by partition.
        for parts, rids, sels, pairs, insert in (
            (removed, r_rid, r_sel, r_pair, False),
            (added, a_rid, a_sel, a_pair, True),
        ):
            for i, (p, rid, sel) in enumerate(zip(parts, rids, sels)):
                lone = sel & ~pairs[i] if pairs is not None else sel
                pos = np.flatnonzero(lone)
                c = self._rows_chunk(p, pos, rid[pos], insert=insert, **kw)
                if c is not None:
                    yield c
        del a_sel, r_sel
        # Phase 3: update pairs in row-id buckets.
        if len(pair_ids):
            yield from self._pairs(added, a_rid, a_pair, removed, r_rid, r_pair, pair_ids, **kw)

    def _pairs(self, added, a_rid, a_pair, removed, r_rid, r_pair, pair_ids, *, version, timestamp_ms) -> Iterator[_Chunk]:
        parts = list(added) + list(removed)
        bytes_per_row = max(
            (p.size_bytes / p.num_records for p in parts if p.num_records), default=64
        ) * _DECODED_BYTES_PER_STORED_BYTE
        buckets = max(1, math.ceil(2 * len(pair_ids) * bytes_per_row / PAIR_MEMORY_BUDGET))
        edges = [pair_ids[min(len(pair_ids) - 1, (i * len(pair_ids)) // buckets)] for i in range(buckets)]
        edges.append(pair_ids[-1] + 1)
        reuse = self._column_reuse(added, a_rid, removed, r_rid, r_pair)
        for lo, hi in zip(edges[:-1], edges[1:]):
            new_pieces = self._read_pieces(added, a_rid, a_pair, lo, hi)
            old_pieces = self._read_pieces(removed, r_rid, r_pair, lo, hi, reuse=reuse, new_pieces=new_pieces)
            new, old = self._assemble(new_pieces), self._assemble(old_pieces)
            del new_pieces, old_pieces
            yield from self._emit_pairs(old, new, version, timestamp_ms)
            del new, old

    def _column_reuse(self, added, a_rid, removed, r_rid, r_pair) -> dict[int, tuple[int, set[str]]]:
        """Removed partitions whose copy-on-write successor among ``added``
        holds the same row ids in the same order, with the table columns
        whose values the two files share (:func:`same_columns`):
        ``{removed index: (added index, columns)}``. The old images of those
        columns are then taken from the new images, not decoded again."""
        by_shape: dict[tuple[int, int, int], int] = {}
        for j, rid in enumerate(a_rid):
            if len(rid):
                by_shape[(len(rid), int(rid[0]), int(rid[-1]))] = j
        out: dict[int, tuple[int, set[str]]] = {}
        for i, (rid, pair) in enumerate(zip(r_rid, r_pair)):
            if not len(rid) or not pair.any():
                continue
            j = by_shape.get((len(rid), int(rid[0]), int(rid[-1])))
            if j is None or not np.array_equal(rid, a_rid[j]):
                continue
            same = same_columns(self._storage, removed[i], added[j], self._table_schema)
            if same:
                out[i] = (j, same)
        return out

    def _read_pieces(self, parts, rids, pairs, lo, hi, *, reuse=None, new_pieces=None) -> dict[int, tuple[pa.Table, np.ndarray, np.ndarray]]:
        """Per partition index, the pair rows with ids in ``[lo, hi)``:
        ``(table columns, positions, row ids)``, in file order."""
        pieces: dict[int, tuple[pa.Table, np.ndarray, np.ndarray]] = {}
        for i, (p, rid, pair) in enumerate(zip(parts, rids, pairs)):
            pos = np.flatnonzero(pair & (rid >= lo) & (rid < hi))
            if not len(pos):
                continue
            match = reuse.get(i) if reuse else None
            if match is not None and match[0] in new_pieces and np.array_equal(new_pieces[match[0]][1], pos):
                # Same rows at the same positions in both files: columns the
                # files share come from the new image already read.
                new_t, same = new_pieces[match[0]][0], match[1]
                names = self._data_schema.names
                diff = [c for c in names if c not in same]
                old_t = read_rows(self._storage, p, self._table_schema, pos, columns=diff) if diff else None
                t = pa.Table.from_arrays(
                    [new_t.column(c) if c in same else old_t.column(c) for c in names], schema=self._data_schema
                )
            else:
                t = read_rows(self._storage, p, self._table_schema, pos)
            pieces[i] = (t, pos, rid[pos])
        return pieces

    def _assemble(self, pieces) -> tuple[pa.Table, np.ndarray]:
        """Concatenate the pieces of one side, sorted by row id."""
        if not pieces:
            return self._data_schema.empty_table(), np.empty(0, np.int64)
        tables = [t for t, _, _ in pieces.values()]
        all_ids = np.concatenate([ids for _, _, ids in pieces.values()])
        if len(all_ids) < 2 or bool(np.all(all_ids[1:] > all_ids[:-1])):
            # Already in id order (partitions and rows in id order, the
            # usual case): no reordering copy.
            return pa.concat_tables(tables), all_ids
        order = np.argsort(all_ids, kind="stable")
        return pa.concat_tables(tables).take(pa.array(order)), all_ids[order]

    def _emit_pairs(self, old_t, new_t, version, timestamp_ms) -> Iterator[_Chunk]:
        (old, old_ids), (new, new_ids) = old_t, new_t
        if len(old_ids) != len(new_ids) or not np.array_equal(old_ids, new_ids):
            raise AssertionError("change scan: update pairs do not align by row id")  # pragma: no cover
        n = len(old_ids)
        if n == 0:
            return
        changed = np.zeros(n, dtype=bool)
        for name in self._data_schema.names:
            changed |= _differs(old.column(name), new.column(name))
        f_old = self._filter_mask(old)
        f_new = self._filter_mask(new)
        f_old = changed if f_old is None else changed & f_old
        f_new = changed if f_new is None else changed & f_new
        both = f_old & f_new
        lone_old = f_old & ~f_new
        lone_new = f_new & ~f_old
        both_idx = np.flatnonzero(both)
        if len(both_idx):
            # DELETE (old image) then INSERT (new image), adjacent per row;
            # interleaved a slice at a time so only one output batch's worth
            # of rows is copied at once.
            old_new = pa.concat_tables([old, new])
            step = max(1, self._batch_rows // 2)
            for s in range(0, len(both_idx), step):
                idx = both_idx[s:s + step]
                take = np.empty(2 * len(idx), dtype=np.int64)
                take[0::2] = idx
                take[1::2] = idx + n
                data = old_new.take(pa.array(take))
                ins = np.zeros(2 * len(idx), dtype=bool)
                ins[1::2] = True
                yield _Chunk(data, ins, _const(2 * len(idx), True), np.repeat(old_ids[idx], 2), version, timestamp_ms)
        for mask, table, insert in ((lone_old, old, False), (lone_new, new, True)):
            sel = np.flatnonzero(mask)
            if len(sel):
                yield _Chunk(table.take(pa.array(sel)), _const(len(sel), insert), _const(len(sel), False), old_ids[sel], version, timestamp_ms)

    # ------------------------------------------------------------ output

    def _format(self, c: _Chunk) -> Iterator[pa.RecordBatch]:
        n = c.data.num_rows
        cols = list(c.data.columns)
        if self._changelog == "op":
            op = np.where(c.insert, np.where(c.update, OP_CORRECT_TO, OP_APPEND), np.where(c.update, OP_CORRECT_FROM, OP_RETRACT))
            cols.append(pa.array(op.astype(np.uint8), pa.uint8()))
        else:
            cols.append(_action_column(c.insert))
            cols.append(pa.array(c.update, pa.bool_()))
        cols.append(row_id_strings(c.row_id, self._seed))
        if self.plan.information == "audit":
            cols.append(pa.array(np.full(n, c.version, dtype=np.int64)))
            micros = pa.array(np.full(n, c.timestamp_ms * 1000, dtype=np.int64))
            cols.append(micros.cast(pa.timestamp("us", tz="UTC")))
        table = pa.Table.from_arrays(cols, schema=self.schema)
        # No combine_chunks(): to_batches() aligns the data columns' chunks
        # with the single-chunk metadata columns by zero-copy slicing, so a
        # partition read in several batches is not copied again.
        yield from table.to_batches(max_chunksize=self._batch_rows)


def _action_column(insert: np.ndarray) -> pa.Array:
    """``METADATA$ACTION``: 'INSERT' where ``insert`` holds, else 'DELETE'.

    A chunk is usually all one action (a partition's inserts or deletes):
    then the string buffer is built directly, without a per-row kernel.
    """
    n = len(insert)
    if n and (insert.all() or not insert.any()):
        word = b"INSERT" if insert[0] else b"DELETE"
        offsets = np.arange(0, len(word) * (n + 1), len(word), dtype=np.int32)
        return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(word * n)])
    return pc.if_else(pa.array(insert), "INSERT", "DELETE")


def _isin(values: np.ndarray, value_set: np.ndarray) -> np.ndarray:
    """``values[i] in value_set`` for int64 row ids.

    Row ids are dense (they count rows from 0), so when the set spans a range
    not much larger than the inputs a boolean lookup table over that range
    (numpy's ``kind="table"``) answers in linear time without hashing;
    otherwise Arrow's hash-based ``is_in``.
    """
    if len(value_set) == 0 or len(values) == 0:
        return np.zeros(len(values), dtype=bool)
    span = int(value_set.max()) - int(value_set.min()) + 1
    if span <= 8 * (len(values) + len(value_set)):
        return np.isin(values, value_set, kind="table")
    res = pc.is_in(pa.array(values), value_set=pa.array(value_set))
    return np.asarray(res.to_numpy(zero_copy_only=False), dtype=bool)


def _isin_split(rids: Sequence[np.ndarray], value_set: np.ndarray) -> list[np.ndarray]:
    """Per partition, which of its row ids are in ``value_set`` (one lookup for all)."""
    if not rids:
        return []
    mask = _isin(np.concatenate(rids), value_set)
    return np.split(mask, np.cumsum([len(r) for r in rids[:-1]]))
