"""Change reads at Spark speed (issue 29, item 8; contract C2): snapshots
with ``METADATA$ROW_ID`` (``CtfileTable.to_df(row_ids=True)``, the data
source's ``rowIds`` option) and minimum-delta change scans
(``CtfileTable.changes_df(information="default")``) read by Spark's own
Parquet reader equal the data source and ctfile's Python reads.

The differential test draws random histories (insert, update, delete,
MERGE, compaction, RESTORE; change capture off, on, or switched on midway;
an added column, a widening or a rename in some) on a small table and then
compares, as multisets:

* ``to_df(version=v, row_ids=True)`` with
  ``spark.read.format("ctfile").option("rowIds", "true")`` and with the
  Python snapshot read ``include_hidden=True``, its row ids hashed by the
  SPEC's definition (``change_checks.row_id_string``);
* ``changes_df(a, b, information="default")`` with the data source's
  ``default`` scan and ``Table.changes(...).to_arrow()``, for drawn
  intervals.
"""

from __future__ import annotations

import logging
import math
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import ctfile
from ctfile.spark import CtfileTable
from spark_helpers import spark_conf

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "property"))
from change_checks import row_id_string  # noqa: E402 -- the property suite's helper

ROW_ID = "METADATA$ROW_ID"
SCHEMA = pa.schema([
    pa.field("k", pa.int64(), nullable=False),
    pa.field("n", pa.int32()),
    pa.field("a", pa.string()),
    pa.field("f", pa.float64()),
])
N = st.one_of(st.none(), st.integers(-2, 3))
A = st.sampled_from([None, "", "x", "y"])
F = st.sampled_from([None, math.nan, -1.5, 0.0, 2.0])
# Conditions on the columns no schema change renames (k, n).
CONDITIONS = [pc.field("k") < 4, pc.field("n").is_null(), (pc.field("n") > 0) & (pc.field("k") >= 6), pc.scalar(True),
              pc.field("k").isin([1, 4, 7, 10, 13, 16])]
SETS = [lambda: {"n": pc.add(pc.field("n"), 1)}, lambda: {"n": pc.field("n")},  # the second is a no-op update
        lambda: {"f": 2.0}, lambda: {"n": None}]


def _canon(v):
    return "NaN" if isinstance(v, float) and v != v else v


def multiset(rows) -> Counter:
    """Spark Rows or pyarrow row dicts as a multiset of tuples (NaN made comparable)."""
    return Counter(tuple(_canon(v) for v in (r.asDict().values() if hasattr(r, "asDict") else r.values())) for r in rows)


def is_native(df) -> bool:
    """Spark's file source names its files; the Python data source has none."""
    return bool(df.inputFiles())


# ---------------------------------------------------------------- histories


@st.composite
def statements(draw):
    kind = draw(st.sampled_from(["insert", "insert", "merge", "merge", "update", "update", "delete", "compact",
                                 "restore", "schema", "capture"]))
    if kind == "insert":
        return ("insert", [(draw(N), draw(A), draw(F)) for _ in range(draw(st.integers(1, 6)))])
    if kind == "merge":
        keys = draw(st.lists(st.integers(0, 16), unique=True, min_size=1, max_size=6))
        actions = draw(st.sampled_from([("update", "insert"), ("delete", None), ("update", None), ("delete", "insert")]))
        return ("merge", [(k, draw(N), draw(A), draw(F)) for k in keys], actions)
    if kind == "update":
        return ("update", draw(st.sampled_from(range(len(CONDITIONS)))), draw(st.sampled_from(range(len(SETS)))))
    if kind == "delete":
        return ("delete", draw(st.sampled_from(range(len(CONDITIONS)))))
    if kind == "restore":
        return ("restore", draw(st.integers(0, 1000)))
    if kind == "schema":
        return ("schema", draw(st.sampled_from(["add", "widen", "rename"])))
    return (kind,)


