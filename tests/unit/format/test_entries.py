"""ctfile.format.entries: self-checking commit entries (SPEC §Log entries)."""

from __future__ import annotations

import json
import re

import pytest
import xxhash

from ctfile.format.actions import AddPartition, CommitInfo, Metadata, Partition, Protocol, RemovePartition, SetTransaction
from ctfile.format.codec import action_to_json, encode_actions
from ctfile.format.entries import (
    checksum_without_line,
    decode_entry,
    duplicate_paths,
    encode_entry,
    encode_entry_objects,
    validate_commit_entry,
)
from ctfile.format.errors import CorruptLogError
from ctfile.format.schema import Field, Schema

WHERE = "mem://t/_ct_log/00000000000000000003.json"
INFO = CommitInfo(1_700_000_000_000, "UPDATE", {"predicate": "(id == 1)"}, 2, txn_id="ab" * 16)


def _part(i: int, version: int = 3) -> Partition:
    return Partition(f"data/p{i}.parquet", 900 + i, 2, 2 * i, version, 5, "cd" * 16)


def _update_entry() -> list:
    """An UPDATE's entry: commitInfo, two removes, two adds."""
    return [
        INFO,
        RemovePartition(_part(0, 1), 7),
        RemovePartition(_part(1, 1), 7),
        AddPartition(_part(2)),
        AddPartition(_part(3)),
    ]


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")[:-1]


def _join(lines: list[bytes]) -> bytes:
    return b"".join(line + b"\n" for line in lines)


# ---------------------------------------------------------------- writing


def test_encode_entry_writes_commit_info_first_with_count_and_checksum():
    actions = _update_entry()
    data = encode_entry(actions[1:] + actions[:1])  # commitInfo given last: written first
    lines = _lines(data)
    info = json.loads(lines[0])["commitInfo"]
    assert info["numActions"] == 5
    assert info["actionsChecksum"] == xxhash.xxh3_128_hexdigest(_join(lines[1:]))
    assert _join(lines[1:]) == encode_actions(actions[1:])  # the other lines, unchanged and in order
    decoded = decode_entry(data, version=3, where=WHERE)
    assert decoded[1:] == actions[1:]
    assert decoded[0].num_actions == 5 and decoded[0].actions_checksum == info["actionsChecksum"]


def test_encode_entry_replaces_stale_fields_of_a_decoded_commit_info():
    actions = _update_entry()
    decoded = decode_entry(encode_entry(actions), version=3, where=WHERE)
    shorter = encode_entry(decoded[:3])  # re-encoded with two actions fewer
    assert decode_entry(shorter, version=3, where=WHERE)[0].num_actions == 3


def test_encode_entry_needs_exactly_one_commit_info():
    with pytest.raises(ValueError, match="exactly one commitInfo, 0 given"):
        encode_entry([AddPartition(_part(1))])
    with pytest.raises(ValueError, match="exactly one commitInfo, 2 given"):
        encode_entry([INFO, INFO])


# ---------------------------------------------------------------- damage is caught


def _torn_tail(lines):
    return lines[:-1]


def _dropped_middle(lines):
    return lines[:2] + lines[3:]


def _duplicated(lines):
    return lines + lines[-1:]


def _flipped_digit(lines):
    # firstRowId 6 -> 7 in the add of p3: still valid JSON, still a valid add
    assert b'"firstRowId":6,' in lines[4]
    return lines[:4] + [lines[4].replace(b'"firstRowId":6,', b'"firstRowId":7,')]


def _reordered(lines):
    return [lines[0], lines[3], lines[4], lines[1], lines[2]]


def _blank_line(lines):
    return lines[:3] + [b""] + lines[3:]


