"""The golden tables ``golden/people`` (SPEC.md, Appendix B, written by the
current revision), ``golden/people-r1`` (the same statements, written by
revision 1 and kept so that newer code must keep reading it) and
``golden/people-capture`` (the same statements with change capture on, SPEC
§Change capture, and a sixth version deleting a partition's last row) read
two ways (and ``golden/people-evolved``, the same statements followed by
schema changes, SPEC §Schema evolution, at the end of this file):

* through the public API, which must give the worked example's snapshots,
  row lineage and time travel;
* byte by byte, with the format codec and pyarrow.parquet only, checking the
  rules SPEC.md states for log entries, data files, row lineage and
  checkpoints.

The golden files are a fixed artefact: a change that makes ctfile unable to
read them, or makes them break a SPEC rule, fails here. They are copied to a
temporary directory before use so no test can alter them.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import xxhash

import ctfile
from ctfile.format import actions as A
from ctfile.format import codec, entries, paths
from ctfile.format.errors import CorruptLogError
from ctfile.format.schema import (
    HIDDEN_COLUMNS,
    PARQUET_FIELD_ID_KEY,
    ROW_ID_COLUMN,
    ROW_ID_FIELD_ID,
    ROW_VERSION_COLUMN,
    ROW_VERSION_FIELD_ID,
)
from ctfile.log.manifest import ManifestLog
from ctfile.log.replay import apply_entry
from ctfile.log.storage import LocalStorage

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
# Each generation of the format, with the protocol its version 0 holds.
GENERATIONS = {
    "people": A.Protocol(),
    "people-r1": A.Protocol(1, 1, ("rowLineage", "checkpoints"), ("rowLineage", "checkpoints", "appTransactions")),
    "people-capture": A.Protocol().with_writer_feature(A.FEATURE_CHANGE_CAPTURE),
}
CAPTURE = "people-capture"
sys.path.insert(0, str(HERE))
from make_golden import ROWS_EVOLVED, ROWS_V2, ROWS_V5, ROWS_V6  # noqa: E402

LATEST = 5  # of every generation but people-capture (6)
# The snapshots of Appendix B, and the materialized lineage of §Row lineage:
# version -> {id: (name, row id, row version)}.
LINEAGE = {
    1: {1: ("Jeff", 0, 1), 2: ("Donny", 1, 1)},
    2: {1: ("Jeff", 0, 1), 2: ("Donny", 1, 1), 3: ("Walter", 2, 2), 4: ("Maud", 3, 2), 5: ("Uli", 4, 2)},
    3: {1: ("Jeffrey", 0, 3), 2: ("Donny", 1, 1), 3: ("Walter", 2, 2), 4: ("Maud", 3, 2), 5: ("Uli", 4, 2)},
    4: {1: ("Jeffrey", 0, 3), 2: ("Donny", 1, 1), 3: ("Walter", 2, 2), 4: ("Maude", 3, 4), 5: ("Uli", 4, 2)},
    5: {1: ("Jeffrey", 0, 3), 3: ("Walter", 2, 2), 4: ("Maude", 3, 4)},
}
LINEAGE_CAPTURE_6 = {3: ("Walter", 2, 2), 4: ("Maude", 3, 4)}
OPERATIONS = ["CREATE TABLE", "INSERT", "INSERT", "UPDATE", "UPDATE", "DELETE", "DELETE"]
# The change rows of people-capture, per version: (id, name, row id, row
# version, change type) (SPEC §Change capture).
CHANGE_ROWS = {
    3: [(1, "Jeff", 0, 1, "update_preimage"), (1, "Jeffrey", 0, None, "update_postimage")],
    4: [(4, "Maud", 3, 2, "update_preimage"), (4, "Maude", 3, None, "update_postimage")],
    5: [(2, "Donny", 1, 1, "delete"), (5, "Uli", 4, 2, "delete")],
}


# people-evolved (SPEC §Schema evolution, Appendix B): versions 0-5 are
# those of people, then the schema changes of make_golden.py.
EVOLVED = "people-evolved"
EVOLVED_LATEST = 11
EVOLVED_OPERATIONS = OPERATIONS[:6] + ["SCHEMA CHANGE", "UPDATE", "SCHEMA CHANGE", "SCHEMA CHANGE", "SCHEMA CHANGE", "INSERT"]
WALTER = "walter@example.com"
# Each version's schema: (field id, name, type, nullable) in column order.
PEOPLE_FIELDS = ((1, "id", "long", False), (2, "name", "string", True))
_V6_FIELDS = PEOPLE_FIELDS + ((3, "email", "string", True), (4, "visits", "integer", True))
_V8_FIELDS = ((1, "id", "long", False), (2, "full_name", "string", True), (4, "visits", "long", True))
_V10_FIELDS = ((1, "id", "long", False), (2, "full_name", "string", True), (5, "email", "string", True))
EVOLVED_FIELDS = {**dict.fromkeys(range(6), PEOPLE_FIELDS), 6: _V6_FIELDS, 7: _V6_FIELDS, 8: _V8_FIELDS,
                  9: _V8_FIELDS[:2], 10: _V10_FIELDS, 11: _V10_FIELDS}
# The snapshots from version 6 on, each row in its version's column order,
# with its row id and row version.
EVOLVED_ROWS = {
    6: [((1, "Jeffrey", None, None), 0, 3), ((3, "Walter", None, None), 2, 2), ((4, "Maude", None, None), 3, 4)],
    7: [((1, "Jeffrey", None, None), 0, 3), ((3, "Walter", WALTER, 2), 2, 7), ((4, "Maude", None, None), 3, 4)],
    8: [((1, "Jeffrey", None), 0, 3), ((3, "Walter", 2), 2, 7), ((4, "Maude", None), 3, 4)],
    9: [((1, "Jeffrey"), 0, 3), ((3, "Walter"), 2, 7), ((4, "Maude"), 3, 4)],
    # The email of version 10 is a new column (id 5): Walter's old email (id 3) never reappears.
    10: [((1, "Jeffrey", None), 0, 3), ((3, "Walter", None), 2, 7), ((4, "Maude", None), 3, 4)],
    11: [((1, "Jeffrey", None), 0, 3), ((3, "Walter", None), 2, 7), ((4, "Maude", None), 3, 4),
         ((6, "Bunny", "bunny@example.com"), 15, 11)],
}


def latest(root: Path) -> int:
    return {CAPTURE: 6, EVOLVED: EVOLVED_LATEST, "people-clustered": 6, "people-restored": 7}.get(root.name, LATEST)


def final_lineage(root: Path) -> dict:
    return LINEAGE_CAPTURE_6 if root.name == CAPTURE else LINEAGE[LATEST]


@pytest.fixture(params=sorted(GENERATIONS))
def root(tmp_path, request) -> Path:
    """A copy of one generation's golden table (named like it)."""
    dst = tmp_path / request.param
    shutil.copytree(GOLDEN / request.param, dst)
    return dst