class History:
    """A table and the statements applied to it; keys ``k`` are fresh for
    inserts (a counter) and drawn for MERGE sources (unique per source)."""

    def __init__(self, root: Path, partition_rows: int, capture: bool):
        props = {"ctfile.changeCapture": "before_after"} if capture else {}
        self.t = ctfile.create_table(str(root), SCHEMA, partition_rows=partition_rows, properties=props)
        self.next_key = 100
        self.t.insert(self._rows([(k, k % 4, "x", float(k)) for k in range(12)]))

    def _rows(self, rows) -> pa.Table:
        """``(k, n, a, f)`` tuples in the table's current schema (renamed
        ``a`` and an added ``z`` included)."""
        schema = self.t.schema
        names = schema.names
        dicts = []
        for k, n, a, f in rows:
            d = {"k": k, "n": n, names[2]: a, "f": f}
            if "z" in names:
                d["z"] = None if a is None else a + "!"
            dicts.append(d)
        return pa.Table.from_pylist(dicts, schema=schema)

    def apply(self, stmt) -> None:
        t, kind = self.t, stmt[0]
        if kind == "insert":
            keys = range(self.next_key, self.next_key + len(stmt[1]))
            self.next_key += len(stmt[1])
            t.insert(self._rows([(k, *r) for k, r in zip(keys, stmt[1])]))
        elif kind == "merge":
            matched, not_matched = stmt[2]
            t.merge(self._rows(stmt[1]), "k", when_matched=matched, when_not_matched=not_matched)
        elif kind == "update":
            t.update(CONDITIONS[stmt[1]], SETS[stmt[2]]())
        elif kind == "delete":
            t.delete(CONDITIONS[stmt[1]])
        elif kind == "compact":
            t.compact(target_rows=16)
        elif kind == "restore" and t.version >= 2:
            t.restore(version=1 + stmt[1] % (t.version - 1))
        elif kind == "schema":
            self._schema(stmt[1])
        elif kind == "capture":
            t.set_properties({"ctfile.changeCapture": "before_after"})

    def _schema(self, change: str) -> None:
        names = self.t.schema.names
        if change == "add" and "z" not in names:
            self.t.update_schema().add_column("z", pa.string()).commit()
        elif change == "widen" and self.t.schema.field("n").type == pa.int32():
            self.t.update_schema().widen_column("n", pa.int64()).commit()
        elif change == "rename" and "a" in names:
            self.t.update_schema().rename_column("a", "b").commit()


# ---------------------------------------------------------------- the three reads of each kind


def datasource_snapshot(spark, uri: str, version: int):
    return spark.read.format("ctfile").option("versionAsOf", version).option("rowIds", "true").load(uri)


def datasource_changes(spark, uri: str, a: int, b: int):
    return (spark.read.format("ctfile").option("changes", "default")
            .option("startingVersion", a).option("endingVersion", b).load(uri))


def python_snapshot(t: ctfile.Table, version: int) -> Counter:
    """The snapshot's rows with their row ids hashed by the SPEC's definition."""
    rows = t.snapshot(version).to_arrow(include_hidden=True).to_pylist()
    out = []
    for r in rows:
        rid = r.pop(ctfile.ROW_ID_COLUMN)
        r.pop(ctfile.ROW_VERSION_COLUMN)
        r[ROW_ID] = row_id_string(t.table_id, rid)
        out.append(r)
    return multiset(out)


def check_snapshot(spark, t: ctfile.Table, version: int) -> None:
    df = CtfileTable.for_path(spark, t.uri).to_df(version=version, row_ids=True)
    ref = datasource_snapshot(spark, t.uri, version)
    assert df.columns == ref.columns == t.snapshot(version).schema.names + [ROW_ID], version
    got = multiset(df.collect())
    assert got == multiset(ref.collect()), version
    assert got == python_snapshot(t, version), version


