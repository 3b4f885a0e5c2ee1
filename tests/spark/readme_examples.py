"""The README's Spark examples and what they must do, for any session: the
suite's local one (test_spark_readme.py, test_spark_upserts_readme.py) and
the children that run them on a standalone cluster and on Spark Connect
(_spark_child.py). Table paths are redirected to a tmp dir."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pyarrow as pa

import ctfile

README = Path(__file__).resolve().parents[2] / "README.md"


def _blocks(heading: str, stop_at: str | None = None) -> list[str]:
    text = README.read_text()
    start = text.index(heading)
    end = text.index("\n## ", start + 1)
    if stop_at is not None:
        cut = text.find(stop_at, start, end)
        end = end if cut < 0 else cut
    return re.findall(r"```py\n(.*?)```", text[start:end], flags=re.S)


def spark_blocks() -> list[str]:
    """The ``py`` blocks of "Using ctfile from PySpark" up to "Streams from
    Spark" (run by test_spark_streams.py)."""
    return _blocks("## Using ctfile from PySpark", "\n#### Streams from Spark")


def upsert_blocks() -> list[str]:
    """The ``py`` blocks of "Upserts from Spark"."""
    return _blocks("## Upserts from Spark")


def merge_blocks() -> list[str]:
    """The ``py`` blocks of "MERGE" (the Spark builder's five patterns)."""
    return _blocks("\n## MERGE\n")


def run_blocks(blocks: list[str], tmp_path) -> dict:
    """Run ``blocks`` in one namespace, ``/tmp/`` paths under ``tmp_path``; the
    namespace. A block that loads an ``s3://`` table is only compiled."""
    ns: dict = {}
    for code in blocks:
        if '"s3://' in code:
            compile(code, "README.md", "exec")  # at least valid Python
            continue
        exec(compile(code.replace('"/tmp/', f'"{tmp_path}/'), "README.md", "exec"), ns)
    return ns


def rows(uri: str) -> list[tuple]:
    return sorted(tuple(r.values()) for r in ctfile.open_table(uri).to_arrow().to_pylist())


def check_pyspark_examples(spark, tmp_path) -> None:
    """Run "Using ctfile from PySpark" on ``spark`` and check what the text says."""
    blocks = spark_blocks()
    assert len(blocks) == 5
    ns = run_blocks(blocks, tmp_path)
    assert ns["spark"] is spark  # getOrCreate() found the given session
    native = ns["people"]  # the to_df() example: Spark's own reader over the files
    assert native.to_df().inputFiles() and native.to_df(version=1).count() == 2
    assert [(r.id, r["METADATA$ACTION"]) for r in native.changes_df(2, 2).collect()] == [(3, "INSERT")]
    people = ctfile.open_table(str(tmp_path / "people_spark"))
    assert people.version == 2
    assert rows(people.uri) == [(1, "Jeff"), (2, "Donny"), (3, "Walter")]
    assert [tuple(r) for r in ns["changes"].select("id", "METADATA$ACTION").collect()] == [(3, "INSERT")]
    assert rows(str(tmp_path / "people_copy")) == rows(people.uri)
    silver = ctfile.open_table(str(tmp_path / "people_silver"))
    assert rows(silver.uri) == rows(people.uri) and silver.app_version("people-to-silver") is not None
    # A micro-batch replayed after a crash is skipped, not applied twice.
    last = silver.app_version("people-to-silver")
    batch = spark.createDataFrame([(3, "Walter again")], "id long, name string")
    ns["upsert"](batch, last)
    assert rows(silver.uri) == rows(people.uri)


def check_upsert_examples(spark, tmp_path) -> None:
    """Run "Upserts from Spark" on ``spark`` and check what the text says:
    the printed counts, the statements' versions and rows, the streaming
    upsert exactly once (a replayed batch commits nothing, a restarted
    query resumes)."""
    blocks = upsert_blocks()
    assert len(blocks) == 2
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ns = run_blocks(blocks, tmp_path)
    assert ns["spark"] is spark
    assert out.getvalue().splitlines()[0] == "2 1 1"
    league = ctfile.open_table(str(tmp_path / "league"))
    assert [h.operation for h in league.history(limit=4)] == ["MERGE", "DELETE", "UPDATE", "MERGE"]
    assert rows(league.uri) == [(1, "JEFF", 11), (2, "donny", 25)]

    # The stream: silver holds each key's latest bronze row, once.
    silver_uri = str(tmp_path / "silver_people")
    silver = ctfile.open_table(silver_uri)
    assert rows(silver_uri) == [(1, "the dude", 3), (2, "donny", 2)]
    last = silver.app_version("bronze_events-to-silver_people")
    assert last is not None
    # Spark running a committed micro-batch again commits nothing.
    replay = spark.createDataFrame([(1, "walter", 9)], "id long, name string, seq long")
    version = silver.version
    ns["upsert_to_silver"](replay, last)
    assert silver.refresh().version == version and rows(silver_uri) == [(1, "the dude", 3), (2, "donny", 2)]
    # A new bronze version reaches silver in the next run of the query.
    new = [{"id": 2, "name": "donny kerabatsos", "seq": 4}, {"id": 3, "name": "walter", "seq": 5}]
    ns["bronze"].insert(pa.Table.from_pylist(new, schema=ns["events"]))
    query = ns["query"]
    restarted = (
        spark.readStream.format("ctfile").option("changes", "append_only").option("startingVersion", 0)
        .load(str(tmp_path / "bronze_events"))
        .writeStream.foreachBatch(ns["upsert_to_silver"])
        .option("checkpointLocation", f"{tmp_path}/checkpoints/bronze_events_silver")
        .trigger(availableNow=True).start()
    )
    restarted.awaitTermination()
    assert restarted.id == query.id  # the same query, resumed from its checkpoint
    assert rows(silver_uri) == [(1, "the dude", 3), (2, "donny kerabatsos", 4), (3, "walter", 5)]
    assert ctfile.verify_table(silver_uri).healthy
