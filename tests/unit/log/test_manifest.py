"""ctfile.log.manifest: latest version, checkpoints, replay, time travel."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import zstandard

import ctfile
from ctfile.format.actions import CommitInfo, Protocol
from ctfile.format.codec import encode_actions
from ctfile.format.errors import (
    CorruptLogError,
    TableNotFoundError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from ctfile.format.paths import LAST_CHECKPOINT, checkpoint_path, commit_path
from ctfile.log.manifest import ManifestLog
from ctfile.log.replay import apply_entry
from ctfile.log.storage import LocalStorage


class CountingStorage(LocalStorage):
    """A real LocalStorage that counts directory listings."""

    def __init__(self, root):
        super().__init__(root)
        self.listings = 0

    def list_dir(self, path):
        self.listings += 1
        return super().list_dir(path)


def _full_replay(log: ManifestLog, version: int):
    state = None
    for v in range(version + 1):
        state = apply_entry(state, v, log.read_entry(v), where=commit_path(v))
    return state


def _assert_same_state(a, b):
    assert a.version == b.version
    assert a.timestamp == b.timestamp
    assert a.partitions == b.partitions
    assert a.next_row_id == b.next_row_id
    assert a.metadata == b.metadata
    assert a.protocol == b.protocol
    assert a.app_transactions == b.app_transactions


@pytest.fixture(scope="module")
def table12_template(tmp_path_factory):
    root = tmp_path_factory.mktemp("template") / "t"
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.int64()), ("s", pa.string())])
    t = ctfile.create_table(root, schema, properties={"ctfile.checkpointInterval": "5"})
    for i in range(12):
        if i % 4 == 3:
            t.delete(pc.field("id") == (i - 1) * 10)
        else:
            ids = list(range(i * 10, i * 10 + 10))
            t.insert(pa.table({"id": ids, "x": ids, "s": [str(j) for j in ids]}))
    assert t.version == 12
    return root


@pytest.fixture
def table12(table12_template, tmp_path):
    """Checkpoint interval 5, versions 0..12 (checkpoints at 5 and 10); a private copy."""
    root = tmp_path / "t12"
    shutil.copytree(table12_template, root)
    return ctfile.open_table(root)


def _log(t) -> ManifestLog:
    """A fresh ManifestLog (no cached entries) over the table's root."""
    return ManifestLog(LocalStorage(t.storage.root))


# ---------------------------------------------------------------- checkpoints


def test_checkpoints_written_at_interval(table12):
    log = _log(table12)
    listing = log.list()
    assert listing.commits == list(range(13))
    assert listing.checkpoints == [5, 10]
    hint = json.loads(log.storage.read_bytes(LAST_CHECKPOINT))
    assert hint["version"] == 10
    assert hint["numPartitions"] == len(log.read_checkpoint(10).partitions)


def test_checkpoint_state_equals_full_replay(table12):
    log = _log(table12)
    for v in (5, 10):
        _assert_same_state(log.read_checkpoint(v), _full_replay(log, v))
    for v in (4, 5, 7, 10, 12):
        _assert_same_state(log.load_state(v), _full_replay(log, v))
    state = log.load_state()
    assert state.version == 12
    # 9 inserts of 10 rows, and 3 deletes each rewriting a 10-row partition into
    # a new 9-row one, which takes fresh firstRowIds from the counter as well.
    assert state.next_row_id == 9 * 10 + 3 * 9
    _assert_same_state(state, _full_replay(log, 12))


def test_load_state_starts_from_checkpoint(table12):
    # Clean up the log before checkpoint 10: only the checkpoint can rebuild v12.
    root = table12.storage.root
    log = _log(table12)
    expected = _full_replay(log, 12)
    log.storage.delete([commit_path(v) for v in range(0, 10)] + [checkpoint_path(5)])
    fresh = ManifestLog(LocalStorage(root))
    _assert_same_state(fresh.load_state(), expected)
    assert fresh.oldest_version() == 10
    with pytest.raises(VersionNotFoundError, match="no longer be reconstructed"):
        fresh.load_state(7)
    with pytest.raises(VersionNotFoundError, match="before the first available commit"):
        fresh.version_at_timestamp(expected.timestamp - 10**9, latest=12)
    assert fresh.version_at_timestamp(expected.timestamp, latest=12) == 12


