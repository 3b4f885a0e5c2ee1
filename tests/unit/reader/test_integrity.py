"""Damaged, truncated, replaced and missing data files are caught on read
(SPEC §Micro-partition files, reader requirements; reader/integrity.py).

The sweep flips one bit at positions across a real data file (the magic
bytes, the footer, page headers, dictionary pages and data pages of every
column chunk) and checks that every read path raises CorruptDataFileError
naming the table, the file and the version, and never returns data: snapshot
reads, change scans in each mode, DML, and the picklable tasks parallel
engines run. On the code before the check, most flips in pages returned wrong
values and the rest raised pyarrow's own errors.
"""

from __future__ import annotations

import pickle
import random

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import ctfile
from ctfile.reader import integrity
from ctfile.reader.integrity import DataFiles, unchecked_reads

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    ("x", pa.int64()),
    ("s", pa.string()),  # unique values
    ("k", pa.string()),  # 3 values: a dictionary page
])


def rows(lo: int, hi: int) -> pa.Table:
    ids = list(range(lo, hi))
    return pa.table({
        "id": ids, "x": [i * 7 for i in ids], "s": [f"value {i}" for i in ids], "k": ["abc"[i % 3] for i in ids],
    }, schema=SCHEMA)


def history(uri: str, storage_options=None) -> ctfile.Table:
    """v1 inserts ids 0-299 (one partition, row groups of 100 rows); v2
    updates every 10th row (rewrites it: hidden columns stored); v3 inserts
    ids 300-399 (a plain insert)."""
    t = ctfile.create_table(
        uri, SCHEMA, partition_rows=1000, properties={"ctfile.rowGroupRows": "100"}, storage_options=storage_options
    )
    t.insert(rows(0, 300))
    t.update(pc.field("id").isin(list(range(0, 300, 10))), {"x": -1})
    t.insert(rows(300, 400))
    assert t.version == 3
    return t


def added_by(t: ctfile.Table, version: int) -> ctfile.format.actions.Partition:
    (p,) = [p for p in t.snapshot().partitions if p.default_row_version == version]
    return p


