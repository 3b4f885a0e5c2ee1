"""A derived table's refresh killed at each step, and two refreshers at
once, each in its own process with its own Spark (SPEC §Derived tables:
a refresh commits its rows, frontier and refresh info in one log entry).

* killed before its commit: the table and its frontier are as they were;
  the next refresh brings it to the right contents;
* killed after its commit, before the sources' retention streams moved:
  the table is refreshed; the next refresh is ``NO_DATA`` and moves them;
* two refreshers released together at their commits: exactly one commits
  the refresh; the other loses the conflict, re-reads the table and finds
  the frontier recorded (``NO_DATA``); on local disk and on S3.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.spark import derived
from derived_helpers import A_SCHEMA, QUERIES, expected_rows, make_sources, multiset
from spark_helpers import spark_env

CHILD = Path(__file__).with_name("_derived_child.py")
DEADLINE_S = 180.0

pytestmark = pytest.mark.slow


def start(uri: str, point: str, work: Path, *, go: Path | None = None, tag: str = "", options: dict | None = None):
    marker, err, out = work / f"marker-{point}{tag}", work / f"err-{point}{tag}", work / f"out-{point}{tag}"
    src = str(Path(ctfile.__file__).resolve().parents[1])
    env = dict(spark_env(), PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
    args = [sys.executable, str(CHILD), uri, point, str(marker)]
    if go is not None:
        args += [str(go), str(out), json.dumps(options or {})]
    with open(err, "wb") as f:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=f, env=env)
    return proc, marker, err, out


def wait_for(proc, path: Path, err: Path) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"refresher exited with {proc.returncode}:\n" + err.read_text(errors="replace"))
        if time.monotonic() > deadline:
            pytest.fail("refresher did not reach its point:\n" + err.read_text(errors="replace"))
        time.sleep(0.05)


def stop(proc) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=60)


def kill_refresh_at(uri: str, point: str, work: Path) -> None:
    """A refresh of ``uri`` in another process, killed (SIGKILL) at ``point``."""
    proc, marker, err, _ = start(uri, point, work)
    try:
        wait_for(proc, marker, err)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        stop(proc)


def change_sources(a: ctfile.Table) -> None:
    a.insert(pa.table({"id": [900, 901], "k": [1, None], "v": [None, None], "s": ["u", "v"]}, schema=A_SCHEMA))
    a.delete(pc.field("id") == 4)


def check(spark, uri: str, a: ctfile.Table) -> None:
    t = ctfile.open_table(uri)
    cols = t.schema.names
    want = multiset(expected_rows(spark, t.derived.query, {"a": a}, t.derived.frontier), cols)
    assert multiset(t.to_arrow(), cols) == want
    assert [v.version for v in t.derived.frontier] == [a.refresh().version]


@pytest.mark.long
@pytest.mark.parametrize("point", ["before_commit", "after_commit"])
def test_refresh_killed_at_each_step(spark, tmp_path, point):
    a, _ = make_sources(tmp_path)
    t = derived.create(spark, str(tmp_path / "d"), QUERIES["aggregate"], sources={"a": a.uri})
    change_sources(a)
    version = t.table.refresh().version
    kill_refresh_at(t.uri, point, tmp_path)
    after = ctfile.open_table(t.uri)
    committed = point == "after_commit"
    assert after.version == version + (1 if committed else 0)
    if committed:
        check(spark, t.uri, a)
    r = t.refresh()
    assert r.action is (ctfile.RefreshAction.NO_DATA if committed else ctfile.RefreshAction.INCREMENTAL), r
    check(spark, t.uri, a)
    # The next refresh moved the retention stream to the frontier.
    held = [s for s in a.refresh().streams() if s.name.startswith("__derived_")]
    assert [s.offset for s in held] == [after.refresh().derived.frontier[0].version]


@pytest.mark.long
@pytest.mark.parametrize("where", ["local", "s3"])
def test_two_refreshers_one_commits(spark, tmp_path, request, where):
    if where == "s3":
        s3 = request.getfixturevalue("moto_s3")
        root, options = s3.new_uri("derived"), s3.storage_options()
    else:
        root, options = str(tmp_path), None
    a, _ = make_sources(root, storage_options=options)
    t = derived.create(spark, f"{root}/d", QUERIES["filter"], sources={"a": a.uri}, storage_options=options)
    change_sources(a)
    version = ctfile.open_table(t.uri, storage_options=options).version
    go = tmp_path / "go"
    children = [start(t.uri, "before_commit", tmp_path, go=go, tag=f"-{i}", options=options) for i in range(2)]
    try:
        for proc, marker, err, _ in children:
            wait_for(proc, marker, err)
        go.touch()
        outcomes = []
        for proc, _, err, out in children:
            assert proc.wait(timeout=DEADLINE_S) == 0, err.read_text(errors="replace")
            outcomes.append(json.loads(out.read_text()))
    finally:
        for proc, *_ in children:
            stop(proc)
    assert sorted(o["action"] for o in outcomes) == ["INCREMENTAL", "NO_DATA"], outcomes
    after = ctfile.open_table(t.uri, storage_options=options)
    assert after.version == version + 1
    assert [e.operation for e in after.history(limit=2)] == ["REFRESH", "REFRESH"]
    assert multiset(after.to_arrow(), after.schema.names) == multiset(
        expected_rows(spark, after.derived.query, {"a": a}, after.derived.frontier), after.schema.names)
