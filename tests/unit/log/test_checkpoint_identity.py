"""A checkpoint, a checkpoint hint and a stream state belong to their table
(SPEC §Checkpoints, identity; §Log replay, rule 3; §Streams, reader
requirements).

Each test copies a real file of table A into table B (two tables of the same
schema, A's rows and ids distinct from B's) and checks that B reads as it did
before the copy -- snapshots, time travel, change scans, history, stream
reads -- or fails with a typed error when nothing is left to read instead;
never with A's rows or A's ``tableId``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

import ctfile
from ctfile.format.actions import CommitInfo, Metadata, Protocol
from ctfile.format.errors import CorruptLogError
from ctfile.format.paths import LAST_CHECKPOINT, checkpoint_path, commit_path
from ctfile.format.schema import schema_from_arrow
from ctfile.format.streams import state_path
from ctfile.log.manifest import ManifestLog
from ctfile.log.replay import apply_entry
from ctfile.log.storage import LocalStorage

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])


def _table(root: Path, first_id: int, versions: int) -> ctfile.Table:
    """A table with a checkpoint every 5 versions, one row per insert."""
    t = ctfile.create_table(str(root), SCHEMA, properties={"ctfile.checkpointInterval": "5"})
    for i in range(versions):
        t.insert(pa.table({"id": [first_id + i], "v": [f"{root.name}{i}"]}, schema=SCHEMA))
    return t


def _copy(src: ctfile.Table, dst: ctfile.Table, path: str) -> None:
    shutil.copyfile(Path(src.storage.root) / path, Path(dst.storage.root) / path)


def _observe(uri: str, *, versions=(), changes_from: int = 1) -> dict:
    """What a fresh reader of ``uri`` sees."""
    t = ctfile.open_table(uri)
    return {
        "table_id": t.table_id,
        "version": t.version,
        "rows": t.to_arrow(include_hidden=True).sort_by("id").to_pylist(),
        "versions": {v: t.snapshot(v).to_arrow().sort_by("id").to_pylist() for v in versions},
        "changes": t.changes(start_version=changes_from).to_arrow().sort_by("id").to_pylist(),
        "history": [(h.version, h.operation) for h in t.history()],
        "schema": [(f.id, f.name) for f in t.schema_at().fields],
    }


@pytest.fixture
def pair(tmp_path):
    """Tables A (ids 1000..) and B (ids 0..), versions 0..12 each,
    checkpoints at 5 and 10."""
    return _table(tmp_path / "A", 1000, 12), _table(tmp_path / "B", 0, 12)


def test_checkpoint_of_another_table_is_skipped(pair):
    """A's checkpoint 10 and hint copied over B's, with A's data files (so
    that A's state would read, as A's rows under A's tableId): every read of
    B starts from B's checkpoint 5 instead, as if checkpoint 10 were damaged."""
    a, b = pair
    feed = b.create_stream("feed", start_version=9)  # version 13
    pending = feed.pending().to_arrow().to_pylist()
    before = _observe(b.uri, versions=(4, 10, 11))
    shutil.copytree(Path(a.storage.root) / "data", Path(b.storage.root) / "data", dirs_exist_ok=True)
    _copy(a, b, checkpoint_path(10))
    _copy(a, b, LAST_CHECKPOINT)
    assert _observe(b.uri, versions=(4, 10, 11)) == before
    assert ctfile.open_table(b.uri).stream("feed").pending().to_arrow().to_pylist() == pending
    log = ManifestLog(LocalStorage(b.storage.root))
    with pytest.raises(CorruptLogError, match=f"state of table {a.table_id}, not of this table \\({b.table_id}"):
        log.read_checkpoint(10)
    with pytest.raises(CorruptLogError, match="copy from another table"):
        log.read_checkpoint_head(10)
    # verify reports it as a problem (readers skip it, but someone put it there).
    report = ctfile.verify_table(b.uri)
    assert [p.check for p in report.problems] == ["checkpoint"]
    assert "a copy from another table" in report.problems[0].message


