"""The PySpark examples of the README run (``py`` blocks of its PySpark section,
table paths redirected to a tmp dir; the object-store example is not run, the
"Streams from Spark" one runs in ``test_spark_streams.py``)."""

from __future__ import annotations

import re
from pathlib import Path

import ctfile

README = Path(__file__).resolve().parents[2] / "README.md"


def spark_blocks() -> list[str]:
    text = README.read_text()
    start = text.index("## Using ctfile from PySpark")
    end = text.index("\n## ", start + 1)
    streams = text.find("\n#### Streams from Spark", start, end)  # run by test_spark_streams.py
    end = end if streams < 0 else streams
    return re.findall(r"```py\n(.*?)```", text[start:end], flags=re.S)


def test_readme_pyspark_examples_run(spark, tmp_path):
    blocks = spark_blocks()
    assert len(blocks) == 5
    ns: dict = {}
    for code in blocks:
        if "s3://" in code:
            compile(code, "README.md", "exec")  # at least valid Python
            continue
        code = code.replace('"/tmp/', f'"{tmp_path}/')
        exec(compile(code, "README.md", "exec"), ns)
    assert ns["spark"] is spark  # getOrCreate() found the suite's session
    native = ns["people"]  # the to_df() example: Spark's own reader over the files
    assert native.to_df().inputFiles() and native.to_df(version=1).count() == 2
    assert [(r.id, r["METADATA$ACTION"]) for r in native.changes_df(2, 2).collect()] == [(3, "INSERT")]
    people = ctfile.open_table(str(tmp_path / "people_spark"))
    assert people.version == 2
    rows = lambda t: sorted(tuple(r.values()) for r in t.snapshot().to_arrow().to_pylist())  # noqa: E731
    assert rows(people) == [(1, "Jeff"), (2, "Donny"), (3, "Walter")]
    assert [tuple(r) for r in ns["changes"].select("id", "METADATA$ACTION").collect()] == [(3, "INSERT")]
    assert rows(ctfile.open_table(str(tmp_path / "people_copy"))) == rows(people)
    silver = ctfile.open_table(str(tmp_path / "people_silver"))
    assert rows(silver) == rows(people) and silver.app_version("people-to-silver") is not None
    # A micro-batch replayed after a crash is skipped, not applied twice.
    last = silver.app_version("people-to-silver")
    batch = spark.createDataFrame([(3, "Walter again")], "id long, name string")
    ns["upsert"](batch, last)
    assert rows(ctfile.open_table(str(tmp_path / "people_silver"))) == rows(people)
