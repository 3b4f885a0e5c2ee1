"""Changing a derived table's definition (SPEC §Derived tables, changing a
definition): ``DerivedTable.alter`` (an ``ALTER DERIVED`` commit: mode and
lag only, no rows, the frontier kept) and ``derived.replace`` (a new query
and its rows in one ``REINITIALIZE`` refresh)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.spark import derived
from derived_helpers import QUERIES, a_rows, equals_query, make_sources

AGG = "SELECT k, count(*) AS n FROM a GROUP BY k"


@pytest.fixture(autouse=True)
def driver_path(spark):
    """Small MERGEs in the driver, as in a default session (as test_derived.py)."""
    before = spark.conf.get("spark.ctfile.local.sourceRows", None)
    spark.conf.unset("spark.ctfile.local.sourceRows")
    yield
    if before is not None:
        spark.conf.set("spark.ctfile.local.sourceRows", before)


def log_files(table: ctfile.Table) -> list[str]:
    """The names in the table's log directory: what a refused call must leave as it was."""
    return sorted(p.name for p in (Path(table.uri) / "_ct_log").iterdir())


def test_alter_mode_and_lag_is_a_metadata_only_commit(spark, tmp_path):
    a, b = make_sources(tmp_path)
    gold = derived.create(spark, str(tmp_path / "gold"), AGG, sources={"a": a.uri}, target_lag="5 minutes")
    before = gold.table.refresh()
    rows, files, frontier = before.to_arrow(include_hidden=True), before.snapshot().partitions, before.derived.frontier

    result = gold.alter(refresh_mode="full")
    t = gold.table.refresh()
    assert result.committed and t.version == before.version + 1
    entry = t.history(limit=1)[0]
    assert entry.operation == "ALTER DERIVED" and not entry.data_change
    assert entry.operation_parameters == {"refreshMode": "full", "targetLag": "5 minutes"}
    assert t.log.commit_info(t.version).refresh is None  # not a refresh
    d = t.derived
    assert (d.refresh_mode, d.target_lag, d.frontier, d.query) == (
        ctfile.RefreshMode.FULL, "5 minutes", frontier, AGG)
    assert t.to_arrow(include_hidden=True).equals(rows) and t.snapshot().partitions == files
    assert t.changes(start_version=t.version, end_version=t.version).to_arrow().num_rows == 0
    assert ctfile.verify_table(t.uri, all_versions=True).healthy

    a.insert(a_rows([100], 1))
    r = gold.refresh()
    assert (r.action, r.reason) == (ctfile.RefreshAction.FULL, "refresh mode full")
    gold.alter(refresh_mode="auto")
    a.insert(a_rows([101], 1))
    assert gold.refresh().action is ctfile.RefreshAction.INCREMENTAL
    equals_query(spark, gold, {"a": a})

    assert gold.alter(target_lag="1 hour").committed and gold.definition.target_lag == "1 hour"
    assert gold.definition.refresh_mode is ctfile.RefreshMode.AUTO  # None: unchanged
    assert gold.alter(target_lag=derived.UNSET).committed and gold.definition.target_lag is None
    version = gold.table.version
    same = gold.alter(refresh_mode="auto")  # nothing to change: nothing committed
    assert not same.committed and gold.table.refresh().version == version
    report = ctfile.verify_table(gold.uri, all_versions=True)
    assert report.healthy, report.problems


def test_alter_refuses_bad_values_and_changes_nothing(spark, tmp_path):
    a, b = make_sources(tmp_path)
    win = derived.create(spark, str(tmp_path / "win"), QUERIES["window"], sources={"a": a.uri})
    logs = log_files(win.table)
    with pytest.raises(derived.IncrementalRequiredError, match="(?i)window"):
        win.alter(refresh_mode="incremental")
    with pytest.raises(ctfile.InvalidArgumentError, match="refreshMode: expected one of"):
        win.alter(refresh_mode="sometimes")
    for lag in ("", 5):
        with pytest.raises(ctfile.InvalidArgumentError, match="targetLag"):
            win.alter(target_lag=lag)
    assert log_files(win.table) == logs and win.table.refresh().derived.refresh_mode is ctfile.RefreshMode.AUTO

    gold = derived.create(spark, str(tmp_path / "gold"), AGG, sources={"a": a.uri})
    assert gold.alter(refresh_mode="incremental").committed  # every operator has a rule
    with a.transaction() as tx:  # the storage-level step refuses a table that is not derived
        with pytest.raises(ctfile.DerivedTableError, match="not derived"):
            tx.alter_derived(refresh_mode="full", target_lag=None)
    with gold.table.transaction() as tx:  # and is the only statement of its transaction
        tx.alter_derived(refresh_mode="full", target_lag=None)
        with pytest.raises(ctfile.InvalidArgumentError, match="only statement"):
            tx.alter_derived(refresh_mode="auto", target_lag=None)
        with pytest.raises(ctfile.CtfileError):
            tx.insert(pa.table({"k": [1], "n": [1]}))
    assert gold.table.refresh().derived.refresh_mode is ctfile.RefreshMode.FULL


