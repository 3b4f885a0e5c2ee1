"""How well a version is clustered, from partition statistics alone (SPEC
§Clustering): key ranges, overlap and clustering depth, as Snowflake's
``SYSTEM$CLUSTERING_INFORMATION`` reports them.

The key range of a partition is the closed interval of its first clustering
key's bounds (:func:`key_ranges`). Two partitions *overlap* when their
ranges share more than one point (:func:`overlaps`); the *depth* of a point
is the number of ranges that contain it. Bounds are decoded Python values
(ints, floats, strings, dates, datetimes, decimals, booleans), so every
function works for any orderable column type; nothing is weighted by width.
"""

from __future__ import annotations

import bisect
import collections
import heapq
from dataclasses import dataclass, field
from typing import Any, Sequence

from ctfile.format.actions import Partition
from ctfile.format.errors import InvalidArgumentError
from ctfile.format.schema import Schema
from ctfile.format.stats import STRING_PREFIX_LENGTH
from ctfile.reader.pruning import column_bounds


@dataclass(frozen=True)
class KeyRange:
    """A partition and the closed range ``[low, high]`` of its first key."""

    partition: Partition
    low: Any
    high: Any

    @property
    def is_point(self) -> bool:
        """Whether the key has one value in the partition (``low == high``)."""
        return self.low == self.high


def key_ranges(partitions: Sequence[Partition], schema: Schema, key: str) -> tuple[list[KeyRange], list[Partition]]:
    """The key ranges of ``partitions`` by column ``key``, sorted by (low,
    high), and the partitions without one (no statistics or no bounds for it).

    String bounds are cut to their first ``STRING_PREFIX_LENGTH - 1`` code
    points (SPEC §Clustering): a maximum rounded up at the last code point
    of the statistics prefix then equals the prefix of its values, so
    values sharing that prefix make ranges that touch, not overlap.
    """
    f = schema.field(key)
    cut = STRING_PREFIX_LENGTH - 1 if f.type == "string" else None
    ranged: list[KeyRange] = []
    unranged: list[Partition] = []
    for p in partitions:
        b = column_bounds(p, key, f.id, f.type)
        if b is None:
            unranged.append(p)
        elif cut is not None:
            ranged.append(KeyRange(p, b[0][:cut], b[1][:cut]))
        else:
            ranged.append(KeyRange(p, b[0], b[1]))
    ranged.sort(key=lambda r: (r.low, r.high))
    return ranged, unranged


def overlaps(a: KeyRange, b: KeyRange) -> bool:
    """Whether two key ranges share more than one point (SPEC §Clustering).

    >>> P = None
    >>> overlaps(KeyRange(P, 0, 10), KeyRange(P, 5, 20)), overlaps(KeyRange(P, 0, 10), KeyRange(P, 10, 20))
    (True, False)
    """
    return a.low < b.high and b.low < a.high


def piece_depths(ranges: Sequence[tuple[Any, Any]]) -> tuple[list[Any], list[int]]:
    """The pieces of the key range and their depths: ``points`` are the
    distinct bounds p_0 < ... < p_k; piece ``2i`` is the point p_i and piece
    ``2i + 1`` the gap (p_i, p_i+1); ``depths[j]`` is the number of closed
    ranges containing piece ``j`` (0 for a gap between disjoint ranges).

    >>> piece_depths([(0, 10), (5, 15)])
    ([0, 5, 10, 15], [1, 1, 2, 2, 2, 1, 1])
    """
    lows = sorted(lo for lo, _ in ranges)
    highs = sorted(hi for _, hi in ranges)
    points = sorted(set(lows) | set(highs))
    depths: list[int] = []
    for i, p in enumerate(points):
        depths.append(bisect.bisect_right(lows, p) - bisect.bisect_left(highs, p))  # low <= p <= high
        if i + 1 < len(points):
            # No bound lies inside the gap: a range contains it iff low <= p < high.
            depths.append(bisect.bisect_right(lows, p) - bisect.bisect_right(highs, p))
    return points, depths


