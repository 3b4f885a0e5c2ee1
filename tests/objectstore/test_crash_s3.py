"""Crash injection at each step of a commit on S3, then vacuum (SPEC §Commit protocol, §Vacuum).

The pattern of ``tests/crash``: a writer runs in a child process, stops at one
point of its commit and is killed with SIGKILL; then a reader and the next
writer must see the last committed version, never a partial commit, and
``vacuum`` must delete exactly the orphaned files.

On S3 the child is an ordinary ctfile writer (nothing is patched in it) that
talks to moto through :class:`s3servers.FaultProxy`; the proxy stops it:

* ``after_first_data_file``: the first data-file PUT is answered, every later
  one is held (never reaches the server);
* ``log_put_in_flight``: all data files are stored; the conditional PUT of the
  log entry is held, not applied;
* ``log_put_applied``: the log PUT reached the server and was applied, but
  the child dies before it sees the answer: the commit is visible.

The local-disk points of ``tests/crash`` are followed by a vacuum too
(``tests/crash/_crash_writer.py``), including the log entry's orphaned
temporary file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.actions import AddPartition
from ctfile.format.paths import commit_path, parse_commit_name
from procs import Child

HERE = Path(__file__).resolve().parent
LOCAL_CRASH_WRITER = HERE.parent / "crash" / "_crash_writer.py"
DEADLINE_S = 60.0
SCHEMA = pa.schema(
    [pa.field("uid", pa.int64(), nullable=False), pa.field("k", pa.int64()), pa.field("v", pa.string())]
)
FILES_WRITTEN = {"insert": 4, "update": 3}  # at 2 rows per partition


def rows(table: ctfile.Table, version: int | None = None) -> list[tuple]:
    t = table.snapshot(version).to_arrow(include_hidden=True)
    cols = ["uid", "k", "v", ctfile.ROW_ID_COLUMN, ctfile.ROW_VERSION_COLUMN]
    return sorted(zip(*(t.column(c).to_pylist() for c in cols)))


def data_files(table: ctfile.Table) -> set[str]:
    return {i.path for i in table.storage.list_dir("data") if i.path.endswith(".parquet")}


def referenced(table: ctfile.Table) -> set[str]:
    return {a.path for v in range(table.version + 1) for a in table.log.read_entry(v) if isinstance(a, AddPartition)}


def seed(uri: str, opts) -> ctfile.Table:
    """6 rows in 3 partitions at version 1, one updated at version 2 (as tests/crash)."""
    t = ctfile.create_table(uri, SCHEMA, partition_rows=2, storage_options=opts)
    t.insert(pa.table({"uid": range(6), "k": [0, 1, 2, 0, 1, 2], "v": list("abcdef")}, schema=SCHEMA))
    t.update(pc.field("uid") == 4, {"v": "E"})
    assert t.version == 2 and len(t.snapshot().partitions) == 3
    return t


def _is_data_put(req) -> bool:
    return req.method == "PUT" and "/data/" in req.path


def _is_log_put(req) -> bool:
    return (req.method == "PUT" and "/_ct_log/" in req.path
            and parse_commit_name(req.path.rsplit("/", 1)[-1]) is not None)


class Stopper:
    """Proxy rules that stop the child at ``point``; ``reached`` is set when it is there."""

    def __init__(self, proxy, point: str):
        self.proxy = proxy
        self.point = point
        self.reached = threading.Event()
        self.release = threading.Event()
        self._data_puts = 0
        self._lock = threading.Lock()
        proxy.rules.append(self.rule)

    def rule(self, req):
        if self.point == "after_first_data_file" and _is_data_put(req):
            with self._lock:
                self._data_puts += 1
                first = self._data_puts == 1
            if first:
                return None
            self.reached.set()
            return ("hold", self.release)
        if self.point == "log_put_in_flight" and _is_log_put(req):
            self.reached.set()
            return ("hold", self.release)
        if self.point == "log_put_applied" and _is_log_put(req):
            return ("forward_then_hold", self.release)
        return None

    def ready(self) -> bool:
        if self.point == "after_first_data_file":
            # The held request is there and the first file was stored completely.
            return self.reached.is_set() and any(_is_data_put(r) for r in self.proxy.forwarded)
        if self.point == "log_put_applied":
            return any(_is_log_put(r) for r in self.proxy.forwarded)
        return self.reached.is_set()


def kill_when(proc, ready, err_path: Path, what: str) -> None:
    """Wait until ``ready()``, then SIGKILL ``proc`` (a Popen or a procs.Child);
    ``err_path`` holds what the child reported if it ends early."""

    def report() -> str:
        return err_path.read_text(errors="replace") if err_path.exists() else "(no output)"

    try:
        deadline = time.monotonic() + DEADLINE_S
        while not ready():
            if proc.poll() is not None:
                pytest.fail(f"writer exited with {proc.returncode} before {what}:\n" + report())
            if time.monotonic() > deadline:
                pytest.fail(f"writer did not reach {what} within {DEADLINE_S}s:\n" + report())
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=DEADLINE_S)
        assert proc.returncode == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=DEADLINE_S)


def _env(extra: dict | None = None) -> dict:
    src = str(Path(ctfile.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
    env.update(extra or {})
    return env


def check_after_crash(table_uri, opts, pre_version, pre_rows, pre_files, n_orphans, visible, op):
    """What every crash must leave: a consistent table, then vacuum removes the orphans only."""
    t = ctfile.open_table(table_uri, storage_options=opts)
    committed = pre_version + (1 if visible else 0)
    assert t.version == committed
    assert t.log.list().commits == list(range(committed + 1)), "no gap, no extra version"
    assert rows(t, pre_version) == pre_rows
    if not visible:
        assert rows(t) == pre_rows, "nothing of the crashed commit is visible"
        assert not t.storage.exists(commit_path(pre_version + 1))
    else:
        got = rows(t)
        info = t.log.commit_info(committed)
        assert info.operation == op.upper() and info.read_version == pre_version
        assert len(got) == len(pre_rows) + (8 if op == "insert" else 0)
        assert all(r[4] == committed for r in got if r[2].startswith(("new", "updated")))
    refs = referenced(t)
    orphans = data_files(t) - refs
    assert pre_files <= refs
    assert len(orphans) == n_orphans, sorted(orphans)
    content = rows(t)

    # Vacuum (history kept: retain 1 day; grace 0: the writer is dead) deletes exactly the orphans.
    dry = t.vacuum(retain=86400, grace_period=0, dry_run=True)
    r = t.vacuum(retain=86400, grace_period=0)
    assert set(dry.deleted_data_files) == set(r.deleted_data_files) == orphans
    assert r.deleted_log_files == ()
    assert data_files(t) == refs
    assert rows(ctfile.open_table(table_uri, storage_options=opts)) == content

    # The next commit takes the next version.
    res = t.insert(pa.table({"uid": [900], "k": [9], "v": ["after"]}, schema=SCHEMA))
    assert res.version == committed + 1
    fresh = ctfile.open_table(table_uri, storage_options=opts)
    assert fresh.log.list().commits == list(range(committed + 2))
    assert [r for r in rows(fresh) if r[0] != 900] == content
    return r


@pytest.mark.parametrize("op", ["insert", "update"])
@pytest.mark.parametrize("point", ["after_first_data_file", "log_put_in_flight", "log_put_applied"])
def test_crash_on_s3_then_vacuum(moto_s3, fault_proxy, tmp_path, point, op):
    uri = moto_s3.new_uri("crash")
    opts = moto_s3.storage_options()
    t = seed(uri, opts)
    pre_version, pre_rows, pre_files = t.version, rows(t), data_files(t)

    stopper = Stopper(fault_proxy, point)
    out = tmp_path / "out.json"
    job = {"op": "crash_op", "kind": op, "uri": uri, "storage_options": fault_proxy.endpoint.storage_options(),
           "out": str(out)}
    proc = Child(job)  # a plain ctfile writer in its own process (see procs.py)
    try:
        kill_when(proc, stopper.ready, out, point)
    finally:
        stopper.release.set()
        fault_proxy.rules.clear()

    n_orphans = {"after_first_data_file": 1, "log_put_in_flight": FILES_WRITTEN[op], "log_put_applied": 0}[point]
    check_after_crash(uri, opts, pre_version, pre_rows, pre_files, n_orphans, point == "log_put_applied", op)


@pytest.mark.parametrize("point", ["after_first_data_file", "before_log_put", "log_tmp_written"])
def test_crash_on_local_disk_then_vacuum(tmp_path, point):
    root = tmp_path / "t"
    t = seed(str(root), None)
    pre_version, pre_rows, pre_files = t.version, rows(t), data_files(t)
    marker = tmp_path / "marker.json"
    err = tmp_path / "child.err"
    with open(err, "wb") as f:
        proc = subprocess.Popen([sys.executable, str(LOCAL_CRASH_WRITER), str(root), point, str(marker), "insert"],
                                stdout=subprocess.DEVNULL, stderr=f, env=_env())
    kill_when(proc, marker.exists, err, point)
    n_orphans = 1 if point == "after_first_data_file" else FILES_WRITTEN["insert"]
    tmp_logs = [p for p in os.listdir(root / "_ct_log") if p.startswith(".tmp-")]
    assert len(tmp_logs) == (1 if point == "log_tmp_written" else 0)
    r = check_after_crash(str(root), None, pre_version, pre_rows, pre_files, n_orphans, False, "insert")
    # The log entry's temporary file is garbage too.
    assert r.deleted_temp_files == tuple(f"_ct_log/{p}" for p in tmp_logs)
    assert not [p for p in os.listdir(root / "_ct_log") if p.startswith(".tmp-")]
