"""Clustering information as ``ctfile show`` and ``ctfile compact`` report it
(SPEC §Clustering): a :class:`ClusteringReport` gathered from
``Snapshot.clustering_info`` (a :class:`ctfile.ClusteringInfo`), rendered as
JSON with the field names of Snowflake's ``SYSTEM$CLUSTERING_INFORMATION``
or as text lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import ctfile

#: Snowflake's histogram has one bucket per depth up to this; above it,
#: buckets double in width (32, 64, ...).
EXACT_DEPTHS = 16


def parse_columns(text: str) -> tuple[str, ...]:
    """``--cluster-by COLS``: comma-separated column names (spaces around a
    name ignored). Whether they name columns of a type with bounds is
    checked against the version's schema by ``Snapshot.clustering_info``.

    >>> parse_columns("region, id")
    ('region', 'id')
    """
    return tuple(c.strip() for c in text.split(","))


def depth_histogram(histogram: Mapping[int, int]) -> dict[str, int]:
    """Snowflake's ``partition_depth_histogram`` of a per-partition depth
    histogram (depth -> partitions): keys are depths as five digits, one
    bucket per depth 0 to 16 (always listed), then buckets 32, 64, ...
    counting the depths above the previous bucket up to theirs (listed up to
    the deepest partition's).

    >>> h = depth_histogram({1: 3, 2: 1, 17: 1, 40: 2})
    >>> h["00001"], h["00002"], h["00016"], h["00032"], h["00064"], len(h)
    (3, 1, 0, 1, 2, 19)
    """
    buckets = {f"{d:05d}": 0 for d in range(EXACT_DEPTHS + 1)}
    top = max(histogram, default=0)
    bound = 2 * EXACT_DEPTHS
    while bound < 2 * top:
        buckets[f"{bound:05d}"] = 0
        bound *= 2
    for depth, n in histogram.items():
        bucket = depth if depth <= EXACT_DEPTHS else 1 << (depth - 1).bit_length()
        buckets[f"{bucket:05d}"] += n
    return buckets


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


@dataclass(frozen=True)
class ClusteringReport:
    """How clustered one version is: ``info`` by the version's clustering keys
    or by columns given on the command line (``by_table_keys`` tells which)."""

    version: int
    info: ctfile.ClusteringInfo
    by_table_keys: bool

    @classmethod
    def of(cls, snap: ctfile.Snapshot, *, keys: Sequence[str] | None = None) -> "ClusteringReport | None":
        """The report of ``snap`` by ``keys`` (default: its clustering keys);
        None when no keys are given and it has none.

        Raises
        ------
        InvalidArgumentError
            ``keys`` names no column, or a column of a type without bounds.
        """
        info = snap.clustering_info(keys=keys)
        if info is None:
            return None
        return cls(snap.version, info, by_table_keys=info.keys == snap.cluster_keys)

    def as_json(self) -> dict:
        i = self.info
        return {
            "cluster_by_keys": list(i.keys),
            "cluster_by_table_keys": self.by_table_keys,
            "key_range_column": i.column,
            "total_partition_count": i.partitions,
            "total_constant_partition_count": i.constant,
            "total_unranged_partition_count": i.unranged,
            "average_overlaps": i.average_overlaps,
            "average_depth": i.average_depth,
            "max_depth": i.max_depth,
            "partition_depth_histogram": depth_histogram(i.depth_histogram),
        }

    def title(self) -> str:
        source = "ctfile.clusterBy" if self.by_table_keys else "--cluster-by"
        return f"clustering by {', '.join(self.info.keys)} ({source})"

    def depth_text(self) -> str:
        """The figures ``compact`` compares: depths and partitions."""
        i = self.info
        return f"average depth {_fmt(i.average_depth)}, max depth {i.max_depth}, {i.partitions} partitions"

    def lines(self) -> list[str]:
        """The report as text, for ``show``."""
        i = self.info
        histogram = ", ".join(f"{n} at depth {d}" for d, n in i.depth_histogram.items()) or "none"
        return [
            f"{self.title()}: {self.depth_text()} ({i.unranged} without a key range of {i.column}, "
            f"{i.constant} constant), average overlaps {_fmt(i.average_overlaps)}",
            f"partitions by depth: {histogram}",
        ]


def change_text(before: ClusteringReport, after: ClusteringReport) -> str:
    """``before`` -> ``after`` for ``compact``, one line.

    The reports are of the same keys (a COMPACT changes no property).
    """
    b, a = before.info, after.info
    return (
        f"{after.title()}: average depth {_fmt(b.average_depth)} -> {_fmt(a.average_depth)}, "
        f"max depth {b.max_depth} -> {a.max_depth}, partitions {b.partitions} -> {a.partitions}"
    )