@pytest.mark.parametrize(
    "garbage",
    [
        b"not zstd at all",
        zstandard.ZstdCompressor().compress(b"{broken json\n"),
        zstandard.ZstdCompressor().compress(b'{"checkpoint":{"version":10,"timestamp":1,"nextRowId":0,"numPartitions":99}}\n'),
        b"",
    ],
    ids=["not-zstd", "bad-json", "bad-header", "empty"],
)
def test_corrupt_checkpoint_is_skipped(table12, garbage):
    log = _log(table12)
    expected = _full_replay(log, 12)
    log.storage.put(checkpoint_path(10), garbage)
    with pytest.raises(CorruptLogError):
        log.read_checkpoint(10)
    _assert_same_state(ManifestLog(LocalStorage(table12.storage.root)).load_state(), expected)
    # And the public API still opens it.
    assert ctfile.open_table(table12.uri).snapshot().num_records == table12.snapshot().num_records


def test_checkpoint_with_wrong_version_is_skipped(table12):
    log = _log(table12)
    expected = _full_replay(log, 12)
    log.storage.put(checkpoint_path(10), log.storage.read_bytes(checkpoint_path(5)))
    with pytest.raises(CorruptLogError, match="header says version 5"):
        log.read_checkpoint(10)
    _assert_same_state(_log(table12).load_state(), expected)


# ---------------------------------------------------------------- latest version


def test_latest_version_without_hint_lists(new_table, make_rows):
    t = new_table()
    t.insert(make_rows(3))
    t.insert(make_rows(3, 3))
    s = CountingStorage(t.storage.root)
    assert not s.exists(LAST_CHECKPOINT)
    assert ManifestLog(s).latest_version() == 2
    assert s.listings == 1


def test_latest_version_with_hint_probes_without_listing(table12):
    s = CountingStorage(table12.storage.root)
    assert ManifestLog(s).latest_version() == 12
    assert s.listings == 0


def test_latest_version_with_stale_hint(table12):
    s = CountingStorage(table12.storage.root)
    s.put(LAST_CHECKPOINT, b'{"version": 5, "numPartitions": 3}\n')
    log = ManifestLog(s)
    assert log.latest_version() == 12
    assert s.listings == 0
    _assert_same_state(log.load_state(), _full_replay(log, 12))


@pytest.mark.parametrize(
    "hint",
    [b"garbage", b"", b"\xff\xfe", b"null", b"[10]", b'{"version": "10"}', b'{"version": -4}',
     b'{"version": 10.0}', b'{"numPartitions": 1}', b'{"version": 11}', b'{"version": 999}'],
)
def test_latest_version_with_garbage_hint(table12, hint):
    s = CountingStorage(table12.storage.root)
    s.put(LAST_CHECKPOINT, hint)
    log = ManifestLog(s)
    assert log.latest_version() == 12
    assert s.listings >= 1  # fell back to listing
    _assert_same_state(log.load_state(), _full_replay(log, 12))


def test_latest_version_of_empty_dir(tmp_path):
    with pytest.raises(TableNotFoundError):
        ManifestLog(LocalStorage(str(tmp_path))).latest_version()


# ---------------------------------------------------------------- load_state errors


def test_load_state_out_of_range(table12):
    log = _log(table12)
    with pytest.raises(VersionNotFoundError, match="version 13"):
        log.load_state(13)
    with pytest.raises(VersionNotFoundError):
        log.load_state(-1)
    with pytest.raises(VersionNotFoundError, match="missing"):
        log.read_entry(50)


def test_corrupt_entry_names_version_file(new_table, make_rows):
    t = new_table()
    for i in range(4):
        t.insert(make_rows(2, i * 2))
    t.storage.put(commit_path(3), b'{"commitInfo": {"timestamp": 1, "oper\n')
    with pytest.raises(CorruptLogError) as ei:
        _log(t).load_state()
    assert "00000000000000000003.json" in str(ei.value)
    with pytest.raises(CorruptLogError, match="00000000000000000003.json"):
        ctfile.open_table(t.uri)
    # Versions before the corrupt one stay readable.
    assert _log(t).load_state(2).version == 2


