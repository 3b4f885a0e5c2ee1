"""docs/spark.md's "The same pipeline, declared" (issue 30 item 6): its
block runs on the suite's local session and prints what the text says, its
queries are those of derived_pipeline.py, and that pipeline, kept current
by the scheduler, equals its model after every batch on local disk.
test_spark_clusters.py runs it on ``s3://`` tables from a standalone
cluster."""

from __future__ import annotations

from derived_pipeline import GOLD, SILVER, run_pipeline
from readme_examples import _run_printing, pipeline_blocks

import ctfile


def test_docs_pipeline_block_runs_and_prints_what_it_says(spark, tmp_path):
    blocks = pipeline_blocks()
    assert len(blocks) == 1
    ns, printed = _run_printing(blocks, spark, tmp_path)
    assert [line.split(" ")[0] for line in printed[:2]] == ["INCREMENTAL", "INCREMENTAL"], printed
    assert printed[2] == "[{'city': 'Los Angeles', 'people': 1}, {'city': None, 'people': 1}]", printed
    explained = "\n".join(printed[3:])
    assert explained.startswith("incremental: yes") and "[full]" not in explained, explained
    assert "left outer join" in explained, explained
    assert (ns["silver"].definition.query, ns["gold"].definition.query) == (SILVER, GOLD)
    silver = ctfile.open_table(ns["silver"].uri).to_arrow().sort_by("id").to_pylist()
    assert silver == [{"id": 1, "name": "the dude", "team": "dudes", "seq": 3},
                      {"id": 3, "name": "walter", "team": "pins", "seq": 4}]


def test_declared_pipeline_under_the_scheduler_on_local_disk(spark, tmp_path):
    seen = run_pipeline(spark, str(tmp_path))
    assert len(seen) == 4