def check_changes(spark, t: ctfile.Table, a: int, b: int) -> None:
    df = CtfileTable.for_path(spark, t.uri).changes_df(a, b, information="default")
    ref = datasource_changes(spark, t.uri, a, b)
    assert df.columns == ref.columns, (a, b)
    got = multiset(df.collect())
    assert got == multiset(ref.collect()), (a, b)
    assert got == multiset(t.changes(start_version=a, end_version=b, information="default").to_arrow().to_pylist()), (a, b)
    with spark_conf(spark, "spark.ctfile.local.changeRows", str(10**9)):  # read in the driver
        in_driver = CtfileTable.for_path(spark, t.uri).changes_df(a, b, information="default")
    assert in_driver.schema == ref.schema and multiset(in_driver.collect()) == got, (a, b)


def run_history(spark, root: Path, data) -> None:
    h = History(root, data.draw(st.sampled_from([3, 5, 16]), "partition_rows"), data.draw(st.booleans(), "capture"))
    for stmt in data.draw(st.lists(statements(), min_size=1, max_size=8), "statements"):
        h.apply(stmt)
    t = h.t
    latest = t.version
    for v in sorted({latest, data.draw(st.integers(0, latest), "version")}):
        check_snapshot(spark, t, v)
    for _ in range(2):
        b = data.draw(st.integers(0, latest), "end")
        a = data.draw(st.integers(0, b), "start")
        check_changes(spark, t, a, b)
    check_changes(spark, t, 1, latest)


SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.generate])


@settings(max_examples=2, **SETTINGS)
@given(data=st.data())
def test_row_ids_and_minimum_delta_equal_the_data_source(spark, tmp_path_factory, data):
    run_history(spark, tmp_path_factory.mktemp("t"), data)


@pytest.mark.long
@settings(max_examples=40, **SETTINGS)
@given(data=st.data())
def test_row_ids_and_minimum_delta_equal_the_data_source_long(spark, tmp_path_factory, data):
    run_history(spark, tmp_path_factory.mktemp("t"), data)


# ---------------------------------------------------------------- fixed cases


def dml_table(root: Path, *, capture: bool = False) -> ctfile.Table:
    """Versions 1..6: insert (3 partitions), update (a pair and a no-op
    update), MERGE (update, insert), delete, compaction, insert."""
    props = {"ctfile.changeCapture": "before_after"} if capture else {}
    t = ctfile.create_table(str(root), SCHEMA, partition_rows=4, properties=props)
    t.insert(pa.table({"k": range(10), "n": pa.array(range(10), pa.int32()), "a": ["x"] * 10,
                       "f": [float(i) for i in range(10)]}, schema=SCHEMA))  # v1
    t.update(pc.field("k") < 3, {"n": pc.if_else(pc.field("k") == 0, pc.field("n"), pa.scalar(7, pa.int32()))})  # v2
    src = pa.table({"k": [4, 20], "n": pa.array([40, 20], pa.int32()), "a": ["m", "m"], "f": [4.0, 20.0]}, schema=SCHEMA)
    t.merge(src, "k")  # v3
    t.delete(pc.field("k") == 9)  # v4
    t.compact()  # v5
    t.insert(pa.table({"k": [30], "n": pa.array([1], pa.int32()), "a": [None], "f": [math.nan]}, schema=SCHEMA))  # v6
    return t


def test_default_changes_are_native_and_minimal(spark, tmp_path):
    """Every interval of a DML history: natively read, equal to the data
    source; the no-op update of k=0 and the compaction give no row, an
    update gives an adjacent pair with ISUPDATE true."""
    t = dml_table(tmp_path / "t")
    ct = CtfileTable.for_path(spark, t.uri)
    for a, b in [(0, 6), (1, 3), (2, 4), (4, 6)]:
        df = ct.changes_df(a, b, information="default")
        want = multiset(datasource_changes(spark, t.uri, a, b).collect())
        assert multiset(df.collect()) == want, (a, b)
        assert is_native(df) == bool(want), (a, b)  # an empty plan needs no read
    pairs = ct.changes_df(2, 2, information="default").collect()
    assert sorted((r.k, r["METADATA$ACTION"], r["METADATA$ISUPDATE"]) for r in pairs) == [
        (1, "DELETE", True), (1, "INSERT", True), (2, "DELETE", True), (2, "INSERT", True)]
    assert ct.changes_df(5, 5, information="default").collect() == []


