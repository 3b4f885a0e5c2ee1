"""Stream consumption killed at each step on S3, and two consumers racing (SPEC §Streams).

The scenario of ``tests/crash/test_crash_streams.py`` on moto: a child
process (an ordinary ctfile consumer, nothing patched in it, see
``procs.py`` and ``_writer.py``'s ``consume``) consumes stream ``feed`` of a
source table into a target through :class:`s3servers.FaultProxy`, which
stops it at one step:

* ``staged``: the conditional PUT of the claim state is held (never applied);
* ``claimed``: the claim is stored; the target's log PUT is held;
* ``committed``: the target's log PUT is applied, the answer never arrives;
* ``resolved``: the PUT of the resolved state is applied, the answer never
  arrives.

The child is SIGKILLed; then a reader of the stream, the next consumer and
vacuum must find the interval consumed exactly once. Two children that
pinned the stream together race on the claim's conditional PUT.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest

import ctfile
from procs import Child
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
)
from test_crash_s3 import DEADLINE_S, kill_when

CONSUMED_BY_CHILD = {"staged": False, "claimed": False, "committed": True, "resolved": True}


class StepStopper:
    """Proxy rules that stop the consumer at a step; ``ready()`` once it is there."""

    def __init__(self, proxy, point: str, source_key: str, target_key: str):
        self.proxy, self.point = proxy, point
        self.state_prefix = f"{source_key}/_ct_streams/"
        self.log_prefix = f"{target_key}/_ct_log/"
        self.reached = threading.Event()
        self.release = threading.Event()
        self._state_puts = 0
        self._lock = threading.Lock()
        self.held = None
        proxy.rules.append(self.rule)

    def _is_state_put(self, req) -> bool:
        return req.method == "PUT" and req.key.startswith(self.state_prefix)

    def _is_target_commit(self, req) -> bool:
        return req.method == "PUT" and req.key.startswith(self.log_prefix) and req.key.endswith(".json")

    def rule(self, req):
        if self._is_state_put(req):
            with self._lock:
                self._state_puts += 1
                n = self._state_puts
            if self.point == "staged" and n == 1:  # the claim
                return self._stop(req, "hold")
            if self.point == "resolved" and n == 2:
                return self._stop(req, "forward_then_hold")
        if self._is_target_commit(req):
            if self.point == "claimed":
                return self._stop(req, "hold")
            if self.point == "committed":
                return self._stop(req, "forward_then_hold")
        return None

    def _stop(self, req, how: str):
        self.held = req
        self.reached.set()
        return (how, self.release)

    def ready(self) -> bool:
        if not self.reached.is_set():
            return False
        if self.point in ("committed", "resolved"):  # the held PUT was applied
            return any(r is self.held for r in self.proxy.forwarded)
        return True


def key_of(uri: str) -> str:
    return uri.split("://", 1)[1].split("/", 1)[1]


@pytest.mark.parametrize("point", ["staged", "claimed", "committed", "resolved"])
def test_consumer_killed_on_s3(moto_s3, fault_proxy, tmp_path, point):
    opts = moto_s3.storage_options()
    source = make_source(moto_s3.new_uri("source"), opts)
    target = ctfile.create_table(moto_s3.new_uri("target"), TARGET_SCHEMA, partition_rows=2, storage_options=opts)
    kill_consumer_at(fault_proxy, point, source, target, tmp_path / "out.json")

    consumed = CONSUMED_BY_CHILD[point]
    orphans = data_files(target) - referenced(target)
    assert bool(orphans) == (not consumed) and target.refresh().version == (1 if consumed else 0)
    s = ctfile.open_table(source.uri, storage_options=opts).stream(STREAM)
    pending = s.pending()
    if consumed:  # the target's txn is seen: not handed out again
        assert (pending.start_version, pending.end_version, s.offset) == (LATEST + 1, LATEST, LATEST)
    else:
        assert (pending.start_version, pending.end_version, s.offset) == (OFFSET + 1, LATEST, OFFSET)
        want = source.changes(start_version=OFFSET + 1, end_version=LATEST, initial_rows=True)
        assert as_tuples(change_rows(pending)) == as_tuples(change_rows(want))
    assert state_sequences(source) == ([0, 1, 2] if consumed else [0, 1] if point == "claimed" else [0])

    source.update(pc.field("uid") == 0, {"v": "A"})
    assert consume(s, ctfile.open_table(target.uri, storage_options=opts)).committed
    assert operations(target) == {"staged": ["TRANSACTION"], "claimed": ["STREAM FENCE", "TRANSACTION"]}.get(
        point, ["TRANSACTION", "TRANSACTION"])
    assert s.offset == 6
    check_exactly_once(source, target, first=OFFSET + 1, last=6, initial_rows=True)
    content = as_tuples(target.to_arrow())

    assert data_files(target) - referenced(target) == orphans
    r = target.vacuum(retain=86400, grace_period=0)
    assert set(r.deleted_data_files) == orphans and r.deleted_log_files == ()
    assert as_tuples(ctfile.open_table(target.uri, storage_options=opts).to_arrow()) == content


def test_two_consumers_race_on_s3(moto_s3, tmp_path):
    """Two processes pin the stream and stage their files, then commit at
    once: one claim's conditional PUT wins, the other consumer gets a
    conflict, and the target holds the interval once."""
    opts = moto_s3.storage_options()
    source = make_source(moto_s3.new_uri("source"), opts)
    target = ctfile.create_table(moto_s3.new_uri("target"), TARGET_SCHEMA, partition_rows=2, storage_options=opts)
    go = tmp_path / "go"
    outs = [tmp_path / f"out-{i}.json" for i in range(2)]
    children = [Child({"op": "consume", "source": source.uri, "target": target.uri, "stream": STREAM,
                       "storage_options": opts, "out": str(o), "go2": str(go)}) for o in outs]
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not all(Path(f"{o}.ready").exists() for o in outs):
            assert time.monotonic() < deadline and all(c.poll() is None for c in children), [
                o.read_text() for o in outs if o.exists()]
            time.sleep(0.01)
        go.touch()
        for c in children:
            assert c.wait(timeout=DEADLINE_S) == 0
    finally:
        for c in children:
            c.kill()
    results = [json.loads(o.read_text()) for o in outs]
    assert sorted(r["outcome"] for r in results) == ["committed", "conflict"], results
    assert operations(target) == ["TRANSACTION"]
    assert source.stream(STREAM).offset == LATEST
    check_exactly_once(source, target, first=OFFSET + 1, last=LATEST, initial_rows=True)
    assert data_files(target) == referenced(target)


def kill_consumer_at(proxy, point: str, source, target, out: Path) -> None:
    stopper = StepStopper(proxy, point, key_of(source.uri), key_of(target.uri))
    job = {"op": "consume", "source": source.uri, "target": target.uri, "stream": STREAM,
           "storage_options": proxy.endpoint.storage_options(), "out": str(out)}
    proc = Child(job)
    try:
        kill_when(proc, stopper.ready, out, point)
    finally:
        stopper.release.set()
        proxy.rules.clear()


def test_fencer_killed_on_s3(moto_s3, fault_proxy, tmp_path):
    """A consumer dies after its claim; the next dies once its STREAM FENCE
    is applied (its first target commit), before abandoning the claim. The
    fence's txn is not a consumption: the interval is still pending, and
    the next consumer applies it once."""
    opts = moto_s3.storage_options()
    source = make_source(moto_s3.new_uri("source"), opts)
    target = ctfile.create_table(moto_s3.new_uri("target"), TARGET_SCHEMA, partition_rows=2, storage_options=opts)
    kill_consumer_at(fault_proxy, "claimed", source, target, tmp_path / "a.json")
    kill_consumer_at(fault_proxy, "committed", source, target, tmp_path / "b.json")  # B's commit is its fence
    assert operations(target) == ["STREAM FENCE"] and state_sequences(source) == [0, 1]

    s = ctfile.open_table(source.uri, storage_options=opts).stream(STREAM)
    pending = s.pending()
    assert (pending.start_version, pending.end_version, s.offset) == (OFFSET + 1, LATEST, OFFSET)
    assert consume(s, ctfile.open_table(target.uri, storage_options=opts)).committed
    assert operations(target) == ["STREAM FENCE", "TRANSACTION"] and s.offset == LATEST
    check_exactly_once(source, target, first=OFFSET + 1, last=LATEST, initial_rows=True)