DAMAGE = {
    "torn tail": (_torn_tail, "entry holds 4 actions, its commitInfo records 5 (numActions): torn or edited"),
    "dropped line": (_dropped_middle, "entry holds 4 actions, its commitInfo records 5"),
    "duplicated line": (_duplicated, "entry holds 6 actions, its commitInfo records 5"),
    "flipped digit": (_flipped_digit, "(actionsChecksum): damaged or edited"),
    "reordered": (_reordered, "(actionsChecksum): damaged or edited"),
    "blank line": (_blank_line, "(actionsChecksum): damaged or edited"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damage_at_line_boundaries_or_inside_a_line_is_corrupt(damage):
    fn, message = DAMAGE[damage]
    damaged = _join(fn(_lines(encode_entry(_update_entry()))))
    with pytest.raises(CorruptLogError, match=f"^{re.escape(WHERE)}: .*{re.escape(message)}"):
        decode_entry(damaged, version=3, where=WHERE)


def test_checksum_message_names_expected_and_found():
    lines = _lines(encode_entry(_update_entry()))
    expected = json.loads(lines[0])["commitInfo"]["actionsChecksum"]
    damaged = _flipped_digit(lines)
    found = xxhash.xxh3_128_hexdigest(_join(damaged[1:]))
    with pytest.raises(CorruptLogError) as ei:
        decode_entry(_join(damaged), version=3, where=WHERE)
    assert f"is {found}, its commitInfo records {expected}" in str(ei.value)


def test_commit_info_may_stand_on_any_line():
    """The hash covers the other lines in file order, wherever the commitInfo is."""
    lines = _lines(encode_entry(_update_entry()))
    moved = lines[1:3] + lines[:1] + lines[3:]
    assert [type(a).__name__ for a in decode_entry(_join(moved), version=3, where=WHERE)][2] == "CommitInfo"
    assert checksum_without_line(_join(moved), 3) == checksum_without_line(_join(lines), 1)


# ---------------------------------------------------------------- unknown actions and revision 1


def test_unknown_action_lines_count_and_are_hashed():
    objs = [action_to_json(a) for a in _update_entry()] + [{"deletionVector": {"path": "dv/1.bin", "n": 3}}]
    data = encode_entry_objects(objs)
    decoded = decode_entry(data, version=3, where=WHERE)
    assert len(decoded) == 5 and decoded[0].num_actions == 6  # read without the unknown action, checked with it
    lines = _lines(data)
    with pytest.raises(CorruptLogError, match="entry holds 5 actions, its commitInfo records 6"):
        decode_entry(_join(lines[:-1]), version=3, where=WHERE)
    edited = lines[:-1] + [lines[-1].replace(b'"n":3', b'"n":4')]
    with pytest.raises(CorruptLogError, match="actionsChecksum"):
        decode_entry(_join(edited), version=3, where=WHERE)


def test_revision_1_entries_without_the_fields_are_read_unchecked():
    data = encode_actions(_update_entry())
    assert decode_entry(data, version=3, where=WHERE) == _update_entry()
    torn = _join(_lines(data)[:-1])  # nothing to check it against
    assert len(decode_entry(torn, version=3, where=WHERE)) == 4


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"numActions": 5}, "records numActions but not actionsChecksum"),
        ({"actionsChecksum": "0" * 32}, "records actionsChecksum but not numActions"),
        ({"numActions": 0, "actionsChecksum": "0" * 32}, "numActions must be >= 1"),
        ({"numActions": 5, "actionsChecksum": "0" * 31}, "32 lower-case hex digits"),
        ({"numActions": 5, "actionsChecksum": "A" * 32}, "32 lower-case hex digits"),
        ({"numActions": "5", "actionsChecksum": "0" * 32}, "'numActions' should be int"),
    ],
)
def test_malformed_self_check_fields(fields, match):
    objs = [action_to_json(a) for a in _update_entry()]
    objs[0]["commitInfo"].update(fields)
    with pytest.raises(CorruptLogError, match=match):
        decode_entry(b"".join(json.dumps(o).encode() + b"\n" for o in objs), version=3, where=WHERE)


# ---------------------------------------------------------------- rule 4: no path twice, in any order


@pytest.mark.parametrize(
    "first, second",
    [
        (AddPartition, AddPartition),
        (RemovePartition, RemovePartition),
        (AddPartition, RemovePartition),
        (RemovePartition, AddPartition),
    ],
    ids=lambda c: c.__name__,
)
def test_an_entry_naming_a_path_twice_is_corrupt_whatever_the_order(first, second):
    def act(cls):
        return AddPartition(_part(9)) if cls is AddPartition else RemovePartition(_part(9, 1), 7)

    actions = [INFO, act(first), AddPartition(_part(2)), act(second)]
    assert duplicate_paths(actions) == ["data/p9.parquet"]
    with pytest.raises(CorruptLogError, match=r"data/p9.parquet is named by more than one add/remove/change .*rule 4"):
        validate_commit_entry(actions, version=3, where=WHERE)
    with pytest.raises(CorruptLogError, match="data/p9.parquet is named by more than one"):
        decode_entry(encode_entry(actions), version=3, where=WHERE)


def test_validate_version_zero_and_distinct_paths_ok():
    md = Metadata("t", Schema((Field(1, "id", "long", False),)), 1)
    entry = [CommitInfo(1, "CREATE TABLE"), Protocol(), md]
    assert validate_commit_entry(entry, version=0, where=WHERE) is entry[0]
    assert duplicate_paths(_update_entry()) == []


# ---------------------------------------------------------------- rule 7: replay keeps no "last one wins"


MD = Metadata("t", Schema((Field(1, "id", "long", False),)), 1)


@pytest.mark.parametrize(
    "extra, what",
    [
        ([Protocol(), Protocol(min_writer_version=1, writer_features=("rowLineage",))], "protocol"),
        ([MD, Metadata("t", MD.schema, 1, {"k": "v"})], "metadata"),
        ([SetTransaction("app", 3, 1), SetTransaction("app", 2, 1)], "txn of appId 'app'"),
    ],
)
def test_an_entry_holding_a_singleton_twice_is_corrupt(extra, what):
    """Which one replay kept depended on their order (the last), verify's the first."""
    with pytest.raises(CorruptLogError, match=f"holds more than one {re.escape(what)} .*rule 7"):
        validate_commit_entry([INFO, *extra], version=3, where=WHERE)
    with pytest.raises(CorruptLogError, match="rule 7"):
        validate_commit_entry([INFO, *extra[::-1]], version=3, where=WHERE)


def test_txns_of_different_applications_are_fine():
    actions = [INFO, SetTransaction("a", 1, 1), SetTransaction("b", 1, 1)]
    assert validate_commit_entry(actions, version=3, where=WHERE) is INFO
