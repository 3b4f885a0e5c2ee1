"""The examples of the README's "Upserts from Spark" section run (its ``py``
blocks, table paths redirected to a tmp dir) and do what the text says."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa

import ctfile

README = Path(__file__).resolve().parents[2] / "README.md"


def upsert_blocks() -> list[str]:
    text = README.read_text()
    start = text.index("## Upserts from Spark")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```py\n(.*?)```", text[start:end], flags=re.S)


def rows(uri: str) -> list[tuple]:
    return sorted(tuple(r.values()) for r in ctfile.open_table(uri).to_arrow().to_pylist())


def test_readme_upsert_examples_run(spark, tmp_path, capsys):
    blocks = upsert_blocks()
    assert len(blocks) == 2
    ns: dict = {}
    for code in blocks:
        code = code.replace('"/tmp/', f'"{tmp_path}/')
        exec(compile(code, "README.md", "exec"), ns)
    assert ns["spark"] is spark

    # The batch statements: the printed counts, then UPDATE, DELETE and the keyed delete.
    assert capsys.readouterr().out.splitlines()[0] == "2 1 1"
    league = ctfile.open_table(str(tmp_path / "league"))
    assert [h.operation for h in league.history(limit=4)] == ["MERGE", "DELETE", "UPDATE", "MERGE"]
    assert rows(str(tmp_path / "league")) == [(1, "JEFF", 11), (2, "donny", 25)]

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
