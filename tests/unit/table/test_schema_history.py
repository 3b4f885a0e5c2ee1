"""``Table.schema_history()``, ``Table.introduced_versions()`` and the schema
marks of ``Table.history()`` (SPEC §Schema evolution), on real tables."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import ctfile
from ctfile.format.entries import encode_entry_objects
from ctfile.log.storage import LocalStorage


def _changes(sv) -> list[tuple[str, str, str]]:
    return [(c.kind.value, c.path, c.detail) for c in sv.changes]


@pytest.fixture(scope="module")
def table(tmp_path_factory, evolved_table) -> ctfile.Table:
    return evolved_table(tmp_path_factory.mktemp("schema-history") / "t")


def test_schema_history_lists_every_schema_change_newest_first(table):
    h = table.schema_history()
    assert [(s.version, s.operation) for s in h] == [
        (6, "SCHEMA CHANGE"), (5, "SCHEMA CHANGE"), (3, "SCHEMA CHANGE"), (2, "SCHEMA CHANGE"), (0, "CREATE TABLE"),
    ]  # not v1 (no metadata) nor v4 (a metadata action with the same schema)
    v6, v5, v3, v2, v0 = h
    assert _changes(v0) == [("add", "id", "integer"), ("add", "name", "string"), ("add", "legacy", "string"),
                            ("add", "address", "struct")]
    assert _changes(v2) == [("add", "email", "string")]
    assert _changes(v3) == [("drop", "legacy", ""), ("rename", "name", "full_name")]
    assert _changes(v5) == [("widen", "id", "integer -> long"), ("add", "address.zip", "string")]
    assert _changes(v6) == [("add", "legacy", "long")]
    assert all(s.complete for s in h)
    # Each item carries the schema of its version, with ids.
    assert v3.schema.names == ["id", "full_name", "address", "email"]
    assert v5.schema.field("id").type == "long" and v3.schema.field("id").type == "integer"
    assert v2.schema.field("email").metadata == {"comment": "primary contact"}
    assert v6.schema == table.snapshot().table_schema
    # A dropped name added again is a new field: a new id, never the old one.
    assert v0.schema.field("legacy").id == 3 and v6.schema.field("legacy").id == 8
    assert {s.version: s.timestamp for s in h} == {e.version: e.timestamp for e in table.history() if e.version in {6, 5, 3, 2, 0}}


def first_having(history, fid: int) -> int | None:
    """The oracle: the oldest version in ``history`` whose schema has ``fid``
    (None when it is the oldest schema available and history was cut)."""
    sv = next(s for s in reversed(history) if fid in ctfile.field_paths(s.schema))
    return sv.version if sv.complete else None


def test_introduced_versions(table):
    intro = table.introduced_versions()
    paths = ctfile.field_paths(table.snapshot().table_schema)
    assert {paths[fid]: v for fid, v in intro.items()} == {
        "id": 0, "full_name": 0, "address": 0, "address.city": 0, "address.zip": 5, "email": 2, "legacy": 6,
    }
    assert (intro.version, intro.oldest_version, len(intro)) == (6, 0, 7)
    # Of an older version: the ids of its schema (the dropped legacy, id 3, too).
    assert table.introduced_versions(version=2) == {1: 0, 2: 0, 3: 0, 4: 0, 5: 0, 6: 2}
    for bad, error in ((99, ctfile.VersionNotFoundError), (-1, ctfile.VersionNotFoundError),
                       ("2", ctfile.InvalidArgumentError), (True, ctfile.InvalidArgumentError)):
        with pytest.raises(error):
            table.introduced_versions(version=bad)


@pytest.mark.parametrize("interval", [1, 2, 3, 100])
def test_introduced_versions_agree_with_the_schema_history(tmp_path, interval):
    """Found through checkpoints (every ``interval`` versions) and a few
    entries, the answer is the oracle's at every version: the first version
    of the schema history whose schema has the id."""
    t = ctfile.create_table(tmp_path / "t", pa.schema([("id", pa.int64())]),
                            properties={"ctfile.checkpointInterval": str(interval)})
    for i in range(12):
        t.insert(pa.table({"id": [i]}))
        if i % 3 == 1:
            with t.update_schema() as u:
                u.add_column(f"c{i}", pa.struct([("a", pa.int32())]))
        if i == 7:
            with t.update_schema() as u:
                u.drop_column("c1")
    history = t.schema_history()
    fresh = ctfile.open_table(t.uri)
    for v in range(t.version + 1):
        intro = fresh.introduced_versions(version=v)
        assert dict(intro) == {fid: first_having([s for s in history if s.version <= v], fid) for fid in intro}, v


def test_schema_history_limit(table):
    assert [s.version for s in table.schema_history(limit=2)] == [6, 5]
    assert [s.version for s in table.schema_history(limit=5)] == [6, 5, 3, 2, 0]
    assert [s.version for s in table.schema_history(limit=50)] == [6, 5, 3, 2, 0]
    for bad in (0, -1, True, "2"):
        with pytest.raises(ctfile.InvalidArgumentError, match="limit must be a positive int"):
            table.schema_history(limit=bad)


def test_schema_history_reads_no_partition(tmp_path, evolved_table):
    """Only the table-level actions are read: an ``add`` line that the full
    decode rejects (written with a valid self-check) does not stop it, while
    ``history()``, which reads whole entries, finds it."""
    t = evolved_table(tmp_path / "t")
    p = Path(t.uri) / "_ct_log" / f"{1:020d}.json"
    lines = [json.loads(x) for x in p.read_text().splitlines()]
    for obj in lines:
        if "add" in obj:
            obj["add"]["numRecords"] = -1
    p.write_bytes(encode_entry_objects(lines))
    fresh = ctfile.open_table(t.uri)
    assert [s.version for s in fresh.schema_history()] == [6, 5, 3, 2, 0]
    with pytest.raises(ctfile.CorruptLogError, match="numRecords"):
        fresh.history()


def test_history_marks_schema_changes(table):
    marks = {h.version: (h.schema_changed, [str(c) for c in h.schema_changes]) for h in table.history()}
    assert marks == {
        6: (True, ["add legacy (long)"]),
        5: (True, ["widen id (integer -> long)", "add address.zip (string)"]),
        4: (False, []),
        3: (True, ["drop legacy", "rename name (full_name)"]),
        2: (True, ["add email (string)"]),
        1: (False, []),
        0: (True, ["add id (integer)", "add name (string)", "add legacy (string)", "add address (struct)"]),
    }
    # The oldest entry of a window (5, 3) is compared with the version before the window.
    for limit in (2, 4):
        window = table.history(limit=limit)
        assert [(h.version, h.schema_changed, [str(c) for c in h.schema_changes]) for h in window] == [
            (v, *marks[v]) for v in range(6, 6 - limit, -1)
        ]


def test_history_marks_a_data_commit_that_changes_the_schema(new_table):
    """A write that evolves the schema in its own commit (Spark's
    ``mergeSchema``) carries the ``metadata`` in a data-changing entry."""
    t = new_table(pa.schema([("id", pa.int64())]))
    t.insert(pa.table({"id": [1]}))
    with t.transaction(operation="WRITE") as tx:
        tx.evolve_schema(lambda e: e.add_column("score", pa.float64()))
        tx.insert(pa.table({"id": [2], "score": [0.5]}))
    latest = t.history(limit=1)[0]
    assert (latest.operation, latest.data_change, latest.schema_changed) == ("WRITE", True, True)
    assert [str(c) for c in latest.schema_changes] == ["add score (double)"]
    assert [(s.version, s.operation) for s in t.schema_history()] == [(2, "WRITE"), (0, "CREATE TABLE")]


def test_schema_history_after_vacuum(tmp_path, evolved_table, settle_clock):
    """Expired history: the last item is the oldest version available, with
    its schema and ``complete`` False; fields older than it were introduced
    at an unknown version (None)."""
    t = evolved_table(tmp_path / "t")
    t.insert(pa.table({"id": [2], "full_name": ["b"], "email": ["e"], "legacy": [7]}))  # v7
    settle_clock(t)
    assert t.vacuum(retain=0, grace_period=0).oldest_version == 7
    with t.update_schema() as u:
        u.add_column("phone", pa.string())  # v8
    h = ctfile.open_table(t.uri).schema_history()
    assert [(s.version, s.operation, s.complete) for s in h] == [(8, "SCHEMA CHANGE", True), (7, "INSERT", False)]
    assert _changes(h[0]) == [("add", "phone", "string")]
    assert h[1].changes == () and h[1].schema == t.snapshot(7).table_schema
    intro = ctfile.open_table(t.uri).introduced_versions()
    schema = t.snapshot().table_schema
    assert intro.oldest_version == 7 and intro[schema.field("phone").id] == 8
    assert {intro[fid] for fid, path in ctfile.field_paths(schema).items() if path != "phone"} == {None}
    assert dict(intro) == {fid: first_having(h, fid) for fid in intro}
    assert [s.version for s in ctfile.open_table(t.uri).schema_history(limit=1)] == [8]


def test_schema_history_when_the_oldest_version_is_a_schema_change(new_table, settle_clock):
    t = new_table(pa.schema([("id", pa.int64())]))
    with t.update_schema() as u:
        u.add_column("email", pa.string())  # v1, then the oldest version available
    settle_clock(t)
    t.vacuum(retain=0, grace_period=0)
    fresh = ctfile.open_table(t.uri)
    (only,) = fresh.schema_history()
    assert (only.version, only.complete, only.changes, only.schema.names) == (1, False, (), ["id", "email"])
    (h,) = fresh.history()
    assert (h.version, h.schema_changed, h.schema_changes) == (1, None, ())  # changed, but from what is unknown


@pytest.mark.parametrize("checkpoint", [4, 5])
def test_schema_history_starts_after_a_gap_in_the_log(tmp_path, evolved_table, checkpoint):
    """Entries 0..4 gone (as an interrupted cleanup leaves them), with an
    older checkpoint (2) and one at ``checkpoint``: the history starts at the
    oldest checkpoint from which every later entry is there."""
    t = evolved_table(tmp_path / "t")
    t.checkpoint(version=2)
    t.checkpoint(version=checkpoint)
    start = t.snapshot(checkpoint)
    for v in range(5):
        (Path(t.uri) / "_ct_log" / f"{v:020d}.json").unlink()
    h = ctfile.open_table(t.uri).schema_history()
    assert (h[-1].version, h[-1].complete, h[-1].changes) == (checkpoint, False, ())
    assert (h[-1].schema, h[-1].timestamp) == (start.table_schema, start.timestamp)
    if checkpoint == 4:  # v5 is compared with the checkpoint of v4, whose entry is gone
        assert [(s.version, s.operation) for s in h] == [(6, "SCHEMA CHANGE"), (5, "SCHEMA CHANGE"), (4, None)]
        assert _changes(h[1]) == [("widen", "id", "integer -> long"), ("add", "address.zip", "string")]
    else:
        assert [(s.version, s.operation) for s in h] == [(6, "SCHEMA CHANGE"), (5, "SCHEMA CHANGE")]


class CountingStorage(LocalStorage):
    """Local storage that records the log entries it reads."""

    def __init__(self, root: str):
        super().__init__(root)
        self.entries_read: list[str] = []

    def read_bytes(self, path: str) -> bytes:
        if path.endswith(".json") and path.rsplit("/", 1)[-1][:20].isdigit():
            self.entries_read.append(path)
        return super().read_bytes(path)


def test_introduced_versions_reads_a_few_entries_not_the_log(tmp_path):
    """60 versions, a checkpoint every 10, a column added at version 36:
    ``introduced_versions`` reads entry 0 (the creation's ids) and the
    entries of one checkpoint interval (31..40); ``schema_history`` reads
    them all."""
    t = ctfile.create_table(tmp_path / "t", pa.schema([("id", pa.int64())]), properties={"ctfile.checkpointInterval": "10"})
    for i in range(59):
        t.insert(pa.table({"id": [i]}))
        if t.version == 35:
            with t.update_schema() as u:
                u.add_column("email", pa.string())
    assert t.version == 60
    counting = CountingStorage(t.uri)
    assert dict(ctfile.Table(counting).introduced_versions()) == {1: 0, 2: 36}
    assert sorted(counting.entries_read) == [f"_ct_log/{v:020d}.json" for v in (0, *range(31, 41))]
    counting = CountingStorage(t.uri)
    ctfile.Table(counting).schema_history()
    assert len(counting.entries_read) == 61