def flip_positions(data: bytes) -> dict[str, list[int]]:
    """Byte offsets to damage, by region of the Parquet file."""
    md = pq.ParquetFile(pa.BufferReader(data)).metadata
    n = len(data)
    footer_len = int.from_bytes(data[-8:-4], "little")
    footer = n - 8 - footer_len
    rng = random.Random(12)
    out: dict[str, list[int]] = {
        "magic and footer length": [0, 3, n - 1, n - 4, n - 8],
        "footer": sorted(rng.sample(range(footer, n - 8), 12)),
        "page headers": [], "dictionary pages": [], "data pages": [],
    }
    for g in range(md.num_row_groups):
        for c in range(md.num_columns):
            cc = md.row_group(g).column(c)
            start = cc.dictionary_page_offset if cc.has_dictionary_page else cc.data_page_offset
            end = start + cc.total_compressed_size
            if cc.has_dictionary_page:
                out["page headers"].append(cc.dictionary_page_offset + 1)
                out["dictionary pages"].append((cc.dictionary_page_offset + cc.data_page_offset) // 2 + 4)
            out["page headers"].append(cc.data_page_offset + 2)
            out["data pages"].append((cc.data_page_offset + end) // 2 + 2)
    assert all(out.values()), out
    return out


def flipped(data: bytes, pos: int, bit: int) -> bytes:
    b = bytearray(data)
    b[pos] ^= 1 << bit
    return bytes(b)


def expect_damaged(t: ctfile.Table, p, read, what: str) -> None:
    with pytest.raises(ctfile.CorruptDataFileError) as e:
        out = read()
        pytest.fail(f"{what}: returned {out!r:.200} from a damaged file")
    assert (e.value.uri, e.value.path, e.value.version) == (t.uri, p.path, p.default_row_version), what
    assert f"{p.path} of table {t.uri} (added by version {p.default_row_version})" in str(e.value), what


def reads_of_rewritten(t: ctfile.Table) -> dict:
    """Every read path that opens the partition v2 (an UPDATE) added."""
    snap = t.snapshot()
    scan_tasks = snap.scan_tasks()
    change_tasks = t.changes(start_version=2, end_version=2).tasks()

    def run_pickled(tasks):
        return [b for task in tasks for b in pickle.loads(pickle.dumps(task)).to_batches()]

    return {
        "to_arrow": lambda: snap.to_arrow(),
        "to_arrow(columns, filter)": lambda: snap.to_arrow(columns=["s"], filter=pc.field("id") < 150),
        "to_batches": lambda: list(snap.to_batches(batch_rows=64)),
        "to_arrow(include_hidden)": lambda: snap.to_arrow(include_hidden=True),
        "to_batches(include_hidden)": lambda: list(snap.to_batches(include_hidden=True)),
        "changes default": lambda: t.changes(start_version=2, end_version=2).to_arrow(),
        "changes default, one thread": lambda: t.changes(start_version=1).to_arrow(use_threads=False),
        "changes audit": lambda: t.changes(start_version=2, information="audit").to_arrow(),
        "changes initial rows": lambda: t.changes(start_version=3, initial_rows=True).to_arrow(),
        "ScanTask pickled": lambda: run_pickled(scan_tasks),
        "ChangeTask pickled": lambda: run_pickled(change_tasks),
    }


def dml(t: ctfile.Table) -> dict:
    """Statements that read the partition v2 added (ids 0-299)."""
    return {
        "UPDATE": lambda: t.update(pc.field("id") == 5, {"x": 0}),
        "DELETE": lambda: t.delete(pc.field("id") == 7),
        "MERGE": lambda: t.merge(rows(298, 302), on="id"),
    }


@pytest.fixture
def table(tmp_path):
    return history(str(tmp_path / "t"))


def test_one_flipped_bit_anywhere_fails_every_read(table, file_tree):
    """The sweep: every region, every read path; DML changes nothing on disk."""
    t = table
    p = added_by(t, 2)
    good = t.storage.read_bytes(p.path)
    regions = flip_positions(good)
    reads = reads_of_rewritten(t)
    statements = dml(t)
    rng = random.Random(3)
    for region, positions in regions.items():
        for i, pos in enumerate(positions):
            t.storage.put(p.path, flipped(good, pos, rng.randrange(8)))
            # Every position through the plain scan; one position of each
            # region through every other path (the check does not depend on
            # the path, only on the file).
            paths = reads.items() if i == 0 else [("to_arrow", reads["to_arrow"])]
            for name, read in paths:
                expect_damaged(t, p, read, f"{name}, {region} byte {pos}")
            if i == 0:
                before = file_tree(t.uri)
                for name, statement in statements.items():
                    expect_damaged(t, p, statement, f"{name}, {region} byte {pos}")
                    assert file_tree(t.uri) == before and ctfile.open_table(t.uri).version == 3, name
    t.storage.put(p.path, good)
    assert t.snapshot().to_arrow().num_rows == 400


def test_a_flipped_bit_in_a_plain_insert_fails_appended_row_scans(table):
    t = table
    p = added_by(t, 3)  # no hidden columns: an append-only scan reads it without any hidden-column read
    good = t.storage.read_bytes(p.path)
    t.storage.put(p.path, flipped(good, len(good) // 2, 0))
    for name, read in {
        "append_only": lambda: t.changes(start_version=3, information="append_only").to_arrow(),
        "default": lambda: t.changes(start_version=3).to_arrow(),
        "append_only task pickled": lambda: [
            b for task in t.changes(start_version=3, information="append_only").tasks()
            for b in pickle.loads(pickle.dumps(task)).to_batches()
        ],
    }.items():
        expect_damaged(t, p, read, name)


@pytest.fixture(params=["local", "moto"])
def location(request, tmp_path):
    """(uri, storage_options) of a fresh table location."""
    if request.param == "local":
        return str(tmp_path / "t"), None
    ep = request.getfixturevalue("moto_s3")
    return ep.new_uri("integrity"), ep.storage_options()


def _replacement_of_same_size(good: bytes) -> bytes:
    """Another valid Parquet file with the same columns and field ids (other
    values: ``x`` zero, ``s`` empty), padded in its footer's key-value
    metadata to the length of ``good``."""
    t = pq.read_table(pa.BufferReader(good))
    n = t.num_rows
    t = t.set_column(t.schema.get_field_index("x"), t.schema.field("x"), pa.array([0] * n, pa.int64()))
    t = t.set_column(t.schema.get_field_index("s"), t.schema.field("s"), pa.array([""] * n, pa.string()))
    pad = 0
    for _ in range(5):
        sink = pa.BufferOutputStream()
        with pq.ParquetWriter(sink, t.schema, compression="zstd", store_schema=False) as w:
            w.write_table(t)
            w.add_key_value_metadata({"pad": "p" * pad})
        data = sink.getvalue().to_pybytes()
        if len(data) == len(good):
            return data
        pad += len(good) - len(data)
        assert pad >= 0, "the replacement is larger than the original"
    raise AssertionError("could not pad the replacement to the original length")


@pytest.mark.parametrize("damage", ["truncated", "missing", "replaced", "flipped"])
def test_damaged_files_on_local_disk_and_s3(location, damage):
    uri, opts = location
    t = history(uri, opts)
    p = added_by(t, 2)
    good = t.storage.read_bytes(p.path)
    if damage == "truncated":
        t.storage.put(p.path, good[: len(good) - 100])
        expected, text = ctfile.CorruptDataFileError, f"the file holds {len(good) - 100} bytes, the log records sizeBytes {len(good)}"
    elif damage == "missing":
        t.storage.delete([p.path])
        expected, text = ctfile.MissingDataFileError, "is missing"
    elif damage == "replaced":
        other = _replacement_of_same_size(good)
        assert pq.read_table(pa.BufferReader(other)).num_rows == p.num_records
        t.storage.put(p.path, other)
        expected, text = ctfile.CorruptDataFileError, f"checksum mismatch: the file hashes to .*, the log records {p.checksum}"
    else:
        t.storage.put(p.path, flipped(good, len(good) // 3, 5))
        expected, text = ctfile.CorruptDataFileError, "checksum mismatch"
    t = ctfile.open_table(uri, storage_options=opts)
    for name, read in {
        "to_arrow": lambda: t.snapshot().to_arrow(),
        "to_batches": lambda: list(t.snapshot().to_batches()),
        "include_hidden": lambda: t.snapshot().to_arrow(include_hidden=True),
        "changes": lambda: t.changes(start_version=2, end_version=2).to_arrow(),
        "update": lambda: t.update(pc.field("id") == 5, {"x": 0}),
    }.items():
        with pytest.raises(expected, match=text) as e:
            read()
        assert (e.value.uri, e.value.path, e.value.version) == (t.uri, p.path, 2), name
        assert f"{p.path} of table {t.uri} (added by version 2)" in str(e.value), name
    assert ctfile.open_table(uri, storage_options=opts).version == 3


def test_each_file_is_verified_once_per_read(table, monkeypatch):
    """A change scan opens the rewritten partition several times (hidden
    columns, rows, column comparison with its predecessor) but reads and
    hashes each file once; a second scan verifies again."""
    t = table
    reads: list[str] = []
    real = integrity.DataFiles._read_verified

    def counting(files, p):
        reads.append(p.path)
        return real(files, p)

    monkeypatch.setattr(integrity.DataFiles, "_read_verified", counting)
    opened: list[str] = []
    real_fetch = integrity.DataFiles.fetch
    monkeypatch.setattr(integrity.DataFiles, "fetch", lambda files, p: opened.append(p.path) or real_fetch(files, p))
    t.changes(start_version=2, end_version=2).to_arrow()
    assert len(opened) > len(set(opened))  # some file opened more than once
    assert sorted(reads) == sorted(set(opened))  # each verified once
    t.changes(start_version=2, end_version=2).to_arrow()
    assert len(reads) == 2 * len(set(opened))


def test_later_opens_in_a_read_still_check_the_length(table):
    t = table
    p = added_by(t, 2)
    files = DataFiles(t.storage)
    with files.open(p) as src:
        assert isinstance(src, pa.BufferReader)  # the first open verifies
    t.storage.put(p.path, t.storage.read_bytes(p.path) + b"x")
    with pytest.raises(ctfile.CorruptDataFileError, match=f"holds {p.size_bytes + 1} bytes"):
        with files.open(p):
            pass


def test_unchecked_reads_skip_the_check_only_inside_the_block(table):
    t = table
    p = added_by(t, 2)
    good = t.storage.read_bytes(p.path)
    md = pq.ParquetFile(pa.BufferReader(good)).metadata
    meta_key = next(iter(md.metadata))  # damage the footer's key-value metadata, which no read decodes
    pos = good.rindex(meta_key)
    t.storage.put(p.path, flipped(good, pos, 1))
    snap = t.snapshot()
    with pytest.raises(ctfile.CorruptDataFileError, match="checksum mismatch"):
        snap.to_arrow()
    with unchecked_reads():
        assert integrity.checks_enabled() is False
        assert snap.to_arrow().num_rows == 400
        assert t.changes(start_version=2, end_version=2).to_arrow().num_rows > 0
    with pytest.raises(ctfile.CorruptDataFileError):
        snap.to_arrow()
    t.storage.delete([p.path])
    with unchecked_reads(), pytest.raises(ctfile.MissingDataFileError):
        snap.to_arrow()


def test_abandoned_to_batches_releases_what_it_fetched(tmp_path, monkeypatch):
    """A stream abandoned after its first batch closes the file it fetched
    ahead (every source DataFiles handed out is closed)."""
    t = ctfile.create_table(str(tmp_path / "t"), SCHEMA, partition_rows=50)
    t.insert(rows(0, 400))
    handed_out = []
    fetch = integrity.DataFiles.fetch

    def recording_fetch(self, p):
        src = fetch(self, p)
        handed_out.append(src)
        return src

    monkeypatch.setattr(integrity.DataFiles, "fetch", recording_fetch)
    it = t.snapshot().to_batches()
    first = next(it)
    assert first.num_rows == 50
    it.close()  # the partition fetched ahead is closed, the pool shut down
    assert len(handed_out) == 2  # the one being read and the one fetched ahead
    assert all(src.closed for src in handed_out)
    assert t.snapshot().to_arrow().num_rows == 400
