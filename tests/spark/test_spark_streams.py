"""Streams from Spark (SPEC §Streams, docs/spark.md "Streams from Spark"): a batch
read of a stream's pending changes (``option("stream")``, ``streamPin``) and
a batch write that consumes a pin exactly once (``consumeStream``), in a
``foreachBatch`` bronze -> silver pipeline.

Spark actions are few and each checks much: a SparkSession's jobs cost
seconds on the shared machine."""

from __future__ import annotations

import json
import os
import threading

import pyarrow as pa
import pytest

import ctfile
from ctfile import InvalidArgumentError
from ctfile.spark_datasource.options import parse_read_options, parse_write_options
from readme_examples import streams_block
from spark_helpers import make_people, read

P = "/tmp/some/table"


def normalized(table: pa.Table) -> tuple[list[str], list[tuple]]:
    """Column names and sorted rows; timestamps as UTC microseconds (Spark
    and pyarrow render them differently in Python)."""
    cols = []
    for f, col in zip(table.schema, table.columns):
        if pa.types.is_timestamp(f.type):
            col = col.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        cols.append(col.to_pylist())
    rows = sorted(zip(*cols), key=lambda r: tuple((v is not None, v) for v in r))
    return table.schema.names, rows


# ---------------------------------------------------------------- options (no Spark)


@pytest.mark.parametrize("other", ["versionAsOf", "changes", "startingVersion", "endingTimestamp", "initialRows"])
def test_stream_read_refuses_contradicting_options(other):
    with pytest.raises(InvalidArgumentError, match=f"options {other} contradict it"):
        parse_read_options({"path": P, "stream": "s", other: "1"})


def test_stream_read_options():
    o = parse_read_options({"path": P, "Stream": "s", "streamPin": "t", "changelog": "op"})
    assert (o.stream, o.stream_pin, o.changelog, o.is_change_scan) == ("s", "t", "op", True)
    with pytest.raises(InvalidArgumentError, match="streamPin is the pin of a stream read: add option stream"):
        parse_read_options({"path": P, "streamPin": "t"})
    with pytest.raises(InvalidArgumentError, match=r"option stream reads .* as a batch \(spark.read\)"):
        parse_read_options({"path": P, "stream": "s", "changes": "default"}, streaming=True)


def test_consuming_write_options():
    o = parse_write_options({"path": P, "consumeStream": "s", "streamTable": "/b", "streamPin": "t"})
    assert (o.consume.stream, o.consume.table, o.consume.pin) == ("s", "/b", "t")
    with pytest.raises(InvalidArgumentError, match="found consumeStream, streamPin, missing streamTable"):
        parse_write_options({"path": P, "consumeStream": "s", "streamPin": "t"})
    with pytest.raises(InvalidArgumentError, match="txnAppId and consumeStream"):
        parse_write_options({"path": P, "consumeStream": "s", "streamTable": "/b", "streamPin": "t", "txnAppId": "a"})


# ---------------------------------------------------------------- reads


def test_stream_read_equals_python_pending(spark, tmp_path):
    people = make_people(tmp_path / "people")  # v1-v2 inserts, v3-v4 updates, v5 delete
    streams = [people.create_stream(m, information=m, start_version=2) for m in ("default", "append_only", "audit")]
    streams.append(people.create_stream("initial", start_version=4, initial_rows=True))
    for s in streams:
        expected = normalized(s.pending().to_arrow())
        got = normalized(read(spark, people.uri, stream=s.name).toArrow())
        assert got == expected, s.name
        assert s.offset == s.state().offset  # reading consumed nothing
    assert streams[-1].pending().to_arrow().num_rows == 3  # from the empty table: version 5's rows, inserted
    # A pin reads exactly its interval, however far the table moved since.
    pin = streams[0].pin()
    people.insert(pa.table({"id": [9], "name": ["Bunny"]}, schema=people.schema))
    pinned = read(spark, people.uri, stream="default", streamPin=pin.token, changelog="op")
    assert normalized(pinned.toArrow()) == normalized(streams[0].pending(pin=pin, changelog="op").to_arrow())
    assert 9 not in [r.id for r in pinned.collect()]


def test_stream_read_errors(spark, tmp_path, settle_clock):
    people = make_people(tmp_path / "people")
    s = people.create_stream("s", start_version=1)
    with pytest.raises(Exception) as ei:
        read(spark, people.uri, stream="s", startingVersion="2")
    assert "InvalidArgumentError" in str(ei.value) and "options startingVersion contradict it" in str(ei.value)
    with pytest.raises(Exception) as ei:
        read(spark, people.uri, stream="nope")
    assert "StreamNotFoundError" in str(ei.value) and "its streams are ['s']" in str(ei.value)
    with pytest.raises(Exception) as ei:
        read(spark, people.uri, stream="s", streamPin="1:2")
    assert "InvalidArgumentError" in str(ei.value) and "pin token" in str(ei.value)
    # History the stream needs expired (a vacuum with no retention and no extension): stale.
    people.set_properties({"ctfile.maxRetentionExtension": "0s"})
    settle_clock(people)
    people.vacuum(retain=0, grace_period=0)
    with pytest.raises(Exception) as ei:
        read(spark, people.uri, stream="s")
    assert "StaleStreamError" in str(ei.value) and "stream s on" in str(ei.value)
    with pytest.raises(ctfile.StaleStreamError):
        s.pending()  # as the Python API


