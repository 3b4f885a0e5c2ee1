"""Derived tables end to end (SPEC §Derived tables, ``ctfile.spark.derived``):
after every refresh the table equals its query run by Spark on the sources
at the recorded frontier (as multisets), and its own change scan over the
refresh equals the difference of consecutive results (minimal: a row whose
values did not change produces no change row).
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctfile
from ctfile.spark import derived
from derived_helpers import QUERIES, a_rows, apply_op, expected_rows, make_sources, multiset
from readme_examples import derived_blocks, run_blocks
from spark_helpers import spark_conf

OPS = st.tuples(
    st.sampled_from(["insert", "update", "delete", "merge", "b_insert", "b_delete", "compact"]),
    st.integers(0, 7), st.integers(0, 5),
)


DRIVER_PATH = ("spark.ctfile.local.sourceRows", "spark.ctfile.local.changeRows", "spark.ctfile.local.spreadRows")


@pytest.fixture(autouse=True)
def driver_path(spark):
    """Small MERGEs and change scans in the driver, as in a default session
    (the suite's session turns the driver path off for the tests of the
    executors' paths)."""
    before = {k: spark.conf.get(k, None) for k in DRIVER_PATH}
    for k in DRIVER_PATH:
        spark.conf.unset(k)
    yield
    for k, v in before.items():
        if v is not None:
            spark.conf.set(k, v)


def visible_columns(t: derived.DerivedTable) -> list[str]:
    return t.table.refresh().schema.names


def check_exact(spark, t: derived.DerivedTable, sources: dict, before: Counter | None) -> Counter:
    """The table equals the query at its frontier; its change scan over the
    last refresh is exactly the difference from ``before``. Returns the
    contents."""
    table = t.table.refresh()
    cols = visible_columns(t)
    got = multiset(table.to_arrow(), cols)
    want = multiset(expected_rows(spark, t.definition.query, sources, table.derived.frontier), cols)
    assert got == want, (t.definition.query, got - want, want - got)
    if before is not None and table.history(limit=1)[0].operation == "REFRESH":
        check_change_scan(table, cols, before, got)
    return got


def check_change_scan(table: ctfile.Table, cols: list[str], before: Counter, after: Counter) -> None:
    """The change scan of the table's last version turns ``before`` into
    ``after`` (its deletes were rows of ``before``), and is minimal: no row
    id has a delete and an insert of the same values."""
    changes = table.changes(start_version=table.version, end_version=table.version).to_arrow().to_pylist()
    inserted = multiset([r for r in changes if r["METADATA$ACTION"] == "INSERT"], cols)
    deleted = multiset([r for r in changes if r["METADATA$ACTION"] == "DELETE"], cols)
    assert not deleted - before, (table.derived.query, deleted - before)
    assert before - deleted + inserted == after, table.derived.query
    images: dict = {}
    for r in changes:
        images.setdefault(r["METADATA$ROW_ID"], {})[r["METADATA$ACTION"]] = tuple(r[c] for c in cols)
    no_ops = [i for i in images.values() if i.get("INSERT", 0) == i.get("DELETE", 1)]
    assert not no_ops, (table.derived.query, no_ops)


def test_gold_aggregate_refreshes_incrementally(spark, tmp_path):
    a, b = make_sources(tmp_path)
    gold = derived.create(spark, str(tmp_path / "gold"), QUERIES["aggregate"], sources={"a": a.uri},
                          refresh_mode="incremental")
    assert gold.table.schema.names == ["k", "n", "sv", "av", "nv"]  # derivation columns hidden
    assert ctfile.open_table(gold.uri).to_arrow().column_names == ["k", "n", "sv", "av", "nv"]
    first = gold.table.history(limit=1)[0]
    assert first.operation == "REFRESH" and first.refresh.action is ctfile.RefreshAction.FULL
    before = check_exact(spark, gold, {"a": a}, None)

    a.update(pc.field("id") == 3, {"v": pa.scalar(None, pa.decimal128(10, 2))})
    a.delete(pc.field("k") == 2)  # a group empties out: its row goes, no zero counts stay behind
    r = gold.refresh()
    assert r.action is ctfile.RefreshAction.INCREMENTAL and r.version == gold.table.refresh().version
    assert [v.version for v in r.frontier] == [a.version]
    check_exact(spark, gold, {"a": a}, before)
    assert 2 not in gold.table.to_arrow().column("k").to_pylist()

    again = gold.refresh()
    assert again.action is ctfile.RefreshAction.NO_DATA and again.version is None


def test_no_data_refresh_starts_no_spark_job(spark, tmp_path):
    a, _ = make_sources(tmp_path)
    t = derived.create(spark, str(tmp_path / "d"), QUERIES["filter"], sources={"a": a.uri})
    a.set_properties({"ctfile.checkpointInterval": "7"})  # a commit that changes no data
    sc = spark.sparkContext
    sc.setJobGroup("derived-no-data", "NO_DATA refresh")
    try:
        r = t.refresh()
    finally:
        sc.setJobGroup("", "")
    assert r.action is ctfile.RefreshAction.NO_DATA, r
    assert list(sc.statusTracker().getJobIdsForGroup("derived-no-data")) == []
    assert r.duration < 5.0


def run_history(spark, root, query: str, histories, *, capture: bool, mode: str = "auto") -> None:
    """Create a derived table of ``query`` over fresh sources, then per
    batch of ``histories`` apply its operations and refresh; after each
    refresh, :func:`check_exact`."""
    a, b = make_sources(root, capture=capture)
    sources = {"a": a, "b": b}
    bound = {n: t.uri for n, t in sources.items() if f" {n}" in query}
    t = derived.create(spark, str(root / "d"), query, sources=bound, refresh_mode=mode)
    contents = check_exact(spark, t, sources, None)
    for ops in histories:
        for op in ops:
            apply_op(a, b, op)
        r = t.refresh()
        assert r.action is not ctfile.RefreshAction.REINITIALIZE, r
        if not t._plan(t._sources()).incremental and r.action is not ctfile.RefreshAction.NO_DATA:
            assert r.action is ctfile.RefreshAction.FULL, r
        # A refresh that committed nothing has no change scan of its own to check.
        contents = check_exact(spark, t, sources, contents if r.version is not None else None)


#: A history that touches every rule: inserts, updates that move rows
#: between groups and join keys, deletes that empty a group, a MERGE,
#: changes of the join's other side and a compaction.
FIXED_HISTORY = [
    [("insert", 1, 3), ("update", 2, 3), ("b_insert", 1, 2)],
    [("delete", 2, 0), ("merge", 3, 1), ("b_delete", 0, 0), ("compact", 0, 0), ("update", 1, 1)],
]


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_each_rule_equals_the_query_at_its_frontier(spark, tmp_path, name):
    run_history(spark, tmp_path, QUERIES[name], FIXED_HISTORY, capture=name in ("join", "aggregate"))


@pytest.mark.parametrize("name", ["join", "window"])
def test_refreshes_spread_over_the_executors_equal_the_query(spark, tmp_path, name, caplog):
    """With the driver's MERGE off, each refresh's MERGE is spread over the
    executors (ctfile.spark.local.run_spread): the Python engine rewrites the
    derived table's partitions there, derivation columns included."""
    with spark_conf(spark, "spark.ctfile.local.sourceRows", "0"), caplog.at_level("INFO", "ctfile.spark"):
        run_history(spark, tmp_path, QUERIES[name], FIXED_HISTORY, capture=name == "join")
    assert any("spread over" in r.getMessage() for r in caplog.records)


@pytest.mark.long
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(sorted(QUERIES)), histories=st.lists(st.lists(OPS, min_size=1, max_size=3),
       min_size=1, max_size=4), capture=st.booleans())
