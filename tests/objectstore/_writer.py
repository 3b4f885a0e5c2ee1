"""Child process of the object-store concurrency tests (not a test module).

Usage: python _writer.py <job json>, or ``procs.Child(job)`` (a fork of a
pre-loaded forkserver, which starts in milliseconds instead of seconds).

The job is a JSON object with ``uri``, ``storage_options`` (or null),
``go`` (a file whose appearance starts the work; children write
``<out>.ready`` when they have opened the table, so the parent can start
them together), ``out`` (where the result JSON goes) and an
``op``:

``append``   ``writer``, ``commits``, ``rows``: ``commits`` inserts of ``rows``
             rows ``(w=writer, seq, i)``; with ``update_every`` k, after every
             k-th insert an update adds 1000 to ``i`` of that batch. The
             result lists, per commit, the version and the number of attempts.
``dml``      ``kind`` ("delete" or "update") and ``where`` (a list of ``w``
             values): opens a transaction, runs the statement (writing its
             files), writes ``<out>.ready`` and waits for ``go2`` before
             leaving the block, i.e. committing; the result holds the version
             or the CommitConflictError's read and winning versions.
``crash_op`` ``kind`` ("insert": 8 rows, "update": every row) on the crash
             tests' table; the test kills the process during the commit.
``consume``  ``source``, ``target`` (URIs) and ``stream``: consumes the
             stream into the target (``stream_log``'s consumer); with
             ``go2``, writes ``<out>.ready`` once the transaction has pinned
             the stream and staged its files and waits for ``go2`` before
             committing. The result holds the version or the conflict.
``upsert``   ``writer`` and ``plan``, a list of steps ``[merge_keys,
             increment_keys]``: per step, ``Table.merge`` of ``merge_keys``
             with ``owner = writer``, ``seq = step`` (upsert on ``id``), then
             ``Table.update`` adding 1 to ``hits`` of ``increment_keys``. The
             result lists every statement's version, attempts and outcome.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback


def _wait_for(path: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {path}")
        time.sleep(0.005)


def _write_json(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def append(job: dict) -> dict:
    import pyarrow as pa

    import ctfile

    table = ctfile.open_table(job["uri"], storage_options=job["storage_options"])
    schema = table.schema
    w = job["writer"]
    results = []
    _write_json(job["out"] + ".ready", {"version": table.version})
    _wait_for(job["go"])
    t0 = time.perf_counter()
    update_every = job.get("update_every", 0)
    for seq in range(job["commits"]):
        n = job["rows"]
        batch = pa.table({"w": [w] * n, "seq": [seq] * n, "i": list(range(n))}, schema=schema)
        r = table.insert(batch)
        results.append({"seq": seq, "version": r.version, "attempts": r.attempts, "committed": r.committed})
        if update_every and seq % update_every == update_every - 1:
            # Rewrite this writer's batch: a copy-on-write commit of its own partition.
            import pyarrow.compute as pc

            u = table.update((pc.field("w") == w) & (pc.field("seq") == seq), {"i": pc.add(pc.field("i"), 1000)})
            results.append({"seq": seq, "op": "update", "version": u.version, "attempts": u.attempts,
                            "committed": u.committed})
    return {"writer": w, "commits": results, "seconds": time.perf_counter() - t0, "end": time.time()}


def dml(job: dict) -> dict:
    import pyarrow.compute as pc

    import ctfile

    table = ctfile.open_table(job["uri"], storage_options=job["storage_options"])
    where = pc.field("w").isin(job["where"])
    try:
        with table.transaction(operation=job["kind"].upper()) as tx:
            if job["kind"] == "delete":
                tx.delete(where)
            else:
                tx.update(where, {"i": pc.multiply(pc.field("i"), 100)})
            _write_json(job["out"] + ".ready", {"read_version": tx.base.version, "staged": tx.staged_paths()})
            _wait_for(job["go2"])
        return {"outcome": "committed", "version": tx.result.version, "attempts": tx.result.attempts,
                "read_version": tx.base.version}
    except ctfile.CommitConflictError as e:
        return {"outcome": "conflict", "read_version": e.read_version, "winning_version": e.winning_version,
                "message": str(e)}


def crash_op(job: dict) -> dict:
    """The statement of the crash tests: insert 8 rows, or update every row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    import ctfile

    table = ctfile.open_table(job["uri"], storage_options=job["storage_options"])
    if job["kind"] == "insert":
        uids = list(range(100, 108))
        r = table.insert(pa.table({"uid": uids, "k": [u % 3 for u in uids], "v": [f"new{u}" for u in uids]},
                                  schema=table.schema))
    else:
        r = table.update(pc.field("uid") >= 0, {"v": "updated"})
    return {"version": r.version}


def consume(job: dict) -> dict:
    import ctfile
    import stream_log

    opts = job["storage_options"]
    stream = ctfile.open_table(job["source"], storage_options=opts).stream(job["stream"])
    target = ctfile.open_table(job["target"], storage_options=opts)

    def wait(cs) -> None:
        if "go2" in job:
            _write_json(job["out"] + ".ready", {"from": cs.start_version, "to": cs.end_version})
            _wait_for(job["go2"])

    try:
        return {"outcome": "committed", "version": stream_log.consume(stream, target, before_commit=wait).version}
    except ctfile.CommitConflictError as e:
        return {"outcome": "conflict", "message": str(e)}


def upsert(job: dict) -> dict:
    import pyarrow as pa
    import pyarrow.compute as pc

    import ctfile

    table = ctfile.open_table(job["uri"], storage_options=job["storage_options"])
    w = job["writer"]
    src_schema = pa.schema([f for f in table.schema if f.name in ("id", "owner", "seq")])
    _write_json(job["out"] + ".ready", {"version": table.version})
    _wait_for(job["go"])
    t0 = time.perf_counter()
    results = []
    for step, (merge_keys, inc_keys) in enumerate(job["plan"]):
        n = len(merge_keys)
        src = pa.table({"id": merge_keys, "owner": [w] * n, "seq": [step] * n}, schema=src_schema)
        r = table.merge(src, "id")
        results.append({"op": "merge", "step": step, "keys": merge_keys, "version": r.version,
                        "committed": r.committed, "attempts": r.attempts,
                        "inserted": r.num_inserted_rows, "updated": r.num_updated_rows})
        r = table.update(pc.field("id").isin(inc_keys), {"hits": pc.add(pc.field("hits"), 1)})
        results.append({"op": "inc", "step": step, "keys": inc_keys, "version": r.version,
                        "committed": r.committed, "attempts": r.attempts, "updated": r.num_updated_rows})
    return {"writer": w, "statements": results, "seconds": time.perf_counter() - t0, "end": time.time()}


def main(argv: list[str]) -> int:
    job = json.loads(argv[0])
    try:
        result = {"append": append, "dml": dml, "crash_op": crash_op, "upsert": upsert,
                  "consume": consume}[job["op"]](job)
    except BaseException:
        _write_json(job["out"], {"error": traceback.format_exc()})
        return 1
    _write_json(job["out"], result)
    return 0


def run(job_json: str) -> None:
    """Entry point in a forked child (``procs.Child``): exit with main's code."""
    code = main([job_json])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
