"""ctfile.log.replay's fold: one statement of the replay rules, strict for
readers and writers, collecting for ``ctfile verify``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctfile
from ctfile.format.actions import (
    FEATURE_ENTRY_CHECKSUMS,
    AddPartition,
    CommitInfo,
    Metadata,
    Partition,
    Protocol,
    RemovePartition,
    SetTransaction,
)
from ctfile.format.codec import action_from_json, action_to_json
from ctfile.format.entries import encode_entry_objects
from ctfile.format.errors import CorruptLogError, UnsupportedFeatureError
from ctfile.format.paths import commit_path
from ctfile.format.schema import Field, Schema
from ctfile.log.manifest import ManifestLog
from ctfile.log.replay import (
    ReplayMode,
    ReplayProblem,
    TableState,
    apply_entry,
    fold_entry,
    roll_forward,
    roll_forward_head,
)
from ctfile.log.storage import LocalStorage

GOLDEN = Path(__file__).resolve().parents[2] / "conformance" / "golden"
MD = Metadata("tid", Schema((Field(1, "a", "long"),)), 1)
#: A protocol without entryChecksums: entries built here record no self-check.
UNSEALED = Protocol(writer_features=tuple(f for f in Protocol().writer_features if f != FEATURE_ENTRY_CHECKSUMS))
V0 = [CommitInfo(10, "CREATE TABLE"), UNSEALED, MD]
LIVE = Partition("data/live", 100, 4, 0, 1, 0)


def _part(path: str, first: int, n: int, version: int) -> Partition:
    return Partition(path, 100, n, first, version, 0)


def _v1() -> TableState:
    """Version 1: one live partition, rows 0..3."""
    return apply_entry(apply_entry(None, 0, V0, where="v0"), 1, [CommitInfo(11, "I"), AddPartition(LIVE)], where="v1")


def _collect(state, version, actions):
    return fold_entry(state, version, actions, where="v", mode=ReplayMode.COLLECT)


# Entries that break a rule readers enforce: (start, version, actions, strict error, collected problem).
BROKEN = {
    "timestamp not after the previous": (
        _v1, 2, [CommitInfo(11, "X")],
        "v: commit timestamp 11 is not after version 1's 11 (SPEC §Commit timestamps)",
        ReplayProblem("replay", "commit timestamp 11 is not after version 1's 11"),
    ),
    "no commitInfo": (
        _v1, 2, [UNSEALED], "v: entry has no commitInfo",
        ReplayProblem("log", "expected exactly one commitInfo, found 0"),
    ),
    "remove of a path not live": (
        _v1, 2, [CommitInfo(12, "D"), RemovePartition(_part("data/zz", 0, 1, 0), 12)],
        "v: remove of data/zz, which is not live",
        ReplayProblem("replay", "remove of a partition that is not live", "data/zz"),
    ),
    "add of a live path": (
        _v1, 2, [CommitInfo(12, "I"), AddPartition(_part("data/live", 4, 1, 2))],
        "v: add of data/live, which is already live",
        ReplayProblem("replay", "add of a partition that is already live", "data/live"),
    ),
    "table id changed": (
        _v1, 2, [CommitInfo(12, "ALTER"), dataclasses.replace(MD, table_id="other")],
        "v: the metadata changes the table id from tid to other; a table's id is fixed at creation "
        "(SPEC §Log replay, rule 3)",
        ReplayProblem("replay", "the metadata changes the table id from tid to other (SPEC §Log replay, rule 3)"),
    ),
    "version 0 without metadata": (
        lambda: None, 0, [CommitInfo(10, "CREATE TABLE"), Protocol()], "v: no protocol/metadata by version 0",
        ReplayProblem("log", "version 0 must contain protocol and metadata actions"),
    ),
}


@pytest.mark.parametrize("case", BROKEN, ids=list(BROKEN))
def test_strict_raises_what_collecting_reports(case):
    start, version, actions, error, problem = BROKEN[case]
    with pytest.raises(CorruptLogError) as e:
        fold_entry(start(), version, actions, where="v")
    assert str(e.value) == error
    assert [p for p in _collect(start(), version, actions).problems if not p.warning] == [problem]


def test_collecting_goes_on_and_leaves_the_start_alone():
    s1 = _v1()
    ghost = _part("data/zz", 0, 1, 0)
    folded = _collect(s1, 2, [CommitInfo(12, "X"), RemovePartition(ghost, 12), AddPartition(_part("data/b", 4, 2, 2))])
    assert [p.message for p in folded.problems] == ["remove of a partition that is not live"]
    assert set(folded.state.partitions) == {"data/live", "data/b"} and folded.state.next_row_id == 6
    assert [p.path for p in folded.added] == ["data/b"] and folded.removed == []
    assert set(s1.partitions) == {"data/live"}


def test_an_entry_without_protocol_or_metadata_is_not_applied():
    folded = _collect(None, 0, [CommitInfo(10, "CREATE TABLE")])
    assert folded.state is None


# Entries that break a rule readers leave to the decoding of an entry (SPEC §Log entries) or do
# not enforce (row lineage): only collecting reports them, and both modes yield the same state.
COLLECT_ONLY = {
    "path named twice": (
        [CommitInfo(12, "U"), RemovePartition(LIVE, 12), AddPartition(_part("data/live", 4, 1, 2))],
        [ReplayProblem("log", "the path is named by more than one add/remove of the entry", "data/live")],
    ),
    "protocol twice": (
        [CommitInfo(12, "X"), UNSEALED, UNSEALED],
        [ReplayProblem("log", "the entry holds more than one protocol")],
    ),
    "defaultRowVersion not the entry's": (
        [CommitInfo(12, "I"), AddPartition(_part("data/b", 4, 1, 7))],
        [ReplayProblem("log", "add has defaultRowVersion 7, expected 2", "data/b")],
    ),
    "firstRowId below the counter": (
        [CommitInfo(12, "I"), AddPartition(_part("data/b", 2, 1, 2))],
        [ReplayProblem("row_lineage", "add has firstRowId 2, but ids below 4 are already assigned "
                       "(SPEC §Row lineage: firstRowId comes from the table's row-id counter)", "data/b")],
    ),
    "re-add of ids never assigned": (
        [CommitInfo(12, "RESTORE"), AddPartition(dataclasses.replace(_part("data/b", 3, 2, 2), restored_row_version=1))],
        [ReplayProblem("row_lineage", "re-add has row ids up to 4, but only ids below 4 were ever assigned "
                       "(SPEC §Restore)", "data/b")],
    ),
}


@pytest.mark.parametrize("case", COLLECT_ONLY, ids=list(COLLECT_ONLY))
def test_rules_only_collecting_checks(case):
    actions, problems = COLLECT_ONLY[case]
    folded = _collect(_v1(), 2, actions)
    assert folded.problems == problems
    assert fold_entry(_v1(), 2, actions, where="v").state == folded.state


def test_missing_entry_checksums_under_the_feature_is_a_warning():
    s0 = apply_entry(None, 0, [CommitInfo(10, "CREATE TABLE"), Protocol(), MD], where="v0")
    (found,) = _collect(s0, 1, [CommitInfo(11, "I")]).problems
    assert found.warning and found.check == "log" and "cannot be checked for damage" in found.message
    sealed = CommitInfo(11, "I", num_actions=1, actions_checksum="0" * 32)
    assert _collect(s0, 1, [sealed]).problems == []


@pytest.mark.parametrize("mode", list(ReplayMode))
def test_a_protocol_this_ctfile_cannot_read_raises_in_both_modes(mode):
    with pytest.raises(UnsupportedFeatureError, match="reader version 99"):
        fold_entry(_v1(), 2, [CommitInfo(12, "UPGRADE"), Protocol(min_reader_version=99)], where="v", mode=mode)


@pytest.mark.parametrize("start, version, match", [(None, 1, "must start at version 0"), (_v1, 3, "expected version 2")])
def test_entries_are_folded_in_version_order(start, version, match):
    for mode in ReplayMode:
        with pytest.raises(CorruptLogError, match=match):
            fold_entry(start() if start else None, version, [CommitInfo(12, "X")], where="v", mode=mode)


def test_roll_forward_is_the_fold_of_each_entry_and_leaves_its_start_alone():
    s1 = _v1()
    entries = [
        (2, [CommitInfo(12, "I"), AddPartition(_part("data/b", 4, 3, 2)), SetTransaction("app", 1, 12)]),
        (3, [CommitInfo(13, "D"), RemovePartition(LIVE, 13), SetTransaction("app", 2, 13)]),
    ]
    rolled = roll_forward(s1, entries, where=commit_path)
    one_by_one = s1
    for v, actions in entries:
        one_by_one = apply_entry(one_by_one, v, actions, where=commit_path(v))
    assert rolled == one_by_one and rolled.partitions == one_by_one.partitions
    assert rolled.app_transactions == one_by_one.app_transactions
    assert set(s1.partitions) == {"data/live"} and s1.app_transactions == {}
    head = roll_forward_head(s1.head, entries, where=commit_path)
    assert head == rolled.head and head.app_transactions["app"].version == 2
    assert roll_forward(s1, [], where=commit_path) is s1


def test_roll_forward_names_the_entry_that_breaks_a_rule():
    with pytest.raises(CorruptLogError, match=r"^_ct_log/00000000000000000003\.json: expected version 2, found 3$"):
        roll_forward(_v1(), [(3, [CommitInfo(12, "X")])], where=commit_path)


def _golden_tables() -> list[Path]:
    return sorted(p for p in GOLDEN.iterdir() if (p / "_ct_log" / commit_path(0).split("/")[-1]).exists())


@pytest.mark.parametrize("root", _golden_tables(), ids=lambda p: p.name)
def test_both_modes_agree_on_the_golden_tables(root):
    log = ManifestLog(LocalStorage(str(root)))
    latest = log.latest_version()
    entries = list(enumerate(log.read_entries(0, latest)))
    strict = roll_forward(None, entries, where=commit_path)
    state = None
    for v, actions in entries:
        folded = fold_entry(state, v, actions, where=commit_path(v), mode=ReplayMode.COLLECT)
        assert folded.problems == [], (v, folded.problems)
        state = folded.state
    assert state == strict and state.partitions == strict.partitions
    assert state.app_transactions == strict.app_transactions
    assert strict == log.load_state(latest) and strict.partitions == log.load_state(latest).partitions
    assert roll_forward_head(None, entries, where=commit_path) == strict.head


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5)), min_size=1, max_size=12))
def test_both_modes_agree_on_valid_logs(steps):
    """Any valid log: entries that remove some live partitions and add
    some new ones, with row ids from the counter."""
    strict = collected = apply_entry(None, 0, V0, where="v0")
    for version, (removes, adds) in enumerate(steps, start=1):
        live = sorted(strict.partitions)[:removes]
        first = strict.next_row_id
        actions = [CommitInfo(10 + version, "W"), *(RemovePartition(strict.partitions[p], 10 + version) for p in live)]
        actions += [AddPartition(_part(f"data/{version}-{i}", first + 2 * i, 2, version)) for i in range(adds)]
        strict = apply_entry(strict, version, actions, where="v")
        folded = _collect(collected, version, actions)
        assert folded.problems == []
        collected = folded.state
        assert collected == strict and collected.partitions == strict.partitions


# ---------------------------------------------------------------- what verify reports


def _damaged(state: TableState, v: int) -> dict[str, list]:
    """Entries of version ``v`` onto ``state`` (that of ``v - 1``), each
    breaking rules."""
    ts = state.timestamp + 1
    live = next(iter(state.partitions.values()))
    ghost = _part("data/ghost.parquet", state.next_row_id, 1, v)
    fresh = _part("data/fresh.parquet", 0, 2, v)
    return {
        "remove of a path not live": [CommitInfo(ts, "DELETE"), RemovePartition(ghost, ts)],
        "add of a live path, ids reused": [CommitInfo(ts, "INSERT"), AddPartition(dataclasses.replace(live, default_row_version=v))],
        "table id changed, timestamp not after": [CommitInfo(state.timestamp, "ALTER"), dataclasses.replace(state.metadata, table_id="x")],
        "ids reused, path named twice": [CommitInfo(ts, "U"), RemovePartition(live, ts), AddPartition(fresh), AddPartition(fresh)],
    }


@pytest.mark.parametrize("case", list(_damaged(_v1(), 2)))
def test_collecting_reports_what_verify_reports(case, new_table, make_rows):
    t = new_table()
    t.insert(make_rows(3))
    t.insert(make_rows(2, start=3))
    state = t.log.load_state()
    v = state.version + 1
    data = encode_entry_objects(action_to_json(a) for a in _damaged(state, v)[case])
    Path(t.uri, commit_path(v)).write_bytes(data)
    report = ctfile.verify_table(t.uri)
    folded = _collect(state, v, [action_from_json(json.loads(line), "x") for line in data.splitlines()])
    assert folded.problems  # the damage is one the fold sees
    found = [(p.check, p.message, p.path or commit_path(v)) for p in folded.problems if not p.warning]
    replay_checks = {"log", "replay", "row_lineage"}  # the data file checks are not the fold's
    assert [(p.check, p.message, p.path) for p in report.problems if p.version == v and p.check in replay_checks] == found
    assert not [p for p in folded.problems if p.warning] and not [w for w in report.warnings if w.version == v]
