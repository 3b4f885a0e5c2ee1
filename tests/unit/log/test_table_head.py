"""The table-level state (``TableHead``) and the lazy open it allows: a change
scan from a fresh ``open_table`` decodes the partitions of its interval only
(SPEC §Change scans), and the partition state is built, with every check,
when a snapshot or a write needs it."""

from __future__ import annotations

import json
import sys

import pyarrow as pa
import pytest
import xxhash

import ctfile
from ctfile.format.actions import Partition, partitions_from_columns
from ctfile.format.entries import decode_entry, decode_table_actions
from ctfile.format.errors import CorruptLogError
from ctfile.format.paths import LAST_CHECKPOINT, commit_path
from ctfile.log.manifest import ManifestLog
from ctfile.log.storage import LocalStorage
from ctfile.log.transaction import LARGE_ENTRY_ACTIONS

WIDE = 40  # partitions the wide commit adds


def decoded_partitions(fn) -> tuple[object, int]:
    """``fn()`` and the number of :class:`Partition` descriptors built while it
    ran: from log lines (the dataclass ``__init__``) and from checkpoint rows
    (:func:`partitions_from_columns`, one per row)."""
    count = 0
    init, from_columns = Partition.__init__.__code__, partitions_from_columns.__code__

    def profile(frame, event, arg):
        nonlocal count
        if event == "call":
            if frame.f_code is init:
                count += 1
            elif frame.f_code is from_columns:
                count += len(frame.f_locals["paths"])

    sys.setprofile(profile)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
    return result, count


@pytest.fixture(params=["no-checkpoint", "checkpoint"])
def wide_table(request, new_table, make_rows) -> ctfile.Table:
    """Version 1 adds WIDE one-row partitions (checkpointed or not), version 2 one more."""
    t = new_table(properties={"ctfile.partitionRows": "1"})
    t.insert(make_rows(WIDE))
    if request.param == "checkpoint":
        t.checkpoint()
    t.insert(make_rows(1, start=WIDE))
    return t


def _cold_scan(uri: str) -> pa.Table:
    return ctfile.open_table(uri).changes(start_version=2, end_version=2, information="append_only").to_arrow()


def test_cold_change_scan_decodes_only_its_interval(wide_table):
    result, count = decoded_partitions(lambda: _cold_scan(wide_table.uri))
    assert result.column("id").to_pylist() == [WIDE]
    assert count == 1  # the add of version 2; none of the WIDE of version 1
    # The counter sees the partition state when something needs it.
    snap, count = decoded_partitions(lambda: ctfile.open_table(wide_table.uri).snapshot())
    assert snap.num_records == WIDE + 1 and count >= WIDE + 1


def test_version_schema_properties_history_need_no_partition(wide_table):
    def uses():
        t = ctfile.open_table(wide_table.uri)
        return t.version, t.schema.names, t.properties, t.history(limit=1)[0].version, t.app_version("job")

    (version, names, props, latest, app), count = decoded_partitions(uses)
    assert (version, names, props["ctfile.partitionRows"], latest, app) == (2, ["id", "x", "s"], "1", 2, None)
    # history(limit=1) decodes the entry of version 2 (its one add) to tell
    # whether the commit is captured; none of the WIDE partitions of version 1.
    assert count == 1


def test_head_equals_the_state_of_replay(wide_table):
    log = ManifestLog(LocalStorage(wide_table.storage.root))
    for v in range(3):
        assert log.load_head(v) == log.load_state(v).head


def test_snapshot_after_a_lazy_open_reads_each_file_once(wide_table):
    """The bytes the head read are kept for the state: no file is fetched twice."""

    class Reads(LocalStorage):
        def __init__(self, root):
            super().__init__(root)
            self.reads: list[str] = []

        def read_bytes(self, path):
            self.reads.append(path)
            return super().read_bytes(path)

    from ctfile.table import Table

    s = Reads(wide_table.storage.root)
    t = Table(s)
    t.changes(start_version=2).to_arrow()
    assert t.snapshot().num_records == WIDE + 1
    files = [p for p in s.reads if p != LAST_CHECKPOINT]  # the hint: by the version search, then the checkpoint's
    assert len(files) == len(set(files)), s.reads


def _reseal(data: bytes, edit) -> bytes:
    """Entry ``data`` with ``edit`` applied to its lines after the commitInfo,
    and numActions / actionsChecksum recomputed: damage only a full decode sees."""
    first, rest = data.split(b"\n", 1)
    rest = edit(rest)
    info = json.loads(first)
    info["commitInfo"]["numActions"] = rest.count(b"\n") + 1
    info["commitInfo"]["actionsChecksum"] = xxhash.xxh3_128_hexdigest(rest)
    return json.dumps(info, separators=(",", ":")).encode() + b"\n" + rest


