"""How ``refresh_mode="auto"`` chooses between an incremental and a full
refresh (``ctfile.spark.derived_cost``): the model's orderings, and the
overwrite its full refresh is written as, end to end."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest
from derived_helpers import QUERIES, a_rows, equals_query, make_sources
from hypothesis import given, settings
from hypothesis import strategies as st

import ctfile
from ctfile.derived import DeltaKind
from ctfile.spark import derived, derived_cost
from ctfile.spark.derived_cost import CostInputs, TargetShape, estimate

BIG = TargetShape(rows=10_000_000, partitions=10)
#: benchmarks/bench_derived.py at 10,000,000 rows: a change of a fraction
#: updates half its rows at random and appends as many (RESULTS.md).
BENCH_ROWS = 10_000_000
FRACTIONS = (0.001, 0.01, 0.1)


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


def _bench(fraction: float, target: TargetShape, *, rows: int = BENCH_ROWS, **kw) -> CostInputs:
    changed = int(rows * fraction)
    return _inputs(source_rows=rows + changed // 2, changed_rows=changed, removed_rows=changed // 2,
                   target=target, **kw)


@pytest.mark.parametrize("rows, fraction, full", [
    (BENCH_ROWS, 0.001, False), (BENCH_ROWS, 0.01, False), (BENCH_ROWS, 0.1, True),
    (2_000_000, 0.001, False), (2_000_000, 0.01, False), (2_000_000, 0.1, True),
])
def test_the_benchmark_deduplication_is_refreshed_in_full_past_a_small_change(rows, fraction, full):
    """The window plan's incremental refresh scans the source's new state and
    windows every row of the blocks the change touches (a 1% change at
    random touches about a tenth of them). ``auto``'s full refresh (an
    overwrite) measured about twice a recomputation; the incremental one,
    its MERGE spread over the executors, less at 0.1% and 1% and more at
    10%: only 10% is refreshed in full, at 10,000,000 rows and at 2,000,000."""
    cost = estimate(_bench(fraction, TargetShape(rows // 10, 1), rows=rows, kind=DeltaKind.PARTITIONS))
    assert cost.prefers_full is full, cost
    # The appends alone (a deduplication's appended rows ranked against the table) stay incremental.
    appended = _bench(fraction, TargetShape(rows // 10, 1), rows=rows, kind=DeltaKind.APPENDED_TOP_ROWS)
    assert not estimate(CostInputs(**{**appended.__dict__, "removed_rows": 0})).prefers_full


@pytest.mark.parametrize("fraction", FRACTIONS)
def test_the_benchmark_aggregate_and_join_stay_incremental(fraction):
    """What ``auto`` picked at 10,000,000 rows (RESULTS.md): INCREMENTAL for
    the aggregate (the driver computes a change of at most
    ``spark.ctfile.local.changeRows`` scan rows) and for the join (a full
    refresh written by ctfile measured 8-9x the recomputation)."""
    driver = int(BENCH_ROWS * fraction) * 3 // 2 <= 500_000
    groups = TargetShape(rows=250, partitions=1)
    assert not estimate(_bench(fraction, groups, aggregate=True, driver_delta=driver)).prefers_full
    assert not estimate(_bench(fraction, TargetShape(rows=BENCH_ROWS, partitions=10))).prefers_full


def test_a_window_partition_count_is_the_derived_rows():
    """One row per partition (a deduplication): a change touches its
    partition's source rows, the derived rows standing for the partitions."""
    one = _inputs(source_rows=1_000, changed_rows=1, removed_rows=1, target=TargetShape(100, 1),
                  kind=DeltaKind.PARTITIONS)
    assert one.window_rows == pytest.approx(10)
    assert one.hits == 1 and _inputs(kind=DeltaKind.CHANGE).window_rows == 0
    assert _inputs(removed_rows=0, kind=DeltaKind.APPENDED_TOP_ROWS).hits == 10_000  # appends land on partitions


@st.composite
def shapes(draw) -> dict:
    """Consistent inputs: the updated and deleted rows are among the changed ones."""
    changed = draw(st.integers(0, 10**8))
    return {"source_rows": draw(st.integers(1, 10**9)), "changed_rows": changed,
            "removed_rows": draw(st.integers(0, changed)),
            "target": TargetShape(draw(st.integers(0, 10**9)), draw(st.integers(0, 10**4))),
            "aggregate": draw(st.booleans()), "driver_delta": draw(st.booleans()),
            "driver_merge_rows": draw(st.integers(0, 10**7))}


@settings(max_examples=25, deadline=None)
@given(shape=shapes(), more=st.integers(1, 10**7))
def test_what_each_delta_reads_orders_its_estimates(shape, more):
    """Properties of the reads: a window plan pays at least a change-only
    delta plus one scan of every source row and of the table, and more for
    more changed rows; a deduplication over appends reads no source state
    (its estimate does not move with the source's size); join keys scan the
    states twice; the full estimate ignores the kind."""
    kinds = {k: estimate(CostInputs(**shape, kind=k)) for k in DeltaKind}
    change = kinds[DeltaKind.CHANGE].incremental
    scan = derived_cost.SCAN_ROW * shape["source_rows"]
    assert len({c.full for c in kinds.values()}) == 1
    window = CostInputs(**shape, kind=DeltaKind.PARTITIONS)
    least = change + scan + derived_cost.SCAN_ROW * shape["target"].rows
    assert kinds[DeltaKind.PARTITIONS].incremental >= least * (1 - 1e-12)
    grown = CostInputs(**{**shape, "changed_rows": shape["changed_rows"] + more}, kind=DeltaKind.PARTITIONS)
    assert estimate(grown).incremental > estimate(window).incremental
    assert kinds[DeltaKind.JOIN_KEYS].incremental == pytest.approx(change + 2 * scan)
    assert kinds[DeltaKind.GROUPS].incremental == pytest.approx(change + scan)
    bigger = CostInputs(**{**shape, "source_rows": shape["source_rows"] * 10}, kind=DeltaKind.APPENDED_TOP_ROWS)
    assert estimate(bigger).incremental == kinds[DeltaKind.APPENDED_TOP_ROWS].incremental


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


def test_auto_refreshes_a_deduplication_in_full_after_an_update_and_not_after_appends(spark, tmp_path, monkeypatch):
    """End to end, the plan's kind reaches the model: with the jobs' fixed
    cost taken away, an update of one row of a deduplication's source makes
    ``auto`` estimate its partition's recomputation (a scan of the source,
    the partition windowed) dearer than a full refresh; an interval that
    only appended ranks the appended rows against the table and stays
    incremental. The table equals its query after each."""
    monkeypatch.setattr(derived_cost, "JOB_COST", 0)
    a, b = make_sources(tmp_path)
    query = "SELECT id, k, v FROM a QUALIFY ROW_NUMBER() OVER (PARTITION BY k ORDER BY id DESC) = 1"
    t = derived.create(spark, str(tmp_path / "dd"), query, sources={"a": a.uri}, refresh_mode="auto")
    a.update(pc.field("id") == 3, {"k": pc.add(pc.field("k"), 1)})
    r = t.refresh()
    assert r.action is ctfile.RefreshAction.FULL and "estimated cost" in r.reason, r
    equals_query(spark, t, {"a": a})
    a.insert(a_rows([100, 101], 7))
    r = t.refresh()
    assert r.action is ctfile.RefreshAction.INCREMENTAL, r
    equals_query(spark, t, {"a": a})