@pytest.fixture(params=[*sorted(GENERATIONS), EVOLVED, "people-clustered", "people-restored"])
def any_root(tmp_path, request) -> Path:
    """A copy of any golden table, ``people-evolved`` included (for the rules
    of the log that do not depend on what the statements were)."""
    dst = tmp_path / request.param
    shutil.copytree(GOLDEN / request.param, dst)
    return dst


@pytest.fixture
def table(root) -> ctfile.Table:
    return ctfile.open_table(str(root))


def rows(t: pa.Table) -> dict[int, str]:
    d = t.to_pydict()
    return dict(zip(d["id"], d["name"]))


def lineage(t: pa.Table) -> dict[int, tuple[str, int, int]]:
    d = t.to_pydict()
    return {
        i: (n, r, v)
        for i, n, r, v in zip(d["id"], d["name"], d[ROW_ID_COLUMN], d[ROW_VERSION_COLUMN])
    }


def raw_entry(root: Path, v: int) -> bytes:
    return (root / paths.commit_path(v)).read_bytes()


def entry(root: Path, v: int) -> list[A.Action]:
    return codec.decode_actions(raw_entry(root, v), where=f"golden v{v}")


def commit_ts(root: Path, v: int) -> int:
    (info,) = [a for a in entry(root, v) if isinstance(a, A.CommitInfo)]
    return info.timestamp


# ---------------------------------------------------------------- through the public API


def test_latest_version(table, root):
    assert table.version == latest(root)
    assert [h.operation for h in reversed(table.history())] == OPERATIONS[: latest(root) + 1]


def test_snapshot_5_is_the_final_rows(table, root):
    assert rows(table.snapshot(5).to_arrow()) == ROWS_V5 == {1: "Jeffrey", 3: "Walter", 4: "Maude"}
    assert rows(table.snapshot().to_arrow()) == (ROWS_V6 if root.name == CAPTURE else ROWS_V5)


def test_snapshot_2_is_the_five_original_rows(table):
    snap = table.snapshot(2)
    assert snap.version == 2
    assert rows(snap.to_arrow()) == ROWS_V2 == {1: "Jeff", 2: "Donny", 3: "Walter", 4: "Maud", 5: "Uli"}


@pytest.mark.parametrize("version", sorted(LINEAGE))
def test_every_version_and_its_lineage(table, version):
    snap = table.snapshot(version)
    assert rows(snap.to_arrow()) == {i: n for i, (n, _, _) in LINEAGE[version].items()}
    assert lineage(snap.to_arrow(include_hidden=True)) == LINEAGE[version]


def test_version_0_is_empty(table):
    snap = table.snapshot(0)
    assert snap.to_arrow().num_rows == 0
    assert snap.schema == pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


def test_updated_rows_keep_their_row_id(table):
    before = lineage(table.snapshot(2).to_arrow(include_hidden=True))
    after = lineage(table.snapshot(5).to_arrow(include_hidden=True))
    # Jeff -> Jeffrey and Maud -> Maude: same row, same row id, new row version.
    assert before[1][0] == "Jeff" and after[1][0] == "Jeffrey"
    assert before[1][1] == after[1][1]
    assert before[4][0] == "Maud" and after[4][0] == "Maude"
    assert before[4][1] == after[4][1]
    assert after[1][2] == 3 and after[4][2] == 4
    # Walter was copied twice and never changed.
    assert before[3] == after[3] == ("Walter", 2, 2)
    # Row ids are unique within every snapshot.
    for v in LINEAGE:
        ids = [r for _, r, _ in lineage(table.snapshot(v).to_arrow(include_hidden=True)).values()]
        assert len(ids) == len(set(ids))


def test_time_travel_by_commit_timestamp(table, root):
    ts2 = commit_ts(root, 2)
    at = dt.datetime.fromtimestamp(ts2 / 1000, tz=dt.timezone.utc)
    assert table.snapshot(timestamp=at).version == 2
    assert table.snapshot(timestamp=at.isoformat()).version == 2
    assert table.snapshot(timestamp=at - dt.timedelta(milliseconds=1)).version == 1
    last = dt.datetime.fromtimestamp(commit_ts(root, latest(root)) / 1000, tz=dt.timezone.utc)
    assert table.snapshot(timestamp=last).version == latest(root)
    with pytest.raises(ctfile.VersionNotFoundError):  # after the latest commit (SPEC §Log replay)
        table.snapshot(timestamp=last + dt.timedelta(milliseconds=1))
    with pytest.raises(ctfile.VersionNotFoundError):
        table.snapshot(timestamp=dt.datetime.fromtimestamp((commit_ts(root, 0) - 1) / 1000, tz=dt.timezone.utc))


