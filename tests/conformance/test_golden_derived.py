"""The golden table ``golden/people-derived`` (revision 8, SPEC §Derived
tables; Appendix B): a derived table over ``golden/people`` with two refresh
commits, a compaction and an ``ALTER DERIVED``. Each version's rows are the query at the
version's frontier (delayed view semantics), the derivation key is hidden
from ordinary reads, each refresh records its frontier in the same entry as
its rows, the checkpoint keeps the definition, and a reader of revision 7
refuses the table with UnsupportedFeatureError."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path

import pytest

import ctfile
from ctfile.format import paths
from ctfile.log import replay
from ctfile.log.manifest import ManifestLog
from ctfile.log.storage import LocalStorage

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_golden import DERIVED_QUERY, derived_rows  # noqa: E402

FRONTIERS = {0: None, 1: 2, 2: 5, 3: 5, 4: 5}
ROWS = {
    0: [],
    1: [(1, "JEFF"), (2, "DONNY"), (4, "MAUD"), (5, "ULI")],
    2: [(1, "JEFFREY"), (4, "MAUDE")],
    3: [(1, "JEFFREY"), (4, "MAUDE")],
    4: [(1, "JEFFREY"), (4, "MAUDE")],
}


@pytest.fixture
def roots(tmp_path) -> tuple[Path, Path]:
    shutil.copytree(HERE / "golden" / "people-derived", tmp_path / "dt")
    shutil.copytree(HERE / "golden" / "people", tmp_path / "people")
    return tmp_path / "dt", tmp_path / "people"


@pytest.fixture
def table(roots) -> ctfile.Table:
    return ctfile.open_table(str(roots[0]))


def _rows(t: ctfile.Table, v: int) -> list[tuple]:
    return sorted(tuple(r.values()) for r in t.snapshot(v).to_arrow().to_pylist())


def _entry(root: Path, v: int) -> list[dict]:
    return [json.loads(line) for line in (root / paths.commit_path(v)).read_text().splitlines()]


def test_versions_are_the_query_at_their_frontier(roots, table):
    people = ctfile.open_table(str(roots[1]))
    assert table.version == 4 and table.schema.names == ["id", "name"]
    assert [h.operation for h in reversed(table.history())] == [
        "CREATE TABLE", "REFRESH", "REFRESH", "COMPACT", "ALTER DERIVED"]
    for v, rows in ROWS.items():
        assert _rows(table, v) == rows, v
        snap = table.snapshot(v)
        assert [f.version for f in snap.derived.frontier] == ([] if FRONTIERS[v] is None else [FRONTIERS[v]])
        if FRONTIERS[v] is not None:  # delayed view semantics, with the key: the rows' source row ids
            assert snap.to_arrow(include_hidden=True).select(["id", "name", "_ct_dt_key"]).sort_by("id") == \
                derived_rows(people, FRONTIERS[v])
    d = table.derived
    assert (d.query, d.refresh_mode, d.target_lag, d.plan_version, d.hidden_columns) == (
        DERIVED_QUERY, ctfile.RefreshMode.AUTO, "15 minutes", 1, ("_ct_dt_key",))
    before = table.snapshot(3).derived
    assert (before.refresh_mode, before.target_lag) == (ctfile.RefreshMode.INCREMENTAL, "1 hour")
    assert d.sources == (ctfile.SourceBinding("people", people.table_id, "/tmp/ctfile-golden/people"),)
    assert d.frontier[0].schema_id == ctfile.schema_id(people.schema_at(5))
    assert d.data_timestamp == people.snapshot(5).timestamp_ms
    assert ctfile.verify_table(table.uri, all_versions=True).healthy


def test_each_refresh_records_its_frontier_in_its_entry(roots, table):
    root = roots[0]
    protocol = _entry(root, 0)[1]["protocol"]
    assert "derivedTables" in protocol["readerFeatures"] and "derivedTables" in protocol["writerFeatures"]
    for v, action in ((1, "FULL"), (2, "INCREMENTAL")):
        entry = _entry(root, v)
        info = entry[0]["commitInfo"]
        (md,) = [o["metadata"] for o in entry if "metadata" in o]
        assert info["operation"] == "REFRESH" and info["refresh"]["action"] == action
        assert md["derived"]["frontier"] == info["refresh"]["frontier"]
        assert md["derived"]["dataTimestamp"] == info["refresh"]["dataTimestamp"]
        assert [o for o in entry if "add" in o]  # the rows are in the same entry
    assert _entry(root, 2)[0]["commitInfo"]["refresh"]["durationMs"] == 12
    compaction = _entry(root, 3)
    assert "refresh" not in compaction[0]["commitInfo"] and not [o for o in compaction if "metadata" in o]
    refreshes = [h.refresh for h in table.history() if h.refresh is not None]
    assert [(r.action.value, r.rows_in, r.rows_out) for r in refreshes] == [("INCREMENTAL", 6, 4), ("FULL", 5, 4)]


def test_change_scans_are_minimal_and_hide_the_key(table):
    rows = table.changes(start_version=2, end_version=2).to_arrow()
    assert rows.column_names == ["id", "name", "METADATA$ACTION", "METADATA$ISUPDATE", "METADATA$ROW_ID"]
    got = sorted((r["id"], r["name"], r["METADATA$ACTION"], r["METADATA$ISUPDATE"]) for r in rows.to_pylist())
    assert got == sorted([(1, "JEFF", "DELETE", True), (1, "JEFFREY", "INSERT", True), (4, "MAUD", "DELETE", True),
                          (4, "MAUDE", "INSERT", True), (2, "DONNY", "DELETE", False), (5, "ULI", "DELETE", False)])
    assert table.changes(start_version=3, end_version=3).to_arrow().num_rows == 0  # COMPACT
    assert table.changes(start_version=4, end_version=4).to_arrow().num_rows == 0  # ALTER DERIVED


def test_an_alter_changes_mode_and_lag_only(roots, table):
    """SPEC §Derived tables, changing a definition: the metadata read, but
    for ``refreshMode`` and ``targetLag``; no rows; not a refresh."""
    entry = _entry(roots[0], 4)
    info = entry[0]["commitInfo"]
    assert (info["operation"], info["dataChange"], info["operationParameters"]) == (
        "ALTER DERIVED", False, {"refreshMode": "auto", "targetLag": "15 minutes"})
    assert "refresh" not in info and not [o for o in entry if "add" in o or "remove" in o]
    (md,) = [o["metadata"] for o in entry if "metadata" in o]
    before = table.log.read_checkpoint(3).metadata
    after = table.snapshot(4)
    assert after.derived == dataclasses.replace(before.derived, refresh_mode=ctfile.RefreshMode.AUTO,
                                                target_lag="15 minutes")
    assert md["derived"]["frontier"] == _entry(roots[0], 2)[0]["commitInfo"]["refresh"]["frontier"]
    assert [h.refresh for h in table.history(limit=1)] == [None]


def test_the_checkpoint_keeps_the_definition(roots, table):
    root = roots[0]
    state = table.log.read_checkpoint(3)
    assert state.metadata.derived == table.snapshot(3).derived
    (root / paths.checkpoint_path(3)).unlink()
    assert ManifestLog(LocalStorage(str(root))).load_state(3).metadata == state.metadata  # = replay


def test_writes_outside_a_refresh_are_refused(table):
    with pytest.raises(ctfile.DerivedTableError, match="derivedTables"):
        table.delete(None)
    assert table.refresh().version == 4


def test_a_revision_7_reader_refuses_the_table(roots, monkeypatch):
    monkeypatch.setattr(replay, "SUPPORTED_READER_FEATURES", replay.SUPPORTED_READER_FEATURES - {"derivedTables"})
    with pytest.raises(ctfile.UnsupportedFeatureError, match="derivedTables"):
        ctfile.open_table(str(roots[0]))
