"""Every table operation on an ``s3://`` URL behaves exactly as on a local path.

The same history of statements runs against a local directory and against
moto (and SeaweedFS for the short smoke test); every observable result -
commit results, snapshots at every version, time travel, all change-scan
modes, history, scan tasks shipped to another process, distributed writes -
must be identical. Then: opening a table on S3 costs a handful of requests
thanks to checkpoints (counted by a proxy), not one per version.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("n", pa.int64())])


def _t(ids, names=None, n=None) -> pa.Table:
    return pa.table({"id": ids, "name": names or [f"x{i}" for i in ids], "n": n or ids}, schema=SCHEMA)


def _sorted(t: pa.Table) -> list[tuple]:
    # Row-id strings hash the (random) table id and commit timestamps the clock.
    cols = [c for c in t.column_names if c not in ("METADATA$COMMIT_TIMESTAMP", "METADATA$ROW_ID")]
    return sorted(zip(*(t.column(c).to_pylist() for c in cols)), key=repr)


def _result(r) -> tuple:
    return (r.version, r.committed, r.operation, r.num_inserted_rows, r.num_updated_rows, r.num_deleted_rows,
            r.num_copied_rows, r.num_added_partitions, r.num_removed_partitions)


def run_history(uri: str, opts, *, capture: bool = False) -> dict:
    """Run the statements; return everything observable, minus timestamps."""
    out: dict = {}
    props = {"ctfile.checkpointInterval": "4"}
    if capture:
        props["ctfile.changeCapture"] = "before_after"
    t = ctfile.create_table(uri, SCHEMA, partition_rows=3, properties=props, storage_options=opts)
    with pytest.raises(ctfile.TableExistsError):
        ctfile.create_table(uri, SCHEMA, storage_options=opts)
    rs = [
        t.insert(_t([1, 2, 3, 4, 5])),
        t.update(pc.field("id") == 2, {"name": "two"}),
        t.delete(pc.field("id") >= 5),
        t.merge(_t([3, 6], ["three", "six"], [30, 60]), on="id"),
        t.update(pc.field("id") == 999, {"name": "nobody"}),  # empty: commits nothing
        t.compact(),
        t.set_properties({"owner": "tests"}),
    ]
    with t.transaction() as tx:
        tx.insert(_t([7, 8]))
        tx.delete(pc.field("id") == 1)
    rs.append(tx.result)
    job = t.write_job()
    job = pickle.loads(pickle.dumps(job))  # as a Spark executor gets it
    staged = job.write(_t([9, 10]))
    rs.append(job.commit(staged))
    rs.append(t.overwrite(_t([20, 21, 22])))
    rs.append(t.insert(_t([23])))
    out["results"] = [_result(r) for r in rs]

    t = ctfile.open_table(uri, storage_options=opts)
    out["version"] = t.version
    out["properties"] = t.properties
    out["snapshots"] = {v: _sorted(t.snapshot(v).to_arrow(include_hidden=True)) for v in range(t.version + 1)}
    ts = t.history()[3].timestamp
    out["at_timestamp"] = (t.snapshot(timestamp=ts).version, _sorted(t.snapshot(timestamp=ts).to_arrow()))
    out["history"] = [(h.version, h.operation, h.data_change, h.read_version) for h in t.history()]
    out["changes"] = {
        (a, mode): _sorted(t.changes(start_version=a, information=mode).to_arrow())
        for a in (1, 3, 8) for mode in ("default", "append_only", "audit")
    }
    out["changes_filtered"] = _sorted(t.changes(start_version=1, end_version=6, filter=pc.field("id") < 4).to_arrow())
    out["changes_initial"] = _sorted(t.changes(start_version=4, end_version=6, initial_rows=True).to_arrow())
    out["filtered"] = _sorted(t.snapshot(6).to_arrow(filter=pc.field("n") > 3))
    out["checkpoints"] = t.log.list().checkpoints
    out["captured"] = [(h.version, h.captured, h.change_files) for h in t.history()]
    out["plan_shapes"] = [str(t.changes(start_version=v, end_version=v).plan_shape) for v in range(1, t.version + 1)]
    return out


@pytest.mark.parametrize("capture", [False, True], ids=["capture-off", "capture-on"])
def test_table_operations_match_local(tmp_path, moto_s3, capture):
    """With change capture on, the change files are written and read over S3
    too, and every change scan equals the capture-off table's."""
    local = run_history(str(tmp_path / "local"), None, capture=capture)
    s3 = run_history(moto_s3.new_uri("parity"), moto_s3.storage_options(), capture=capture)
    assert local["checkpoints"] == [4, 8] and local["version"] == 9
    for key in local:
        assert s3[key] == local[key], key
    if capture:
        assert "CAPTURED" in s3["plan_shapes"] and any(n for _, _, n in s3["captured"])
        off = run_history(str(tmp_path / "off"), None)
        for key in ("results", "snapshots", "changes", "changes_filtered", "changes_initial"):
            assert s3[key] == off[key], key


def test_scan_tasks_and_storage_options_in_another_process(seaweedfs_s3, tmp_path):
    """Scan tasks carry the URI and storage options; a fresh process reads them."""
    uri = seaweedfs_s3.new_uri("tasks")
    t = ctfile.create_table(uri, SCHEMA, partition_rows=2, storage_options=seaweedfs_s3.storage_options())
    t.insert(_t(list(range(7))))
    tasks = t.snapshot().scan_tasks(filter=pc.field("id") >= 2)
    assert len(tasks) == 3  # [0,1] pruned
    blob = tmp_path / "tasks.pkl"
    blob.write_bytes(pickle.dumps(tasks))
    code = (
        "import pickle, sys, json; tasks = pickle.load(open(sys.argv[1], 'rb'));"
        "print(json.dumps(sorted(i for task in tasks for b in task.to_batches() for i in b.column('id').to_pylist())))"
    )
    src = str(Path(ctfile.__file__).resolve().parents[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # options only from the tasks
    env["PYTHONPATH"] = src
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    out = subprocess.run([sys.executable, "-c", code, str(blob)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [2, 3, 4, 5, 6]


def test_open_uses_few_requests_thanks_to_checkpoints(moto_s3, fault_proxy):
    """Open + read the latest snapshot of a 22-version table: with a checkpoint
    every 5 versions it costs a few requests; without checkpoints every entry
    is read. (benchmarks/bench_objectstore.py measures 10,000 versions.)"""
    counts = {}
    for interval in ("5", "0"):
        uri = moto_s3.new_uri("open")
        t = ctfile.create_table(uri, SCHEMA, properties={"ctfile.checkpointInterval": interval},
                                storage_options=moto_s3.storage_options())
        for i in range(21):
            t.insert(_t([i]))
        assert t.version == 21
        fault_proxy.stats.reset()
        opened = ctfile.open_table(uri, storage_options=fault_proxy.endpoint.storage_options())
        assert opened.version == 21
        assert opened.snapshot().num_records == 21
        counts[interval] = dict(fault_proxy.stats.reset())
    with_cp = counts["5"]
    # hint (GET) + checkpoint probe and version probing (HEADs) + hint and
    # checkpoint again (2 GETs) + the one entry after it (GET); twice the
    # probing, as open_table and snapshot() each look for the latest version.
    assert sum(with_cp.values()) <= 16, with_cp
    assert with_cp.get("LIST", 0) == 0, "the hint spares the listing"
    assert counts["0"].get("GET", 0) >= 21, counts["0"]  # every entry replayed
    print(f"\n[figures] open-22-versions requests: with checkpoints {with_cp}, without {counts['0']}")