def test_hidden_columns_are_not_in_ordinary_reads(table):
    snap = table.snapshot()
    assert snap.schema.names == ["id", "name"]
    assert snap.to_arrow().column_names == ["id", "name"]
    for b in snap.to_batches():
        assert b.schema.names == ["id", "name"]
    assert table.snapshot(3).to_arrow(columns=["name"]).column_names == ["name"]
    with pytest.raises(ctfile.InvalidArgumentError):
        snap.to_arrow(columns=[ROW_ID_COLUMN])
    assert snap.to_arrow(include_hidden=True).column_names == ["id", "name", *HIDDEN_COLUMNS]


def test_reads_without_checkpoint_or_hint_agree(root):
    """SPEC §Checkpoints: the hint and checkpoint are optional; replay from 0 gives the same."""
    (root / paths.checkpoint_path(5)).unlink()
    (root / paths.LAST_CHECKPOINT).unlink()
    t = ctfile.open_table(str(root))
    assert t.version == latest(root)
    assert lineage(t.snapshot().to_arrow(include_hidden=True)) == final_lineage(root)


def test_a_corrupt_checkpoint_is_skipped(root):
    (root / paths.checkpoint_path(5)).write_bytes(b"not parquet")
    t = ctfile.open_table(str(root))
    assert lineage(t.snapshot().to_arrow(include_hidden=True)) == final_lineage(root)


# ---------------------------------------------------------------- the raw files against SPEC.md


def test_log_directory_names(any_root):
    root = any_root
    names = sorted(p.name for p in (root / paths.LOG_DIR).iterdir())
    # people-clustered keeps the default interval (100): no checkpoint yet.
    checkpoints = {EVOLVED: (5, 10), "people-clustered": (), "people-restored": (5, 7)}.get(root.name, (5,))
    assert names == sorted(
        [f"{v:020d}.json" for v in range(latest(root) + 1)]
        + [f"{v:020d}.checkpoint.parquet" for v in checkpoints] + (["_last_checkpoint"] if checkpoints else [])
    )
    for v in range(latest(root) + 1):
        assert re.fullmatch(r"[0-9]{20}\.json", f"{v:020d}.json")
        assert paths.parse_commit_name(f"{v:020d}.json") == v


def test_entries_are_newline_terminated_single_key_lines(any_root):
    root = any_root
    for v in range(latest(root) + 1):
        data = raw_entry(root, v)
        assert data.endswith(b"\n")
        text = data.decode("utf-8")
        for line in text[:-1].split("\n"):
            assert line.strip(), f"v{v}: blank line"
            obj = json.loads(line)
            assert isinstance(obj, dict) and len(obj) == 1
            assert next(iter(obj)) in {"commitInfo", "protocol", "metadata", "add", "remove", "change", "txn"}
        # A cut-short entry is corrupt.
        with pytest.raises(CorruptLogError, match="truncated"):
            codec.decode_actions(data[:-1], where=f"v{v}")


def test_entries_check_themselves_or_are_of_revision_1(any_root):
    """SPEC §Log entries, rule 8, recomputed by hand: a commitInfo (first line)
    records numActions and the XXH3-128 of the other lines, or (revision 1)
    neither."""
    root = any_root
    for v in range(latest(root) + 1):
        data = raw_entry(root, v)
        lines = data.split(b"\n")[:-1]
        info = json.loads(lines[0])["commitInfo"]
        if "numActions" not in info and "actionsChecksum" not in info:
            continue
        assert info["numActions"] == len(lines)
        assert info["actionsChecksum"] == xxhash.xxh3_128_hexdigest(b"".join(x + b"\n" for x in lines[1:]))
        entries.decode_entry(data, version=v, where=f"v{v}")
        with pytest.raises(CorruptLogError, match="torn or edited"):
            entries.decode_entry(b"".join(x + b"\n" for x in lines[:-1]), version=v, where=f"v{v}")


def test_entry_rules(root):
    """SPEC §Log entries rules 1-7 and §Row lineage, checked by hand on the golden log."""
    live: dict[str, A.Partition] = {}
    next_row_id = 0
    prev_ts = None
    capture = root.name == CAPTURE
    for v in range(latest(root) + 1):
        actions = entry(root, v)
        entries.validate_commit_entry(actions, version=v, where=f"v{v}")
        infos = [a for a in actions if isinstance(a, A.CommitInfo)]
        assert len(infos) == 1  # rule 1
        info = infos[0]
        assert isinstance(actions[0], A.CommitInfo)  # SHOULD: commitInfo first
        assert info.operation == OPERATIONS[v]
        assert info.read_version == (None if v == 0 else v - 1)
        assert info.txn_id and re.fullmatch(r"[0-9a-f]{32}", info.txn_id)
        if v == 0:  # rule 2, §Creating a table
            kinds = [type(a) for a in actions]
            assert kinds == [A.CommitInfo, A.Protocol, A.Metadata]
            assert actions[1] == GENERATIONS[root.name]
            assert info.data_change is False
            assert actions[2].created_time == info.timestamp
            assert [f.id for f in actions[2].schema.fields] == [1, 2]
        else:
            assert not any(isinstance(a, (A.Protocol, A.Metadata)) for a in actions)
        if prev_ts is not None:  # rule 6
            assert info.timestamp > prev_ts
        prev_ts = info.timestamp
        counter = next_row_id
        for a in actions:
            if isinstance(a, A.RemovePartition):  # rule 4; the full descriptor
                assert live.pop(a.path) == a.partition
                assert a.deletion_timestamp == info.timestamp
                assert a.data_change is True
                # SPEC §Change capture: only v6 of people-capture deletes a whole partition.
                assert a.deletes_all_rows == (capture and v == 6)
            if isinstance(a, A.ChangeFile):
                assert capture and v in CHANGE_ROWS
                assert re.fullmatch(rf"_ct_changes/change-{info.txn_id}-[0-9]{{5,}}\.parquet", a.path)
            if isinstance(a, A.AddPartition):
                p = a.partition
                assert p.path not in live  # rule 4
                assert p.default_row_version == v  # rule 3
                assert p.first_row_id == counter  # consecutive ranges in entry order
                counter += p.num_records
                next_row_id = max(next_row_id, p.first_row_id + p.num_records)
                assert a.data_change is True
                # §Table layout: data/part-<txnId>-<seq>.parquet
                assert paths.validate_relative_path(p.path, where="test") == p.path
                assert re.fullmatch(rf"data/part-{info.txn_id}-[0-9]{{5,}}\.parquet", p.path)
                live[p.path] = p
        assert next_row_id == counter
        changes = [a for a in actions if isinstance(a, A.ChangeFile)]
        assert len(changes) == (1 if capture and v in CHANGE_ROWS else 0)
    assert next_row_id == 13
    assert len(live) == (1 if capture else 2)


