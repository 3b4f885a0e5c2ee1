"""The golden table ``golden/people-append`` (revision 9, SPEC §Append-only
tables; make_golden.py): created with ``ctfile.appendOnly = true`` (writer
feature ``appendOnly`` from version 0), two inserts, an insert-only MERGE and
a compaction; then the property set back to ``false`` (the feature stays)
and a DELETE. Newer code must keep reading it and enforcing it: a writer
that sets the property again is refused a DELETE, and change scans of its
append-only intervals read only the fresh rows. A writer of revision 8 (one
that does not know ``appendOnly``) refuses to write it; readers of every
revision read it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.log import replay

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_golden import ROWS_APPEND, ROWS_APPEND_V6  # noqa: E402


@pytest.fixture
def table(tmp_path) -> ctfile.Table:
    shutil.copytree(HERE / "golden" / "people-append", tmp_path / "t")
    return ctfile.open_table(str(tmp_path / "t"))


def _rows(t: ctfile.Table, v: int) -> dict:
    return dict(zip(*t.snapshot(v).to_arrow().sort_by("id").to_pydict().values()))


def test_versions_read_as_the_statements_made_them(table):
    assert table.version == 6
    assert [h.operation for h in reversed(table.history())] == [
        "CREATE TABLE", "INSERT", "INSERT", "MERGE", "COMPACT", "SET TBLPROPERTIES", "DELETE"]
    assert _rows(table, 4) == ROWS_APPEND and _rows(table, 6) == ROWS_APPEND_V6
    assert table.snapshot(0).append_only and table.snapshot(4).append_only and not table.snapshot(5).append_only
    assert "appendOnly" in table.snapshot(0).protocol.writer_features
    assert "appendOnly" in table.protocol.writer_features  # kept when the property was set back to false
    assert "appendOnly" not in table.protocol.reader_features


def test_change_scans_of_its_append_only_intervals_read_the_fresh_rows(table):
    cs = table.changes(start_version=1, end_version=4)
    assert cs.plan.reads_fresh_rows  # the compaction of version 4 is not read
    compacted = {p.path for p in table.snapshot(4).partitions}
    assert not compacted & {p.path for p in cs.plan.partitions_to_read()}
    got = {r["id"]: r["name"] for r in cs.to_arrow().to_pylist() if r["METADATA$ACTION"] == "INSERT"}
    assert got == ROWS_APPEND and cs.to_arrow().num_rows == 6
    across = table.changes(start_version=4, end_version=6)
    assert not across.plan.reads_fresh_rows
    assert [(r["id"], r["METADATA$ACTION"]) for r in across.to_arrow().to_pylist()] == [(2, "DELETE")]


def test_this_build_enforces_the_property_again(table):
    table.set_properties({"ctfile.appendOnly": "true"})
    version = table.version
    with pytest.raises(ctfile.AppendOnlyError, match="ctfile.appendOnly"):
        table.delete(pc.field("id") == 1)
    assert ctfile.open_table(table.uri).version == version


def test_a_writer_of_revision_8_refuses_to_write_it(table, monkeypatch):
    """SPEC §Protocol: a writer that does not implement a writer feature the
    protocol lists commits nothing; a reader does not look at writer features."""
    monkeypatch.setattr(replay, "SUPPORTED_WRITER_FEATURES", replay.SUPPORTED_WRITER_FEATURES - {"appendOnly"})
    old = ctfile.open_table(table.uri)
    assert _rows(old, 6) == ROWS_APPEND_V6  # it reads
    with pytest.raises(ctfile.UnsupportedFeatureError, match="appendOnly"):
        old.insert(pa.table({"id": [7], "name": ["Smokey"]}))
    assert ctfile.open_table(table.uri).version == 6