def test_random_histories_equal_the_query_at_the_frontier(spark, tmp_path_factory, name, histories, capture):
    run_history(spark, tmp_path_factory.mktemp("derived"), QUERIES[name], histories, capture=capture)


def test_time_functions_give_timestamp_columns_at_the_data_timestamp(spark, tmp_path):
    """A timestamp output column (``current_timestamp()``, bound to the
    refresh's data timestamp) is a UTC timestamp column of the table."""
    import datetime

    a, _ = make_sources(tmp_path)
    t = derived.create(spark, str(tmp_path / "ts"), "SELECT id, current_timestamp() AS at FROM a WHERE id < 3",
                       sources={"a": a.uri}, refresh_mode="incremental")
    assert t.table.schema.field("at").type == pa.timestamp("us", tz="UTC")
    a.insert(a_rows([-1], 1))
    assert t.refresh().action is ctfile.RefreshAction.INCREMENTAL
    table = t.table.refresh()
    second, first = (datetime.datetime.fromtimestamp(e.refresh.data_timestamp / 1000, datetime.timezone.utc)
                     for e in table.history(limit=2))
    at = {r["id"]: r["at"] for r in table.to_arrow().to_pylist()}
    assert at == {-1: second, 0: first, 1: first, 2: first} and second > first


def test_incremental_mode_refuses_a_query_without_rules(spark, tmp_path):
    a, _ = make_sources(tmp_path)
    with pytest.raises(derived.IncrementalRequiredError, match="(?i)window"):
        derived.create(spark, str(tmp_path / "w"), QUERIES["window"], sources={"a": a.uri},
                       refresh_mode="incremental")
    assert not (tmp_path / "w").exists()
    t = derived.create(spark, str(tmp_path / "w"), QUERIES["window"], sources={"a": a.uri}, refresh_mode="auto")
    text = str(t.explain())
    assert "window" in text.lower()


