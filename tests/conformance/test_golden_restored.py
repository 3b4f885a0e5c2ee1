"""The golden table ``golden/people-restored`` (revision 7, SPEC §Restore;
Appendix B): a RESTORE re-adds the partitions of version 2 with their
lineage, so its rows come back with their row ids and row versions, and
every change scan across it is exactly the difference of its snapshots.
Also: a reader of revision 6 (one that does not know ``restoredPartitions``)
refuses the table at the RESTORE's entry with UnsupportedFeatureError, never
with a corrupt-log error or a wrong answer. The byte-level rules of the log
are checked for it with the other generations in ``test_golden.py``."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import ctfile
from ctfile.format import actions as A
from ctfile.format import paths
from ctfile.log import replay
from ctfile.log.manifest import ManifestLog
from ctfile.log.storage import LocalStorage

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_golden import ROWS_RESTORED, ROWS_V2, ROWS_V5  # noqa: E402

ACTION, ISUPDATE, ROW_ID = "METADATA$ACTION", "METADATA$ISUPDATE", "METADATA$ROW_ID"
# id -> (name, row id, row version) at version 2 (SPEC §Row lineage, worked example).
LINEAGE_V2 = {1: ("Jeff", 0, 1), 2: ("Donny", 1, 1), 3: ("Walter", 2, 2), 4: ("Maud", 3, 2), 5: ("Uli", 4, 2)}


@pytest.fixture
def root(tmp_path) -> Path:
    shutil.copytree(HERE / "golden" / "people-restored", tmp_path / "t")
    return tmp_path / "t"


@pytest.fixture
def table(root) -> ctfile.Table:
    return ctfile.open_table(str(root))


def _lineage(t: ctfile.Table, v: int) -> dict:
    rows = t.snapshot(v).to_arrow(include_hidden=True).to_pylist()
    return {r["id"]: (r["name"], r[ctfile.ROW_ID_COLUMN], r[ctfile.ROW_VERSION_COLUMN]) for r in rows}


def _changes(t: ctfile.Table, a: int, b: int, mode: str = "default") -> list[tuple]:
    rows = t.changes(start_version=a, end_version=b, information=mode).to_arrow().to_pylist()
    return sorted((r["id"], r["name"], r[ACTION], r[ISUPDATE]) for r in rows)


def test_versions_read_as_the_statements_made_them(table):
    assert table.version == 7
    assert [h.operation for h in reversed(table.history())][5:] == ["DELETE", "RESTORE", "UPDATE"]
    assert {i: n for i, (n, _, _) in _lineage(table, 5).items()} == ROWS_V5
    assert _lineage(table, 6) == LINEAGE_V2 == _lineage(table, 2)  # row ids and row versions come back
    assert {i: n for i, (n, _, _) in _lineage(table, 7).items()} == ROWS_RESTORED
    assert _lineage(table, 7)[2] == ("Donny K", 1, 7)
    assert ctfile.verify_table(table.uri, all_versions=True).healthy


def test_the_restore_entry_re_adds_with_the_lineage_it_had(root):
    entry = [json.loads(line) for line in (root / paths.commit_path(6)).read_text().splitlines()]
    info = entry[0]["commitInfo"]
    assert (info["operation"], info["operationParameters"], info["readVersion"]) == ("RESTORE", {"version": 2}, 5)
    assert info["operationMetrics"] == {
        "numAddedRows": 5, "numRemovedRows": 3, "numAddedPartitions": 2, "numRemovedPartitions": 2,
    }
    adds = [o["add"] for o in entry if "add" in o]
    v2 = {
        o["add"]["path"]: o["add"]
        for v in (1, 2) for o in map(json.loads, (root / paths.commit_path(v)).read_text().splitlines()) if "add" in o
    }
    assert {a["path"] for a in adds} == set(v2)  # A and B, the same files
    for a in adds:
        old = v2[a["path"]]
        assert a["defaultRowVersion"] == 6 and a["restoredRowVersion"] == old["defaultRowVersion"]
        lineage = ("defaultRowVersion", "restoredRowVersion")
        assert {k: v for k, v in a.items() if k not in lineage} == {k: v for k, v in old.items() if k not in lineage}
    (protocol,) = [o["protocol"] for o in entry if "protocol" in o]
    assert "restoredPartitions" in protocol["readerFeatures"] and "restoredPartitions" in protocol["writerFeatures"]
    assert not [o for o in entry if "metadata" in o or "change" in o or "txn" in o]


def test_next_row_id_does_not_move_and_the_checkpoint_keeps_the_field(root, table):
    log = table.log
    assert log.load_state(6).next_row_id == log.load_state(5).next_row_id == 13
    cp = pq.read_table(root / paths.checkpoint_path(7)).to_pylist()
    restored = {r["path"]: r["restoredRowVersion"] for r in cp}
    assert sorted(restored.values(), key=str) == [2, None]  # B still re-added; A was rewritten by version 7
    state = log.read_checkpoint(7)
    assert {p.path: p.restored_row_version for p in state.partitions.values()} == restored
    (root / paths.checkpoint_path(7)).unlink()
    assert ManifestLog(LocalStorage(str(root))).load_state(7).partitions == state.partitions  # = replay


def test_change_scans_are_the_differences_of_snapshots(table):
    pair = [("DELETE", True), ("INSERT", True)]
    got = _changes(table, 6, 6)
    assert got == sorted([
        (1, "Jeffrey", *pair[0]), (1, "Jeff", *pair[1]), (4, "Maude", *pair[0]), (4, "Maud", *pair[1]),
        (2, "Donny", "INSERT", False), (5, "Uli", "INSERT", False),
    ])
    assert [r[:4] for r in _changes(table, 6, 6, "audit")] == got
    assert _changes(table, 6, 6, "append_only") == []  # a RESTORE inserts no row
    assert _changes(table, 3, 6) == []  # snapshots 2 and 6 are equal
    assert _changes(table, 6, 7) == sorted([*(r for r in got if r[0] != 2), (2, "Donny K", "INSERT", False)])
    assert _changes(table, 7, 7) == [(2, "Donny", "DELETE", True), (2, "Donny K", "INSERT", True)]
    assert _changes(table, 1, 7, "append_only") == sorted((i, n, "INSERT", False) for i, n in ROWS_V2.items())
    ids = {r[ROW_ID] for r in table.changes(start_version=1, end_version=7, information="append_only").to_arrow().to_pylist()}
    assert len(ids) == 5  # each row id once, when it was inserted


@pytest.mark.parametrize("checkpoint_7", [True, False])
def test_a_revision_6_reader_refuses_the_table_cleanly(root, monkeypatch, checkpoint_7):
    """SPEC §Protocol: the RESTORE's entry passes the entry rules a reader of
    revision 6 checks (its defaultRowVersion is the entry's version) and
    holds the protocol it refuses; so does the checkpoint of version 7."""
    monkeypatch.setattr(replay, "SUPPORTED_READER_FEATURES", replay.SUPPORTED_READER_FEATURES - {A.FEATURE_RESTORED_PARTITIONS})
    if not checkpoint_7:
        (root / paths.checkpoint_path(7)).unlink()
    with pytest.raises(ctfile.UnsupportedFeatureError, match="restoredPartitions"):
        ctfile.open_table(str(root))
    log = ManifestLog(LocalStorage(str(root)))
    with pytest.raises(ctfile.UnsupportedFeatureError, match="restoredPartitions"):
        log.load_state(6)  # every entry decoded and checked, then its protocol
    assert log.load_state(5).version == 5  # versions before the RESTORE still read
