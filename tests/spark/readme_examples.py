"""The Spark examples of the documentation and what they must do, for any
session: the suite's local one (test_spark_readme.py,
test_spark_upserts_readme.py, test_spark_merge_builder.py,
test_spark_sql_readme.py) and the children that run them on a standalone
cluster and on Spark Connect (_spark_child.py). Pages and sections are
looked up by tests/doc_pages.py. Table paths are redirected to a tmp dir."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

import ctfile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from doc_pages import code_blocks, section  # noqa: E402


def _blocks(name: str, heading: str | None = None, stop_at: str | None = None) -> list[str]:
    """The ``py`` blocks of page ``name`` (a section of it: :func:`doc_pages.section`)."""
    return code_blocks(section(name, heading, stop_at), "py")


def tour_blocks() -> list[str]:
    """The ``py`` blocks of the README's tour (section "Spark")."""
    return _blocks("README.md", "\n### Spark\n", "\n### ")


def spark_blocks() -> list[str]:
    """The ``py`` blocks of docs/spark.md's "Using ctfile from PySpark" up
    to "Streams from Spark" (run by test_spark_streams.py)."""
    return _blocks("spark.md", "## Using ctfile from PySpark", "\n#### Streams from Spark")


def upsert_blocks() -> list[str]:
    """The ``py`` blocks of docs/spark.md's "Upserts from Spark"."""
    return _blocks("spark.md", "## Upserts from Spark", "### The same pipeline, declared")


def pipeline_blocks() -> list[str]:
    """The ``py`` blocks of docs/spark.md's "The same pipeline, declared"."""
    return _blocks("spark.md", "### The same pipeline, declared", "\n## ")


def sql_blocks() -> list[str]:
    """The ``py`` blocks of docs/spark.md's "SQL"."""
    return _blocks("spark.md", "\n## SQL\n")


def streams_block() -> str:
    """The one ``py`` block of docs/spark.md's "Streams from Spark"."""
    (block,) = _blocks("spark.md", "\n#### Streams from Spark")
    return block


def derived_readme_blocks() -> list[str]:
    """The ``py`` block of the README's "Derived tables" (the gold example)."""
    return _blocks("README.md", "\n### Derived tables\n", "\n### ")


def derived_blocks() -> list[str]:
    """The ``py`` blocks of the README's "Derived tables" and of docs/derived.md."""
    return derived_readme_blocks() + _blocks("derived.md")


def merge_blocks() -> list[str]:
    """The ``py`` blocks of docs/merge.md's "MERGE" (the Spark builder's five patterns)."""
    return _blocks("merge.md", "\n## MERGE\n")


def run_blocks(blocks: list[str], tmp_path) -> dict:
    """Run ``blocks`` in one namespace, ``/tmp/`` paths under ``tmp_path``; the
    namespace. A block that loads an ``s3://`` table is only compiled."""
    ns: dict = {}
    for code in blocks:
        if '"s3://' in code:
            compile(code, "docs", "exec")  # at least valid Python
            continue
        exec(compile(code.replace('"/tmp/', f'"{tmp_path}/'), "docs", "exec"), ns)
    return ns


def rows(uri: str) -> list[tuple]:
    return sorted(tuple(r.values()) for r in ctfile.open_table(uri).to_arrow().to_pylist())


def _run_printing(blocks: list[str], spark, tmp_path) -> tuple[dict, list[str]]:
    """:func:`run_blocks` on ``spark``'s ``getOrCreate()``: the namespace and the lines printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ns = run_blocks(blocks, tmp_path)
    assert ns["spark"] is spark  # getOrCreate() found the given session
    return ns, out.getvalue().splitlines()


def _check_people_spark(ns: dict, tmp_path) -> str:
    """The write, reads and change scan of ``/tmp/people_spark``; its uri."""
    people = ctfile.open_table(str(tmp_path / "people_spark"))
    assert people.version == 2
    assert rows(people.uri) == [(1, "Jeff"), (2, "Donny"), (3, "Walter")]
    assert [tuple(r) for r in ns["changes"].select("id", "METADATA$ACTION").collect()] == [(3, "INSERT")]
    return people.uri


def _check_league(tmp_path) -> None:
    """MERGE, UPDATE, DELETE and a keyed delete of ``/tmp/league`` through ``CtfileTable``."""
    league = ctfile.open_table(str(tmp_path / "league"))
    assert [h.operation for h in league.history(limit=4)] == ["MERGE", "DELETE", "UPDATE", "MERGE"]
    assert rows(league.uri) == [(1, "JEFF", 11), (2, "donny", 25)]


def check_tour_examples(spark, tmp_path) -> None:
    """Run the README tour's Spark examples on ``spark`` (a write, reads and
    a change scan; MERGE, UPDATE and DELETE through ``CtfileTable``) and check
    what the text says."""
    blocks = tour_blocks()
    assert len(blocks) == 2
    ns, printed = _run_printing(blocks, spark, tmp_path)
    _check_people_spark(ns, tmp_path)
    assert "2 1 1" in printed
    _check_league(tmp_path)


def check_pyspark_examples(spark, tmp_path) -> None:
    """Run docs/spark.md's "Using ctfile from PySpark" on ``spark`` and check what the text says."""
    blocks = spark_blocks()
    assert len(blocks) == 5
    ns, _ = _run_printing(blocks, spark, tmp_path)
    native = ns["people"]  # the to_df() example: Spark's own reader over the files
    assert native.to_df().inputFiles() and native.to_df(version=1).count() == 2
    assert [(r.id, r["METADATA$ACTION"]) for r in native.changes_df(2, 2).collect()] == [(3, "INSERT")]
    people = _check_people_spark(ns, tmp_path)
    assert rows(str(tmp_path / "people_copy")) == rows(people)
    silver = ctfile.open_table(str(tmp_path / "people_silver"))
    assert rows(silver.uri) == rows(people) and silver.app_version("people-to-silver") is not None
    # A micro-batch replayed after a crash is skipped, not applied twice.
    last = silver.app_version("people-to-silver")
    batch = spark.createDataFrame([(3, "Walter again")], "id long, name string")
    ns["upsert"](batch, last)
    assert rows(silver.uri) == rows(people)


