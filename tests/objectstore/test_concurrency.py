"""Concurrent writers in separate processes, without a lock service.

* 8 writer processes x 25 appends against one table, on local disk and on
  SeaweedFS: every commit lands exactly once, versions are dense, every row
  is readable exactly once and carries the version its writer was told.
* Conflicting DML in two processes that read the same version and commit at
  the same moment: disjoint partitions both commit (one after a rebase);
  overlapping partitions give exactly one CommitConflictError naming the
  winning version; nothing is lost or duplicated.
* A reader running change scans and snapshots while writers commit always sees
  whole commits, and consecutive change scans add up to the snapshots.
* Concurrent upserts (``Table.merge``) and increments (``Table.update``) of
  overlapping keys in 4 processes (SPEC §Conflict detection): keys stay
  unique, no committed update is lost, and every committed MERGE's values are
  in the snapshot of its version.

Figures (wall time, attempts) are printed with ``-s`` and written to
``$CTFILE_CONCURRENCY_REPORT`` (a JSON file) when that variable is set.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.actions import AddPartition, CommitInfo
from procs import Child
SCHEMA = pa.schema([pa.field("w", pa.int64(), nullable=False), ("seq", pa.int64()), ("i", pa.int64())])
CHILD_TIMEOUT_S = 300


def _report(name: str, figures: dict) -> None:
    print(f"\n[figures] {name}: {json.dumps(figures, sort_keys=True)}")
    path = os.environ.get("CTFILE_CONCURRENCY_REPORT")
    if path:
        existing = json.loads(Path(path).read_text()) if Path(path).exists() else {}
        existing[name] = figures
        Path(path).write_text(json.dumps(existing, indent=2, sort_keys=True))


def _child_env(endpoint) -> None:
    """Children get everything from their job (storage options included)."""
    return None


def _start(job: dict, env, err_path: Path) -> Child:
    """A writer process (forked from the pre-loaded forkserver, see procs.py);
    its errors come back in the result file."""
    return Child(job)


def _wait_ready(procs: list[Child], outs: list[Path], tmp_path: Path) -> None:
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while not all(Path(f"{o}.ready").exists() for o in outs):
        for n, (p, o) in enumerate(zip(procs, outs)):
            if p.poll() is not None and not Path(f"{o}.ready").exists():
                out = o.read_text() if o.exists() else ""
                pytest.fail(f"child {n} exited early with {p.returncode}: {out}")
        assert time.monotonic() < deadline, "children did not get ready"
        time.sleep(0.01)


def _wait_all(procs: list[Child], outs: list[Path]) -> list[dict]:
    try:
        for p in procs:
            p.wait(timeout=CHILD_TIMEOUT_S)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    results = []
    for p, out in zip(procs, outs):
        res = json.loads(out.read_text()) if out.exists() else {"error": f"no result (exit {p.returncode})"}
        assert "error" not in res, res["error"]
        assert p.returncode == 0
        results.append(res)
    return results


def _run_together(jobs: list[dict], tmp_path: Path, prefix: str) -> tuple[list[dict], float]:
    """Start one child per job, release them together once all are ready, and
    return their results and the wall time from the release to the last
    child's end (its last commit, not its process exit)."""
    go = tmp_path / "go"
    procs, outs = [], []
    for n, job in enumerate(jobs):
        out = tmp_path / f"{prefix}{n}.json"
        procs.append(_start({**job, "go": str(go), "out": str(out)}, None, tmp_path / f"{prefix}{n}.err"))
        outs.append(out)
    _wait_ready(procs, outs, tmp_path)
    t0 = time.time()
    go.write_text("go")
    results = _wait_all(procs, outs)
    return results, max(r["end"] for r in results) - t0


def _target(request, tmp_path, kind: str):
    if kind == "local":
        return str(tmp_path / "table"), None, None
    ep = request.getfixturevalue("seaweedfs_s3")
    return ep.new_uri("conc"), ep.storage_options(), ep


@pytest.fixture(params=["local", "seaweedfs"])
def target(request, tmp_path):
    """(uri, storage_options, endpoint or None) of a fresh table location."""
    return _target(request, tmp_path, request.param)


# ---------------------------------------------------------------- appends

N_WRITERS = 8
N_COMMITS = 25
ROWS = 2


