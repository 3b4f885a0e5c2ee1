"""Partition statistics and their two decoders (ctfile.format.partition_stats)."""

from __future__ import annotations

import pytest

from ctfile.format import actions, codec
from ctfile.format.errors import CorruptLogError
from ctfile.format.partition_stats import (
    PartitionStats,
    fast_stats,
    stats_from_json,
    stats_from_text,
    stats_to_json,
    stats_to_text,
)

STATS = PartitionStats(3, {1: -5, 2: "a"}, {1: 9, 2: "z"}, {1: 0, 2: 1}, {3: 0})


def test_the_old_import_paths_name_the_same_objects():
    assert actions.PartitionStats is PartitionStats
    assert codec.stats_from_text is stats_from_text and codec.stats_to_text is stats_to_text
    assert codec.stats_from_json is stats_from_json and codec.stats_to_json is stats_to_json


def test_both_decoders_read_what_is_written():
    obj = stats_to_json(STATS)
    assert fast_stats(obj, 3) == STATS
    assert stats_from_json(obj, "w") == STATS
    assert stats_from_text(stats_to_text(STATS), "cp", num_records=3, path="data/a.parquet") == STATS


@pytest.mark.parametrize("obj, message", [
    ({"numRecords": 3, "nullCount": {"1": -1}}, r"w.nullCount: count for field 1 must be a long >= 0, found -1"),
    ({"numRecords": 3, "nanCount": {"1": True}}, r"w.nanCount: count for field 1 must be a long >= 0, found True"),
    ({"numRecords": 3, "minValues": {"1": 2**63}}, r"bound for field 1 is 9223372036854775808"),
    ({"numRecords": 3, "maxValues": {"x": 1}}, r"w.maxValues: keys must be field ids"),
    ({"numRecords": -1}, r"w: field 'numRecords' must be >= 0, found -1"),
    ([1], r"w: stats must be an object"),
])
def test_the_fast_path_declines_what_the_checked_path_refuses_naming_the_field(obj, message):
    assert fast_stats(obj, 3) is None
    with pytest.raises(CorruptLogError, match=message):
        stats_from_json(obj, "w")


def test_text_whose_count_differs_from_the_partitions_is_refused():
    with pytest.raises(CorruptLogError, match=r"cp stats of data/a.parquet: stats.numRecords 3 != numRecords 4"):
        stats_from_text(stats_to_text(STATS), "cp", num_records=4, path="data/a.parquet")
