"""How ``refresh_mode="auto"`` chooses between an incremental and a full
refresh (``ctfile.spark.derived_cost``): the model's orderings, and the
overwrite its full refresh is written as, end to end."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest
from derived_helpers import QUERIES, a_rows, equals_query, make_sources

import ctfile
from ctfile.spark import derived, derived_cost
from ctfile.spark.derived_cost import CostInputs, TargetShape, estimate

BIG = TargetShape(rows=10_000_000, partitions=10)


def _inputs(**kw) -> CostInputs:
    base = dict(source_rows=10_000_050, changed_rows=10_000, removed_rows=5_000, target=BIG, aggregate=False,
                driver_delta=False, driver_merge_rows=2_000_000)
    return CostInputs(**{**base, **kw})


def test_touched_rows_are_the_partitions_random_rows_fall_in():
    assert BIG.touched_rows(0) == 0
    assert TargetShape(rows=500, partitions=1).touched_rows(1) == 500  # one partition: any change rewrites it
    assert TargetShape(rows=0, partitions=0).touched_rows(10) == 0
    assert BIG.touched_rows(1) == pytest.approx(1_000_000)
    assert BIG.touched_rows(5_000) == pytest.approx(10_000_000)  # 500 hits per partition: all of them
    assert BIG.touched_rows(3) < BIG.touched_rows(30) < BIG.rows


def test_updates_of_a_join_at_random_cost_the_incremental_its_whole_table():
    """0.1% of updates at random touch every partition of a join's derived
    table: the incremental refresh rewrites all of it, about what the full
    refresh writes, so the margin keeps it incremental (row ids kept)."""
    cost = estimate(_inputs())
    touched = derived_cost.MERGE_ROW * BIG.rows
    assert cost.incremental >= touched and not cost.prefers_full
    assert "incremental" in str(cost) and "full" in str(cost)


def test_appends_to_a_join_touch_no_stored_row():
    cost = estimate(_inputs(removed_rows=0))
    assert cost.incremental < derived_cost.SPARK_DELTA_JOBS * derived_cost.JOB_COST + 20 * 10_000 + 1
    assert estimate(_inputs(removed_rows=0, changed_rows=10_000_000)).prefers_full  # a delta the size of the source


def test_an_aggregate_in_the_driver_stays_incremental_and_a_large_spark_delta_does_not():
    small = TargetShape(rows=250, partitions=1)
    assert not estimate(_inputs(target=small, aggregate=True, driver_delta=True, changed_rows=150_000)).prefers_full
    assert estimate(_inputs(target=small, aggregate=True, driver_delta=False, changed_rows=3_000_000)).prefers_full


def test_small_tables_stay_incremental():
    """A few rows: the jobs' fixed costs decide, and they tie; the margin
    keeps the refresh incremental (row ids kept downstream)."""
    tiny = TargetShape(rows=20, partitions=1)
    assert not estimate(_inputs(source_rows=25, changed_rows=10, removed_rows=10, target=tiny)).prefers_full


def test_auto_full_refresh_by_cost_overwrites(spark, tmp_path, monkeypatch):
    """With the jobs' fixed cost taken away, updates of a small join's
    source make ``auto`` estimate the full refresh cheaper: it replaces every
    row in one ``FULL`` refresh commit that says why, the table equals its
    query, and an append afterwards is incremental again."""
    monkeypatch.setattr(derived_cost, "JOB_COST", 0)
    a, b = make_sources(tmp_path)
    t = derived.create(spark, str(tmp_path / "j"), QUERIES["join"], sources={"a": a.uri, "b": b.uri},
                       refresh_mode="auto")
    old_ids = set(ctfile.open_table(t.uri).to_arrow(include_hidden=True).column("_ct_row_id").to_pylist())
    a.update(pc.field("id") < 15, {"k": pc.add(pc.field("k"), 1)})
    r = t.refresh()
    assert r.action is ctfile.RefreshAction.FULL and "overwrite" in r.reason and "estimated cost" in r.reason, r
    equals_query(spark, t, {"a": a, "b": b})
    after = ctfile.open_table(t.uri)
    new_ids = set(after.to_arrow(include_hidden=True).column("_ct_row_id").to_pylist())
    info = after.history(limit=1)[0].refresh
    assert (info.action, info.rows_out) == (ctfile.RefreshAction.FULL, len(old_ids) + len(new_ids))
    changes = after.changes(start_version=after.version, end_version=after.version).to_arrow()
    assert changes.num_rows == len(old_ids) + len(new_ids) and old_ids.isdisjoint(new_ids)  # every row replaced

    a.insert(a_rows([100, 101], 7))
    r = t.refresh()
    assert r.action is ctfile.RefreshAction.INCREMENTAL, r
    equals_query(spark, t, {"a": a, "b": b})
    assert ctfile.verify_table(t.uri, all_versions=True).healthy
