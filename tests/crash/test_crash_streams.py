"""Crash injection at each step of a stream consumption (SPEC §Streams).

A consumer runs in a child process (``_crash_consumer.py``): it consumes
stream ``feed`` of a source table into a target table with
``target.transaction(consuming=stream)``, appending the pending change rows
(``stream_log``: the target is a log of consumed changes). The child wraps
``StreamStore.write_next`` / ``LocalStorage.put_if_absent`` in its own
process to stop at one step of the consumption; the test kills it with
SIGKILL and checks what a reader of the stream and the next consumer see:

* ``staged`` (files staged, no claim) and ``claimed`` (the claim state is
  written, the target's entry is not): ``pending()`` hands out the whole
  interval again and writes nothing; the next consumer consumes all of it
  -- after fencing the claim with a ``STREAM FENCE`` commit on the target
  in the ``claimed`` case -- and the crashed consumer's staged files are
  orphans that ``vacuum`` deletes once the grace period allows it;
* ``committed`` (the target's entry is written, the resolved state is not)
  and ``resolved``: the interval is consumed; ``pending()`` sees the
  target's ``txn`` and rolls the claim forward instead of handing the
  interval out again;

and in every case the target ends up with every change of the source
exactly once (``stream_log.check_exactly_once``). Two consumers racing on
the stream: exactly one commits, the other gets ``CommitConflictError``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest

import ctfile
from stream_log import (
    LATEST,
    OFFSET,
    STREAM,
    TARGET_SCHEMA,
    as_tuples,
    change_rows,
    check_exactly_once,
    consume,
    data_files,
    make_source,
    operations,
    referenced,
    state_sequences,
    stream_txn,
)

HELPER = Path(__file__).with_name("_crash_consumer.py")
DEADLINE_S = 60.0


@pytest.fixture
def tables(tmp_path) -> tuple[ctfile.Table, ctfile.Table]:
    target = ctfile.create_table(tmp_path / "target", TARGET_SCHEMA, partition_rows=2)
    return make_source(str(tmp_path / "source")), target


def start_child(source, target, point: str, workdir: Path, *, go: Path | None = None, tag: str = ""):
    marker = workdir / f"marker-{point}{tag}.json"
    err = workdir / f"child-{point}{tag}.err"
    out = workdir / f"out-{point}{tag}.json"
    src = str(Path(ctfile.__file__).resolve().parents[1])  # the ctfile this test imports
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
    args = [sys.executable, str(HELPER), source.uri, target.uri, STREAM, point, str(marker)]
    if go is not None:
        args += [str(go), str(out)]
    with open(err, "wb") as f:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=f, env=env)
    return proc, marker, err, out


def wait_for(proc, path: Path, err: Path, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not path.exists():
        if proc.poll() is not None and not path.exists():
            pytest.fail(f"consumer exited with {proc.returncode} before {what}:\n" + err.read_text(errors="replace"))
        if time.monotonic() > deadline:
            pytest.fail(f"consumer did not reach {what} within {DEADLINE_S}s:\n" + err.read_text(errors="replace"))
        time.sleep(0.01)


def kill_at(source, target, point: str, workdir: Path) -> None:
    """Run the consumer until ``point``, then SIGKILL it."""
    proc, marker, err, _ = start_child(source, target, point, workdir)
    try:
        wait_for(proc, marker, err, point)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=DEADLINE_S) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=DEADLINE_S)


def finish(proc, out: Path, err: Path) -> dict:
    """Wait for a released consumer; its outcome."""
    try:
        assert proc.wait(timeout=DEADLINE_S) == 0, err.read_text(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=DEADLINE_S)
    return json.loads(out.read_text())


def expected_first_interval(source: ctfile.Table) -> list[tuple]:
    return as_tuples(change_rows(source.changes(start_version=OFFSET + 1, end_version=LATEST, initial_rows=True)))


CONSUMED_BY_CHILD = {"staged": False, "claimed": False, "committed": True, "resolved": True}


@pytest.mark.parametrize("meets", ["reader", "consumer"])
@pytest.mark.parametrize("point", ["staged", "claimed", "committed", "resolved"])
def test_consumer_killed_at_each_step(tables, tmp_path, point, meets):
    source, target = tables
    app_id = source.stream(STREAM).state().app_id
    kill_at(source, target, point, tmp_path)
    consumed = CONSUMED_BY_CHILD[point]
    orphans = data_files(target) - referenced(target)
    assert bool(orphans) == (not consumed), orphans  # staged but never committed: orphans
    assert target.refresh().version == (1 if consumed else 0)
    # The child got as far as the claim (state 1) only from "claimed" on.
    assert state_sequences(source) == {"staged": [0], "claimed": [0, 1], "committed": [0, 1],
                                       "resolved": [0, 1, 2]}[point]

    if meets == "reader":
        s = ctfile.open_table(source.uri).stream(STREAM)
        pending = s.pending()
        if consumed:
            # The target's txn is seen: the consumed interval is not handed out again.
            assert (pending.start_version, pending.end_version) == (LATEST + 1, LATEST)
            assert pending.to_arrow().num_rows == 0 and s.offset == LATEST
            assert state_sequences(source) == [0, 1, 2]  # rolled forward by the reader (or the child)
        else:
            assert (pending.start_version, pending.end_version) == (OFFSET + 1, LATEST)
            assert as_tuples(change_rows(pending)) == expected_first_interval(source)
            assert s.offset == OFFSET
            # A read writes nothing: an unresolved claim is left to a consumer.
            assert state_sequences(source) == ([0, 1] if point == "claimed" else [0])
            assert target.refresh().version == 0

    source.update(pc.field("uid") == 0, {"v": "A"})  # version 6: pending for the next consumer
    s = ctfile.open_table(source.uri).stream(STREAM)
    result = consume(s, ctfile.open_table(target.uri))
    assert result.committed
    if point == "claimed":
        # The next consumer fenced the dead claim (state 1) before consuming.
        assert operations(target) == ["STREAM FENCE", "TRANSACTION"]
        assert [a.version for a in stream_txn(target, 1, app_id)] == [1]
    assert s.offset == source.version == 6 and s.state().claim is None
    check_exactly_once(source, target, first=OFFSET + 1, last=6, initial_rows=True)
    consumed_rows = as_tuples(target.to_arrow())
    # One interval 3..6 (version 6's update folded into the initial rows), or
    # 3..5 then the update pair of version 6.
    assert len(consumed_rows) == len(expected_first_interval(source)) + (2 if consumed else 0)

    # The dead consumer's files: kept while a transaction could still be
    # running (the grace period), then deleted, and nothing else.
    assert data_files(target) - referenced(target) == orphans
    assert target.vacuum(retain=86400).deleted_data_files == ()
    r = target.vacuum(retain=86400, grace_period=0)
    assert set(r.deleted_data_files) == orphans and r.deleted_log_files == ()
    assert data_files(target) == referenced(target)
    assert as_tuples(ctfile.open_table(target.uri).to_arrow()) == consumed_rows


def test_two_consumers_pinned_together_one_commits(tables, tmp_path):
    """Both pin state 0 and stop before their claim; released together,
    exactly one writes the claim and commits, the other gets a conflict."""
    source, target = tables
    go = tmp_path / "go"
    children = [start_child(source, target, "staged", tmp_path, go=go, tag=f"-{i}") for i in range(2)]
    try:
        for proc, marker, err, _ in children:
            wait_for(proc, marker, err, "staged")
        go.touch()
        outcomes = sorted(finish(proc, out, err)["outcome"] for proc, _, err, out in children)
    finally:
        for proc, *_ in children:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=DEADLINE_S)
    assert outcomes == ["committed", "conflict"]
    assert operations(target) == ["TRANSACTION"]
    assert source.stream(STREAM).offset == LATEST
    check_exactly_once(source, target, first=OFFSET + 1, last=LATEST, initial_rows=True)
    # The loser's staged files were deleted when its claim failed.
    assert data_files(target) == referenced(target)


def test_consumer_fenced_while_committing_gets_conflict(tables, tmp_path):
    """A consumer stops after its claim; another process fences the claim
    and consumes; released, the first finds its batch replayed and reports
    a conflict: nothing is applied twice."""
    source, target = tables
    go = tmp_path / "go"
    proc, marker, err, out = start_child(source, target, "claimed", tmp_path, go=go)
    try:
        wait_for(proc, marker, err, "claimed")
        assert consume(ctfile.open_table(source.uri).stream(STREAM), ctfile.open_table(target.uri)).committed
        go.touch()
        outcome = finish(proc, out, err)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=DEADLINE_S)
    assert outcome["outcome"] == "conflict" and "fenced" in outcome["message"], outcome
    assert operations(target) == ["STREAM FENCE", "TRANSACTION"]
    assert source.stream(STREAM).offset == LATEST
    check_exactly_once(source, target, first=OFFSET + 1, last=LATEST, initial_rows=True)


def test_fencer_killed_after_its_fence(tables, tmp_path):
    """A consumer dies after its claim; the next one fences the claim and
    dies before writing the state that abandons it. The target's txn of the
    claim is then the fence's, not a consumption: a reader must still hand
    out the whole interval (not roll the claim forward), and the next
    consumer consumes it once."""
    source, target = tables
    kill_at(source, target, "claimed", tmp_path)
    kill_at(source, target, "fenced", tmp_path)
    assert operations(target) == ["STREAM FENCE"] and state_sequences(source) == [0, 1]

    s = ctfile.open_table(source.uri).stream(STREAM)
    pending = s.pending()
    assert (pending.start_version, pending.end_version, s.offset) == (OFFSET + 1, LATEST, OFFSET)
    assert as_tuples(change_rows(pending)) == expected_first_interval(source)

    assert consume(s, ctfile.open_table(target.uri)).committed
    assert operations(target) == ["STREAM FENCE", "TRANSACTION"]  # the fence that landed is enough
    assert s.offset == LATEST
    check_exactly_once(source, target, first=OFFSET + 1, last=LATEST, initial_rows=True)