def _parquet(root: Path, p: A.Partition) -> tuple[bytes, pq.ParquetFile]:
    data = (root / p.path).read_bytes()
    return data, pq.ParquetFile(pa.BufferReader(data))


def _all_adds(root: Path) -> list[tuple[int, A.Partition]]:
    return [(v, a.partition) for v in range(LATEST + 1) for a in entry(root, v) if isinstance(a, A.AddPartition)]


def test_data_files_match_their_add(root):
    """SPEC §Micro-partition files and §Statistics."""
    schema = next(a for a in entry(root, 0) if isinstance(a, A.Metadata)).schema
    adds = _all_adds(root)
    assert len(adds) == 6
    for v, p in adds:
        data, pf = _parquet(root, p)
        assert len(data) == p.size_bytes
        assert p.checksum == xxhash.xxh3_128_hexdigest(data)
        assert pf.metadata.num_rows == p.num_records
        arrow = pf.schema_arrow
        ids = [int(f.metadata[PARQUET_FIELD_ID_KEY]) for f in arrow]
        has_hidden = ROW_ID_COLUMN in arrow.names
        if has_hidden:
            assert arrow.names == ["id", "name", ROW_ID_COLUMN, ROW_VERSION_COLUMN]
            assert ids == [1, 2, ROW_ID_FIELD_ID, ROW_VERSION_FIELD_ID]
        else:  # a plain insert: no hidden columns at all
            assert OPERATIONS[v] == "INSERT"
            assert arrow.names == ["id", "name"] and ids == [1, 2]
        t = pf.read()
        s = p.stats
        assert s is not None and s.num_records == p.num_records
        for f in schema.fields:
            col = t.column(f.name)
            assert s.null_count[f.id] == col.null_count
            assert s.min_values[f.id] == pa.compute.min(col).as_py()
            assert s.max_values[f.id] == pa.compute.max(col).as_py()
        for name, fid in ((ROW_ID_COLUMN, ROW_ID_FIELD_ID), (ROW_VERSION_COLUMN, ROW_VERSION_FIELD_ID)):
            stored = t.column(name) if has_hidden else pa.nulls(p.num_records, pa.int64())
            assert s.null_count[fid] == stored.null_count  # stored values, before inheritance
        assert p.fresh_rows == (p.num_records if OPERATIONS[v] == "INSERT" else 0)


def test_stored_hidden_values_follow_the_row_kinds(root, table):
    """SPEC §Hidden columns: materializing the raw files by the SPEC formula
    gives what ctfile reads, and the stored values are the table's row kinds."""
    for v in range(1, latest(root) + 1):
        live = table.snapshot(v).partitions
        expected = LINEAGE.get(v, LINEAGE_CAPTURE_6)
        got = {}
        for p in live:
            _, pf = _parquet(root, p)
            t = pf.read().to_pydict()
            n = p.num_records
            rid = t.get(ROW_ID_COLUMN, [None] * n)
            rv = t.get(ROW_VERSION_COLUMN, [None] * n)
            for pos in range(n):
                row_id = rid[pos] if rid[pos] is not None else p.first_row_id + pos
                row_version = rv[pos] if rv[pos] is not None else p.default_row_version
                got[t["id"][pos]] = (t["name"][pos], row_id, row_version)
                # Stored null row version <=> the row was written (inserted or changed) by
                # the version that added the partition.
                assert (rv[pos] is None) == (row_version == p.default_row_version)
                assert rv[pos] is None or rv[pos] < p.default_row_version
                if rid[pos] is None:  # fresh row: both inherited
                    assert rv[pos] is None
        assert got == expected