def test_entry_with_wrong_default_row_version_is_corrupt(new_table, make_rows):
    t = new_table()
    t.insert(make_rows(2))
    raw = t.storage.read_bytes(commit_path(1)).replace(b'"defaultRowVersion":1', b'"defaultRowVersion":0')
    t.storage.put(commit_path(1), raw)
    with pytest.raises(CorruptLogError, match="00000000000000000001.json"):
        _log(t).load_state()


def test_non_increasing_timestamp_is_corrupt(new_table, make_rows):
    t = new_table()
    t.insert(make_rows(2))
    ts0 = _log(t).commit_info(0).timestamp
    t.storage.put(commit_path(1), encode_actions([CommitInfo(ts0, "INSERT")]))
    with pytest.raises(CorruptLogError, match="not after version 0"):
        _log(t).load_state()


def _append_entry(t, actions) -> None:
    v = _log(t).latest_version() + 1
    t.storage.put_if_absent(commit_path(v), encode_actions(actions))


@pytest.mark.parametrize(
    "protocol, match",
    [
        (Protocol(min_reader_version=99), "reader version 99"),
        (Protocol(reader_features=("rowLineage", "deletionVectors")), "deletionVectors"),
    ],
)
def test_unsupported_reader_protocol(new_table, make_rows, protocol, match):
    t = new_table()
    t.insert(make_rows(2))
    _append_entry(t, [CommitInfo(_log(t).commit_info(1).timestamp + 1, "UPGRADE"), protocol])
    with pytest.raises(UnsupportedFeatureError, match=match):
        _log(t).load_state()
    with pytest.raises(UnsupportedFeatureError, match=match):
        ctfile.open_table(t.uri)
    # The history before the upgrade stays readable.
    assert _log(t).load_state(1).num_records == 2


def test_unsupported_protocol_in_checkpoint_is_not_skipped(table12):
    log = _log(table12)
    state = log.read_checkpoint(10)
    from dataclasses import replace

    log.write_checkpoint(replace(state, protocol=Protocol(min_reader_version=99)))
    with pytest.raises(UnsupportedFeatureError):
        _log(table12).load_state()


def test_unsupported_writer_protocol_blocks_writes_not_reads(new_table, make_rows):
    t = new_table()
    t.insert(make_rows(2))
    _append_entry(t, [CommitInfo(_log(t).commit_info(1).timestamp + 1, "UPGRADE"), Protocol(min_writer_version=7)])
    t2 = ctfile.open_table(t.uri)
    assert t2.to_arrow().num_rows == 2
    with pytest.raises(UnsupportedFeatureError, match="writer version 7"):
        t2.insert(make_rows(1, 100))
    assert _log(t).latest_version() == 2


# ---------------------------------------------------------------- time travel


def test_version_at_timestamp(table12):
    log = _log(table12)
    ts = [log.commit_info(v).timestamp for v in range(13)]
    assert ts == sorted(set(ts))  # strictly increasing
    for v, t in enumerate(ts):
        assert log.version_at_timestamp(t, latest=12) == v
        if v < 12 and ts[v + 1] - t > 1:
            assert log.version_at_timestamp(t + 1, latest=12) == v
    assert log.version_at_timestamp(ts[-1] + 10_000_000, latest=12) == 12
    # A smaller `latest` caps the answer.
    assert log.version_at_timestamp(ts[-1], latest=8) == 8
    with pytest.raises(VersionNotFoundError, match="before the first available commit"):
        log.version_at_timestamp(ts[0] - 1, latest=12)


def test_entries_are_cached_and_immutable(new_table, make_rows):
    t = new_table()
    t.insert(make_rows(1))
    log = _log(t)
    first = log.read_entry(1)
    assert log.read_entry(1) is first
    assert log.read_entries(0, 1)[1] is first