def test_concurrent_appends_land_exactly_once(target, tmp_path):
    uri, opts, ep = target
    table = ctfile.create_table(uri, SCHEMA, storage_options=opts)
    jobs = [{"op": "append", "uri": uri, "storage_options": opts, "writer": w, "commits": N_COMMITS, "rows": ROWS}
            for w in range(N_WRITERS)]
    results, wall = _run_together(jobs, tmp_path, "w")

    total = N_WRITERS * N_COMMITS
    reported = {(r["writer"], c["seq"]): c for r in results for c in r["commits"]}
    assert len(reported) == total and all(c["committed"] for c in reported.values())
    versions = sorted(c["version"] for c in reported.values())
    assert versions == list(range(1, total + 1)), "every commit got its own version, densely"

    table = ctfile.open_table(uri, storage_options=opts)
    assert table.version == total
    assert table.log.list().commits == list(range(total + 1))
    snap = table.snapshot().to_arrow(include_hidden=True)
    assert snap.num_rows == total * ROWS
    keys = Counter(zip(snap.column("w").to_pylist(), snap.column("seq").to_pylist(), snap.column("i").to_pylist()))
    assert set(keys.values()) == {1}, "no row twice"
    assert set(keys) == {(w, s, i) for w in range(N_WRITERS) for s in range(N_COMMITS) for i in range(ROWS)}
    # Each commit's rows carry the version its writer was told (row lineage).
    for w, s, rv in zip(snap.column("w").to_pylist(), snap.column("seq").to_pylist(),
                        snap.column(ctfile.ROW_VERSION_COLUMN).to_pylist()):
        assert rv == reported[(w, s)]["version"]
    row_ids = snap.column(ctfile.ROW_ID_COLUMN).to_pylist()
    assert sorted(row_ids) == list(range(total * ROWS)), "row ids dense and unique"
    # The log agrees: one INSERT per version, each from a distinct transaction.
    txn_ids = set()
    for entry in table.log.read_entries(1, total):  # concurrent GETs on S3
        info = next(a for a in entry if isinstance(a, CommitInfo))
        assert info.operation == "INSERT"
        txn_ids.add(info.txn_id)
        assert sum(isinstance(a, AddPartition) for a in entry) == 1
    assert len(txn_ids) == total
    # Every change of the whole history, once.
    changes = table.changes(start_version=1).to_arrow()
    assert changes.num_rows == total * ROWS

    attempts = [c["attempts"] for c in reported.values()]
    _report(
        f"appends-{'local' if ep is None else ep.name}",
        {
            "writers": N_WRITERS, "commits_per_writer": N_COMMITS, "commits": total,
            "wall_s": round(wall, 2), "commits_per_s": round(total / wall, 1),
            "attempts_mean": round(sum(attempts) / total, 2), "attempts_max": max(attempts),
            "retries_total": sum(attempts) - total,
            "writer_seconds": sorted(round(r["seconds"], 2) for r in results),
        },
    )


# ---------------------------------------------------------------- schema changes


def test_schema_changes_while_writers_append(target, tmp_path):
    """Schema changes committed while 3 processes append (SPEC §Schema
    evolution, concurrency): an append that read the old schema conflicts
    with the change and re-runs at the new one, so every commit lands once
    and every file a commit adds has the field ids of its version's schema."""
    import pyarrow.parquet as pq

    from ctfile.reader.projection import field_id

    uri, opts, ep = target
    ctfile.create_table(uri, SCHEMA, storage_options=opts)
    jobs = [{"op": "append", "uri": uri, "storage_options": opts, "writer": w, "commits": 10, "rows": 2}
            for w in range(3)]
    go = tmp_path / "go"
    procs, outs = [], []
    for n, job in enumerate(jobs):
        outs.append(tmp_path / f"s{n}.json")
        procs.append(_start({**job, "go": str(go), "out": str(outs[-1])}, None, tmp_path / f"s{n}.err"))
    _wait_ready(procs, outs, tmp_path)
    go.write_text("go")
    table = ctfile.open_table(uri, storage_options=opts)
    changes = [lambda u: u.add_column("email", pa.string()), lambda u: u.add_column("note", pa.string(), first=True),
               lambda u: u.make_nullable("w")]
    for change in changes:
        while table.refresh().version < 3 and all(p.poll() is None for p in procs):
            time.sleep(0.01)  # land among the appends, not before them
        with table.update_schema() as u:
            change(u)
    results = _wait_all(procs, outs)
    assert all(c["committed"] for r in results for c in r["commits"])
    table.refresh()
    assert table.version == 30 + len(changes)
    snap = table.snapshot().to_arrow()
    assert snap.num_rows == 60 and snap.schema.names == ["note", "w", "seq", "i", "email"]
    assert snap.column("email").null_count == 60
    schemas = {}
    for v in range(1, table.version + 1):
        schemas[v] = table.snapshot(v).table_schema
    for v, entry in enumerate(table.log.read_entries(1, table.version), start=1):
        for a in entry:
            if isinstance(a, AddPartition):
                f = pq.read_schema(table.storage.arrow_path(a.partition.path), filesystem=table.storage.arrow_filesystem)
                ids = {field_id(x) for x in f} - {ctfile.ROW_ID_FIELD_ID, ctfile.ROW_VERSION_FIELD_ID}
                assert ids == {x.id for x in schemas[v].fields}, f"version {v} added a file of another schema"
    assert table.changes(start_version=1).to_arrow().num_rows == 60
    report = ctfile.verify_table(uri, storage_options=opts, all_versions=True)
    assert report.healthy, report.problems