def check_upsert_examples(spark, tmp_path) -> None:
    """Run docs/spark.md's "Upserts from Spark" on ``spark`` and check what the text says:
    the printed counts, the statements' versions and rows, the streaming
    upsert exactly once (a replayed batch commits nothing, a restarted
    query resumes)."""
    blocks = upsert_blocks()
    assert len(blocks) == 2
    ns, printed = _run_printing(blocks, spark, tmp_path)
    assert printed[0] == "2 1 1"
    _check_league(tmp_path)

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


#: The join of the gold example's sources that :func:`check_derived_examples` adds.
REGIONS_JOIN = "SELECT e.id, e.amount, c.region FROM e JOIN c ON e.country = c.country"


def check_derived_examples(spark, tmp_path) -> None:
    """Run the README's derived-tables gold example on ``spark``, then a
    two-way join of its source with another table, ``refresh_all`` on the
    two, one DML commit on the source (an update moving a row between
    groups, a delete emptying a group, inserts), and check each refresh's
    action, that each table holds its query run by Spark over the sources
    at the frontier it recorded, and ``explain()``."""
    from ctfile.spark import derived

    ns, printed = _run_printing(derived_readme_blocks(), spark, tmp_path)
    assert printed[:3] == ["6", "INCREMENTAL", "NO_DATA"], printed
    events, gold = ns["events"], ns["gold"]
    events.insert(pa.table({"id": range(100, 140), "country": ["NL", "FR", "DE", "BE"] * 10,
                            "event_type": ["buy", "refund"] * 20, "amount": range(40)}, schema=events.schema))
    regions = pa.schema([("country", pa.string()), ("region", pa.string())])
    countries = ctfile.create_table(str(tmp_path / "countries"), regions)
    countries.insert(pa.table({"country": ["NL", "FR", "DE", "BE"], "region": ["west", "west", "central", "west"]}))
    joined = derived.create(spark, str(tmp_path / "gold_regions"), REGIONS_JOIN, refresh_mode="incremental",
                            sources={"e": events.uri, "c": countries.uri})
    results = derived.refresh_all(spark, [gold, joined])
    # gold: 40 of 53 rows appended, and auto still refreshes incrementally: its delta is computed in the
    # driver, no Spark job, where a full refresh runs three (derived_cost); joined read them at its creation
    assert sorted((r.action.value, len(r.frontier)) for r in results) == [("INCREMENTAL", 1), ("NO_DATA", 2)], results
    with events.transaction() as tx:  # one commit changing 6 of 53 rows
        # NL/buy -> NL/refund for id 0, FR/refund stays for id 1: two groups change, a third gains a row
        tx.update(pc.field("id").isin([0, 1]), {"event_type": pa.scalar("refund"), "amount": pc.field("amount") + 100})
        # ids 5 and 11, DE/refund's only rows: the group empties
        tx.delete((pc.field("country") == "DE") & (pc.field("event_type") == "refund"))
        tx.insert(pa.table({"id": [200, 201], "country": ["BE", "NL"], "event_type": ["gift", "buy"], "amount": [5, 6]},
                           schema=events.schema))
    sources = {"silver": events, "e": events, "c": countries}
    for t in (gold, joined):
        r = t.refresh()
        assert r.action.value == "INCREMENTAL", r
        assert t.refresh().action.value == "NO_DATA"
        _check_derived(spark, t, sources, r.frontier)
        plan = t.explain()
        assert plan.incremental and plan.rows and all(row.incremental for row in plan.rows), str(plan)
    groups = {(x["country"], x["event_type"]) for x in ctfile.open_table(gold.uri).to_arrow().to_pylist()}
    assert ("DE", "refund") not in groups and ("BE", "gift") in groups, groups


def _check_derived(spark, t, sources: dict, frontier) -> None:
    """Derived table ``t`` holds its query run by Spark over ``sources``
    (name -> table) at ``frontier``, as multisets of rows."""
    from derived_helpers import expected_rows, multiset

    got = ctfile.open_table(t.uri).to_arrow()
    want = expected_rows(spark, t.definition.query, sources, frontier)
    assert multiset(got, got.column_names) == multiset(want, got.column_names), (got.to_pylist(), want)