# ---------------------------------------------------------------- foreachBatch bronze -> silver


def silver_rows(uri, **kw) -> list[tuple]:
    return sorted(tuple(r.values()) for r in ctfile.open_table(uri, **kw).to_arrow().to_pylist())


def test_foreach_batch_pipeline_is_exactly_once(spark, tmp_path):
    """The docs/spark.md example, then more batches, a replayed batch, two writes
    racing with one pin and a pin consumed elsewhere; silver always equals
    the model: every bronze row once, its name capitalized."""
    ns: dict = {"spark": spark}
    exec(compile(streams_block().replace('"/tmp/', f'"{tmp_path}/'), "docs/spark.md", "exec"), ns)
    bronze = ctfile.open_table(str(tmp_path / "bronze"))
    silver = str(tmp_path / "silver")
    stream = bronze.stream("to_silver")
    model = [(1, "Jeff"), (2, "Donny")]
    assert silver_rows(silver) == model and stream.offset == bronze.version

    def add(*rows):
        bronze.insert(pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows]}, schema=bronze.schema))
        model.extend((i, n.capitalize()) for i, n in rows)

    # Two more bronze commits, and the query again from its checkpoint.
    add((3, "walter"))
    add((4, "maude"))
    q = (spark.readStream.format("ctfile").option("changes", "append_only").option("startingVersion", 0)
         .load(str(tmp_path / "bronze")).writeStream.foreachBatch(ns["to_silver"])
         .option("checkpointLocation", str(tmp_path / "checkpoints" / "bronze_silver"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    assert silver_rows(silver) == sorted(model) and stream.offset == bronze.version

    # A batch re-run with the same pin (a retry after a crash): skipped.
    add((5, "uli"))
    pin = stream.pin()
    ns["write_silver"](spark, pin)
    version = ctfile.open_table(silver).version
    ns["write_silver"](spark, pin)
    assert ctfile.open_table(silver).version == version and silver_rows(silver) == sorted(model)

    # Two writes racing with one pin: it is applied once; the loser
    # conflicted, or (arriving after the winner) was skipped as a replay.
    add((6, "bunny"))
    pin = stream.pin()
    errors: list = []

    def write():
        # The JVM looks Python data sources up in the thread's active
        # session, which a new thread lacks.
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        try:
            ns["write_silver"](spark, pin)
        except Exception as e:  # noqa: BLE001 - what Spark wraps the conflict in
            errors.append(f"{e} {getattr(e, 'java_exception', '')}")

    threads = [threading.Thread(target=write) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) <= 1 and all("CommitConflictError" in str(e) for e in errors), errors
    after = ctfile.open_table(silver).version
    writes = [h.operation for h in ctfile.open_table(silver).history(limit=after - version)]
    assert writes.count("WRITE") == 1 and silver_rows(silver) == sorted(model)  # a fence may be the other one

    # A pin consumed into another table: the Spark write conflicts, commits nothing.
    add((7, "karl"))
    pin = stream.pin()
    gold = ctfile.create_table(str(tmp_path / "gold"), bronze.schema)
    rows = stream.pending(pin=pin).to_arrow().select(["id", "name"])
    job = gold.write_job(schema=rows.schema, consuming=stream, pin=pin)
    assert job.commit(job.write(rows)).committed
    model.pop()
    with pytest.raises(Exception) as ei:
        ns["write_silver"](spark, pin)
    assert "CommitConflictError" in str(ei.value) and "was consumed otherwise" in str(ei.value)
    assert silver_rows(silver) == sorted(model) and stream.offset == bronze.version
    assert ctfile.open_table(silver).version == after


def test_stream_pipeline_on_s3(spark, seaweedfs_s3, monkeypatch):
    """Read a stream and consume its pin into silver, both tables on the S3
    server, the storage options travelling as options (the workers'
    environment holds no credentials)."""
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    opts = seaweedfs_s3.storage_options()
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    bronze = ctfile.create_table(seaweedfs_s3.new_uri("bronze"), schema, storage_options=opts)
    silver = ctfile.create_table(seaweedfs_s3.new_uri("silver"), schema, storage_options=opts)
    stream = bronze.create_stream("to_silver", initial_rows=True)
    bronze.insert(pa.table({"id": [1, 2], "name": ["a", "b"]}, schema=schema))
    pin = stream.pin()
    changes = (spark.read.format("ctfile").option("storageOptions", json.dumps(opts))
               .option("stream", "to_silver").option("streamPin", pin.token).load(bronze.uri))
    (changes.select("id", "name").write.format("ctfile").mode("append")
     .option("storageOptions", json.dumps(opts))
     .option("consumeStream", "to_silver").option("streamTable", bronze.uri).option("streamPin", pin.token)
     .save(silver.uri))
    assert silver_rows(silver.uri, storage_options=opts) == [(1, "a"), (2, "b")]
    assert stream.offset == bronze.version and not stream.pin().has_pending
    assert silver.refresh().app_version(stream.state().app_id) is not None