def test_checkpoint_file(root):
    """SPEC §Checkpoints: a Parquet file, one row per live partition in the
    typed columns of the SPEC table, the header, protocol, metadata and txn
    lines as NDJSON under the key-value metadata key ``ctfile.checkpoint``."""
    path = root / paths.checkpoint_path(5)
    pf = pq.ParquetFile(path)
    kv = pf.metadata.metadata
    raw = kv[b"ctfile.checkpoint"]
    assert raw.endswith(b"\n")
    actions = codec.decode_actions(raw, where="checkpoint 5")
    header = actions[0]
    assert isinstance(header, A.CheckpointHeader)
    assert isinstance(actions[1], A.Protocol) and isinstance(actions[2], A.Metadata)
    assert all(isinstance(a, A.SetTransaction) for a in actions[3:])
    assert header.version == 5 and header.num_partitions == pf.metadata.num_rows == 2
    assert header.timestamp == commit_ts(root, 5)
    assert header.next_row_id == 13
    # Typed columns, read with pyarrow.parquet only; statistics are the JSON text of an add's stats.
    schema = pf.schema_arrow
    assert schema.names == ["path", "sizeBytes", "numRecords", "firstRowId", "defaultRowVersion",
                            "modificationTime", "checksum", "stats"]
    for name in schema.names:
        f = schema.field(name)
        if name in ("path", "checksum", "stats"):
            assert f.type == pa.string()
        else:
            assert f.type == pa.int64()
        assert f.nullable == (name in ("checksum", "stats"))
    assert all(rg.column(i).compression == "ZSTD" for rg in map(pf.metadata.row_group, range(pf.num_row_groups))
               for i in range(rg.num_columns))
    rows_ = pq.read_table(path).to_pylist()
    # Equal to the replayed state of version 5, descriptors as originally added.
    state = None
    for v in range(LATEST + 1):
        state = apply_entry(state, v, entry(root, v), where=f"v{v}")
    assert [r["path"] for r in rows_] == list(state.partitions)
    for r in rows_:
        add = codec.action_to_json(A.AddPartition(state.partitions[r["path"]], data_change=False))["add"]
        assert json.loads(r.pop("stats")) == add.pop("stats")
        assert r == {k: v for k, v in add.items() if k != "dataChange"}
    cp = ManifestLog(LocalStorage(str(root))).read_checkpoint(5)
    assert cp == state
    assert json.loads((root / paths.LAST_CHECKPOINT).read_text()) == {"version": 5, "numPartitions": 2}


def test_change_files_of_people_capture(tmp_path):
    """SPEC §Change capture, read with pyarrow.parquet only: each change file
    named by an entry has the recorded size, checksum, row count and
    statistics, the columns and field ids of the layout, rows that follow the
    rules, and exactly the old and new images of its commit."""
    from ctfile.format.change_files import CHANGE_TYPE_FIELD_ID, check_change_rows

    root = tmp_path / CAPTURE
    shutil.copytree(GOLDEN / CAPTURE, root)
    named = set()
    for v in range(latest(root) + 1):
        changes = [a for a in entry(root, v) if isinstance(a, A.ChangeFile)]
        got = []
        for c in changes:
            named.add(c.path)
            data = (root / c.path).read_bytes()
            assert len(data) == c.size_bytes and c.checksum == xxhash.xxh3_128_hexdigest(data)
            pf = pq.ParquetFile(pa.BufferReader(data))
            arrow = pf.schema_arrow
            assert arrow.names == ["id", "name", ROW_ID_COLUMN, ROW_VERSION_COLUMN, "_ct_change_type"]
            assert [int(f.metadata[PARQUET_FIELD_ID_KEY]) for f in arrow] == [
                1, 2, ROW_ID_FIELD_ID, ROW_VERSION_FIELD_ID, CHANGE_TYPE_FIELD_ID]
            t = pf.read()
            assert t.num_rows == c.num_records == c.stats.num_records
            check_change_rows(t, uri=str(root), path=c.path, version=v)
            for fid, name in ((1, "id"), (2, "name"), (ROW_ID_FIELD_ID, ROW_ID_COLUMN)):
                assert c.stats.min_values[fid] == pa.compute.min(t.column(name)).as_py()
                assert c.stats.max_values[fid] == pa.compute.max(t.column(name)).as_py()
                assert c.stats.null_count[fid] == 0
            got += [tuple(r.values()) for r in t.to_pylist()]
        assert got == CHANGE_ROWS.get(v, []), v
    assert named == {f"_ct_changes/{p.name}" for p in (root / paths.CHANGES_DIR).iterdir()}
    (rm,) = [a for a in entry(root, 6) if isinstance(a, A.RemovePartition)]
    assert rm.deletes_all_rows and rm.partition.num_records == 1
    t = ctfile.open_table(str(root))
    assert lineage(t.snapshot(6).to_arrow(include_hidden=True)) == LINEAGE_CAPTURE_6
    assert rows(t.snapshot(6).to_arrow()) == ROWS_V6


def test_readers_ignore_unknown_actions_and_fields(any_root):
    """SPEC §Log entries: unknown action keys and unknown fields are ignored."""
    root = any_root
    data = raw_entry(root, 3)
    lines = [json.loads(line) for line in data.decode().split("\n") if line]
    for obj in lines:
        (body,) = obj.values()
        body["futureField"] = {"x": [1, 2]}
        if "stats" in body:
            body["stats"]["futureStat"] = {"1": 0}
    lines.insert(1, {"futureAction": {"anything": True}})
    lines.append({"futureScalarAction": 7})
    mutated = "".join(json.dumps(o) + "\n" for o in lines).encode()
    assert codec.decode_actions(mutated, where="mutated v3") == entry(root, 3)
    # But a line with two keys is corrupt.
    bad = data + b'{"add": {}, "remove": {}}\n'
    with pytest.raises(CorruptLogError):
        codec.decode_actions(bad, where="bad v3")


def test_lines_split_only_at_newline(tmp_path):
    """SPEC §Log entries: U+2028, U+2029 and U+0085 inside strings (ctfile writes
    them unescaped, e.g. in string statistics) do not end a line."""
    text = ["a\u2028b", "c\u2029d", "e\x85f", "plain"]
    t = ctfile.create_table(str(tmp_path / "t"), pa.schema([("s", pa.string())]), description="x\u2028y")
    t.insert(pa.table({"s": text}))
    t2 = ctfile.open_table(str(tmp_path / "t"))
    assert sorted(t2.to_arrow().column("s").to_pylist()) == sorted(text)
    assert t2.snapshot().metadata.description == "x\u2028y"