def _refresh_transaction(gold: derived.DerivedTable, a: ctfile.Table):
    """A refresh transaction of ``gold`` begun and not committed: its
    frontier moves ``a`` to its latest version (no rows changed, a later
    data timestamp)."""
    d = gold.table.refresh().derived
    item = d.frontier[0]
    moved = ctfile.SourceVersion(item.name, item.table_id, a.refresh().version, item.schema_id)
    info = ctfile.RefreshInfo("NO_DATA", "test", (moved,), d.data_timestamp + 1, 0, 0)
    return ctfile.open_table(gold.uri).transaction(refresh=info)


def test_alter_and_a_concurrent_refresh_conflict_either_way(spark, tmp_path):
    a, b = make_sources(tmp_path)
    gold = derived.create(spark, str(tmp_path / "gold"), AGG, sources={"a": a.uri})
    a.insert(a_rows([100], 1))

    refresh = _refresh_transaction(gold, a)  # the refresh reads first, the alter commits first
    assert gold.alter(refresh_mode="full").committed
    with pytest.raises(ctfile.CommitConflictError):
        refresh.commit()
    t = gold.table.refresh()
    assert t.derived.refresh_mode is ctfile.RefreshMode.FULL and t.history(limit=1)[0].operation == "ALTER DERIVED"

    alter = ctfile.open_table(gold.uri).transaction()  # the alter reads first, the refresh commits first
    alter.alter_derived(refresh_mode="incremental", target_lag="1 hour")
    refresh = _refresh_transaction(gold, a)
    assert refresh.commit().committed
    with pytest.raises(ctfile.CommitConflictError):
        alter.commit()
    t = gold.table.refresh()
    assert (t.derived.refresh_mode, t.derived.target_lag) == (ctfile.RefreshMode.FULL, None)
    assert t.history(limit=1)[0].operation == "REFRESH"

    assert gold.alter(refresh_mode="auto").committed  # re-run, it commits over the refresh
    assert ctfile.verify_table(gold.uri, all_versions=True).healthy


def test_replace_commits_the_new_query_and_its_rows_in_one_refresh(spark, tmp_path):
    a, b = make_sources(tmp_path)
    gold = derived.create(spark, str(tmp_path / "gold"), AGG, sources={"a": a.uri}, refresh_mode="incremental",
                          target_lag="5 minutes")
    a.insert(a_rows([100, 101], 2))
    gold.refresh()
    old = gold.table.refresh()
    old_key_id, old_version, old_rows = old.schema_at().field("_ct_dt_key").id, old.version, old.to_arrow()

    join = "SELECT a.id, b.w, upper(a.s) AS s FROM a JOIN b ON a.k = b.k"
    new = derived.replace(spark, gold.uri, join, sources={"a": a.uri, "b": b.uri}, refresh_mode="auto")
    t = new.table.refresh()
    assert t.version == old_version + 1 and t.table_id == old.table_id
    entry = t.history(limit=1)[0]
    info = t.log.commit_info(t.version).refresh
    assert entry.operation == "REFRESH" and info.action is ctfile.RefreshAction.REINITIALIZE
    assert info.reason.startswith("the definition was replaced; recomputed at a@")
    d = t.derived
    assert (d.query, d.source_names, d.refresh_mode, d.target_lag) == (join, ("a", "b"), ctfile.RefreshMode.AUTO,
                                                                        None)
    assert [v.name for v in d.frontier] == ["a", "b"] and info.frontier == d.frontier
    assert t.schema.names == ["id", "w", "s"]
    assert t.schema_at().field("_ct_dt_key").id == old_key_id  # same name and type: same field id
    equals_query(spark, new, {"a": a, "b": b})
    assert sorted(new.to_df().columns) == ["id", "s", "w"] and new.to_df().count() == t.to_arrow().num_rows
    # The version before still holds the old definition with the old rows.
    assert t.snapshot(old_version).to_arrow().equals(old_rows)
    assert ctfile.verify_table(t.uri, all_versions=True).healthy

    b.insert(pa.table({"k": [3], "w": [30]}, schema=b.schema))  # the new definition refreshes incrementally
    r = new.refresh()
    assert r.action is ctfile.RefreshAction.INCREMENTAL, r
    equals_query(spark, new, {"a": a, "b": b})
    assert t.refresh().derived.frontier[1].version == b.version


