"""ctfile.verify_table: every check on a real table corrupted on disk."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import ctfile
from ctfile.format.entries import encode_entry_objects
from ctfile.reader.verify import CHECKS


# ---------------------------------------------------------------- helpers


def _table(new_table, make_rows, **kw) -> ctfile.Table:
    """Versions: 1 insert ids 0..2, 2 insert ids 3..4, 3 update id 1."""
    t = new_table(**kw)
    t.insert(make_rows(3))
    t.insert(make_rows(2, start=3))
    t.update(pc.field("id") == 1, {"s": "one"})
    return t


def _root(t: ctfile.Table) -> Path:
    return Path(t.uri)


def _log_file(t: ctfile.Table, v: int) -> Path:
    return _root(t) / "_ct_log" / f"{v:020d}.json"


def _edit_entry(t: ctfile.Table, v: int, fn) -> None:
    """Rewrite the JSON lines of the log entry of version ``v``, as a writer
    would have written them (self-check included: the tests using this check
    other rules)."""
    p = _log_file(t, v)
    lines = [json.loads(x) for x in p.read_text().splitlines()]
    for obj in lines:
        fn(obj)
    p.write_bytes(encode_entry_objects(lines))


def _added_path(t: ctfile.Table, v: int) -> str:
    for line in _log_file(t, v).read_text().splitlines():
        obj = json.loads(line)
        if "add" in obj:
            return obj["add"]["path"]
    raise AssertionError(f"version {v} adds nothing")


def _checks(report) -> set[str]:
    return {p.check for p in report.problems}


def _only(report, check: str):
    found = [p for p in report.problems if p.check == check]
    assert found, f"no {check} problem in {[str(p) for p in report.problems]}"
    return found


# ---------------------------------------------------------------- healthy tables


def test_healthy_table(new_table, make_rows):
    t = _table(new_table, make_rows)
    r = ctfile.verify_table(t.uri)
    assert r.healthy and r.problems == [] and r.warnings == []
    assert (r.latest_version, r.oldest_version, r.entries_checked) == (3, 0, 4)
    assert r.snapshots_checked == [3]
    assert r.files_checked == len(t.snapshot().partitions)
    assert r.rows_checked == 5
    assert r.to_dict()["healthy"] is True
    json.dumps(r.to_dict())  # serializable


def test_all_types_all_versions_no_false_positives(new_table):
    """Stats of every type (NaN, infinities, nulls, truncated strings, pre-1000
    timestamps, decimals, nested columns), copy-on-write, merge, compaction and
    checkpoints verify clean across every version."""
    schema = pa.schema([
        pa.field("id", pa.int64(), nullable=False), ("b", pa.bool_()), ("i8", pa.int8()),
        ("f32", pa.float32()), ("f64", pa.float64()), ("s", pa.string()), ("bin", pa.binary()),
        ("d", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")), ("tsn", pa.timestamp("us")),
        ("dec", pa.decimal128(10, 2)), ("l", pa.list_(pa.int32())),
        ("st", pa.struct([("x", pa.int32())])), ("m", pa.map_(pa.string(), pa.int64())),
    ])

    def rows(ids):
        return pa.table({
            "id": ids, "b": [i % 2 == 0 for i in ids], "i8": [i % 100 for i in ids],
            "f32": [float("nan") if i % 3 == 0 else i / 2 for i in ids],
            "f64": [None if i % 4 == 0 else (float("inf") if i == 5 else i * 1.5) for i in ids],
            "s": [("x" * 40 + str(i)) if i % 2 else "\U0010ffff" * 35 for i in ids],
            "bin": [b"ab"] * len(ids),
            "d": [dt.date(2024, 1, 1) + dt.timedelta(days=i) for i in ids],
            "ts": [dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=i) for i in ids],
            "tsn": [dt.datetime(999, 1, 1) + dt.timedelta(seconds=i) for i in ids],
            "dec": [decimal.Decimal(f"{i}.25") for i in ids], "l": [[i, i + 1] for i in ids],
            "st": [{"x": i} for i in ids], "m": [[("k", i)] for i in ids],
        }, schema=schema)

    t = new_table(schema, partition_rows=3, properties={"ctfile.checkpointInterval": "2"})
    t.insert(rows(list(range(10))))
    t.update(pc.field("id") == 3, {"s": "zzz"})
    t.delete(pc.field("id") == 7)
    t.merge(rows([1, 2, 50]), on="id")
    t.insert(rows([60]))
    assert t.compact(target_rows=10).committed
    r = ctfile.verify_table(t.uri, all_versions=True)
    assert r.healthy, [str(p) for p in r.problems]
    assert r.warnings == []
    assert r.snapshots_checked == list(range(t.version + 1))
    assert (_root(t) / "_ct_log" / f"{2:020d}.checkpoint.parquet").exists()  # checkpoints were compared


def test_progress_callback_sees_every_entry_and_file(new_table, make_rows):
    t = _table(new_table, make_rows)
    calls = []
    ctfile.verify_table(t.uri, progress=lambda phase, done, total: calls.append((phase, done, total)))
    assert ("log", 4, 4) in calls
    n = len(t.snapshot().partitions)
    assert ("files", n, n) in calls


def test_bad_arguments_and_missing_table(tmp_path):
    with pytest.raises(ctfile.TableNotFoundError):
        ctfile.verify_table(tmp_path / "nothing")
    with pytest.raises(ctfile.InvalidArgumentError):
        ctfile.verify_table("")
    with pytest.raises(ctfile.InvalidArgumentError):
        ctfile.verify_table(tmp_path, storage_options=["x"])
    with pytest.raises(ctfile.InvalidArgumentError):
        ctfile.verify_table(tmp_path, all_versions="yes")


# ---------------------------------------------------------------- data files


def test_missing_partition_file(new_table, make_rows):
    t = _table(new_table, make_rows)
    path = _added_path(t, 2)
    os.remove(_root(t) / path)
    r = ctfile.verify_table(t.uri)
    (p,) = _only(r, "missing_file")
    assert (p.version, p.path) == (2, path)
    assert _checks(r) == {"missing_file"}


def test_truncated_partition_file(new_table, make_rows):
    t = _table(new_table, make_rows)
    f = _root(t) / _added_path(t, 2)
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    r = ctfile.verify_table(t.uri)
    assert {"size", "checksum", "unreadable"} <= _checks(r)
    size = _only(r, "size")[0]
    assert size.version == 2 and str(len(data)) in size.message and str(len(data) // 2) in size.message


def test_flipped_bytes_fail_the_checksum(new_table, make_rows):
    t = _table(new_table, make_rows)
    path = _added_path(t, 2)
    f = _root(t) / path
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))
    r = ctfile.verify_table(t.uri)
    (p,) = _only(r, "checksum")
    assert (p.version, p.path) == (2, path)
    assert "size" not in _checks(r)


def test_log_entry_row_count_edited(new_table, make_rows):
    """numRecords alone: the entry contradicts its own stats (a log problem);
    numRecords and stats together: the file holds fewer rows (row_count)."""
    t = _table(new_table, make_rows)

    def bump(obj):
        if "add" in obj:
            obj["add"]["numRecords"] += 1

    _edit_entry(t, 2, bump)
    r = ctfile.verify_table(t.uri)
    (p,) = _only(r, "log")
    assert p.version == 2 and "numRecords" in p.message and p.path == _added_path(t, 2)
    # The add is still replayed (without its stats), so its file is checked too.
    assert any(x.check == "row_count" and x.version == 2 for x in r.problems)

    t2 = _table(new_table, make_rows)

    def bump_both(obj):
        if "add" in obj:
            obj["add"]["numRecords"] += 1
            obj["add"]["stats"]["numRecords"] += 1

    _edit_entry(t2, 2, bump_both)
    r = ctfile.verify_table(t2.uri)
    (p,) = _only(r, "row_count")
    assert p.version == 2 and "holds 2 rows" in p.message and "numRecords 3" in p.message


@pytest.mark.parametrize("bad", ["../escape.parquet", "data/../../x.parquet", "/etc/passwd", "s3://other/x.parquet"])
def test_path_escaping_the_root(new_table, make_rows, bad):
    t = _table(new_table, make_rows)

    def swap(obj):
        if "add" in obj:
            obj["add"]["path"] = bad

    _edit_entry(t, 2, swap)
    r = ctfile.verify_table(t.uri)
    (p,) = _only(r, "path")
    assert (p.version, p.path) == (2, bad) and "escapes the table root" in p.message
    assert _checks(r) == {"path"}  # never opened: no missing-file or size finding for it


def test_stats_not_matching_data(new_table, make_rows):
    t = _table(new_table, make_rows)  # version 2 holds ids 3, 4

    def shrink(obj):
        if "add" in obj:
            obj["add"]["stats"]["maxValues"]["1"] = 3  # id: real max 4
            obj["add"]["stats"]["nullCount"]["2"] = 1  # x: no nulls

    _edit_entry(t, 2, shrink)
    r = ctfile.verify_table(t.uri)
    msgs = [p.message for p in _only(r, "stats")]
    assert any("maxValues is 3" in m and "holds 4" in m for m in msgs)
    assert any("nullCount is 1" in m and "0 nulls" in m for m in msgs)
    assert all(p.version == 2 for p in _only(r, "stats"))


def test_hidden_column_stats_checked(new_table, make_rows):
    t = _table(new_table, make_rows)

    def lie(obj):
        if "add" in obj:
            obj["add"]["stats"]["nullCount"]["2147483540"] = 0  # claims stored row ids

    _edit_entry(t, 2, lie)
    r = ctfile.verify_table(t.uri)
    assert any("_ct_row_id" in p.message for p in _only(r, "stats"))


def test_duplicate_row_ids(new_table, make_rows):
    t = _table(new_table, make_rows)

    def reuse(obj):
        if "add" in obj:
            obj["add"]["firstRowId"] = 0  # ids 0, 1 are taken by version 1's rows

    _edit_entry(t, 2, reuse)
    r = ctfile.verify_table(t.uri)
    (dup,) = _only(r, "duplicate_row_id")
    assert dup.version == 3 and _added_path(t, 2) in dup.path
    assert "2 row ids" in dup.message
    lineage = _only(r, "row_lineage")
    assert lineage[0].version == 2


def test_duplicates_only_in_an_old_version_need_all_versions(new_table, make_rows):
    t = new_table()
    t.insert(make_rows(2))
    t.insert(make_rows(2, start=2))
    t.delete(pc.field("id") >= 2)  # version 3 removes the clashing partition

    def reuse(obj):
        if "add" in obj:
            obj["add"]["firstRowId"] = 0

    _edit_entry(t, 2, reuse)
    _edit_entry(t, 3, lambda obj: obj["remove"].update(firstRowId=0) if "remove" in obj else None)
    latest = ctfile.verify_table(t.uri)
    assert "duplicate_row_id" not in _checks(latest)
    every = ctfile.verify_table(t.uri, all_versions=True)
    (dup,) = _only(every, "duplicate_row_id")
    assert dup.version == 2


def test_removed_file_gone_is_a_warning_with_all_versions(new_table, make_rows):
    t = new_table()
    t.insert(make_rows(3))
    t.delete(pc.field("id") == 0)
    old = _added_path(t, 1)
    os.remove(_root(t) / old)
    assert ctfile.verify_table(t.uri).healthy  # the latest snapshot does not need it
    r = ctfile.verify_table(t.uri, all_versions=True)
    assert r.healthy
    (w,) = r.warnings
    assert (w.check, w.path) == ("missing_file", old)


def test_unreferenced_files_are_listed_not_problems(new_table, make_rows):
    t = _table(new_table, make_rows)
    (_root(t) / "data" / "part-orphan-00001.parquet").write_bytes(b"junk")
    r = ctfile.verify_table(t.uri)
    assert r.healthy and r.unreferenced_files == ["data/part-orphan-00001.parquet"]


def test_vacuum_and_verify_agree_on_the_files_the_oldest_entry_removes(new_table, make_rows, settle_clock):
    """After a vacuum whose oldest retained entry removes a file, vacuum keeps
    that file (a change scan from that version reads it) and verify does not
    list it as unreferenced: both use ctfile.log.vacuum.retained_files."""
    t = new_table()
    t.insert(make_rows(3))                       # version 1
    t.delete(pc.field("id") == 2)                # version 2: removes version 1's file
    t.update(pc.field("id") == 1, {"s": "one"})  # version 3: removes version 2's file
    removed_at_3 = {p.path for p in t.snapshot(2).partitions} - {p.path for p in t.snapshot(3).partitions}
    assert removed_at_3
    added_at_1 = _added_path(t, 1)
    before = t.changes(start_version=3).to_arrow().to_pylist()
    settle_clock(t)
    r = t.vacuum(retain=0, grace_period=0)
    assert r.oldest_version == 3 and r.deleted_data_files == (added_at_1,)
    assert all((_root(t) / p).exists() for p in removed_at_3)
    report = ctfile.verify_table(t.uri, all_versions=True)
    assert report.healthy and report.oldest_version == 3
    assert report.unreferenced_files == []
    # A change scan from the oldest retained version still reads the removed file.
    after = ctfile.open_table(t.uri).changes(start_version=3).to_arrow().to_pylist()
    assert after == before
    assert [(c["id"], c["s"], c["METADATA$ACTION"], c["METADATA$ISUPDATE"]) for c in after] == [
        (1, "s1", "DELETE", True), (1, "one", "INSERT", True),
    ]
    # A second vacuum keeps them too: the listing stays empty.
    settle_clock(t)
    assert t.vacuum(retain=0, grace_period=0).deleted_data_files == ()
    assert ctfile.verify_table(t.uri).unreferenced_files == []


# ---------------------------------------------------------------- log structure


def test_non_dense_log(new_table, make_rows):
    t = _table(new_table, make_rows)
    os.remove(_log_file(t, 2))
    r = ctfile.verify_table(t.uri)
    dense = _only(r, "dense")
    assert dense[0].version == 2 and dense[0].path == "_ct_log/00000000000000000002.json"
    assert any("latest version 3 cannot be reconstructed" in p.message for p in dense)


def test_gap_bridged_by_a_checkpoint_still_reported(new_table, make_rows):
    t = _table(new_table, make_rows, properties={"ctfile.checkpointInterval": "2"})
    os.remove(_log_file(t, 2))  # checkpoint 2 exists: replay resumes there
    r = ctfile.verify_table(t.uri)
    assert [p.version for p in _only(r, "dense")] == [2]
    assert r.snapshots_checked == [3] and r.files_checked == len(t.snapshot().partitions)


def test_truncated_log_entry(new_table, make_rows):
    t = _table(new_table, make_rows)
    p = _log_file(t, 3)
    p.write_bytes(p.read_bytes()[:-1])
    r = ctfile.verify_table(t.uri)
    truncated, checksum = _only(r, "log")
    assert truncated.version == 3 and "truncated" in truncated.message
    assert checksum.version == 3 and "(actionsChecksum): damaged or edited" in checksum.message


def test_invalid_json_line(new_table, make_rows):
    t = _table(new_table, make_rows)
    p = _log_file(t, 1)
    p.write_text(p.read_text() + "{not json\n")
    r = ctfile.verify_table(t.uri)
    invalid, count = _only(r, "log")
    assert invalid.version == 1 and "invalid JSON" in invalid.message
    assert count.version == 1 and "entry holds 3 actions, its commitInfo records 2" in count.message


def test_timestamps_must_increase(new_table, make_rows):
    t = _table(new_table, make_rows)
    _edit_entry(t, 3, lambda obj: obj["commitInfo"].update(timestamp=1) if "commitInfo" in obj else None)
    r = ctfile.verify_table(t.uri)
    (prob,) = _only(r, "replay")
    assert prob.version == 3 and "timestamp" in prob.message


def test_remove_of_a_partition_that_is_not_live(new_table, make_rows):
    t = _table(new_table, make_rows)
    _edit_entry(t, 3, lambda obj: obj["remove"].update(path="data/never-added.parquet") if "remove" in obj else None)
    r = ctfile.verify_table(t.uri)
    assert any(p.path == "data/never-added.parquet" and p.version == 3 for p in _only(r, "replay"))


def test_checkpoint_disagreeing_with_the_log(new_table, make_rows):
    t = _table(new_table, make_rows, properties={"ctfile.checkpointInterval": "2"})
    cp = _root(t) / "_ct_log" / f"{2:020d}.checkpoint.parquet"
    table = pq.read_table(cp)
    lines = [json.loads(x) for x in table.schema.metadata[b"ctfile.checkpoint"].decode().splitlines()]
    lines[0]["checkpoint"]["nextRowId"] += 7
    body = "".join(json.dumps(x) + "\n" for x in lines)
    pq.write_table(table.replace_schema_metadata({"ctfile.checkpoint": body}), cp)
    r = ctfile.verify_table(t.uri)
    (prob,) = _only(r, "checkpoint")
    assert prob.version == 2 and "nextRowId" in prob.message


def test_unreadable_checkpoint_and_stale_hint_are_warnings(new_table, make_rows):
    t = _table(new_table, make_rows, properties={"ctfile.checkpointInterval": "2"})
    (_root(t) / "_ct_log" / f"{2:020d}.checkpoint.parquet").write_bytes(b"not parquet")
    (_root(t) / "_ct_log" / "_last_checkpoint").write_text('{"version": 9}\n')
    r = ctfile.verify_table(t.uri)
    assert r.healthy
    assert sorted(w.check for w in r.warnings) == ["checkpoint", "checkpoint"]


def test_every_reported_check_is_a_known_kind(new_table, make_rows):
    t = _table(new_table, make_rows)
    os.remove(_root(t) / _added_path(t, 2))
    os.remove(_log_file(t, 1))
    r = ctfile.verify_table(t.uri)
    assert r.problems and all(p.check in CHECKS for p in r.problems)
    assert all(str(p).startswith(f"[{p.check}]") for p in r.problems)


# ---------------------------------------------------------------- self-checking entries, ranges, rule 4


def test_update_entry_torn_at_a_line_boundary(new_table, make_rows):
    """Issue 12, defect 3: the entry lost its trailing add line; verify used
    to call the table healthy."""
    t = _table(new_table, make_rows)
    p = _log_file(t, 3)
    lines = p.read_bytes().split(b"\n")[:-1]
    assert json.loads(lines[-1]).keys() == {"add"}
    p.write_bytes(b"".join(x + b"\n" for x in lines[:-1]))
    r = ctfile.verify_table(t.uri)
    assert not r.healthy
    (prob,) = _only(r, "log")
    assert prob.version == 3 and prob.path == "_ct_log/00000000000000000003.json"
    assert f"entry holds {len(lines) - 1} actions, its commitInfo records {len(lines)}" in prob.message


def test_entry_without_the_self_check_in_a_table_that_lists_it_is_a_warning(new_table, make_rows):
    t = _table(new_table, make_rows)

    def strip(obj):
        if "commitInfo" in obj:
            del obj["commitInfo"]["numActions"], obj["commitInfo"]["actionsChecksum"]

    p = _log_file(t, 2)
    lines = [json.loads(x) for x in p.read_text().splitlines()]
    for obj in lines:
        strip(obj)
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = ctfile.verify_table(t.uri)
    assert r.healthy
    (w,) = r.warnings
    assert (w.check, w.version) == ("log", 2) and "entryChecksums" in w.message


@pytest.mark.parametrize("order", ["add-then-remove", "remove-then-add"])
def test_path_named_twice_in_an_entry_whatever_the_order(new_table, make_rows, order):
    t = _table(new_table, make_rows)
    added = _added_path(t, 2)

    def twice(lines):
        (add,) = [o for o in lines if "add" in o]
        remove = {"remove": {**add["add"], "deletionTimestamp": 1}}
        return [o for o in lines if "add" not in o] + ([add, remove] if order == "add-then-remove" else [remove, add])

    p = _log_file(t, 2)
    p.write_bytes(encode_entry_objects(twice([json.loads(x) for x in p.read_text().splitlines()])))
    r = ctfile.verify_table(t.uri)
    assert any(
        x.version == 2 and x.path == added and "more than one add/remove" in x.message for x in _only(r, "log")
    )


@pytest.mark.parametrize(
    "field, value",
    [
        ("firstRowId", 2**63),
        ("firstRowId", 2**63 - 2),  # + numRecords 2: the last row id would not fit
        ("numRecords", 2**63),
        ("sizeBytes", 2**64),
        ("modificationTime", -(2**63) - 1),
    ],
)
def test_out_of_range_long_is_a_log_problem(new_table, make_rows, field, value):
    """Issue 12, defect 8: a firstRowId beyond int64 passed decoding and
    verify died with OverflowError."""
    t = _table(new_table, make_rows)
    _edit_entry(t, 2, lambda obj: obj["add"].update({field: value}) if "add" in obj else None)
    r = ctfile.verify_table(t.uri)
    assert any(x.version == 2 and "does not fit a long" in x.message for x in _only(r, "log"))