def test_checkpoint_of_another_table_with_both_checkpoints_copied(pair):
    """With A's checkpoints 5 and 10 both copied, B replays from version 0."""
    a, b = pair
    before = _observe(b.uri, versions=(3, 5, 12))
    _copy(a, b, checkpoint_path(5))
    _copy(a, b, checkpoint_path(10))
    assert _observe(b.uri, versions=(3, 5, 12)) == before


@pytest.fixture
def vacuumed_pair(tmp_path):
    """A: versions 0..15 with checkpoints 5, 9 (on demand), 10 and 15.
    B: versions 0..8, vacuumed at version 8 (its entries below 8 gone, its
    checkpoint 8 the oldest state), then versions 9..15 (checkpoints 10, 15)."""
    a = _table(tmp_path / "A", 1000, 9)
    a.checkpoint()
    for i in range(9, 15):
        a.insert(pa.table({"id": [1000 + i], "v": ["a"]}, schema=SCHEMA))
    b = _table(tmp_path / "B", 0, 8)
    result = b.vacuum(retain=0, grace_period=0)
    assert result is not None
    log = ManifestLog(LocalStorage(b.storage.root))
    assert log.list().commits[0] == 8 and log.list().checkpoints == [8]
    for i in range(8, 15):
        b.insert(pa.table({"id": [i], "v": ["b"]}, schema=SCHEMA))
    assert (a.version, b.version) == (15, 15)
    assert ManifestLog(LocalStorage(b.storage.root)).list().checkpoints == [8, 10, 15]
    return a, b


def test_checkpoint_of_another_table_after_a_vacuum(vacuumed_pair):
    """Version 0 is gone: each checkpoint is checked against the entry of its
    own version (SPEC §Checkpoints, identity, rule 2). A's checkpoints 10
    and 15 copied over B's: B reads from its checkpoint 8 instead."""
    a, b = vacuumed_pair
    before = _observe(b.uri, versions=(8, 10, 14), changes_from=9)
    _copy(a, b, checkpoint_path(15))
    _copy(a, b, checkpoint_path(10))
    assert _observe(b.uri, versions=(8, 10, 14), changes_from=9) == before
    log = ManifestLog(LocalStorage(b.storage.root))
    with pytest.raises(CorruptLogError, match="commit timestamp .* is not that of the entry of version 15"):
        log.read_checkpoint(15)


def test_oldest_checkpoint_of_another_table_fails_the_versions_it_alone_holds(vacuumed_pair):
    """A's checkpoint 9 copied where B has version 9 but no checkpoint: B
    never uses it. A's checkpoint 8 copied over B's base: the versions only
    it reconstructs fail as a damaged log (CorruptLogError), never with A's
    rows; later versions read from B's own checkpoints."""
    a, b = vacuumed_pair
    before = _observe(b.uri, versions=(10, 14), changes_from=11)
    _copy(a, b, checkpoint_path(9))
    assert _observe(b.uri, versions=(10, 14), changes_from=11) == before
    assert ctfile.open_table(b.uri).snapshot(9).to_arrow().sort_by("id").column("id").to_pylist() == list(range(9))
    # B's base overwritten by A's checkpoint of the same version (A checkpointed 8 on demand).
    a8 = ManifestLog(LocalStorage(a.storage.root)).load_state(8)
    ManifestLog(LocalStorage(a.storage.root)).write_checkpoint(a8)
    _copy(a, b, checkpoint_path(8))
    (Path(b.storage.root) / checkpoint_path(9)).unlink()
    assert _observe(b.uri, versions=(10, 14), changes_from=11) == before
    fresh = ctfile.open_table(b.uri)
    with pytest.raises(CorruptLogError, match="cannot be reconstructed.*rejected.*not that of the entry of version 8"):
        fresh.snapshot(8)
    with pytest.raises(CorruptLogError):
        fresh.snapshot(9)
    report = ctfile.verify_table(b.uri)
    assert any(p.check == "checkpoint" and "needed to start replay" in p.message for p in report.problems)


