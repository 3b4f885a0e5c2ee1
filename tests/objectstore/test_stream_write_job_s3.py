"""Two write jobs consuming one stream pin, interleaved for real on S3: the
fault proxy holds the first job's commit between its claim and its target
commit (SPEC §Streams steps 2 and 3) while the second job runs. The second
fences the first's claim and commits; the first then finds its batch
replayed and raises CommitConflictError: the interval is applied once."""

from __future__ import annotations

import threading

import pyarrow as pa

import ctfile
from ctfile.log.streams import StreamStore

SCHEMA = pa.schema([("id", pa.int64())])


def test_racing_jobs_with_one_pin_one_commits_the_other_conflicts(fault_proxy):
    opts = fault_proxy.endpoint.storage_options()
    bronze = ctfile.create_table(fault_proxy.endpoint.new_uri("bronze"), SCHEMA, storage_options=opts)
    silver = ctfile.create_table(fault_proxy.endpoint.new_uri("silver"), SCHEMA, storage_options=opts)
    stream = bronze.create_stream("to_silver")
    bronze.insert(pa.table({"id": [1, 2, 3]}))
    pin = stream.pin()
    rows = stream.pending(pin=pin).to_arrow().select(["id"])
    first, second = (silver.write_job(schema=rows.schema, consuming=stream, pin=pin) for _ in range(2))
    first_files, second_files = first.write(rows), second.write(rows)

    log_prefix = silver.uri.split("/", 3)[3] + "/_ct_log/"
    release, held = threading.Event(), threading.Event()

    def hold_first_commit(req):
        if req.method == "PUT" and req.key.startswith(log_prefix) and not held.is_set():
            held.set()
            release.wait(60)  # then forwarded: the put of a version the second job took
        return None

    fault_proxy.rules.append(hold_first_commit)
    outcome: list = []

    def run_first():
        try:
            outcome.append(first.commit(first_files))
        except ctfile.CommitConflictError as e:
            outcome.append(e)

    t = threading.Thread(target=run_first)
    t.start()
    assert held.wait(60)  # the first job claimed and is committing
    assert StreamStore(bronze.storage).current("to_silver").claim is not None
    try:
        result = second.commit(second_files)  # fences the first's claim, then consumes the pin
    finally:
        release.set()
        t.join(60)
    assert result.committed
    (err,) = outcome
    assert isinstance(err, ctfile.CommitConflictError) and "fenced" in str(err)
    silver.refresh()
    assert sorted(silver.to_arrow().column("id").to_pylist()) == [1, 2, 3]
    assert [h.operation for h in silver.history()][:2] == ["WRITE", "STREAM FENCE"]
    assert stream.offset == pin.end
