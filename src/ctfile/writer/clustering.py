"""Clustered writes: rows sorted by the clustering keys, partitions cut at key
boundaries (SPEC §Clustering, **Writes**).

A table whose ``ctfile.clusterBy`` names keys gets a :class:`ClusterOrder`
(:meth:`ClusterOrder.of`). Writers use it three ways:

* :meth:`ClusterOrder.chunks` turns the batches of an INSERT into the
  partitions to write: sorted into the clustering order in windows (the whole
  input when it is in memory already, about :data:`SORT_WINDOW_BYTES` of a
  stream otherwise; the short tail of a window is carried into the next so
  that files come out full), then cut by :meth:`ClusterOrder.cut_ends`;
* :meth:`ClusterOrder.sort` orders the rows of one copy-on-write rewrite;
* the recluster of COMPACT (:mod:`ctfile.writer.recluster`) sorts groups of
  partitions with both.

Sorting is Arrow's stable ``sort_indices`` with nulls at the end (NaN sorts
after numbers and before nulls), so rows equal on every key keep their order
and a partition already in order comes back unchanged, without a copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.properties import cluster_keys
from ctfile.format.schema import Schema

#: How much of a streamed input is sorted at once (Arrow bytes in memory).
SORT_WINDOW_BYTES = 512 << 20
#: A cut moves forward by at most ``target // CUT_SLACK`` rows to reach a
#: change of the first key (SPEC §Clustering: a quarter).
CUT_SLACK = 4


@dataclass(frozen=True)
class ClusterOrder:
    """The clustering order of a table: ascending by each of ``keys`` in
    turn, nulls last, stable.

    Examples
    --------
    >>> order = ClusterOrder(("k",))
    >>> order.sort(pa.table({"k": [3, None, 1, 2], "v": list("abcd")})).to_pydict()
    {'k': [1, 2, 3, None], 'v': ['c', 'd', 'a', 'b']}
    >>> order.cut_ends(pa.table({"k": [1, 1, 1, 1, 1, 2, 2, 2, 2, 3]}), 4)  # cuts at 4 and 8 move by up to 1
    [5, 9, 10]
    """

    keys: tuple[str, ...]

    @classmethod
    def of(cls, properties: Mapping[str, str], schema: Schema) -> "ClusterOrder | None":
        """The order of a table with these properties and schema; None
        without clustering keys (or with keys the schema lacks)."""
        keys = cluster_keys(properties, schema)
        return cls(keys) if keys else None

    def sort_indices(self, table: pa.Table) -> np.ndarray | None:
        """The stable permutation that sorts ``table``; None when it is
        already in order.

        One numeric key without nulls (the common ``id``) is sorted by
        NumPy's stable sort, a radix sort for integers that is about twice
        as fast as Arrow's comparison sort here, after a linear check that
        skips already ordered input (ids that arrive ascending); NumPy puts
        NaN last, as Arrow does. Anything else goes to Arrow's
        ``sort_indices``."""
        values = _plain_numbers(table.column(self.keys[0])) if len(self.keys) == 1 else None
        if values is not None:
            # NaN compares false with everything, so ordered input is only
            # recognised without one (NumPy's sort puts NaN last).
            nan = values.dtype.kind == "f" and bool(np.isnan(values).any())
            if not nan and (len(values) < 2 or not (values[1:] < values[:-1]).any()):
                return None
            return np.argsort(values, kind="stable")
        idx = pc.sort_indices(
            table.select(list(self.keys)),
            sort_keys=[(k, "ascending", "at_end") for k in self.keys],
        ).to_numpy()
        if np.array_equal(idx, np.arange(len(idx))):
            return None
        return idx

    def sort(self, table: pa.Table) -> pa.Table:
        """``table`` in the clustering order (the same object when it is already)."""
        idx = self.sort_indices(table)
        return table if idx is None else table.take(pa.array(idx))

    def cut_ends(self, table: pa.Table, target_rows: int) -> list[int]:
        """The end positions of the partitions to cut a sorted ``table`` into:
        every ``target_rows`` rows, each cut moved forward to where the first
        key's value changes when that is at most ``target_rows //
        CUT_SLACK`` rows further (SPEC §Clustering)."""
        first = table.column(self.keys[0])
        n, ends, pos = table.num_rows, [], 0
        slack = target_rows // CUT_SLACK
        while n - pos > target_rows:
            cut = pos + target_rows
            if slack:
                cut = _next_change(first, cut, slack)
            ends.append(cut)
            pos = cut
        if n > pos or not ends:
            ends.append(n)
        return ends

    def chunks(
        self, batches: Iterable[pa.RecordBatch], target_rows: int, *, window_bytes: int | None = SORT_WINDOW_BYTES
    ) -> Iterator[list[pa.RecordBatch]]:
        """The partitions (lists of batches) of a clustered write of
        ``batches``: sorted in windows of ``window_bytes`` (None: all at
        once), cut by :meth:`cut_ends`; the last partition of a window, when
        short, is carried into the next window."""
        buffer: list[pa.RecordBatch] = []
        size = 0
        for b in batches:
            if not b.num_rows:
                continue
            buffer.append(b)
            size += b.nbytes
            if window_bytes is not None and size >= window_bytes:
                tail = yield from self._emit(buffer, target_rows, keep_tail=True)
                buffer, size = tail, sum(t.nbytes for t in tail)
        if buffer:
            yield from self._emit(buffer, target_rows, keep_tail=False)

    def _emit(self, buffer: list[pa.RecordBatch], target_rows: int, *, keep_tail: bool):
        """Sort ``buffer`` and yield its partitions. Only the key column is
        gathered whole (to find the cuts); each partition's rows are
        gathered when it is yielded, so that gathering the next overlaps
        the encoding of the last on the writer's threads, and the window is
        never held twice (a sorted copy beside the input)."""
        table = pa.Table.from_batches(buffer)
        idx = self.sort_indices(table)
        keys = table.select([self.keys[0]]) if idx is None else table.select([self.keys[0]]).take(idx)
        ends = self.cut_ends(keys, target_rows)
        start = 0
        for i, end in enumerate(ends):
            piece = table.slice(start, end - start) if idx is None else table.take(idx[start:end])
            if keep_tail and i == len(ends) - 1 and end - start < target_rows:
                return piece.to_batches()
            yield piece.to_batches()
            start = end
        return []


def _plain_numbers(column: pa.ChunkedArray) -> np.ndarray | None:
    """``column`` as a NumPy array when it is of integer, floating or
    temporal type without nulls (its values ordered as NumPy orders them);
    None otherwise.

    >>> _plain_numbers(pa.chunked_array([[3, 1]])), _plain_numbers(pa.chunked_array([["a"]]))
    (array([3, 1]), None)
    """
    t = column.type
    if column.null_count or not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t)):
        return None
    if pa.types.is_temporal(t):
        column = column.cast(pa.int64() if t.bit_width == 64 else pa.int32())
    return column.to_numpy()


def _next_change(first: pa.ChunkedArray, cut: int, slack: int) -> int:
    """``cut``, or the first position in ``(cut, cut + slack]`` where the
    value differs from the one at ``cut - 1`` (a null after a value, or a
    NaN, counts as a change); ``cut`` when there is none.

    >>> _next_change(pa.chunked_array([[1, 1, 1, 2]]), 1, 5), _next_change(pa.chunked_array([[1, 1, 1, 1]]), 1, 5)
    (3, 1)
    """
    window = first.slice(cut - 1, slack + 2)
    ref = window[0]
    if not ref.is_valid:
        return cut  # nulls sort last: a run of nulls has no change after it
    changed = pc.or_kleene(pc.not_equal(window, ref), pc.is_null(window))
    hit = pc.index(changed, True).as_py()
    return cut if hit < 1 else cut - 1 + hit
