"""Logs no writer wrote, read without a raw error or an unbounded loop
(issue 26, items 4a and 5).

JSON nested deeper than the parser goes (SPEC §Conventions) is a corrupt
entry or stream state, and an ignored checkpoint hint (SPEC §Checkpoints:
the hint is advisory). A stray entry named with a huge version is one gap:
``verify`` reports it as one problem, and every reader stops at the first
missing version instead of walking the version numbers.
"""

from __future__ import annotations

import os
import shutil
import threading
import time

import pyarrow as pa
import pytest

import ctfile
from ctfile.format.paths import LAST_CHECKPOINT, commit_path
from ctfile.format.schema import LONG_MAX
from ctfile.log.streams import StreamStore

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture
def table(new_table, make_rows) -> ctfile.Table:
    t = new_table()
    t.insert(make_rows(3))
    t.checkpoint()
    return t


def _write(t: ctfile.Table, path: str, text: str) -> None:
    with open(f"{t.uri}/{path}", "w") as f:
        f.write(text)


# ---------------------------------------------------------------- nesting (item 4a)


def test_an_entry_nested_too_deeply_is_corrupt(table):
    _write(table, commit_path(2), '{"commitInfo":{"timestamp":99999999999999,"operation":"X","operationParameters":'
           '{"a":' + DEEP + "}}}\n")
    with pytest.raises(ctfile.CorruptLogError, match="00000000000000000002.json line 1: .*nested too deeply"):
        ctfile.open_table(table.uri)
    report = ctfile.verify_table(table.uri)
    assert any("nested too deeply" in p.message and p.version == 2 for p in report.problems)


def test_a_checkpoint_hint_nested_too_deeply_is_ignored(table, make_rows):
    _write(table, LAST_CHECKPOINT, '{"version": ' + DEEP + "}\n")
    t = ctfile.open_table(table.uri)
    assert t.log.read_hint() is None
    assert t.to_arrow().num_rows == 3 and t.version == 1
    t.insert(make_rows(1, 10))
    assert ctfile.open_table(table.uri).to_arrow().num_rows == 4
    report = ctfile.verify_table(table.uri)
    assert report.healthy and any("hint is unreadable" in w.message for w in report.warnings)


@pytest.mark.parametrize("hint", ['{"version": 1e999}', '{"version": true}', '{"version": 99999999999999999999}', "[1]"])
def test_a_checkpoint_hint_naming_no_version_is_ignored(table, hint):
    _write(table, LAST_CHECKPOINT, hint + "\n")
    t = ctfile.open_table(table.uri)
    assert t.log.read_hint() is None and t.to_arrow().num_rows == 3
    assert ctfile.verify_table(table.uri).healthy


def test_a_stream_state_nested_too_deeply_is_corrupt(table):
    table.create_stream("s")
    current = StreamStore(table.storage).files("s").current_sequence
    _write(table, f"_ct_streams/s/{current:020d}.json", '{"stream": ' + DEEP + "}")
    with pytest.raises(ctfile.CorruptLogError, match="nested too deeply"):
        ctfile.open_table(table.uri).stream("s")
    report = ctfile.verify_table(table.uri)
    assert any(p.check == "stream" and "nested too deeply" in p.message for p in report.problems)


def test_a_schema_nested_too_deeply_for_the_log_is_refused_before_anything_is_written(tmp_path):
    t = pa.int64()
    for _ in range(100):  # three JSON levels per struct: beyond MAX_JSON_DEPTH
        t = pa.struct([("a", t)])
    with pytest.raises(ctfile.InvalidArgumentError, match="nests deeper than 256"):
        ctfile.create_table(tmp_path / "t", pa.schema([("s", t)]))
    assert not (tmp_path / "t" / "_ct_log").exists() or not any((tmp_path / "t" / "_ct_log").iterdir())


# ---------------------------------------------------------------- stray versions (item 5)


