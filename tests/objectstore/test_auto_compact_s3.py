"""Automatic compaction never fails the user's commit (SPEC §Clustering,
automatic compaction), shown with real failures on a real S3 server (moto
behind the fault proxy) and with real concurrent writer processes.

* A second writer commits between the user's commit and its automatic
  compaction: the fault proxy holds the compaction's own log put (the
  conditional PUT of the next version) and, before forwarding it, has an
  independent client commit that version on the server. This is the race
  two free-running processes hit only by chance; the proxy makes it happen
  every time at the exact point. A DELETE of a compacted row conflicts with
  the compaction (abandoned, its files deleted); an INSERT does not (the
  compaction rebases and commits after it).
* The compaction's puts fail (403 on its data file, or on its log entry).

In every case the user's ``CommitResult`` is committed, its version is
readable by a fresh client, ``auto_compaction`` says what happened (None
when abandoned), no data file is left that no version names, no row is lost
or doubled, and ``verify_table`` finds the table healthy.

Then 3 writer processes append and update with ``ctfile.autoCompact`` on, on
local disk and on SeaweedFS: every committed statement's rows are there
exactly once, automatic compactions did commit, the table verifies.
"""

from __future__ import annotations

import threading
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.actions import AddPartition, CommitInfo
from ctfile.format.paths import commit_path

from test_concurrency import SCHEMA as WSI_SCHEMA, _run_together, _target

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("k", pa.string())])
PROPS = {"ctfile.clusterBy": "k,id", "ctfile.autoCompact": "true", "ctfile.partitionRows": "8"}
NO_CLIENT_RETRIES = {"config_kwargs": {"retries": {"max_attempts": 1, "mode": "standard"}, "connect_timeout": 2}}


def _rows(ids) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": ids, "k": [f"k{i % 3}" for i in ids]}, schema=SCHEMA)


def _key(uri: str, path: str) -> str:
    return uri.split("/", 3)[3] + "/" + path


def _three_small_inserts(t: ctfile.Table) -> None:
    """Three one-row partitions: the next small insert makes four, and its
    commit (version 4) is followed by an automatic compaction."""
    for i in range(3):
        assert t.insert(_rows([i])).auto_compaction is None


def _stored_data_files(endpoint, uri: str) -> set[str]:
    prefix = _key(uri, "data/")
    client = endpoint.boto3_client()
    found = client.list_objects_v2(Bucket=endpoint.bucket, Prefix=prefix).get("Contents", [])
    return {o["Key"][len(prefix) - len("data/"):] for o in found}


def _named_data_files(t: ctfile.Table) -> set[str]:
    """Every data file some version of ``t`` adds."""
    return {a.partition.path for v in range(t.version + 1) for a in t.log.read_entry(v) if isinstance(a, AddPartition)}


def _check_healthy(uri: str, opts: dict, endpoint, want_ids: list[int]) -> ctfile.Table:
    fresh = ctfile.open_table(uri, storage_options=opts)
    ids = Counter(fresh.to_arrow().column("id").to_pylist())
    assert ids == Counter(want_ids), "no row lost or doubled"
    assert _stored_data_files(endpoint, uri) == _named_data_files(fresh), "no data file no version names"
    report = ctfile.verify_table(uri, storage_options=opts, all_versions=True)
    assert report.healthy, report
    return fresh


# ---------------------------------------------------------------- a writer in between


@pytest.mark.parametrize("other", ["delete", "insert", "small-insert"])
def test_writer_between_commit_and_auto_compaction(moto_s3, fault_proxy, other):
    uri = moto_s3.new_uri("autoc")
    opts = fault_proxy.endpoint.storage_options()
    direct = moto_s3.storage_options()  # the other writer talks to the server itself
    t = ctfile.create_table(uri, SCHEMA, properties=PROPS, storage_options=opts)
    _three_small_inserts(t)
    compaction_entry = _key(uri, commit_path(5))
    done = threading.Event()
    seen: list[str] = []

    def other_writer_first(req):
        """Before the compaction's put of version 5 reaches the server, a
        second client commits version 5 (once)."""
        if req.conditional_put and req.key == compaction_entry and not done.is_set():
            done.set()
            w = ctfile.open_table(uri, storage_options=direct)
            if other == "delete":
                r = w.delete(pc.field("id") == 1)
            else:  # 8 rows make a full partition; 1 row a fifth small one
                r = w.insert(_rows(range(100, 108) if other == "insert" else [100]))
            seen.append(f"{r.operation}@{r.version}")
            if r.auto_compaction is not None:
                seen.append(f"{r.auto_compaction.operation}@{r.auto_compaction.version}")
        return None

    fault_proxy.rules.append(other_writer_first)
    r = t.insert(_rows([3]))
    fault_proxy.rules.clear()
    assert done.is_set(), "the compaction did try to commit version 5"
    assert (r.version, r.committed, r.operation) == (4, True, "INSERT")
    if other == "delete":
        # The DELETE removed a partition the compaction read: it conflicts
        # and is abandoned; the user's commit stands.
        assert seen == ["DELETE@5"]
        assert r.auto_compaction is None
        want, ops = [0, 2, 3], ["INSERT", "DELETE"]
    elif other == "insert":
        # A blind append does not conflict with a COMPACT: rebased, committed after it.
        assert seen == ["INSERT@5"]
        assert r.auto_compaction is not None and r.auto_compaction.version == 6, r
        assert r.auto_compaction.attempts == 2
        want, ops = [0, 1, 2, 3, *range(100, 108)], ["INSERT", "INSERT", "COMPACT"]
    else:
        # The other writer's small insert has its own automatic compaction,
        # of the same partitions: it commits first, ours conflicts and is abandoned.
        assert seen == ["INSERT@5", "COMPACT@6"]
        assert r.auto_compaction is None
        want, ops = [0, 1, 2, 3, 100], ["INSERT", "INSERT", "COMPACT"]
    latest = 3 + len(ops)
    fresh = _check_healthy(uri, opts, moto_s3, want)
    assert fresh.version == latest
    assert sorted(fresh.snapshot(4).to_arrow().column("id").to_pylist()) == [0, 1, 2, 3]
    assert [next(a for a in fresh.log.read_entry(v) if isinstance(a, CommitInfo)).operation
            for v in range(4, latest + 1)] == ops