def test_replace_gives_every_row_a_new_id_and_releases_old_sources(spark, tmp_path):
    a, b = make_sources(tmp_path)
    gold = derived.create(spark, str(tmp_path / "gold"), "SELECT k, w FROM b", sources={"b": b.uri})
    stream = f"__derived_{gold.table.table_id}"
    assert stream in [s.name for s in b.refresh().streams()]
    old_ids = set(gold.table.to_arrow(include_hidden=True).column("_ct_row_id").to_pylist())

    same = derived.replace(spark, gold.uri, "SELECT k, w FROM a2", sources={"a2": b.uri})  # same rows, new name
    t = same.table.refresh()
    new_ids = set(t.to_arrow(include_hidden=True).column("_ct_row_id").to_pylist())
    assert old_ids and not old_ids & new_ids
    changes = t.changes(start_version=t.version, end_version=t.version).to_arrow()
    actions = pc.value_counts(changes.column("METADATA$ACTION")).to_pylist()
    assert sorted((x["values"], x["counts"]) for x in actions) == [("DELETE", 5), ("INSERT", 5)]

    derived.replace(spark, gold.uri, "SELECT id FROM a", sources={"a": a.uri})
    assert stream not in [s.name for s in b.refresh().streams()]  # b no longer read: its history released
    assert stream in [s.name for s in a.refresh().streams()]


def test_replace_refuses_a_missing_or_plain_table_and_bad_definitions(spark, tmp_path):
    a, b = make_sources(tmp_path)
    with pytest.raises(ctfile.TableNotFoundError):
        derived.replace(spark, str(tmp_path / "nothing"), AGG, sources={"a": a.uri})
    assert not (tmp_path / "nothing").exists()
    logs = log_files(a)
    with pytest.raises(ctfile.DerivedTableError, match="not derived"):
        derived.replace(spark, a.uri, AGG, sources={"a": b.uri})
    assert log_files(a) == logs

    gold = derived.create(spark, str(tmp_path / "gold"), AGG, sources={"a": a.uri})
    down = derived.create(spark, str(tmp_path / "down"), "SELECT k FROM g", sources={"g": gold.uri})
    logs = log_files(gold.table)  # down's stream on gold included
    with pytest.raises(derived.IncrementalRequiredError, match="(?i)window"):
        derived.replace(spark, gold.uri, QUERIES["window"], sources={"a": a.uri}, refresh_mode="incremental")
    with pytest.raises(ctfile.InvalidArgumentError):
        derived.replace(spark, gold.uri, "DELETE FROM a", sources={"a": a.uri})
    with pytest.raises(ctfile.InvalidArgumentError, match="target_lag"):
        derived.replace(spark, gold.uri, AGG, sources={"a": a.uri}, target_lag="")
    with pytest.raises(ctfile.InvalidArgumentError, match="a cycle"):  # reading itself
        derived.replace(spark, gold.uri, "SELECT k FROM g", sources={"g": gold.uri})
    with pytest.raises(ctfile.InvalidArgumentError, match="d -> g reading it, a cycle"):  # through a derived table
        derived.replace(spark, gold.uri, "SELECT k, count(*) AS n FROM d GROUP BY k", sources={"d": down.uri})
    assert log_files(gold.table) == logs


def test_a_plain_commit_that_changes_the_definition_fails_verify(spark, tmp_path):
    """verify accepts an ALTER DERIVED that changes only mode and lag, and
    reports any other change of ``derived`` outside a refresh."""
    from dataclasses import replace

    a, b = make_sources(tmp_path)
    gold = derived.create(spark, str(tmp_path / "gold"), AGG, sources={"a": a.uri})
    with gold.table.transaction(operation="SET TBLPROPERTIES") as tx:
        tx.data_change = False
        md = tx.metadata
        tx.set_metadata(replace(md, derived=md.derived.altered(refresh_mode="full", target_lag=None)))
    report = ctfile.verify_table(gold.uri, all_versions=True)
    assert [p.message for p in report.problems if "metadata.derived" in p.message] == [
        "SET TBLPROPERTIES changed metadata.derived outside a refresh commit; expected the definition read, or an "
        "ALTER DERIVED commit changing only refreshMode and targetLag (SPEC §Derived tables)"]


def test_a_table_made_by_other_plan_rules_is_recompiled_once(spark, tmp_path, monkeypatch):
    """SPEC §Derived tables, planVersion: a refresh by rules of another
    version re-initializes the table with the query compiled by its own
    rules, recorded in the same commit, so the refresh after it is
    incremental again (not a REINITIALIZE at every refresh)."""
    import ctfile.derived

    a, _ = make_sources(tmp_path)
    t = derived.create(spark, str(tmp_path / "d"), QUERIES["aggregate"], sources={"a": a.uri},
                       refresh_mode="incremental", target_lag="1 hour")
    later = ctfile.derived.PLAN_VERSION + 1
    monkeypatch.setattr(ctfile.derived, "PLAN_VERSION", later)  # the rules of a later release
    r = t.refresh()  # no source changed: the rules did
    assert r.action is ctfile.RefreshAction.REINITIALIZE and "plan rules" in r.reason, r
    d = t.table.refresh().derived
    assert (d.plan_version, d.refresh_mode, d.target_lag, d.query) == (
        later, ctfile.RefreshMode.INCREMENTAL, "1 hour", QUERIES["aggregate"])
    assert [v.version for v in d.frontier] == [a.refresh().version]
    equals_query(spark, t, {"a": a})
    a.delete(pc.field("k") == 2)
    assert t.refresh().action is ctfile.RefreshAction.INCREMENTAL
    equals_query(spark, t, {"a": a})