# ---------------------------------------------------------------- people-evolved (SPEC §Schema evolution)


@pytest.fixture
def evolved_root(tmp_path) -> Path:
    dst = tmp_path / EVOLVED
    shutil.copytree(GOLDEN / EVOLVED, dst)
    return dst


@pytest.fixture
def evolved(evolved_root) -> ctfile.Table:
    return ctfile.open_table(str(evolved_root))


def fields_of(schema) -> tuple:
    return tuple((f.id, f.name, f.type, f.nullable) for f in schema.fields)


def evolved_snapshot(v: int) -> list[tuple]:
    """Version ``v`` of Appendix B: (row, row id, row version) by id."""
    if v in EVOLVED_ROWS:
        return EVOLVED_ROWS[v]
    return [((i, n), r, rv) for i, (n, r, rv) in sorted(LINEAGE.get(v, {}).items())]


def test_evolved_history(evolved):
    assert evolved.version == EVOLVED_LATEST
    assert [h.operation for h in reversed(evolved.history())] == EVOLVED_OPERATIONS
    got = {r[0][0]: (r[0][1], r[0][2]) for r in EVOLVED_ROWS[EVOLVED_LATEST]}
    assert got == ROWS_EVOLVED  # what make_golden.py checked when it wrote the table


@pytest.mark.parametrize("version", range(EVOLVED_LATEST + 1))
def test_evolved_every_version_in_its_schema(evolved, version):
    """SPEC §Schema evolution, reader requirements: a snapshot of version v
    reads every partition into the schema of v, by field id."""
    snap = evolved.snapshot(version)
    want_fields = EVOLVED_FIELDS[version]
    assert fields_of(snap.table_schema) == want_fields
    names = [n for _, n, _, _ in want_fields]
    assert snap.schema.names == names
    want = evolved_snapshot(version)
    t = snap.to_arrow(include_hidden=True).sort_by("id")
    assert t.column_names == names + list(HIDDEN_COLUMNS)
    assert [tuple(r.values()) for r in t.select(names).to_pylist()] == [r for r, _, _ in want]
    assert list(zip(t.column(ROW_ID_COLUMN).to_pylist(), t.column(ROW_VERSION_COLUMN).to_pylist())) == [
        (rid, rv) for _, rid, rv in want]
    plain = snap.to_arrow().sort_by("id")
    assert plain.schema == snap.schema and [tuple(r.values()) for r in plain.to_pylist()] == [r for r, _, _ in want]
    streamed = pa.Table.from_batches(list(snap.to_batches()), schema=snap.schema).sort_by("id")
    assert streamed.equals(plain)


def test_evolved_types_are_those_of_each_version(evolved):
    """visits is read as integer before the widening of version 8 and as long
    from it, from the same file; email of version 6 has its comment."""
    assert evolved.snapshot(7).schema.field("visits").type == pa.int32()
    assert evolved.snapshot(8).schema.field("visits").type == pa.int64()
    assert evolved.snapshot(6).table_schema.field("email").metadata == {"comment": "primary contact"}
    assert evolved.snapshot(10).table_schema.field("email").metadata == {}


def test_evolved_field_ids_and_last_field_id(evolved_root, evolved):
    """SPEC §Schema evolution, id assignment: new fields take ids above
    lastFieldId, which a schema written without its highest id records."""
    assigned = {v: evolved.snapshot(v).metadata.assigned_field_ids for v in range(EVOLVED_LATEST + 1)}
    assert assigned == {**dict.fromkeys(range(6), 2), **dict.fromkeys(range(6, 10), 4), 10: 5, 11: 5}
    raw = {}
    for v in range(EVOLVED_LATEST + 1):
        for line in raw_entry(evolved_root, v).decode().splitlines():
            if line.startswith('{"metadata"'):
                raw[v] = json.loads(line)["metadata"].get("lastFieldId")
    assert raw == {0: None, 6: None, 8: None, 9: 4, 10: None}
    assert evolved.snapshot(9).metadata.last_field_id == 4


def test_evolved_protocol_feature_from_version_8(evolved_root, evolved):
    """SPEC §Schema evolution, protocol: adding columns (version 6) needs no
    feature; the rename, widening and drop of version 8 add schemaEvolution,
    in the entry of version 8."""
    for v in range(EVOLVED_LATEST + 1):
        p = evolved.snapshot(v).protocol
        has = A.FEATURE_SCHEMA_EVOLUTION in p.reader_features
        assert has == (v >= 8) and (A.FEATURE_SCHEMA_EVOLUTION in p.writer_features) == has, v
    protocols = {v: a for v in range(EVOLVED_LATEST + 1) for a in entry(evolved_root, v) if isinstance(a, A.Protocol)}
    assert sorted(protocols) == [0, 8]
    assert protocols[8] == protocols[0].with_reader_feature(A.FEATURE_SCHEMA_EVOLUTION)