# ---------------------------------------------------------------- conflicting DML


def _seed_partitions(uri, opts) -> ctfile.Table:
    """Four partitions, one per w value 0..3, 3 rows each."""
    t = ctfile.create_table(uri, SCHEMA, storage_options=opts)
    for w in range(4):
        t.insert(pa.table({"w": [w] * 3, "seq": [0] * 3, "i": [1, 2, 3]}, schema=SCHEMA))
    assert len(t.snapshot().partitions) == 4
    return t


def _run_pair(uri, opts, ep, tmp_path, jobs: list[dict]) -> list[dict]:
    """Start both DML children; when both have written their files, release them together."""
    env = _child_env(ep)
    go2 = tmp_path / "go2"
    procs, outs = [], []
    for n, job in enumerate(jobs):
        out = tmp_path / f"dml{n}.json"
        job = {**job, "op": "dml", "uri": uri, "storage_options": opts, "go": "", "go2": str(go2), "out": str(out)}
        procs.append(_start(job, env, tmp_path / f"dml{n}.err"))
        outs.append(out)
    _wait_ready(procs, outs, tmp_path)
    ready = [json.loads(Path(f"{o}.ready").read_text()) for o in outs]
    assert len({r["read_version"] for r in ready}) == 1, "both read the same version"
    go2.write_text("go")
    results = _wait_all(procs, outs)
    for r, rd in zip(results, ready):
        r["staged"] = rd["staged"]
    return results


def _rows(table: ctfile.Table) -> list[tuple]:
    t = table.snapshot().to_arrow()
    return sorted(zip(*(t.column(c).to_pylist() for c in ("w", "seq", "i"))))


def _data_objects(table: ctfile.Table) -> set[str]:
    return {i.path for i in table.storage.list_dir("data")}


def test_disjoint_dml_both_commit_after_rebase(target, tmp_path):
    uri, opts, ep = target
    t = _seed_partitions(uri, opts)
    read_version = t.version
    results = _run_pair(uri, opts, ep, tmp_path, [
        {"kind": "delete", "where": [0]},
        {"kind": "update", "where": [2]},
    ])
    assert [r["outcome"] for r in results] == ["committed", "committed"]
    assert sorted(r["version"] for r in results) == [read_version + 1, read_version + 2]
    first, second = sorted(r["attempts"] for r in results)
    assert first == 1 and second >= 2, "the loser lost the race and rebased"
    t = ctfile.open_table(uri, storage_options=opts)
    assert t.version == read_version + 2
    expected = [(1, 0, i) for i in (1, 2, 3)] + [(2, 0, i * 100) for i in (1, 2, 3)] + [(3, 0, i) for i in (1, 2, 3)]
    assert _rows(t) == sorted(expected)
    # Both statements' files are referenced: nothing orphaned by the rebase.
    live = {p.path for p in t.snapshot().partitions}
    for r in results:
        assert set(r["staged"]) <= live
    changes = t.changes(start_version=read_version + 1).to_arrow()
    assert Counter(changes.column("METADATA$ACTION").to_pylist()) == {"DELETE": 6, "INSERT": 3}