def clustering_depth(ranges: Sequence[tuple[Any, Any]]) -> float | None:
    """The average depth of ``ranges`` (closed ``(low, high)`` intervals of
    one ordered type), as Snowflake's ``average_depth``: the mean depth of
    the pieces of the key range (:func:`piece_depths`) that some range
    contains. 1.0 when no two ranges share a point; ``n`` when all ``n``
    ranges are equal; None for no ranges (SPEC §Clustering).

    Examples
    --------
    >>> clustering_depth([(0, 9), (10, 19), (20, 29)])
    1.0
    >>> clustering_depth([(0, 10), (0, 10), (0, 10)])
    3.0
    >>> clustering_depth([(0, 10), (5, 15)])  # pieces 0,(0,5),5,(5,10),10,(10,15),15: depths 1,1,2,2,2,1,1
    1.4285714285714286
    >>> clustering_depth([]) is None
    True
    """
    try:
        return _average_depth(_pairs(ranges))
    except TypeError:  # sorting the bounds: some do not compare
        raise InvalidArgumentError(f"the bounds of the ranges must be of one ordered type, found {ranges!r:.80}") from None


def _average_depth(pairs: Sequence[tuple[Any, Any]]) -> float | None:
    """:func:`clustering_depth` of pairs known to be ranges (from statistics)."""
    if not pairs:
        return None
    depths = [d for d in piece_depths(pairs)[1] if d]
    return sum(depths) / len(depths)


def _pairs(ranges: Any) -> list[tuple[Any, Any]]:
    """``ranges`` as a list of ``(low, high)`` pairs with ``low <= high``;
    :class:`InvalidArgumentError` otherwise."""
    if isinstance(ranges, (str, bytes)) or not isinstance(ranges, Sequence):
        raise InvalidArgumentError(f"ranges must be a sequence of (low, high) pairs, found {ranges!r:.80}")
    out = []
    for r in ranges:
        if isinstance(r, (str, bytes)) or not isinstance(r, Sequence) or len(r) != 2:
            raise InvalidArgumentError(f"each range must be a (low, high) pair, found {r!r:.80}")
        try:
            ordered = r[0] <= r[1]
        except TypeError:
            ordered = False
        if ordered is not True:
            raise InvalidArgumentError(f"each range must be a (low, high) pair with low <= high, found {r!r:.80}")
        out.append((r[0], r[1]))
    return out


def max_depth(ranges: Sequence[tuple[Any, Any]]) -> int:
    """The largest number of ``ranges`` that contain one point (0 for none).

    >>> max_depth([(0, 10), (5, 15), (12, 13)])
    2
    """
    return max(piece_depths(ranges)[1], default=0)


def stretches(ranges: Sequence[tuple[Any, Any]]) -> list[range]:
    """Cut ``ranges`` (sorted by (low, high)) into *stretches*: maximal runs
    of consecutive ranges each of which overlaps (:func:`overlaps`) the
    union of those before it in the stretch. Ranges of different stretches
    never overlap, so depth can be bounded one stretch at a time. Returned
    as index ranges into ``ranges``.

    >>> stretches([(0, 10), (5, 15), (15, 20), (16, 17)])
    [range(0, 2), range(2, 4)]
    """
    out: list[range] = []
    start, high = 0, None
    for i, (lo, hi) in enumerate(ranges):
        if i and not (lo < high and ranges[start][0] < hi):
            out.append(range(start, i))
            start, high = i, hi
        else:
            high = hi if high is None else max(high, hi)
    if ranges:
        out.append(range(start, len(ranges)))
    return out


def sorted_runs(ranges: Sequence[tuple[Any, Any]], weights: Sequence[int] | None = None) -> list[list[int]]:
    """Split ``ranges`` (sorted by (low, high)) into the fewest *runs*: sets
    of ranges no two of which overlap (:func:`overlaps`), as lists of
    indices into ``ranges`` (SPEC §Clustering, automatic compaction).

    Interval partitioning: each range joins a run whose last range ends at
    or before its low, the heaviest such run by ``weights`` (rows; default
    1 each), so that a long sorted run of partitions stays one run and the
    ranges that cut across it make light runs of their own; a range that no
    run can take starts a new one. Whichever run takes it, this uses as many
    runs as the largest number of ranges that pairwise overlap (on a line,
    ranges that pairwise overlap share a point): :func:`max_depth` when no
    two ranges touch (share only a bound). O(n log n).

    >>> sorted_runs([(0, 1), (0, 9), (2, 3), (4, 5), (10, 12)])
    [[0, 2, 3, 4], [1]]
    """
    runs: list[list[int]] = []
    totals: list[int] = []
    busy: list[tuple[Any, int]] = []  # heap of (end of the run's last range, run)
    free: list[tuple[int, int]] = []  # heap of (-total weight, run): runs ending at or before the current low
    for i, (lo, hi) in enumerate(ranges):
        while busy and not busy[0][0] > lo:
            run = heapq.heappop(busy)[1]
            heapq.heappush(free, (-totals[run], run))
        if free:
            run = heapq.heappop(free)[1]
        else:
            run = len(runs)
            runs.append([])
            totals.append(0)
        runs[run].append(i)
        totals[run] += 1 if weights is None else weights[i]
        heapq.heappush(busy, (hi, run))
    return runs