def test_evolved_schema_change_entries(evolved_root):
    """A schema change is a metadata-only commit: commitInfo (SCHEMA CHANGE,
    dataChange false, the changes), metadata, and at version 8 protocol."""
    want = {
        6: [{"change": "add", "path": "email", "detail": "string"}, {"change": "add", "path": "visits", "detail": "integer"}],
        8: [{"change": "rename", "path": "name", "detail": "full_name"},
            {"change": "widen", "path": "visits", "detail": "integer -> long"}, {"change": "drop", "path": "email"}],
        9: [{"change": "drop", "path": "visits"}],
        10: [{"change": "add", "path": "email", "detail": "string"}],
    }
    for v in range(6, EVOLVED_LATEST + 1):
        actions = entry(evolved_root, v)
        entries.validate_commit_entry(actions, version=v, where=f"v{v}")
        info = actions[0]
        assert isinstance(info, A.CommitInfo) and info.operation == EVOLVED_OPERATIONS[v] and info.read_version == v - 1
        kinds = [type(a) for a in actions[1:]]
        if v in want:
            assert info.data_change is False and info.operation_parameters == {"changes": want[v]}
            assert kinds == ([A.Protocol] if v == 8 else []) + [A.Metadata], v
            assert fields_of(actions[-1].schema) == EVOLVED_FIELDS[v]
        else:
            assert info.data_change is True and A.Metadata not in kinds and A.Protocol not in kinds, v


def test_evolved_data_files_keep_their_field_ids(evolved_root, evolved):
    """SPEC §Schema evolution: no file is rewritten by a schema change, and
    later commits write the new schema's names and ids. The UPDATE of
    version 7 wrote email (3) and visits (4); the INSERT of version 11 writes
    full_name under id 2 and the new email under id 5."""
    by_version = {v: a.partition for v in range(EVOLVED_LATEST + 1) for a in entry(evolved_root, v)
                  if isinstance(a, A.AddPartition)}
    assert sorted(by_version) == [1, 2, 3, 4, 5, 7, 11]
    for v, want in ((7, [("id", 1), ("name", 2), ("email", 3), ("visits", 4), (ROW_ID_COLUMN, ROW_ID_FIELD_ID),
                         (ROW_VERSION_COLUMN, ROW_VERSION_FIELD_ID)]),
                    (11, [("id", 1), ("full_name", 2), ("email", 5)])):
        _, pf = _parquet(evolved_root, by_version[v])
        assert [(f.name, int(f.metadata[PARQUET_FIELD_ID_KEY])) for f in pf.schema_arrow] == want, v
    p7 = by_version[7]
    assert p7.stats.min_values[3] == WALTER and p7.stats.min_values[4] == 2 and p7.stats.null_count[3] == 1
    for p in evolved.snapshot(EVOLVED_LATEST).partitions:  # written by versions 5, 7 and 11, none rewritten since
        data, _ = _parquet(evolved_root, p)
        assert len(data) == p.size_bytes and xxhash.xxh3_128_hexdigest(data) == p.checksum
    # An engine matching columns by name would read full_name of the older files as nulls.
    with pytest.raises(ctfile.UnsupportedFeatureError, match="renamed, dropped or widened"):
        evolved.snapshot(EVOLVED_LATEST).to_dataset()


def change_rows(cs) -> list[tuple]:
    """The rows of a change scan as tuples, in output order, METADATA$ROW_ID left out."""
    return [tuple(v for k, v in r.items() if k != "METADATA$ROW_ID") for r in cs.to_arrow().to_pylist()]


def test_evolved_change_scans_in_the_end_schema(evolved):
    """SPEC §Change scans, schema changes: rows in the schema of the end of
    the interval; old images projected into it; pairs compared in it; schema
    changes are not data changes."""
    t = evolved
    u, d, i = ("DELETE", True), ("INSERT", True), ("INSERT", False)
    cs = t.changes(start_version=7, end_version=7)  # the end schema is version 7's
    assert cs.schema.names[:4] == ["id", "name", "email", "visits"]
    assert change_rows(cs) == [(3, "Walter", None, None, *u), (3, "Walter", WALTER, 2, *d)]
    cs = t.changes(start_version=7, end_version=8)  # renamed, widened, email dropped
    assert cs.schema.names[:3] == ["id", "full_name", "visits"] and cs.schema.field("visits").type == pa.int64()
    assert change_rows(cs) == [(3, "Walter", None, *u), (3, "Walter", 2, *d)]
    assert [r["op"] for r in t.changes(start_version=7, end_version=8, changelog="op").to_arrow().to_pylist()] == [2, 3]
    # Ending at 9, the UPDATE changed only dropped columns: its images are equal, no pair.
    assert t.changes(start_version=7, end_version=9).to_arrow().num_rows == 0
    assert t.changes(start_version=7, end_version=9, information="audit").to_arrow().num_rows == 0
    # Versions 8-10 change only the schema.
    for info in ("default", "append_only", "audit"):
        cs = t.changes(start_version=8, end_version=10, information=info)
        assert cs.plan_shape.value == "EMPTY" and cs.to_arrow().num_rows == 0
    # 6..11: Walter's update is invisible in the schema of 11 (email is the new column 5).
    assert change_rows(t.changes(start_version=6, end_version=11)) == [(6, "Bunny", "bunny@example.com", *i)]
    audit = t.changes(start_version=6, end_version=11, information="audit").to_arrow().to_pylist()
    assert [(r["id"], r["METADATA$COMMIT_VERSION"]) for r in audit] == [(6, 11)]
    # 5..7: the DELETE of version 5 in the schema of 7 (email and visits null), then Walter's pair.
    rows = change_rows(t.changes(start_version=5, end_version=7))
    assert sorted(rows, key=repr) == sorted([(2, "Donny", None, None, "DELETE", False), (5, "Uli", None, None, "DELETE", False),
                                             (3, "Walter", None, None, *u), (3, "Walter", WALTER, 2, *d)], key=repr)
    # The whole history in the schema of 11: the rows of version 11 as inserts.
    rows = change_rows(t.changes(start_version=1, end_version=11))
    assert sorted(rows, key=repr) == [(*r, *i) for r, _, _ in EVOLVED_ROWS[11]]
    assert sorted(change_rows(t.changes(start_version=1, information="append_only")), key=repr) == [
        (1, "Jeff", None, *i), (2, "Donny", None, *i), (3, "Walter", None, *i), (4, "Maud", None, *i),
        (5, "Uli", None, *i), (6, "Bunny", "bunny@example.com", *i)]
    # A filter names the columns of the end schema.
    assert change_rows(t.changes(start_version=7, end_version=8, filter=pc.field("visits") == 2)) == [(3, "Walter", 2, "INSERT", False)]