@pytest.mark.parametrize("kinds", [("delete", "update"), ("update", "update")])
def test_overlapping_dml_one_wins_one_conflicts(target, tmp_path, kinds):
    uri, opts, ep = target
    t = _seed_partitions(uri, opts)
    read_version = t.version
    before = _rows(t)
    results = _run_pair(uri, opts, ep, tmp_path, [
        {"kind": kinds[0], "where": [0, 1]},
        {"kind": kinds[1], "where": [1, 2]},  # both touch the partition of w=1
    ])
    outcomes = sorted(r["outcome"] for r in results)
    assert outcomes == ["committed", "conflict"]
    winner = next(r for r in results if r["outcome"] == "committed")
    loser_n = next(n for n, r in enumerate(results) if r["outcome"] == "conflict")
    loser = results[loser_n]
    assert winner["version"] == read_version + 1
    assert loser["read_version"] == read_version
    assert loser["winning_version"] == winner["version"]
    assert f"version {winner['version']}" in loser["message"]

    t = ctfile.open_table(uri, storage_options=opts)
    assert t.version == read_version + 1, "the loser committed nothing"
    # The table is exactly the winner's statement applied to the seed.
    winner_job = {0: (kinds[0], [0, 1]), 1: (kinds[1], [1, 2])}[1 - loser_n]
    kind, ws = winner_job
    expected = []
    for w, s, i in before:
        if w in ws:
            if kind == "delete":
                continue
            i *= 100
        expected.append((w, s, i))
    assert _rows(t) == sorted(expected)
    # The loser deleted its files; the winner's are live.
    assert not (set(loser["staged"]) & _data_objects(t))
    assert set(winner["staged"]) <= {p.path for p in t.snapshot().partitions}


# ---------------------------------------------------------------- reader during commits


def test_change_scans_while_writers_commit(target, tmp_path):
    """Writers append batches and update some of them; a reader keeps running
    change scans over the versions committed since its last scan. Applying
    the changes to the previous snapshot always gives exactly the snapshot
    of the version scanned to: whole commits, nothing twice, nothing missed."""
    uri, opts, ep = target
    ctfile.create_table(uri, SCHEMA, storage_options=opts)
    go = tmp_path / "go"
    n_writers, n_commits, rows, update_every = 3, 12, 5, 3
    procs, outs = [], []
    for w in range(n_writers):
        out = tmp_path / f"w{w}.json"
        job = {"op": "append", "uri": uri, "storage_options": opts, "go": str(go), "out": str(out),
               "writer": w, "commits": n_commits, "rows": rows, "update_every": update_every}
        procs.append(_start(job, None, tmp_path / f"w{w}.err"))
        outs.append(out)
    reader = ctfile.open_table(uri, storage_options=opts)
    _wait_ready(procs, outs, tmp_path)
    go.write_text("go")
    model: Counter = Counter()  # (w, seq, i) rows, built from change scans only
    last = 0
    scans = 0
    versions_seen = []
    try:
        while True:
            done = all(p.poll() is not None for p in procs)
            reader.refresh()
            v = reader.version
            if v > last:
                cs = reader.changes(start_version=last + 1, end_version=v).to_arrow()
                scans += 1
                for w, s, i, action in zip(*(cs.column(c).to_pylist() for c in ("w", "seq", "i", "METADATA$ACTION"))):
                    if action == "INSERT":
                        model[(w, s, i)] += 1
                    else:
                        model[(w, s, i)] -= 1
                        assert model[(w, s, i)] >= 0, "a DELETE of a row the reader never saw"
                model = +model
                snap = reader.snapshot(v).to_arrow()
                assert Counter(zip(*(snap.column(c).to_pylist() for c in ("w", "seq", "i")))) == model
                # Every batch is whole: all rows inserted, or all rows updated.
                per_batch = Counter((w, s, i >= 1000) for w, s, i in model.elements())
                assert set(per_batch.values()) <= {rows}, per_batch
                versions_seen.append(v)
                last = v
            if done and reader.refresh().version == last:
                break
            time.sleep(0.02)
    finally:
        results = _wait_all(procs, outs)
    n_updates = n_writers * (n_commits // update_every)
    assert sum(len(r["commits"]) for r in results) == n_writers * n_commits + n_updates
    assert last == n_writers * n_commits + n_updates
    assert len({(w, s) for w, s, _ in model}) == n_writers * n_commits
    assert sum(1 for _, _, i in model if i >= 1000) == n_updates * rows
    assert scans >= 2, "the reader ran while writers committed"
    _report(f"reader-{'local' if ep is None else ep.name}",
            {"scans": scans, "versions": last, "versions_seen": versions_seen})


# ---------------------------------------------------------------- serializable upserts

UPSERT_SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False), ("owner", pa.int64()), ("seq", pa.int64()), ("hits", pa.int64()),
])
SEED_KEYS = list(range(10))  # incremented; keys 5..19 are upserted (5..9 exist, 10..19 are new)


