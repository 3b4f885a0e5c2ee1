"""RESTORE under concurrent writers in separate processes (SPEC §Restore,
§Conflict detection: a RESTORE reads the whole table).

* A RESTORE and a DELETE prepared in two processes from the same version,
  each held before its commit: whichever commits second conflicts, naming
  the first one's version, and the table is what the first made it. On
  local disk and on the S3 server (moto): each commit is released only
  after the other finished, so moto's non-atomic conditional PUT (see
  ``tests/unit/log/test_storage_contract.py``) is never raced.
* Free-running: 3 processes append while a fourth restores version 1 over
  and over, on local disk and on SeaweedFS (whose conditional PUT is
  atomic). Every RESTORE that committed made the table equal to version 1,
  rows, row ids and row versions; its change scan is exactly the
  difference of the snapshots around it; every append it did not undo is
  there exactly once; the table verifies.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import _restorer
import ctfile
import procs
from ctfile.format.actions import CommitInfo
from ctfile.reader.row_ids import row_id_strings, table_seed
from test_concurrency import SCHEMA, _target, _wait_all, _wait_ready

DEADLINE_S = 300


class _Restorer(procs.Child):
    """``_restorer.py``'s job in a forked child of the pre-loaded forkserver."""

    def __init__(self, job: dict):
        # Not super().__init__: that starts a _writer child.
        self._p = procs.context().Process(target=_restorer.run, args=(json.dumps(job),), daemon=True)
        self._p.start()
        self.pid = self._p.pid


def _base(uri: str, opts) -> ctfile.Table:
    """Version 1: 6 rows in 3 partitions, the version every RESTORE restores."""
    t = ctfile.create_table(uri, SCHEMA, storage_options=opts, partition_rows=2)
    t.insert(pa.table({"w": [-1] * 6, "seq": [0] * 6, "i": list(range(6))}, schema=SCHEMA))
    return t


def _lineage(t: ctfile.Table, v: int) -> list[dict]:
    order = [(c, "ascending") for c in ("w", "seq", "i")]
    return t.snapshot(v).to_arrow(include_hidden=True).sort_by(order).to_pylist()


def _difference(t: ctfile.Table, v: int) -> Counter:
    """The change of version ``v`` computed from the snapshots around it, by row id."""
    seed = table_seed(t.table_id)

    def by_id(x: int) -> dict:
        s = t.snapshot(x).to_arrow(include_hidden=True)
        rids = row_id_strings(s.column(ctfile.ROW_ID_COLUMN).combine_chunks(), seed).to_pylist()
        return dict(zip(rids, (tuple(r.values()) for r in s.select(["w", "seq", "i"]).to_pylist())))

    old, new = by_id(v - 1), by_id(v)
    out: Counter = Counter()
    for rid in old.keys() | new.keys():
        if old.get(rid) != new.get(rid):
            pair = rid in old and rid in new
            if rid in old:
                out[(rid, "DELETE", pair, old[rid])] += 1
            if rid in new:
                out[(rid, "INSERT", pair, new[rid])] += 1
    return out


def _scan(t: ctfile.Table, v: int) -> Counter:
    rows = t.changes(start_version=v, end_version=v).to_arrow().to_pylist()
    return Counter((r["METADATA$ROW_ID"], r["METADATA$ACTION"], r["METADATA$ISUPDATE"], (r["w"], r["seq"], r["i"]))
                   for r in rows)


# ---------------------------------------------------------------- held commits, released one after the other


def _prepared_dml(uri, opts, tmp_path: Path, name: str) -> tuple[procs.Child, Path, Path]:
    out, go2 = tmp_path / f"{name}.json", tmp_path / f"{name}.go"
    child = procs.Child({"op": "dml", "kind": "delete", "where": [-1], "uri": uri, "storage_options": opts,
                         "out": str(out), "go2": str(go2)})
    deadline = time.monotonic() + DEADLINE_S
    while not Path(f"{out}.ready").exists():
        assert child.poll() is None and time.monotonic() < deadline, out.read_text() if out.exists() else "no output"
        time.sleep(0.01)
    return child, out, go2