def test_evolved_checkpoint_10_is_the_replayed_state(evolved_root):
    """SPEC §Checkpoints: the checkpoint of version 10 holds its protocol (with
    schemaEvolution), its metadata (the schema with the new email, id 5) and
    its live partitions, equal to the replay of entries 0-10; reading
    without checkpoints gives the same table."""
    state = None
    for v in range(11):
        state = apply_entry(state, v, entry(evolved_root, v), where=f"v{v}")
    cp = ManifestLog(LocalStorage(str(evolved_root))).read_checkpoint(10)
    assert cp == state
    assert fields_of(cp.metadata.schema) == EVOLVED_FIELDS[10]
    assert A.FEATURE_SCHEMA_EVOLUTION in cp.protocol.reader_features
    assert json.loads((evolved_root / paths.LAST_CHECKPOINT).read_text()) == {"version": 10, "numPartitions": 2}
    with_cp = ctfile.open_table(str(evolved_root)).snapshot().to_arrow(include_hidden=True)
    for v in (5, 10):
        (evolved_root / paths.checkpoint_path(v)).unlink()
    (evolved_root / paths.LAST_CHECKPOINT).unlink()
    replayed = ctfile.open_table(str(evolved_root)).snapshot().to_arrow(include_hidden=True)
    assert replayed.sort_by("id").equals(with_cp.sort_by("id"))


# ---------------------------------------------------------------- people-streams (revision 5)

STREAM_STATES = [  # (sequence, offset, initialRows, claim end or None): SPEC Appendix B
    (0, 2, True, None), (1, 2, True, 2), (2, 2, False, None), (3, 2, False, 3), (4, 3, False, None),
    (5, 3, False, 5), (6, 5, False, None),
]
KEPT_STATES = STREAM_STATES[4:]  # the writer deleted those below the current sequence minus two


@pytest.fixture
def streams_root(tmp_path) -> Path:
    """Copies of ``people-streams`` and ``people-changes`` side by side."""
    for name in ("people-streams", "people-changes"):
        shutil.copytree(GOLDEN / name, tmp_path / name)
    return tmp_path


def test_streams_states_follow_the_claim_protocol(streams_root):
    from ctfile.format.streams import STREAMS_DIR, decode_state, parse_state_name

    d = streams_root / "people-streams" / STREAMS_DIR
    assert [p.name for p in d.iterdir()] == ["people_stream"]
    files = sorted((d / "people_stream").iterdir())
    states = [decode_state(p.read_bytes(), where=p.name) for p in files]
    assert [parse_state_name(p.name) for p in files] == [s.sequence for s in states]
    got = [(s.sequence, s.offset, s.initial_rows, s.claim.end if s.claim else None) for s in states]
    assert got == KEPT_STATES
    people = ctfile.open_table(str(streams_root / "people-streams"))
    changes = ctfile.open_table(str(streams_root / "people-changes"))
    assert {s.stream_id for s in states} == {states[0].stream_id} and {s.table_id for s in states} == {people.table_id}
    assert all(s.claim.target_table_id == changes.table_id for s in states if s.claim)
    # Each claim's consumption is the target commit whose txn has the claim's sequence.
    txns = {}
    for entry_version in range(changes.version + 1):
        entry = changes.log.read_entries(entry_version, entry_version)[0]
        txns.update({entry_version: a.version for a in entry if isinstance(a, A.SetTransaction)})
    assert txns == {1: 1, 3: 3, 5: 5}
    assert changes.app_version(states[0].app_id) == 5


def test_streams_protocol_feature_from_the_create_stream_commit(streams_root):
    people = ctfile.open_table(str(streams_root / "people-streams"))
    assert [h.operation for h in reversed(people.history())] == [
        "CREATE TABLE", "INSERT", "CREATE STREAM", "INSERT", "UPDATE", "UPDATE", "DELETE",
    ]
    entry = people.log.read_entries(2, 2)[0]
    assert {type(a) for a in entry} == {A.CommitInfo, A.Protocol}
    (protocol,) = [a for a in entry if isinstance(a, A.Protocol)]
    assert protocol == A.Protocol().with_writer_feature(A.FEATURE_STREAMS)


def test_streams_consumptions_are_the_papers(streams_root):
    from make_golden import CONSUMED

    changes = ctfile.open_table(str(streams_root / "people-changes"))
    for version, expected in zip((1, 3, 5), CONSUMED):
        rows = [tuple(r.values()) for r in changes.snapshot(version).to_arrow().to_pylist()]
        assert sorted(rows, key=str) == sorted(expected, key=str)


def test_streams_pending_is_the_delete_after_the_pin(streams_root):
    people = ctfile.open_table(str(streams_root / "people-streams"))
    (info,) = people.streams()
    assert (info.name, info.offset, info.lag_versions, info.lag_rows, info.claim) == ("people_stream", 5, 1, 2, None)
    rows = people.stream("people_stream").pending().to_arrow().sort_by("id")
    assert rows.select(["id", "name", "METADATA$ACTION", "METADATA$ISUPDATE"]).to_pylist() == [
        {"id": 2, "name": "Donny", "METADATA$ACTION": "DELETE", "METADATA$ISUPDATE": False},
        {"id": 5, "name": "Uli", "METADATA$ACTION": "DELETE", "METADATA$ISUPDATE": False},
    ]