def _upsert_plan(writer: int, steps: int) -> list[list[list[int]]]:
    import random

    rng = random.Random(1000 + writer)
    return [[sorted(rng.sample(range(5, 20), 4)), sorted(rng.sample(SEED_KEYS, 3))] for _ in range(steps)]


def test_concurrent_upserts_keep_keys_unique_and_lose_no_update(target, tmp_path):
    """The defect: four processes upserting the same new keys stored some
    keys twice. Every statement here re-runs on conflict (Table.merge and
    Table.update), so all of them commit, in some serial order."""
    uri, opts, ep = target
    table = ctfile.create_table(uri, UPSERT_SCHEMA, storage_options=opts, partition_rows=4)
    n = len(SEED_KEYS)
    table.insert(pa.table({"id": SEED_KEYS, "owner": [-1] * n, "seq": [-1] * n, "hits": [0] * n}, schema=UPSERT_SCHEMA))
    n_writers, steps = 4, 5
    plans = {w: _upsert_plan(w, steps) for w in range(n_writers)}
    jobs = [{"op": "upsert", "uri": uri, "storage_options": opts, "writer": w, "plan": plans[w]}
            for w in range(n_writers)]
    results, wall = _run_together(jobs, tmp_path, "u")
    stmts = [dict(s, writer=r["writer"]) for r in results for s in r["statements"]]
    assert all(s["committed"] for s in stmts), "every statement committed (re-run after conflicts)"
    versions = sorted(s["version"] for s in stmts)
    assert versions == list(range(2, 2 + len(stmts))), "one version per statement, dense"

    table = ctfile.open_table(uri, storage_options=opts)
    final = table.to_arrow()
    ids = final.column("id").to_pylist()
    assert len(ids) == len(set(ids)), f"duplicate keys: {sorted(i for i, c in Counter(ids).items() if c > 1)}"
    merged = {k for s in stmts if s["op"] == "merge" for k in s["keys"]}
    assert set(ids) == set(SEED_KEYS) | merged
    rows = {r["id"]: r for r in final.to_pylist()}
    # No lost increment: hits counts every committed increment of the key.
    expected_hits = Counter(k for s in stmts if s["op"] == "inc" for k in s["keys"])
    assert {k: rows[k]["hits"] for k in SEED_KEYS} == {k: expected_hits.get(k, 0) for k in SEED_KEYS}
    # Each committed MERGE is whole in the snapshot of its version, and the
    # last MERGE of a key (by version) is what the table holds.
    last_merge = {}
    for s in sorted((s for s in stmts if s["op"] == "merge"), key=lambda s: s["version"]):
        snap = {r["id"]: r for r in table.snapshot(s["version"]).to_arrow().to_pylist()}
        assert all((snap[k]["owner"], snap[k]["seq"]) == (s["writer"], s["step"]) for k in s["keys"]), s
        for k in s["keys"]:
            last_merge[k] = (s["writer"], s["step"])
    assert {k: (rows[k]["owner"], rows[k]["seq"]) for k in last_merge} == last_merge
    # The inserts of new keys add up: each key 10..19 inserted exactly once.
    assert sum(s["inserted"] for s in stmts if s["op"] == "merge") == len(merged - set(SEED_KEYS))
    attempts = [s["attempts"] for s in stmts]
    _report(
        f"upserts-{'local' if ep is None else ep.name}",
        {"writers": n_writers, "statements": len(stmts), "wall_s": round(wall, 2),
         "attempts_mean": round(sum(attempts) / len(attempts), 2), "attempts_max": max(attempts)},
    )
