"""ctfile.log.replay: folding entries into table states, checkpoint bodies."""

from __future__ import annotations

import pytest

from ctfile.format.actions import (
    AddPartition,
    CommitInfo,
    Metadata,
    Partition,
    Protocol,
    RemovePartition,
    SetTransaction,
)
from ctfile.format.errors import CorruptLogError
from ctfile.format.schema import Field, Schema
from ctfile.log.checkpoint_state import checkpoint_actions, state_from_checkpoint
from ctfile.log.replay import apply_entry

MD = Metadata("tid", Schema((Field(1, "a", "long"),)), 1)
V0 = [CommitInfo(10, "CREATE TABLE"), Protocol(), MD]


def _part(path, first, n, version):
    return Partition(path, 100, n, first, version, 0)


def test_replay_tracks_partitions_counter_and_txns():
    s0 = apply_entry(None, 0, V0, where="v0")
    assert (s0.version, s0.timestamp, s0.next_row_id, s0.partitions) == (0, 10, 0, {})
    p1, p2 = _part("data/a", 0, 5, 1), _part("data/b", 5, 3, 1)
    s1 = apply_entry(s0, 1, [CommitInfo(11, "INSERT"), AddPartition(p1), AddPartition(p2),
                             SetTransaction("app", 3, 11)], where="v1")
    assert s1.next_row_id == 8 and set(s1.partitions) == {"data/a", "data/b"}
    assert s1.app_transactions["app"].version == 3
    assert s1.num_records == 8
    s2 = apply_entry(s1, 2, [CommitInfo(12, "DELETE"), RemovePartition(p1, 12)], where="v2")
    assert set(s2.partitions) == {"data/b"}
    assert s2.next_row_id == 8  # the counter never goes back
    assert set(s1.partitions) == {"data/a", "data/b"}  # states are not mutated


@pytest.mark.parametrize(
    "state_version, version, actions, match",
    [
        (None, 1, V0, "must start at version 0"),
        (0, 2, [CommitInfo(11, "X")], "expected version 1, found 2"),
        (0, 1, [CommitInfo(10, "X")], "not after version 0"),
        (0, 1, [Protocol()], "no commitInfo"),
        (0, 1, [CommitInfo(11, "X"), RemovePartition(_part("data/zz", 0, 1, 0), 11)], "not live"),
        (None, 0, [CommitInfo(10, "CREATE TABLE"), Protocol()], "no protocol/metadata"),
    ],
)
def test_replay_errors(state_version, version, actions, match):
    state = None if state_version is None else apply_entry(None, 0, V0, where="v0")
    with pytest.raises(CorruptLogError, match=match):
        apply_entry(state, version, actions, where="somewhere")


def test_add_of_live_partition_is_corrupt():
    s0 = apply_entry(None, 0, V0, where="v0")
    p = _part("data/a", 0, 1, 1)
    s1 = apply_entry(s0, 1, [CommitInfo(11, "I"), AddPartition(p)], where="v1")
    with pytest.raises(CorruptLogError, match="already live"):
        apply_entry(s1, 2, [CommitInfo(12, "I"), AddPartition(_part("data/a", 1, 1, 2))], where="v2")


def test_checkpoint_actions_round_trip():
    s0 = apply_entry(None, 0, V0, where="v0")
    s1 = apply_entry(s0, 1, [CommitInfo(11, "I"), AddPartition(_part("data/a", 0, 4, 1)),
                             SetTransaction("app", 1, 11)], where="v1")
    acts = checkpoint_actions(s1)
    back = state_from_checkpoint(acts, where="cp")
    assert back == s1
    assert (back.version, back.timestamp, back.metadata, back.protocol) == (1, 11, MD, Protocol())
    with pytest.raises(CorruptLogError, match="checkpoint lacks"):
        state_from_checkpoint(acts[1:], where="cp")
    with pytest.raises(CorruptLogError, match="says 1 partitions, holds 0"):
        state_from_checkpoint([a for a in acts if not isinstance(a, AddPartition)], where="cp")