def partition_depths(ranges: Sequence[tuple[Any, Any]]) -> list[int]:
    """For each range, the largest depth of a point in it (itself included),
    Snowflake's per-partition depth. O(k log k + n) with a sparse table of
    range maxima over the k pieces.

    >>> partition_depths([(0, 10), (5, 15), (20, 30)])
    [2, 2, 1]
    """
    if not ranges:
        return []
    points, depths = piece_depths(ranges)
    index = {p: 2 * i for i, p in enumerate(points)}
    table = [depths]
    while 2 ** len(table) <= len(depths):
        prev, half = table[-1], 2 ** (len(table) - 1)
        table.append([max(prev[i], prev[i + half]) for i in range(len(prev) - half)])
    out = []
    for lo, hi in ranges:
        a, b = index[lo], index[hi]
        level = (b - a + 1).bit_length() - 1
        out.append(max(table[level][a], table[level][b - 2**level + 1]))
    return out


@dataclass(frozen=True)
class ClusteringInfo:
    """How clustered a version is by ``keys`` (SPEC §Clustering), after
    Snowflake's ``SYSTEM$CLUSTERING_INFORMATION``.

    ``partitions`` counts the live partitions, ``unranged`` those without a
    key range (not in the other figures), ``constant`` those whose range is
    one value; ``average_overlaps`` is the mean number of other partitions a
    partition overlaps, ``average_depth`` the :func:`clustering_depth`
    (None without ranges), ``max_depth`` the deepest point, and
    ``depth_histogram`` maps a per-partition depth to how many partitions
    have it.
    """

    keys: tuple[str, ...]
    partitions: int
    unranged: int
    constant: int
    average_overlaps: float
    average_depth: float | None
    max_depth: int
    depth_histogram: dict[int, int] = field(default_factory=dict)

    @property
    def column(self) -> str:
        """The column the ranges are of: the first key."""
        return self.keys[0]


def clustering_info(partitions: Sequence[Partition], schema: Schema, keys: Sequence[str]) -> ClusteringInfo:
    """The :class:`ClusteringInfo` of ``partitions`` by ``keys`` (the ranges
    are those of the first key)."""
    ranged, unranged = key_ranges(partitions, schema, keys[0])
    pairs = [(r.low, r.high) for r in ranged]
    n = len(ranged)
    depths = partition_depths(pairs)
    return ClusteringInfo(
        keys=tuple(keys),
        partitions=len(partitions),
        unranged=len(unranged),
        constant=sum(1 for r in ranged if r.is_point),
        average_overlaps=_total_overlaps(ranged) / n if n else 0.0,
        average_depth=_average_depth(pairs),
        max_depth=max(depths, default=0),
        depth_histogram=dict(sorted(collections.Counter(depths).items())),
    )


def _total_overlaps(ranged: Sequence[KeyRange]) -> int:
    """Over the ranges of ``ranged`` (sorted by low), the sum of the number
    of other ranges each overlaps (see :class:`ClusteringInfo`,
    ``average_overlaps``)."""
    lows = [r.low for r in ranged]
    highs = sorted(r.high for r in ranged)
    points = collections.Counter(r.low for r in ranged if r.is_point)
    n = len(ranged)
    total = 0
    for r in ranged:
        # Partitions that do not overlap r end at or before its low, or
        # start at or after its high; a one-value range equal to r's is both.
        apart = bisect.bisect_right(highs, r.low) + n - bisect.bisect_left(lows, r.high)
        if r.is_point:
            total += n - apart + points[r.low]
        else:
            total += n - apart - 1
    return total