def test_default_changes_with_change_capture_and_restore(spark, tmp_path):
    """An interval of captured commits only is read from its change files
    by the data source (not the partitions its DML rewrote); one with a
    RESTORE (never captured) natively, by partition lineage (a RESTORE
    matches rows on row id and row version)."""
    t = dml_table(tmp_path / "t", capture=True)
    t.restore(version=2)  # v7
    ct = CtfileTable.for_path(spark, t.uri)
    for (a, b), native in {(2, 4): False, (7, 7): True, (1, 7): True}.items():
        assert (t.changes(start_version=a, end_version=b).plan_shape is ctfile.PlanShape.CAPTURED) is not native
        df = ct.changes_df(a, b, information="default")
        assert is_native(df) is native, (a, b)
        want = multiset(t.changes(start_version=a, end_version=b).to_arrow().to_pylist())
        assert multiset(df.collect()) == want == multiset(datasource_changes(spark, t.uri, a, b).collect()), (a, b)


@pytest.mark.parametrize("capture", [False, True])
def test_small_change_scans_are_read_in_the_driver(spark, tmp_path, caplog, capture):
    """A change scan that reads at most ``spark.ctfile.local.changeRows``
    rows (from the log) is read by ctfile's reader in the driver, with the
    data source's columns, types and rows; one that reads more runs on the
    executors."""
    t = dml_table(tmp_path / "t", capture=capture)
    ct = CtfileTable.for_path(spark, t.uri)
    intervals = [(0, 6), (1, 3), (2, 4), (4, 6), (5, 5)]
    for a, b in intervals:
        reads = t.changes(start_version=a, end_version=b).plan.rows_to_read
        limit = max(reads, 1)  # 0 turns the driver path off, even for a scan that reads nothing
        with spark_conf(spark, "spark.ctfile.local.changeRows", str(limit)), caplog.at_level(logging.INFO):
            caplog.clear()
            df = ct.changes_df(a, b, information="default")
            assert "read in the driver" in caplog.text, (a, b)
        ref = datasource_changes(spark, t.uri, a, b)
        assert df.schema == ref.schema, (a, b)
        assert multiset(df.collect()) == multiset(ref.collect()), (a, b)
        appended = ct.changes_df(a, b, information="append_only")  # the same limit: it reads at most as much
        assert multiset(appended.collect()) == multiset(
            t.changes(start_version=a, end_version=b, information="append_only").to_arrow().to_pylist()), (a, b)
    reads = t.changes(start_version=0, end_version=6).plan.rows_to_read
    with spark_conf(spark, "spark.ctfile.local.changeRows", str(reads - 1)), caplog.at_level(logging.INFO):
        caplog.clear()
        ct.changes_df(0, 6, information="default")
        assert "read in the driver" not in caplog.text


def test_default_changes_fall_back_across_a_rename(spark, tmp_path, caplog):
    t = dml_table(tmp_path / "t")
    t.update_schema().rename_column("a", "b").commit()  # v7: older files misread by name
    t.update(pc.field("k") == 5, {"b": "renamed"})  # v8
    ct = CtfileTable.for_path(spark, t.uri)
    with caplog.at_level(logging.INFO, logger="ctfile.spark"):
        df = ct.changes_df(2, 8, information="default")
    assert not is_native(df) and "renamed or dropped" in caplog.text and "default changes" in caplog.text
    assert multiset(df.collect()) == multiset(datasource_changes(spark, t.uri, 2, 8).collect())


def test_default_changes_fall_back_for_maps(spark, tmp_path, caplog):
    schema = pa.schema([("k", pa.int64()), ("m", pa.map_(pa.string(), pa.int64()))])
    t = ctfile.create_table(str(tmp_path / "t"), schema)
    t.insert(pa.table({"k": [1, 2], "m": [[("a", 1)], None]}, schema=schema))
    t.update(pc.field("k") == 1, {"k": 3})
    with caplog.at_level(logging.INFO, logger="ctfile.spark"):
        df = CtfileTable.for_path(spark, t.uri).changes_df(1, 2, information="default")
    assert not is_native(df) and "map" in caplog.text
    assert len(df.collect()) == 2


