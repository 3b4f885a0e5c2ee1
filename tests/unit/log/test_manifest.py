"""ctfile.log.manifest: latest version, checkpoints, replay, time travel."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import xxhash

import ctfile
from ctfile.format.actions import AddPartition, CommitInfo, Protocol, RemovePartition, pending_stats_text
from ctfile.format.entries import encode_entry, encode_entry_objects
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
    """A real LocalStorage that counts directory listings, existence checks and reads."""

    def __init__(self, root):
        super().__init__(root)
        self.listings = 0
        self.exists_calls = 0
        self.reads: list[str] = []

    def list_dir(self, path):
        self.listings += 1
        return super().list_dir(path)

    def exists(self, path):
        self.exists_calls += 1
        return super().exists(path)

    def read_bytes(self, path):
        self.reads.append(path)
        return super().read_bytes(path)


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


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def _edit_checkpoint(raw: bytes, fn) -> bytes:
    """The checkpoint ``raw`` with its Arrow table passed through ``fn``."""
    return _parquet_bytes(fn(pq.read_table(pa.BufferReader(raw))))


def _edit_header(raw: bytes, **fields) -> bytes:
    def fn(t: pa.Table) -> pa.Table:
        lines = [json.loads(x) for x in t.schema.metadata[b"ctfile.checkpoint"].decode().splitlines()]
        lines[0]["checkpoint"].update(fields)
        return t.replace_schema_metadata({"ctfile.checkpoint": "".join(json.dumps(x) + "\n" for x in lines)})

    return _edit_checkpoint(raw, fn)


def _flip_stats_page_byte(raw: bytes) -> bytes:
    """One byte of the compressed data page of the `stats` column changed: the
    page checksum (or zstd) catches it."""
    col = pq.ParquetFile(pa.BufferReader(raw)).metadata.row_group(0).column(7)
    assert col.path_in_schema == "stats"
    at = col.data_page_offset + col.total_compressed_size - 2
    return raw[:at] + bytes([raw[at] ^ 0x5A]) + raw[at + 1:]


def _null_in(name: str):
    def fn(t: pa.Table) -> pa.Table:
        i = t.schema.get_field_index(name)
        col = pa.array([None] + t.column(name).to_pylist()[1:], type=t.schema.field(name).type)
        return t.set_column(i, pa.field(name, col.type), col)

    return fn


CORRUPTIONS = {
    "not-parquet": lambda raw: b"not parquet at all",
    "empty": lambda raw: b"",
    "truncated-half": lambda raw: raw[: len(raw) // 2],
    "truncated-footer": lambda raw: raw[:-9],
    "flipped-page-byte": _flip_stats_page_byte,
    "plain-parquet": lambda raw: _parquet_bytes(pa.table({"a": [1, 2]})),
    "no-key": lambda raw: _edit_checkpoint(raw, lambda t: t.replace_schema_metadata(None)),
    "bad-json-key": lambda raw: _edit_checkpoint(raw, lambda t: t.replace_schema_metadata({"ctfile.checkpoint": "{broken\n"})),
    "header-count": lambda raw: _edit_header(raw, numPartitions=99),
    "header-next-row-id": lambda raw: _edit_header(raw, nextRowId=1),
    "missing-column": lambda raw: _edit_checkpoint(raw, lambda t: t.drop_columns(["numRecords"])),
    "wrong-type": lambda raw: _edit_checkpoint(raw, lambda t: t.set_column(1, "sizeBytes", pc.cast(t.column("sizeBytes"), pa.int32()))),
    "null-required": lambda raw: _edit_checkpoint(raw, _null_in("firstRowId")),
    "negative": lambda raw: _edit_checkpoint(raw, lambda t: t.set_column(1, "sizeBytes", pc.negate(t.column("sizeBytes")))),
    "unsafe-path": lambda raw: _edit_checkpoint(raw, lambda t: t.set_column(
        0, "path", pa.array(["../escape.parquet"] + t.column("path").to_pylist()[1:]))),
    "duplicate-path": lambda raw: _edit_checkpoint(raw, lambda t: t.set_column(
        0, "path", pa.array([t.column("path")[0].as_py()] * t.num_rows))),
}


@pytest.mark.parametrize("corrupt", sorted(CORRUPTIONS))
def test_corrupt_checkpoint_is_skipped(table12, corrupt):
    """SPEC §Checkpoints: a rejected checkpoint makes the reader start from the
    older checkpoint (5) instead; with that one bad too, from version 0."""
    log = _log(table12)
    expected = _full_replay(log, 12)
    changes = ctfile.open_table(table12.uri).changes(start_version=11).to_arrow()
    good = log.storage.read_bytes(checkpoint_path(10))
    log.storage.put(checkpoint_path(10), CORRUPTIONS[corrupt](good))
    with pytest.raises(CorruptLogError):
        log.read_checkpoint(10)
    # The table-level state, read from the footer when it is readable, is that of replay.
    assert ManifestLog(LocalStorage(table12.storage.root)).load_head() == expected.head
    fresh = ManifestLog(LocalStorage(table12.storage.root))
    _assert_same_state(fresh.load_state(), expected)
    assert fresh.load_state(10).version == 10
    # The lazy open: a change scan, then the state built from the files the head read (or older ones).
    lazy = ctfile.open_table(table12.uri)
    assert lazy.changes(start_version=11).to_arrow() == changes
    _assert_same_state(lazy.snapshot().state, expected)
    # And the public API still opens it.
    assert ctfile.open_table(table12.uri).snapshot().num_records == table12.snapshot().num_records
    # With checkpoint 5 unreadable too, replay starts at version 0.
    log.storage.put(checkpoint_path(5), CORRUPTIONS[corrupt](log.storage.read_bytes(checkpoint_path(5))))
    _assert_same_state(ManifestLog(LocalStorage(table12.storage.root)).load_state(), expected)


def test_checkpoint_read_back_is_exact_and_lazy(table12):
    """A checkpoint's partitions equal the replayed ones; their statistics stay
    text until read, and a checkpoint written from them copies that text."""
    log = _log(table12)
    cp = log.read_checkpoint(10)
    replayed = _full_replay(log, 10)
    assert all(pending_stats_text(p) is not None for p in cp.partitions.values())
    before = log.storage.read_bytes(checkpoint_path(10))
    log.write_checkpoint(cp)  # from undecoded statistics
    assert all(pending_stats_text(p) is not None for p in cp.partitions.values())
    assert pq.read_table(pa.BufferReader(log.storage.read_bytes(checkpoint_path(10)))).equals(
        pq.read_table(pa.BufferReader(before)))
    assert cp.partitions == replayed.partitions  # decodes
    assert all(pending_stats_text(p) is None for p in cp.partitions.values())
    eager = log.read_checkpoint(10, decode_stats=True)
    assert all(pending_stats_text(p) is None for p in eager.partitions.values())


def _bad_stats(raw: bytes) -> bytes:
    def fn(t: pa.Table) -> pa.Table:
        texts = t.column("stats").to_pylist()
        texts[0] = texts[0].replace('"numRecords":', '"numRecords":1000')
        return t.set_column(t.schema.get_field_index("stats"), "stats", pa.array(texts))

    return _edit_checkpoint(raw, fn)


def test_invalid_stats_text_fails_on_first_use(table12):
    """SPEC §Checkpoints: statistics are decoded when first needed; a bad one
    fails the read that needs it, and read_checkpoint(decode_stats=True) (what
    vacuum and verify use) rejects the checkpoint up front."""
    log = _log(table12)
    log.storage.put(checkpoint_path(10), _bad_stats(log.storage.read_bytes(checkpoint_path(10))))
    cp = log.read_checkpoint(10)  # accepted: statistics not decoded yet
    first = next(iter(cp.partitions.values()))
    with pytest.raises(CorruptLogError, match=r"00000000000000000010\.checkpoint\.parquet stats of data/.*numRecords"):
        first.stats
    with pytest.raises(CorruptLogError, match="numRecords"):
        log.read_checkpoint(10, decode_stats=True)
    with pytest.raises(CorruptLogError, match="stats of"):
        ctfile.open_table(table12.uri).to_arrow(filter=pc.field("id") > 5)


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


@pytest.mark.parametrize("hint", [b'{"version": 5, "numPartitions": 3}\n', b'{"version": 11}'], ids=["stale", "no-checkpoint"])
def test_latest_version_with_stale_hint(table12, hint):
    """A hint naming an older committed version, with a checkpoint or not
    (SPEC §Log replay: its entry makes it a starting point), is searched
    from without listing."""
    s = CountingStorage(table12.storage.root)
    s.put(LAST_CHECKPOINT, hint)
    log = ManifestLog(s)
    assert log.latest_version() == 12
    assert s.listings == 0
    _assert_same_state(log.load_state(), _full_replay(log, 12))


@pytest.mark.parametrize(
    "hint",
    [b"garbage", b"", b"\xff\xfe", b"null", b"[10]", b'{"version": "10"}', b'{"version": -4}',
     b'{"version": 10.0}', b'{"numPartitions": 1}', b'{"version": 999}'],
)
def test_latest_version_with_garbage_hint(table12, hint):
    s = CountingStorage(table12.storage.root)
    s.put(LAST_CHECKPOINT, hint)
    log = ManifestLog(s)
    assert log.latest_version() == 12
    assert s.listings >= 1  # fell back to listing
    _assert_same_state(log.load_state(), _full_replay(log, 12))


def test_latest_version_from_a_known_version(table12):
    s = CountingStorage(table12.storage.root)
    log = ManifestLog(s)
    assert log.latest_version(known=12) == 12
    assert (s.exists_calls, s.reads, s.listings) == (2, [], 0)  # 12 exists, 13 does not
    assert log.latest_version(known=3) == 12
    assert s.reads == [] and s.listings == 0
    # A known version a vacuum deleted: the search starts from the hint instead.
    s.delete([commit_path(v) for v in range(0, 10)])
    assert log.latest_version(known=3) == 12
    assert s.reads == [LAST_CHECKPOINT] and s.listings == 0


def test_snapshot_after_open_does_not_search_again(table12):
    """open_table finds the latest version from the hint; the refresh of the
    following snapshot() only checks that no newer version exists."""
    from ctfile.table import Table

    s = CountingStorage(table12.storage.root)
    t = Table(s).refresh()
    s.exists_calls, s.reads = 0, []
    assert t.snapshot().version == 12
    assert (s.exists_calls, s.reads, s.listings) == (2, [], 0)
    table12.insert(pa.table({"id": [1000], "x": [1], "s": ["a"]}))  # another writer
    assert t.snapshot().version == 13


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


def _rewrite_entry(t, v: int, fn) -> None:
    """Replace the entry of ``v`` by ``fn(its action objects)``, written as a
    writer would (self-checking), so that the rule under test is what fails."""
    objs = [json.loads(line) for line in t.storage.read_bytes(commit_path(v)).decode().splitlines()]
    t.storage.put(commit_path(v), encode_entry_objects(fn(objs)))


def test_entry_with_wrong_default_row_version_is_corrupt(new_table, make_rows):
    t = new_table()
    t.insert(make_rows(2))
    _rewrite_entry(t, 1, lambda objs: [o if "add" not in o else {"add": {**o["add"], "defaultRowVersion": 0}} for o in objs])
    with pytest.raises(CorruptLogError, match="00000000000000000001.json: add .* has defaultRowVersion 0"):
        _log(t).load_state()


def test_non_increasing_timestamp_is_corrupt(new_table, make_rows):
    t = new_table()
    t.insert(make_rows(2))
    ts0 = _log(t).commit_info(0).timestamp
    t.storage.put(commit_path(1), encode_entry([CommitInfo(ts0, "INSERT")]))
    with pytest.raises(CorruptLogError, match="not after version 0"):
        _log(t).load_state()


def _append_entry(t, actions) -> None:
    v = _log(t).latest_version() + 1
    t.storage.put_if_absent(commit_path(v), encode_entry(actions))


# ---------------------------------------------------------------- self-checking entries, rule 4


def test_update_entry_torn_at_a_line_boundary_is_corrupt(new_table, make_rows):
    """Issue 12, defect 3: dropping the trailing add of an UPDATE's entry made
    every row it rewrote vanish, and the entry read as valid."""
    t = new_table()
    t.insert(make_rows(3))
    t.update(pc.field("id") == 1, {"s": "one"})
    raw = t.storage.read_bytes(commit_path(2))
    lines = raw.split(b"\n")[:-1]
    assert json.loads(lines[-1]).keys() == {"add"}
    t.storage.put(commit_path(2), b"".join(line + b"\n" for line in lines[:-1]))  # the add line is lost
    expected = f"{t.storage.uri}/{commit_path(2)}: entry holds {len(lines) - 1} actions, its commitInfo records {len(lines)}"
    with pytest.raises(CorruptLogError, match=re.escape(expected) + ".*torn or edited"):
        _log(t).read_entry(2)
    with pytest.raises(CorruptLogError, match="torn or edited"):
        ctfile.open_table(t.uri).snapshot().to_arrow()
    assert _log(t).load_state(1).num_records == 3  # the versions before stay readable


def test_commits_write_self_checking_entries(new_table, make_rows):
    t = new_table()
    t.insert(make_rows(3))
    t.update(pc.field("id") == 1, {"s": "one"})
    log = _log(t)
    for v in range(3):
        info = log.commit_info(v)
        lines = t.storage.read_bytes(commit_path(v)).split(b"\n")[:-1]
        assert "commitInfo" in json.loads(lines[0]) and info.num_actions == len(lines)
        assert info.actions_checksum == xxhash.xxh3_128_hexdigest(b"".join(x + b"\n" for x in lines[1:]))


@pytest.mark.parametrize("order", ["add-then-remove", "remove-then-add"])
def test_entry_naming_a_path_twice_is_corrupt_whatever_the_order(new_table, make_rows, order):
    """Issue 12, defect 10: add X then remove X used to replay (X silently
    vanished) while remove X then add X was rejected."""
    t = new_table()
    t.insert(make_rows(2))
    (add,) = [a for a in _log(t).read_entry(1) if isinstance(a, AddPartition)]
    info = CommitInfo(_log(t).commit_info(1).timestamp + 1, "TRANSACTION")
    x = replace(add.partition, path="data/x.parquet", first_row_id=2, default_row_version=2)
    pair = [AddPartition(x), RemovePartition(x, info.timestamp)]
    _append_entry(t, [info, *(pair if order == "add-then-remove" else pair[::-1])])
    with pytest.raises(CorruptLogError, match="data/x.parquet is named by more than one add/remove"):
        _log(t).load_state()
    opened = ctfile.open_table(t.uri)  # finds the schema without decoding the partition actions
    with pytest.raises(CorruptLogError, match="data/x.parquet is named by more than one add/remove"):
        opened.snapshot()


def test_next_row_id_is_the_maximum_over_adds_listed_out_of_order(new_table, make_rows):
    """SPEC §Log replay, step 4: a writer assembling an entry from several
    workers may list its adds out of row-id order; nextRowId is still the
    maximum, so the next insert takes fresh row ids."""
    t = new_table(properties={"ctfile.partitionRows": "2"})
    t.insert(make_rows(5))
    before = ctfile.open_table(t.uri).snapshot().to_arrow(include_hidden=True).sort_by("id")

    def reverse_adds(objs):
        adds = [o for o in objs if "add" in o]
        assert [o["add"]["firstRowId"] for o in adds] == [0, 2, 4]
        return [o for o in objs if "add" not in o] + adds[::-1]

    _rewrite_entry(t, 1, reverse_adds)
    state = _log(t).load_state()
    assert [p.first_row_id for p in state.partitions.values()] == [4, 2, 0]
    assert state.next_row_id == 5
    reread = ctfile.open_table(t.uri)
    assert reread.snapshot().to_arrow(include_hidden=True).sort_by("id") == before
    reread.insert(make_rows(1, start=5))
    after = ctfile.open_table(t.uri).snapshot().to_arrow(include_hidden=True).sort_by("id")
    assert after.column("_ct_row_id").to_pylist() == [0, 1, 2, 3, 4, 5]  # no id taken twice


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
    with pytest.raises(UnsupportedFeatureError, match=r"00000000000000000010\.checkpoint\.parquet: table needs reader version 99"):
        _log(table12).load_state()
    # The lazy open reads the protocol from the checkpoint's footer: the same refusal.
    with pytest.raises(UnsupportedFeatureError, match=r"00000000000000000010\.checkpoint\.parquet: table needs reader version 99"):
        ctfile.open_table(table12.uri)


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