@pytest.mark.parametrize("stray", [10**15, LONG_MAX, 10**20 - 1])
def test_verify_reports_a_stray_version_as_one_gap_at_once(table, stray):
    shutil.copy(f"{table.uri}/{commit_path(1)}", f"{table.uri}/{commit_path(stray)}")
    start = time.perf_counter()
    report = ctfile.verify_table(table.uri)
    assert time.perf_counter() - start < 5  # one gap, not one problem per missing number
    assert [(p.check, p.version) for p in report.problems] == [("dense", 2)]
    msg = report.problems[0].message
    assert f"versions 2..{stray - 1} ({stray - 2} versions) are missing" in msg
    assert f"the latest version {stray} cannot be reconstructed (replay stops at version 1)" in msg
    assert report.latest_version == stray and report.oldest_version == 0


def test_verify_reports_each_gap_once_and_bridges_them_by_checkpoints(table, make_rows):
    for i in range(4):
        table.insert(make_rows(1, 10 + i))  # versions 2..5
    table.checkpoint()  # of 5
    table.insert(make_rows(1, 20))  # 6
    for v in (2, 3, 5):
        os.remove(f"{table.uri}/{commit_path(v)}")
    report = ctfile.verify_table(table.uri)
    dense = [(p.version, p.message) for p in report.problems if p.check == "dense"]
    assert dense[0] == (2, "versions 2..3 (2 versions) are missing from the log (versions must be dense)")
    assert dense[1] == (5, "version 5 has a checkpoint but no log entry")
    assert len(dense) == 2  # replay restarts at the checkpoint of 5: the latest version is reached


def _in_thread(fn, timeout: float):
    """``fn()`` in a daemon thread; its result or exception, or TimeoutError."""
    out: dict = {}

    def run():
        try:
            out["result"] = fn()
        except BaseException as e:  # noqa: BLE001 -- handed to the caller
            out["error"] = e

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(timeout)
    if th.is_alive():
        raise TimeoutError(f"still running after {timeout}s")
    if "error" in out:
        raise out["error"]
    return out["result"]


def test_readers_on_an_object_store_stop_at_the_first_missing_version():
    """On an object store entries are fetched concurrently: a range that
    ends at a stray version is asked for a batch at a time, so the first
    missing version ends the read (it used to submit every version number)."""
    URI = f"memory://h26-stray-{time.time_ns()}/t"
    t = ctfile.create_table(URI, pa.schema([("id", pa.int64())]))
    t.insert(pa.table({"id": [1]}))
    t.storage.put_if_absent(commit_path(10**15), t.storage.read_bytes(commit_path(1)))
    with pytest.raises(ctfile.VersionNotFoundError, match="version 2 is not in the log"):
        _in_thread(lambda: ctfile.open_table(URI), timeout=20)
    with pytest.raises(ctfile.VersionNotFoundError):
        _in_thread(lambda: t.log.read_entries(0, 10**15), timeout=20)
    report = _in_thread(lambda: ctfile.verify_table(URI), timeout=20)
    assert [(p.check, p.version) for p in report.problems] == [("dense", 2)]


def test_readers_and_vacuum_stop_at_the_first_missing_version_of_a_stray(new_table, make_rows, file_tree):
    """Without a checkpoint hint the latest version is the listing's (a
    hint lets readers probe from its checkpoint instead, and they then do
    not see the stray at all: SPEC §Log replay)."""
    table = new_table()
    table.insert(make_rows(3))
    shutil.copy(f"{table.uri}/{commit_path(1)}", f"{table.uri}/{commit_path(10**15)}")
    before = file_tree(table.uri)
    for call in (
        lambda: ctfile.open_table(table.uri),
        lambda: ctfile.Table(table.storage).refresh(),
        lambda: table.vacuum(retain=0, grace_period=0),
        lambda: table.log.read_entries(0, 10**15),
    ):
        with pytest.raises(ctfile.VersionNotFoundError, match="version 2 is not in the log"):
            _in_thread(call, timeout=20)
    assert file_tree(table.uri) == before