def test_to_df_row_ids(spark, tmp_path):
    """Row ids of every version equal the data source's and ctfile's; a
    filter and a projection keep them (positions count every row of the
    file); an empty snapshot has the column."""
    t = dml_table(tmp_path / "t")
    ct = CtfileTable.for_path(spark, t.uri)
    for v in range(t.version + 1):
        check_snapshot(spark, t, v)
    df = ct.to_df(row_ids=True)
    assert is_native(df) and df.columns[-1] == ROW_ID
    full = {r.k: r[ROW_ID] for r in df.collect()}
    picked = df.filter("k >= 6").select("k", ROW_ID).collect()
    assert {r.k: r[ROW_ID] for r in picked} == {k: v for k, v in full.items() if k >= 6}
    assert "GreaterThanOrEqual(k,6)" in df.filter("k >= 6")._jdf.queryExecution().executedPlan().toString()
    assert ct.to_df(version=0, row_ids=True).columns == ["k", "n", "a", "f", ROW_ID]
    # The data source with a filter on the row ids and one on a column.
    ref = datasource_snapshot(spark, t.uri, t.version)
    some = sorted(full.values())[:3]
    assert {r.k for r in ref.filter(ref[ROW_ID].isin(some)).collect()} == {k for k, v in full.items() if v in some}
    assert {r.k: r[ROW_ID] for r in ref.filter("k >= 6").collect()} == {k: v for k, v in full.items() if k >= 6}


def test_to_df_row_ids_fall_back_across_a_rename(spark, tmp_path, caplog):
    t = dml_table(tmp_path / "t")
    t.update_schema().rename_column("a", "b").commit()
    ct = CtfileTable.for_path(spark, t.uri)
    with caplog.at_level(logging.INFO, logger="ctfile.spark"):
        df = ct.to_df(row_ids=True)
    assert not is_native(df) and "renamed or dropped" in caplog.text
    check_snapshot(spark, t, t.version)


def test_errors(spark, tmp_path):
    t = dml_table(tmp_path / "t")
    ct = CtfileTable.for_path(spark, t.uri)
    with pytest.raises(ctfile.InvalidArgumentError, match="information must be one of"):
        ct.changes_df(1, 2, information="minimal")
    with pytest.raises(ctfile.InvalidArgumentError, match="append_only and default"):
        ct.changes_df(1, 2, information="audit")
    with pytest.raises(ctfile.InvalidArgumentError):
        ct.changes_df(5, 2, information="default")
    with pytest.raises(ctfile.VersionNotFoundError):
        ct.changes_df(1, 99, information="default")
    with pytest.raises(ctfile.InvalidArgumentError, match="row_ids must be a bool"):
        ct.to_df(row_ids="yes")
    with pytest.raises(Exception, match="option rowIds"):
        spark.read.format("ctfile").option("changes", "default").option("rowIds", "true").load(t.uri).collect()
    with pytest.raises(Exception, match="option rowIds must be true or false"):
        spark.read.format("ctfile").option("rowIds", "yes").load(t.uri).collect()


def test_default_changes_without_broadcasting_the_deletes(spark, tmp_path, monkeypatch):
    """Past ``BROADCAST_DELETES`` candidate DELETEs the old side is joined
    without a broadcast: the same rows."""
    from ctfile.spark import min_delta

    t = dml_table(tmp_path / "t")
    ct = CtfileTable.for_path(spark, t.uri)
    monkeypatch.setattr(min_delta, "BROADCAST_DELETES", -1)
    assert not min_delta._few_deletes(t.changes(start_version=2, end_version=4).plan)
    df = ct.changes_df(2, 4, information="default")
    assert multiset(df.collect()) == multiset(datasource_changes(spark, t.uri, 2, 4).collect())