@pytest.mark.parametrize("where", ["local", "moto"])
@pytest.mark.parametrize("first", ["restore", "delete"])
def test_restore_and_dml_prepared_together_one_conflicts(request, tmp_path, where, first):
    if where == "local":
        uri, opts = str(tmp_path / "t"), None
    else:
        ep = request.getfixturevalue("moto_s3")
        uri, opts = ep.new_uri("restore"), ep.storage_options()
    t = _base(uri, opts)
    t.update(pc.field("i") == 0, {"i": 100})  # 2: version 1 differs from now
    t.insert(pa.table({"w": [7], "seq": [0], "i": [0]}, schema=SCHEMA))  # 3
    # The RESTORE in this process, held before its commit; the DELETE in a child, held likewise.
    tx = t.transaction()
    tx.restore(1)
    child, out, go2 = _prepared_dml(uri, opts, tmp_path, "delete")
    try:
        if first == "restore":
            r = tx.commit()
            assert r.committed and r.version == 4
            go2.touch()
            assert child.wait(timeout=DEADLINE_S) == 0
            res = json.loads(out.read_text())
            assert (res["outcome"], res["read_version"], res["winning_version"]) == ("conflict", 3, 4), res
        else:
            go2.touch()
            assert child.wait(timeout=DEADLINE_S) == 0
            res = json.loads(out.read_text())
            assert (res["outcome"], res["version"]) == ("committed", 4), res
            with pytest.raises(ctfile.CommitConflictError) as e:
                tx.commit()
            assert (e.value.read_version, e.value.winning_version) == (3, 4)
    finally:
        child.kill()
    fresh = ctfile.open_table(uri, storage_options=opts)
    assert fresh.version == 4
    if first == "restore":
        assert _lineage(fresh, 4) == _lineage(fresh, 1)
    else:
        assert fresh.to_arrow().column("w").to_pylist() == [7]  # the DELETE's table, untouched by the RESTORE
    assert ctfile.verify_table(uri, storage_options=opts, all_versions=True).healthy


# ---------------------------------------------------------------- free-running


@pytest.fixture(params=["local", "seaweedfs"])
def target(request, tmp_path):
    return _target(request, tmp_path, request.param)


def test_restores_among_free_running_writers(target, tmp_path):
    uri, opts, _ = target
    t = _base(uri, opts)
    go = tmp_path / "go"
    jobs = [{"op": "append", "uri": uri, "storage_options": opts, "writer": w, "commits": 8, "rows": 2}
            for w in range(3)]
    children, outs = [], []
    for n, job in enumerate(jobs + [{"op": "restore", "uri": uri, "storage_options": opts, "version": 1,
                                     "restores": 8, "pause": 0.02}]):
        out = tmp_path / f"c{n}.json"
        job = {**job, "go": str(go), "out": str(out)}
        children.append(_Restorer(job) if job["op"] == "restore" else procs.Child(job))
        outs.append(out)
    _wait_ready(children, outs, tmp_path)
    go.write_text("go")
    *appends, restores = _wait_all(children, outs)

    fresh = ctfile.open_table(uri, storage_options=opts)
    ops = {v: next(a for a in fresh.log.read_entry(v) if isinstance(a, CommitInfo)).operation
           for v in range(2, fresh.version + 1)}
    restored = sorted(v for v, op in ops.items() if op == "RESTORE")
    told = sorted(r["version"] for r in restores["restores"] if r["outcome"] == "committed")
    print("\n[restores]", Counter(r["outcome"] for r in restores["restores"]), "versions", fresh.version)
    assert restored == told and restored, restores  # every committed RESTORE is in the log, as told
    for r in restores["restores"]:
        if r["outcome"] == "conflict":
            assert r["winning_version"] > r["read_version"] and ops[r["winning_version"]] == "INSERT", r
    base = _lineage(fresh, 1)
    for v in restored:
        assert _lineage(fresh, v) == base, v  # rows, row ids and row versions of version 1
        assert _scan(fresh, v) == _difference(fresh, v), v
    # Every append not undone by a later RESTORE is there exactly once.
    last = restored[-1]
    kept = Counter((a["writer"], c["seq"]) for a in appends for c in a["commits"] if c["version"] > last)
    rows = Counter((r["w"], r["seq"]) for r in fresh.to_arrow().to_pylist() if r["w"] >= 0)
    assert rows == Counter({k: 2 * n for k, n in kept.items()})
    assert all(c["committed"] for a in appends for c in a["commits"])
    assert ctfile.verify_table(uri, storage_options=opts, all_versions=True).healthy
