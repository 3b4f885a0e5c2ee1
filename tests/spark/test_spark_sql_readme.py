"""docs/spark.md's "SQL" examples run on the suite's local session (the five
MERGE patterns as SQL text, reads, RESTORE: their assertions are in the
blocks)."""

from __future__ import annotations

import ctfile
from readme_examples import run_blocks, sql_blocks


def test_readme_sql_examples_run(spark, tmp_path):
    blocks = sql_blocks()
    assert len(blocks) == 1
    run_blocks(blocks, tmp_path)
    accounts = ctfile.open_table(str(tmp_path / "sql_accounts"))
    assert accounts.history()[0].operation == "RESTORE"
    assert sorted(r["id"] for r in accounts.to_arrow().to_pylist()) == [1, 2, 3]