def test_user_dml_on_a_derived_table_is_refused(spark, tmp_path):
    a, _ = make_sources(tmp_path)
    t = derived.create(spark, str(tmp_path / "d"), QUERIES["distinct"], sources={"a": a.uri})
    version = t.table.refresh().version
    with pytest.raises(ctfile.DerivedTableError, match="derivedTables"):
        t.table.delete(pc.field("k") == 1)
    assert t.table.refresh().version == version


def test_source_schema_change_reinitializes(spark, tmp_path):
    a, _ = make_sources(tmp_path)
    t = derived.create(spark, str(tmp_path / "d"), QUERIES["filter"], sources={"a": a.uri})
    with a.update_schema() as u:
        u.add_column("extra", pa.int64())
    a.insert(pa.table({"id": [900], "k": [3], "v": [None], "s": ["q"], "extra": [1]},
                      schema=a.schema))
    r = t.refresh()
    assert r.action is ctfile.RefreshAction.REINITIALIZE and "schema" in r.reason
    check_exact(spark, t, {"a": a}, None)


def test_lost_history_reinitializes(spark, tmp_path):
    a, _ = make_sources(tmp_path)
    t = derived.create(spark, str(tmp_path / "d"), QUERIES["join"], sources={"a": a.uri, "b": str(tmp_path / "b")})
    b = ctfile.open_table(str(tmp_path / "b"))
    held = [s.name for s in a.streams()]
    assert any(n.startswith("__derived_") for n in held)  # the derived table holds a's history
    a.insert(pa.table({"id": [777], "k": [1], "v": [None], "s": ["n"]}, schema=a.schema))
    a.update(pc.field("id") == 777, {"s": pa.scalar("m")})
    for n in held:
        a.drop_stream(n)
    a.vacuum(retain=0, grace_period=0)
    r = t.refresh()
    assert r.action is ctfile.RefreshAction.REINITIALIZE and "history" in r.reason, r
    check_exact(spark, t, {"a": a, "b": b}, None)


def test_derived_over_derived_refresh_all_keeps_a_diamond_consistent(spark, tmp_path):
    a, b = make_sources(tmp_path)
    left = derived.create(spark, str(tmp_path / "left"), "SELECT id, k FROM a WHERE k >= 1", sources={"a": a.uri})
    right = derived.create(spark, str(tmp_path / "right"), "SELECT k, count(*) AS n FROM a GROUP BY k",
                           sources={"a": a.uri})
    top = derived.create(spark, str(tmp_path / "top"),
                         "SELECT l.id, r.n FROM l JOIN r ON l.k = r.k",
                         sources={"l": left.uri, "r": right.uri}, refresh_mode="incremental")
    a.insert(pa.table({"id": [501, 502], "k": [1, 3], "v": [None, None], "s": ["p", "q"]}, schema=a.schema))
    results = derived.refresh_all(spark, [top, right, left])
    assert [r.action for r in results][-1] is ctfile.RefreshAction.INCREMENTAL
    frontier_a = {ctfile.open_table(x.uri).derived.frontier[0].version for x in (left, right)}
    assert frontier_a == {a.version}
    up = {"l": ctfile.open_table(left.uri), "r": ctfile.open_table(right.uri)}
    check_exact(spark, top, up, None)
    with pytest.raises(ctfile.InvalidArgumentError, match="cycle"):
        derived._dependency_order({"x": _Fake("x", ["y"]), "y": _Fake("y", ["x"])})


class _Fake:
    """A stand-in definition holder for the cycle check (no table needed)."""

    def __init__(self, tid, deps):
        self.definition = type("D", (), {"sources": [type("B", (), {"table_id": d})() for d in deps]})()


def test_documentation_examples_run(spark, tmp_path, capsys):
    """The README's "Derived tables" and docs/derived.md's examples, and
    what they print."""
    blocks = derived_blocks()
    assert len(blocks) >= 3
    ns = run_blocks(blocks, tmp_path)
    printed = capsys.readouterr().out.splitlines()
    assert printed[:3] == ["6", "INCREMENTAL", "NO_DATA"], printed
    assert "INCREMENTAL 1" in printed
    assert "full 1 hour ALTER DERIVED" in printed and "incremental None" in printed  # "Changing a definition"
    assert "REFRESH REINITIALIZE the definition was replaced" in printed
    assert "[{'id': 2, 'country': 'NL'}, {'id': 3, 'country': 'FR'}]" in printed
    assert "INCREMENTAL [{'id': 1, 'name': 'Ada'}, {'id': 2, 'name': 'Bo'}]" in printed  # an outer join
    assert ns["by_country"].table.to_arrow().sort_by("country").to_pylist() == [
        {"country": "FR", "revenue": 10, "orders": 2}, {"country": "NL", "revenue": 12, "orders": 2}]