def test_checkpoint_of_another_table_below_the_oldest_entry(vacuumed_pair):
    """A's checkpoint 5, a version B vacuumed: no entry of B vouches for it
    or follows it (rule 3), so reading version 5 of B fails typed instead of
    returning A's state; B's retained versions read as before."""
    a, b = vacuumed_pair
    before = _observe(b.uri, versions=(8, 12), changes_from=9)
    _copy(a, b, checkpoint_path(5))
    with pytest.raises(CorruptLogError, match="connected to nothing"):
        ctfile.open_table(b.uri).snapshot(5)
    assert _observe(b.uri, versions=(8, 12), changes_from=9) == before
    assert ctfile.open_table(b.uri).log.oldest_version() == 8


def test_hint_and_checkpoint_of_another_table_beyond_the_latest_version(pair):
    """A's hint and checkpoint 15, a version B never reached: B's latest
    version stays 12 (the hint's version has no entry in B)."""
    a, b = pair
    before = _observe(b.uri, versions=(10,))
    for i in range(3):
        a.insert(pa.table({"id": [2000 + i], "v": ["a"]}, schema=SCHEMA))
    assert a.version == 15
    _copy(a, b, checkpoint_path(15))
    _copy(a, b, LAST_CHECKPOINT)
    assert _observe(b.uri, versions=(10,)) == before


def test_stream_state_of_another_table_is_refused(tmp_path):
    """A's state of stream "feed", copied into B's stream directory as its
    newest state: reading the stream fails typed (not A's offset, not an
    older state of B's), a vacuum deletes nothing, verify reports it."""
    a = _table(tmp_path / "A", 1000, 3)
    b = _table(tmp_path / "B", 0, 3)
    fa, fb = a.create_stream("feed", start_version=0), b.create_stream("feed", start_version=1)
    for v in (1, 2, 3):
        fa.advance(v)
    assert fa.state().sequence > fb.state().sequence
    seq = fa.state().sequence
    _copy(a, b, state_path("feed", seq))
    with pytest.raises(CorruptLogError, match=f"of table {a.table_id}, not of this table \\({b.table_id}\\)"):
        ctfile.open_table(b.uri).stream("feed")
    with pytest.raises(CorruptLogError, match="copy from another table"):
        fb.pending()
    with pytest.raises(CorruptLogError, match="copy from another table"):
        ctfile.open_table(b.uri).streams()
    files = sorted(p.name for p in Path(b.storage.root).rglob("*") if p.is_file())
    with pytest.raises(CorruptLogError, match="copy from another table"):
        ctfile.open_table(b.uri).vacuum(retain=0, grace_period=0)
    assert sorted(p.name for p in Path(b.storage.root).rglob("*") if p.is_file()) == files
    report = ctfile.verify_table(b.uri)
    assert any(p.check == "stream" and a.table_id in p.message for p in report.problems)


def test_metadata_may_not_change_the_table_id():
    """SPEC §Log replay, rule 3: an entry whose metadata carries another
    tableId is corrupt."""
    schema = schema_from_arrow(SCHEMA)
    state = apply_entry(None, 0, [CommitInfo(1, "CREATE TABLE"), Protocol(), Metadata("B", schema, 1)], where="v0")
    same = apply_entry(state, 1, [CommitInfo(2, "SET PROPERTIES"), Metadata("B", schema, 1, {"k": "v"})], where="v1")
    assert same.metadata.properties == {"k": "v"}
    with pytest.raises(CorruptLogError, match="changes the table id from B to A"):
        apply_entry(state, 1, [CommitInfo(2, "SET PROPERTIES"), Metadata("A", schema, 1)], where="v1")