# ---------------------------------------------------------------- failed puts


def _denied(predicate):
    return lambda req: ("respond", 403, "AccessDenied", "injected") if predicate(req) else None


@pytest.mark.parametrize("fail", ["data", "entry"])
def test_failed_compaction_puts_leave_the_commit(moto_s3, fault_proxy, fail):
    uri = moto_s3.new_uri("autof")
    opts = {**fault_proxy.endpoint.storage_options(), **NO_CLIENT_RETRIES}
    t = ctfile.create_table(uri, SCHEMA, properties=PROPS, storage_options=opts)
    _three_small_inserts(t)
    user_entry, compaction_entry = _key(uri, commit_path(4)), _key(uri, commit_path(5))
    committed = threading.Event()
    denied: list[str] = []

    def after_user_commit(req):
        """Deny the compaction's data PUTs (or its log put), which all come
        after the user's entry was put."""
        if req.conditional_put and req.key == user_entry:
            committed.set()
            return None
        hit = committed.is_set() and req.method == "PUT" and (
            "/data/" in req.path if fail == "data" else req.key == compaction_entry)
        if hit:
            denied.append(req.key)
            return ("respond", 403, "AccessDenied", "injected")
        return None

    fault_proxy.rules.append(after_user_commit)
    r = t.insert(_rows([3]))
    fault_proxy.rules.clear()
    assert denied, "the compaction did try to write"
    assert (r.version, r.committed, r.auto_compaction) == (4, True, None)
    assert t.version == 4
    fresh = _check_healthy(uri, opts, moto_s3, [0, 1, 2, 3])
    assert fresh.version == 4
    # The next commit tries again (and, the fault gone, compacts).
    r = t.insert(_rows([4]))
    assert r.auto_compaction is not None and r.auto_compaction.committed
    _check_healthy(uri, opts, moto_s3, [0, 1, 2, 3, 4])


# ---------------------------------------------------------------- writer processes


@pytest.fixture(params=["local", "seaweedfs"])
def target(request, tmp_path):
    return _target(request, tmp_path, request.param)


def test_writer_processes_with_auto_compaction(target, tmp_path):
    """3 processes x 12 inserts of 2 rows, each third batch then updated
    (i + 1000), on a table clustered by ``i,w`` with automatic compaction:
    each committed statement's rows exactly once, with its values."""
    uri, opts, _ = target
    ctfile.create_table(uri, WSI_SCHEMA, storage_options=opts, properties={
        "ctfile.clusterBy": "i,w", "ctfile.autoCompact": "true", "ctfile.partitionRows": "12"})
    writers, commits, rows = 3, 12, 2
    jobs = [{"op": "append", "uri": uri, "storage_options": opts, "writer": w, "commits": commits, "rows": rows,
             "update_every": 3} for w in range(writers)]
    results, _ = _run_together(jobs, tmp_path, "ac")
    for res in results:
        assert all(c["committed"] for c in res["commits"]), res
    table = ctfile.open_table(uri, storage_options=opts)
    snap = table.to_arrow()
    got = Counter(zip(*(snap.column(c).to_pylist() for c in ("w", "seq", "i"))))
    want = Counter((w, s, i + (1000 if s % 3 == 2 else 0))
                   for w in range(writers) for s in range(commits) for i in range(rows))
    assert got == want
    infos = [next(a for a in e if isinstance(a, CommitInfo)) for e in table.log.read_entries(1, table.version)]
    compactions = [i for i in infos if i.operation == "COMPACT"]
    assert compactions and all(not i.data_change and i.operation_parameters.get("auto") for i in compactions)
    assert sum(i.operation in ("INSERT", "UPDATE") for i in infos) == writers * (commits + commits // 3)
    # Every inserted row once in the history's changes; compactions invisible.
    assert table.changes(start_version=1, information="append_only").to_arrow().num_rows == writers * commits * rows
    report = ctfile.verify_table(uri, storage_options=opts, all_versions=True)
    assert report.healthy, report
