"""ctfile.verify_table on change files (SPEC §Change capture): every check
on a real table whose change files or entries are damaged on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash

import ctfile
from ctfile.format.entries import encode_entry_objects

CAPTURE = {"ctfile.changeCapture": "before_after"}


def _table(new_table, make_rows) -> ctfile.Table:
    """Capture on. Versions: 1 insert ids 0..9 (two partitions), 2 update ids
    1 and 7, 3 delete id 2, 4 delete ids 5..9 (a whole partition)."""
    t = new_table(partition_rows=5, properties=CAPTURE)
    t.insert(make_rows(10))
    t.update(pc.field("id").isin([1, 7]), {"s": "u"})
    t.delete(pc.field("id") == 2)
    t.delete(pc.field("id") >= 5)
    return t


def _log_file(t: ctfile.Table, v: int) -> Path:
    return Path(t.uri) / "_ct_log" / f"{v:020d}.json"


def _lines(t: ctfile.Table, v: int) -> list[dict]:
    return [json.loads(x) for x in _log_file(t, v).read_text().splitlines()]


def _edit_entry(t: ctfile.Table, v: int, fn) -> None:
    """Rewrite entry ``v`` as a writer would have (self-check included)."""
    lines = _lines(t, v)
    for obj in lines:
        fn(obj)
    _log_file(t, v).write_bytes(encode_entry_objects(lines))


def _change_paths(t: ctfile.Table, v: int) -> list[str]:
    return [o["change"]["path"] for o in _lines(t, v) if "change" in o]


def _problems(t: ctfile.Table, check: str) -> list:
    return [p for p in ctfile.verify_table(t.uri).problems if p.check == check]


def test_a_captured_table_is_healthy_and_its_change_files_are_checked(new_table, make_rows):
    t = _table(new_table, make_rows)
    report = ctfile.verify_table(t.uri)
    assert report.healthy, report.problems
    n_changes = sum(len(_change_paths(t, v)) for v in range(5))
    assert n_changes == 2  # v2 (two partitions rewritten, one file), v3; v4 removes a whole partition
    assert report.files_checked == len(t.snapshot().partitions) + n_changes
    assert report.unreferenced_files == []


def test_missing_and_damaged_change_files(new_table, make_rows):
    t = _table(new_table, make_rows)
    (p2,) = _change_paths(t, 2)
    (p3,) = _change_paths(t, 3)
    (Path(t.uri) / p2).unlink()
    data = bytearray((Path(t.uri) / p3).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (Path(t.uri) / p3).write_bytes(bytes(data))
    report = ctfile.verify_table(t.uri)
    found = {(p.check, p.version, p.path) for p in report.problems}
    assert ("missing_file", 2, p2) in found and ("checksum", 3, p3) in found


def test_change_rows_breaking_the_rules(new_table, make_rows):
    t = _table(new_table, make_rows)
    (p2,) = _change_paths(t, 2)
    path = Path(t.uri) / p2
    table = pq.read_table(path)
    # A postimage without its preimage: drop the first row; keep the file
    # consistent with its log entry (size, checksum, count, stats).
    broken = table.slice(1)
    pq.write_table(broken, path)
    data = path.read_bytes()

    def fix(obj):
        if "change" in obj:
            c = obj["change"]
            c.update(sizeBytes=len(data), checksum=xxhash.xxh3_128_hexdigest(data), numRecords=broken.num_rows)
            c.pop("stats")

    _edit_entry(t, 2, fix)
    (p,) = _problems(t, "change_rows")
    assert p.version == 2 and p.path == p2 and "update_postimage that does not follow" in p.message


def test_an_update_pair_with_equal_images_is_reported(new_table, make_rows):
    """Readers output a captured commit's pairs as they stand (no comparison),
    so verify reports a pair whose images are equal (a writer broke the
    no-op rule)."""
    t = _table(new_table, make_rows)
    (p2,) = _change_paths(t, 2)
    path = Path(t.uri) / p2
    table = pq.read_table(path)
    pre = table.column("_ct_change_type").to_pylist().index("update_preimage")
    rows = table.to_pylist()
    rows[pre + 1] = {**rows[pre], "_ct_row_version": None, "_ct_change_type": "update_postimage"}
    equal = pa.Table.from_pylist(rows, schema=table.schema)
    pq.write_table(equal, path)
    data = path.read_bytes()

    def fix(obj):
        if "change" in obj:
            obj["change"].update(sizeBytes=len(data), checksum=xxhash.xxh3_128_hexdigest(data))
            obj["change"].pop("stats")

    _edit_entry(t, 2, fix)
    (p,) = _problems(t, "change_rows")
    assert p.version == 2 and p.path == p2 and f"equal images, the first at row {pre}" in p.message


def test_change_rows_disagreeing_with_the_metrics(new_table, make_rows):
    t = _table(new_table, make_rows)

    def fix(obj):
        if "commitInfo" in obj:
            obj["commitInfo"]["operationMetrics"]["numUpdatedRows"] = 3

    _edit_entry(t, 2, fix)
    msgs = [p.message for p in _problems(t, "change_rows") if p.version == 2]
    assert len(msgs) == 2
    assert "hold 2 old images" in msgs[0] and "3 updated rows" in msgs[0]
    assert "hold 2 update_postimage rows" in msgs[1]


def test_metrics_count_the_rows_of_deletes_all_rows_removes(new_table, make_rows):
    """Version 4 removes a whole partition (no change rows) and rewrites
    nothing: healthy; dropping the marker makes it an uncaptured commit."""
    t = _table(new_table, make_rows)
    assert ctfile.verify_table(t.uri).healthy

    def unmark(obj):
        if "remove" in obj:
            obj["remove"].pop("deletesAllRows")

    _edit_entry(t, 4, unmark)
    (p,) = _problems(t, "capture")
    assert p.version == 4 and "before_after" in p.message


def test_a_commit_without_capture_on_a_capture_table_is_a_problem(new_table, make_rows):
    t = _table(new_table, make_rows)
    _edit_entry(t, 3, lambda obj: obj.pop("change", None))
    lines = _lines(t, 3)
    _log_file(t, 3).write_bytes(encode_entry_objects([o for o in lines if o]))
    (p,) = _problems(t, "capture")
    assert p.version == 3


def test_capture_off_commits_are_not_required_to_be_captured(new_table, make_rows):
    t = new_table(partition_rows=5)
    t.insert(make_rows(10))
    t.update(pc.field("id") == 1, {"s": "u"})
    t.set_properties(CAPTURE)
    t.update(pc.field("id") == 2, {"s": "u"})
    report = ctfile.verify_table(t.uri)
    assert report.healthy and report.files_checked == len(t.snapshot().partitions) + 1


def test_unreferenced_change_files_are_listed(new_table, make_rows):
    t = _table(new_table, make_rows)
    tx = t.transaction()
    tx.update(pc.field("id") == 3, {"s": "x"})
    orphans = [f.path for f in tx.staged_changes()]
    report = ctfile.verify_table(t.uri)
    assert report.healthy and set(orphans) <= set(report.unreferenced_files)
    tx.abort()
    assert not set(orphans) & set(ctfile.verify_table(t.uri).unreferenced_files)


def test_change_file_stats_are_checked(new_table, make_rows):
    t = _table(new_table, make_rows)

    def fix(obj):
        if "change" in obj:
            obj["change"]["stats"]["maxValues"]["1"] = 0

    _edit_entry(t, 2, fix)
    (p,) = [p for p in ctfile.verify_table(t.uri).problems if p.check == "stats"]
    assert p.version == 2 and "maxValues is 0" in p.message