def test_broken_partition_line_outside_the_interval_fails_when_the_state_is_built(new_table, make_rows):
    """An add of version 1 with a negative sizeBytes (the entry's self-check
    recomputed, so only decoding the line finds it): a scan of version 2 does
    not need it; a snapshot does, and fails as the open used to."""
    t = new_table(properties={"ctfile.partitionRows": "1"})
    t.insert(make_rows(3))
    t.insert(make_rows(1, start=3))
    bad = _reseal(t.storage.read_bytes(commit_path(1)), lambda rest: rest.replace(b'"sizeBytes":', b'"sizeBytes":-', 1))
    t.storage.put(commit_path(1), bad)
    with pytest.raises(CorruptLogError, match="sizeBytes") as full:
        decode_entry(bad, version=1, where="v1")
    assert [type(a).__name__ for a in decode_table_actions(bad, version=1, where="v1")] == ["CommitInfo"]

    assert _cold_scan(t.uri).column("id").to_pylist() == [3]
    opened = ctfile.open_table(t.uri)
    with pytest.raises(CorruptLogError, match="00000000000000000001.json line 2.*sizeBytes") as err:
        opened.snapshot()
    assert str(full.value).split(": ", 1)[1] in str(err.value)
    with pytest.raises(CorruptLogError, match="sizeBytes"):
        ctfile.open_table(t.uri).insert(make_rows(1, start=10))


def test_damaged_entry_outside_the_interval_fails_the_open(new_table, make_rows):
    """The self-check (SPEC §Log entries, rule 8) covers every line, decoded or
    not: a changed byte in an add line of version 1 fails the open itself."""
    t = new_table(properties={"ctfile.partitionRows": "1"})
    t.insert(make_rows(3))
    t.insert(make_rows(1, start=3))
    data = t.storage.read_bytes(commit_path(1))
    t.storage.put(commit_path(1), data.replace(b'"numRecords":1', b'"numRecords":2', 1))
    with pytest.raises(CorruptLogError, match="actionsChecksum"):
        ctfile.open_table(t.uri)


def test_metadata_line_among_partition_lines_is_found(new_table, make_rows):
    """A writer may put a metadata action anywhere in an entry, and write it
    with spaces: the head still finds it, as replay does."""
    t = new_table(properties={"ctfile.partitionRows": "1"})
    t.insert(make_rows(3))
    (meta,) = [line for line in t.storage.read_bytes(commit_path(0)).split(b"\n") if line.startswith(b'{"metadata"')]
    body = json.loads(meta)
    body["metadata"]["properties"]["owner"] = "spaced"
    spaced = json.dumps(body).encode()  # `{"metadata": {...}}`: a space after each colon
    assert spaced.startswith(b'{"metadata": {')

    def insert_line(rest: bytes) -> bytes:
        lines = rest.split(b"\n")
        return b"\n".join([*lines[:2], spaced, *lines[2:]])  # between two add lines

    t.storage.put(commit_path(1), _reseal(t.storage.read_bytes(commit_path(1)), insert_line))
    log = ManifestLog(LocalStorage(t.storage.root))
    assert log.load_head().metadata.properties["owner"] == "spaced"
    assert log.load_state().metadata == log.load_head().metadata
    assert ctfile.open_table(t.uri).properties["owner"] == "spaced"


@pytest.mark.parametrize(
    "rows, interval, checkpointed",
    [(LARGE_ENTRY_ACTIONS, None, True), (LARGE_ENTRY_ACTIONS - 1, None, False), (LARGE_ENTRY_ACTIONS, "0", False)],
)
def test_a_large_entry_is_checkpointed(tmp_path, rows, interval, checkpointed):
    """SPEC §Checkpoints: a version whose entry holds LARGE_ENTRY_ACTIONS adds
    and removes is checkpointed whatever the interval (unless checkpoints are
    off), so a later open reads its footer instead of scanning the entry."""
    props = {"ctfile.partitionRows": "1"}
    if interval is not None:
        props["ctfile.checkpointInterval"] = interval
    t = ctfile.create_table(tmp_path / "t", pa.schema([("id", pa.int64())]), properties=props)
    t.insert(pa.table({"id": list(range(rows))}))
    assert (tmp_path / "t" / "_ct_log" / f"{1:020d}.checkpoint.parquet").exists() is checkpointed
    if checkpointed:
        t.insert(pa.table({"id": [-1]}))
        result, count = decoded_partitions(lambda: _cold_scan(str(tmp_path / "t")))
        assert result.column("id").to_pylist() == [-1] and count == 1
