"""``CtfileTable.merge_builder``: MERGE with ordered conditional clauses on
Spark (SPEC §Copy-on-write, MERGE).

The five patterns of issue 27 (conditional upsert, upsert with delete,
accumulate, snapshot sync with NOT MATCHED BY SOURCE, SCD type 2) through
the Spark builder; the multiple-match error; and a differential property
test: random statements (tests/property/merge_statements.py) through the
Python builder and the Spark builder on copies of one table give the same
rows (user and hidden columns), counts and change scans in every mode,
and the model's.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings

import ctfile
from ctfile.spark import CtfileTable
from ctfile.spark.local import LocalLimits, matched_target_pruning, unmatched_target_pruning
from ctfile.spark.sqltext import SqlConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "property"))
from merge_statements import SOURCE_ROWS, SOURCE_SCHEMA, TARGET_ROWS, MultipleMatch  # noqa: E402
from merge_statements import run_model, statements, table_of  # noqa: E402
from spark_helpers import by_first_id, ranged_table, spark_conf, spoiled  # noqa: E402
from test_merge_model import _changes, _check_snapshot, _expected_changes, _files, _setup  # noqa: E402

SOURCE_DDL = "k long, a long, c long, op string"


def _rows(t: ctfile.Table) -> list[dict]:
    return sorted(t.refresh().to_arrow().to_pylist(), key=lambda r: tuple((v is None, v) for v in r.values()))


# ---------------------------------------------------------------- the five patterns


ACCOUNTS = pa.schema([("id", pa.int64()), ("total", pa.int64()), ("ts", pa.int64())])


@pytest.fixture
def accounts(tmp_path, spark):
    t = ctfile.create_table(str(tmp_path / "accounts"), ACCOUNTS, partition_rows=2,
                            properties={"ctfile.changeCapture": "before_after"})
    t.insert(pa.table({"id": [1, 2, 3, 4], "total": [10, 20, 30, 40], "ts": [5, 5, 5, 5]}, schema=ACCOUNTS))
    return t, CtfileTable.for_path(spark, t.uri)


#: Where the Spark builder runs a statement: Spark's join on the executors,
#: the Python engine in the driver (ctfile.spark.local), or spread over the
#: executors (ctfile.spark.local.run_spread).
PATHS = {"join": ("0", "0"), "driver": (str(LocalLimits.source_rows), "0"), "spread": ("0", str(LocalLimits.spread_rows))}


def test_conditional_upsert(spark, accounts):
    t, ct = accounts
    batch = spark.createDataFrame([(1, 11, 9), (2, 21, 1), (7, 70, 9)], "id long, total long, ts long")
    r = (ct.merge_builder(batch, on="id")
         .when_matched_update_all(condition="s.ts > t.ts")
         .when_not_matched_insert_all()
         .execute())
    assert (r.version, r.num_updated_rows, r.num_inserted_rows, r.num_deleted_rows) == (2, 1, 1, 0)
    assert _rows(t) == [{"id": 1, "total": 11, "ts": 9}, {"id": 2, "total": 20, "ts": 5},
                        {"id": 3, "total": 30, "ts": 5}, {"id": 4, "total": 40, "ts": 5},
                        {"id": 7, "total": 70, "ts": 9}]
    entry = t.history()[0]  # newest first
    assert entry.operation_parameters["engine"] == "spark"
    assert [c["kind"] for c in entry.operation_parameters["clauses"]] == ["matched", "notMatched"]
    assert entry.operation_parameters["clauses"][0]["condition"] == "s.ts > t.ts"


def test_a_source_over_the_spread_limit_runs_on_sparks_join(spark, tmp_path, caplog):
    """A source of unknown size past ``spark.ctfile.local.spreadRows`` runs
    on Spark's join; one within it is spread. Both give the same rows."""
    batch = spark.createDataFrame([(1, 11, 9), (2, 21, 9), (7, 70, 9)], "id long, total long, ts long")
    for limit, spread in (("2", False), ("3", True)):
        t = ctfile.create_table(str(tmp_path / f"t{limit}"), ACCOUNTS, partition_rows=2)
        t.insert(pa.table({"id": [1, 2, 3, 4], "total": [10, 20, 30, 40], "ts": [5, 5, 5, 5]}, schema=ACCOUNTS))
        caplog.clear()
        with spark_conf(spark, "spark.ctfile.local.sourceRows", "0"), \
                spark_conf(spark, "spark.ctfile.local.spreadRows", limit), caplog.at_level("INFO", "ctfile.spark"):
            r = (CtfileTable.for_path(spark, t.uri).merge_builder(batch, on="id")
                 .when_matched_update_all().when_not_matched_insert_all().execute())
        assert any("spread over" in m.getMessage() for m in caplog.records) is spread
        assert (r.num_updated_rows, r.num_inserted_rows) == (2, 1)
        assert _rows(t) == [{"id": 1, "total": 11, "ts": 9}, {"id": 2, "total": 21, "ts": 9},
                            {"id": 3, "total": 30, "ts": 5}, {"id": 4, "total": 40, "ts": 5},
                            {"id": 7, "total": 70, "ts": 9}]


def test_upsert_with_delete_in_one_version(spark, accounts):
    t, ct = accounts
    batch = spark.createDataFrame([(1, 11, 9, "upsert"), (2, 0, 9, "delete"), (8, 80, 9, "upsert"),
                                   (9, 0, 9, "delete")], "id long, total long, ts long, op string")
    ids = {r["id"]: r[ctfile.ROW_ID_COLUMN] for r in t.to_arrow(include_hidden=True).to_pylist()}
    r = (ct.merge_builder(batch, on="t.id = s.id")
         .when_matched_delete(condition="s.op = 'delete'")
         .when_matched_update(set={"total": "s.total", "ts": "s.ts"})
         .when_not_matched_insert(values={"id": "s.id", "total": "s.total", "ts": "s.ts"},
                                  condition="s.op != 'delete'")
         .execute())
    assert (r.version, r.num_updated_rows, r.num_inserted_rows, r.num_deleted_rows) == (2, 1, 1, 1)
    got = {row["id"]: row for row in t.to_arrow(include_hidden=True).to_pylist()}
    assert sorted(got) == [1, 3, 4, 8]
    assert got[1][ctfile.ROW_ID_COLUMN] == ids[1] and got[1][ctfile.ROW_VERSION_COLUMN] == 2
    assert got[3][ctfile.ROW_VERSION_COLUMN] == 1  # untouched: its version kept
    changes = Counter((c["METADATA$ACTION"], c["METADATA$ISUPDATE"], c["id"])
                      for c in t.changes(start_version=2, end_version=2).to_arrow().to_pylist())
    assert changes == Counter({("DELETE", True, 1): 1, ("INSERT", True, 1): 1, ("DELETE", False, 2): 1,
                               ("INSERT", False, 8): 1})


def test_accumulate(spark, accounts):
    t, ct = accounts
    batch = spark.createDataFrame([(1, 5), (3, -30), (5, 50)], "id long, amount long")
    r = (ct.merge_builder(batch, on={"id": "id"})
         .when_matched_update(set={"total": "t.total + s.amount"})
         .when_not_matched_insert(values={"id": "s.id", "total": "amount", "ts": 0})
         .execute())
    assert (r.num_updated_rows, r.num_inserted_rows) == (2, 1)
    assert {r["id"]: r["total"] for r in t.to_arrow().to_pylist()} == {1: 15, 2: 20, 3: 0, 4: 40, 5: 50}


def test_snapshot_sync_deletes_what_the_source_lacks(spark, accounts):
    """NOT MATCHED BY SOURCE: the table becomes the source; an unchanged row
    is not rewritten (no change reported)."""
    t, ct = accounts
    snapshot = spark.createDataFrame([(1, 10, 5), (2, 99, 5), (6, 60, 5)], "id long, total long, ts long")
    r = (ct.merge_builder(snapshot, on="id")
         .when_matched_update_all()
         .when_not_matched_insert_all()
         .when_not_matched_by_source_delete()
         .execute())
    assert (r.num_updated_rows, r.num_inserted_rows, r.num_deleted_rows) == (1, 1, 2)
    assert _rows(t) == [{"id": 1, "total": 10, "ts": 5}, {"id": 2, "total": 99, "ts": 5},
                        {"id": 6, "total": 60, "ts": 5}]
    ids = sorted(c["id"] for c in t.changes(start_version=r.version, end_version=r.version).to_arrow().to_pylist())
    assert ids == [2, 2, 3, 4, 6]  # id 1 set to its own values: no change


def test_scd2(spark, tmp_path):
    """Slowly changing dimension, type 2: a changed row is closed and its
    new version inserted, in one statement (Delta's staged-source pattern:
    a changed row appears twice in the source, once with a null merge key)."""
    schema = pa.schema([("id", pa.int64()), ("addr", pa.string()), ("current", pa.bool_()),
                        ("start", pa.int64()), ("end", pa.int64())])
    t = ctfile.create_table(str(tmp_path / "dim"), schema, partition_rows=2)
    t.insert(pa.table({"id": [1, 2], "addr": ["a", "b"], "current": [True, True], "start": [1, 1],
                       "end": [None, None]}, schema=schema))
    ct = CtfileTable.for_path(spark, t.uri)
    updates = spark.createDataFrame([(1, "a2", 5), (2, "b", 5), (3, "c", 5)], "id long, addr string, ts long")
    updates.createOrReplaceTempView("updates")
    staged = spark.sql("SELECT id AS merge_key, * FROM updates UNION ALL "
                       "SELECT NULL AS merge_key, u.* FROM updates u WHERE u.id = 1")
    r = (ct.merge_builder(staged, on="t.id = s.merge_key AND t.current = true")
         .when_matched_update(set={"current": False, "end": "s.ts"}, condition="t.addr <> s.addr")
         .when_not_matched_insert(values={"id": "s.id", "addr": "s.addr", "current": True, "start": "s.ts"})
         .execute())
    assert (r.version, r.num_updated_rows, r.num_inserted_rows) == (2, 1, 2)
    assert _rows(t) == [
        {"id": 1, "addr": "a", "current": False, "start": 1, "end": 5},
        {"id": 1, "addr": "a2", "current": True, "start": 5, "end": None},
        {"id": 2, "addr": "b", "current": True, "start": 1, "end": None},
        {"id": 3, "addr": "c", "current": True, "start": 5, "end": None},
    ]


@pytest.mark.parametrize("path", sorted(PATHS))
def test_patterns_on_an_s3_server(spark, moto_s3, path):
    """Upsert with delete, accumulate and snapshot sync on an S3 server
    (moto), on each path (:data:`PATHS`)."""
    uri, opts = moto_s3.new_uri(), moto_s3.storage_options()
    t = ctfile.create_table(uri, ACCOUNTS, partition_rows=2, storage_options=opts)
    t.insert(pa.table({"id": [1, 2, 3, 4], "total": [10, 20, 30, 40], "ts": [5, 5, 5, 5]}, schema=ACCOUNTS))
    ct = CtfileTable.for_path(spark, uri, storage_options=opts)
    batch = spark.createDataFrame([(1, 5, 9, "upsert"), (2, 0, 9, "delete"), (8, 80, 9, "upsert")],
                                  "id long, amount long, ts long, op string")
    with _engine_path(spark, path) as paths:
        r1 = (ct.merge_builder(batch, on="id")
              .when_matched_delete(condition="s.op = 'delete'")
              .when_matched_update(set={"total": "t.total + s.amount", "ts": "s.ts"})
              .when_not_matched_insert(values={"id": "s.id", "total": "s.amount", "ts": "s.ts"})
              .execute())
        snapshot = spark.createDataFrame([(1, 15, 9), (8, 80, 9)], "id long, total long, ts long")
        r2 = ct.merge_builder(snapshot, on="id").when_matched_update_all().when_not_matched_by_source_delete().execute()
    assert (paths.local, paths.spread) == {"driver": (2, 0), "spread": (0, 2), "join": (0, 0)}[path]
    assert (r1.num_updated_rows, r1.num_deleted_rows, r1.num_inserted_rows) == (1, 1, 1)
    assert (r2.num_updated_rows, r2.num_deleted_rows) == (0, 2)
    assert _rows(t) == [{"id": 1, "total": 15, "ts": 9}, {"id": 8, "total": 80, "ts": 9}]


def test_a_row_matched_twice_and_updated_is_refused_before_writing(spark, accounts):
    t, ct = accounts
    before = _files(t.uri)
    batch = spark.createDataFrame([(2, 1), (2, 2), (3, 1), (3, 2)], "id long, amount long")
    with pytest.raises(ctfile.InvalidArgumentError, match=r"2 source rows match the table row with key \{'id': 2\}"):
        ct.merge_builder(batch, on="id").when_matched_update(set={"total": "s.amount"}, condition="t.id = 2") \
            .when_matched_delete().execute()
    assert _files(t.uri) == before
    # Every pair of row 3 falls to DELETE: allowed.
    r = ct.merge_builder(batch, on="id").when_matched_update(set={"total": "s.amount"}, condition="t.id = 1") \
        .when_matched_delete().execute()
    assert r.num_deleted_rows == 2 and sorted(x["id"] for x in t.to_arrow().to_pylist()) == [1, 4]


def test_schema_evolution_adds_the_sources_columns(spark, accounts):
    t, ct = accounts
    batch = spark.createDataFrame([(1, 11, 9, "web"), (9, 90, 9, "app")],
                                  "id long, total long, ts long, channel string")
    with pytest.raises(ctfile.SchemaMismatchError, match="with schema evolution"):
        ct.merge_builder(batch, on="id").when_matched_update(set={"note": "upper(s.channel)"}).execute()
    r = (ct.merge_builder(batch, on="id").when_matched_update(set={"t.note": "upper(s.channel)", "total": "s.total"},
                                                             condition="s.ts > 100")
         .when_matched_update_all().when_not_matched_insert_all().with_schema_evolution().execute())
    assert r.version == 2 and t.refresh().schema.names == ["id", "total", "ts", "channel", "note"]
    got = {row["id"]: (row["channel"], row["note"]) for row in t.to_arrow().to_pylist()}
    assert got == {1: ("web", None), 2: (None, None), 3: (None, None), 4: (None, None), 9: ("app", None)}


def test_not_matched_by_source_reads_what_its_condition_may_select(spark, tmp_path):
    """The partitions a NOT MATCHED BY SOURCE clause reads are pruned by its
    condition's statistics when it translates (SPEC §Copy-on-write, MERGE,
    candidates); not when it cannot (a function)."""
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    t = ctfile.create_table(str(tmp_path / "t"), schema, partition_rows=2)
    t.insert(pa.table({"id": list(range(1, 9)), "v": list("abcdefgh")}, schema=schema))
    ct = CtfileTable.for_path(spark, t.uri)
    src = spark.createDataFrame([(1, "A")], "id long, v string")
    sql = SqlConf.of(spark)

    def candidates(condition):
        stmt = (ct.merge_builder(src, on="id").when_matched_update_all()
                .when_not_matched_by_source_delete(condition=condition).statement)
        prune_by = unmatched_target_pruning(stmt, schema, sql)
        with t.transaction() as tx:
            job = ctfile.RewriteJob.for_merge_statement(tx, stmt, schema, key_ranges={"id": (1, 1)}, prune_by=prune_by)
            return len(job.candidates)

    assert candidates("t.id > 6 OR T.ID IS NULL") == 2   # ids 1-2 (the key) and 7-8
    assert candidates("upper(t.v) = 'H'") == 4            # a function: every partition
    r = (ct.merge_builder(src, on="t.id = s.id").when_matched_update_all()
         .when_not_matched_by_source_delete(condition="t.id > 6").execute())
    assert (r.num_updated_rows, r.num_deleted_rows) == (1, 2)
    assert sorted(x["id"] for x in t.to_arrow().to_pylist()) == [1, 2, 3, 4, 5, 6]


def test_on_condition_prunes_what_a_matched_clause_reads(spark, tmp_path):
    """The ON condition's conjuncts over the table alone prune the
    partitions a MATCHED clause reads (SPEC §Copy-on-write, MERGE,
    candidates): a MERGE of keys in every partition ON ``t.id = s.id AND
    t.id >= 600`` opens only the last two of eight partitions (the others
    are garbage and would fail the statement); a conjunct over the source,
    or a function, does not prune."""
    t = ranged_table(tmp_path / "t")
    ct = CtfileTable.for_path(spark, t.uri)
    src = spark.createDataFrame([(k, f"new{k}") for k in range(0, 800, 50)], "id long, v string")
    schema = t.schema

    def pruned(on: str):
        stmt = ct.merge_builder(src, on=on).when_matched_update_all().statement
        return matched_target_pruning(stmt, schema, SqlConf.of(spark))

    assert pruned("t.id = s.id AND s.v > 'a' AND upper(t.v) = 'X'") is None
    assert pruned("t.id = s.id AND t.id >= 600 AND s.v > 'a'") is not None
    with spoiled(t, by_first_id(t)[:6]):
        r = (ct.merge_builder(src, on="t.id = s.id AND t.id >= 600").when_matched_update_all()
             .when_not_matched_insert_all(condition="s.id >= 600").execute())
    assert (r.num_updated_rows, r.num_inserted_rows, r.num_removed_partitions) == (4, 0, 2)
    got = {row["id"]: row["v"] for row in t.to_arrow().to_pylist()}
    assert len(got) == 800 and [got[k] for k in (550, 600, 750)] == ["v550", "new600", "new750"]


def test_bad_clauses_are_typed_errors(spark, accounts):
    t, ct = accounts
    batch = spark.createDataFrame([(1, 5)], "id long, amount long")
    with pytest.raises(ctfile.InvalidArgumentError, match="Spark SQL string or Column"):
        ct.merge_builder(batch, on="id").when_matched_update(set={})
    with pytest.raises(ctfile.InvalidArgumentError, match="no equality"):
        ct.merge_builder(batch, on="t.id > s.id")
    with pytest.raises(ctfile.SchemaMismatchError):
        ct.merge_builder(batch, on="id").when_matched_update(set={"total": "s.nope"}).execute()
    assert t.refresh().version == 1


def test_readme_merge_examples_run(spark, tmp_path):
    """docs/merge.md's Spark builder examples (section "MERGE") run; their
    asserts check the five patterns' results, and each is one version."""
    from readme_examples import merge_blocks, run_blocks

    blocks = merge_blocks()
    assert len(blocks) == 1
    ns = run_blocks(blocks, tmp_path)
    silver = ctfile.open_table(str(tmp_path / "spark_merge_silver"))
    assert [h.operation for h in silver.history(limit=5)] == ["TRANSACTION", "MERGE", "MERGE", "MERGE", "WRITE"]
    assert sorted((r["id"], r["name"]) for r in silver.to_arrow().to_pylist()) == [(1, "AA"), (4, "D2"), (5, "E")]
    assert ns["customers"].table.history(limit=1)[0].operation == "MERGE"


# ---------------------------------------------------------------- differential


def _spark_value(v):
    """A SET/VALUES value as the Spark builder takes it: a Python value
    where the generator gives one (a string is SQL text there: quoted)."""
    if getattr(v, "raw", False) and not isinstance(v.value, str):
        return v.value
    return v.to_sql()


def _spark_builder(stmt, builder):
    """``builder`` (``CtfileTable.merge_builder``) with ``stmt``'s clauses as Spark SQL."""
    for c in stmt.clauses:
        cond = None if c.condition is None else c.condition.to_sql()
        assigned = {col: _spark_value(v) for col, v in c.assignments}
        method = ctfile.MergeBuilder.method_for(c.kind, c.action)
        args = (assigned,) if c.action.assigns else ()
        builder = getattr(builder, method)(*args, condition=cond)
    return builder


def _state(t: ctfile.Table, ids: list[int]) -> tuple[list, list]:
    """(rows that existed, with hidden columns; inserted rows, row id aside)."""
    rows = t.refresh().to_arrow(include_hidden=True).to_pylist()
    old = sorted((r for r in rows if r[ctfile.ROW_ID_COLUMN] in ids), key=lambda r: r[ctfile.ROW_ID_COLUMN])
    new = sorted(({k: v for k, v in r.items() if k != ctfile.ROW_ID_COLUMN} for r in rows
                  if r[ctfile.ROW_ID_COLUMN] not in ids), key=repr)
    return old, new


class _Paths(logging.Handler):
    """The paths the Spark MERGEs took (``ctfile.spark``'s log)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.local = self.spread = self.not_spread = 0

    def emit(self, record):
        text = record.getMessage()
        self.local += "runs in the driver" in text
        self.spread += "spread over" in text
        self.not_spread += "is not spread" in text


@contextlib.contextmanager
def _engine_path(spark, path: str):
    """The Spark builder on ``path`` (:data:`PATHS`); yields its log."""
    paths, logger = _Paths(), logging.getLogger("ctfile.spark")
    level = logger.level
    logger.addHandler(paths)
    logger.setLevel(logging.INFO)
    source_rows, spread_rows = PATHS[path]
    try:
        with spark_conf(spark, "spark.ctfile.local.sourceRows", source_rows), \
                spark_conf(spark, "spark.ctfile.local.spreadRows", spread_rows):
            yield paths
    finally:
        logger.removeHandler(paths)
        logger.setLevel(level)


def _check_path(paths: _Paths, path: str) -> None:
    """The statement took ``path`` (a spread that declined ran Spark's join)."""
    assert paths.local == (path == "driver"), "the driver path was (not) taken"
    if path == "spread":
        assert paths.spread + paths.not_spread == 1, "the spread path was not tried"
    else:
        assert paths.spread == paths.not_spread == 0, "the spread path was tried"


def check_engines(spark, stmt, target, source, capture: bool, path: str = "join") -> None:
    """``stmt`` through both builders (the Spark one on ``path``,
    :data:`PATHS`) against the model and each other."""
    root = tempfile.mkdtemp(prefix="ctfile-spark-merge-")
    try:
        py, ids = _setup(root + "/py", target, capture)
        shutil.copytree(root + "/py", root + "/spark")
        sp = ctfile.open_table(root + "/spark")
        before = _files(root + "/spark")
        df = spark.createDataFrame([tuple(r[c] for c in SOURCE_SCHEMA.names) for r in source], SOURCE_DDL)
        spark_builder = _spark_builder(stmt, CtfileTable.for_path(spark, sp.uri).merge_builder(df, on=stmt.on_sql()))
        py_builder = stmt.builder(py, table_of(source, SOURCE_SCHEMA))
        try:
            outcome = run_model(stmt, target, source)
        except MultipleMatch as e:
            for b in (py_builder, spark_builder):
                with pytest.raises(ctfile.InvalidArgumentError, match=f"{e.count} source rows match the table row"):
                    with _engine_path(spark, path):
                        b.execute()
            assert _files(root + "/spark") == before
            return
        with _engine_path(spark, path) as paths:
            results = [py_builder.execute(), spark_builder.execute()]
        _check_path(paths, path)
        for t, r in zip((py, sp), results):
            assert (r.num_inserted_rows, r.num_updated_rows, r.num_deleted_rows) == outcome.counts, stmt
            assert r.committed == (any(outcome.changed) or bool(outcome.inserted))
            if not r.committed:
                continue
            _check_snapshot(t.refresh(), outcome, target, ids, r.version)
            want = _expected_changes(outcome, target)
            for mode in ("default", "audit"):
                assert _changes(t, r.version, mode) == want, (mode, stmt)
            fresh = Counter(k for k in want.elements() if k[:2] == ("INSERT", False))
            assert _changes(t, r.version, "append_only") == fresh
        assert _state(sp, ids) == _state(py, ids), stmt
        assert sp.version == py.version
    finally:
        shutil.rmtree(root, ignore_errors=True)


SETTINGS = dict(deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
CASES = dict(stmt=statements(), target=TARGET_ROWS, source=SOURCE_ROWS)


@settings(max_examples=5, **SETTINGS)
@given(**CASES)
def test_spark_builder_matches_python_builder_and_model(spark, stmt, target, source):
    check_engines(spark, stmt, target, source, capture=bool(len(target) % 2),
                  path="driver" if len(source) % 2 else "join")


@settings(max_examples=5, **SETTINGS)
@given(**CASES)
def test_spread_merge_matches_python_builder_and_model(spark, stmt, target, source):
    """The Python engine spread over the executors (ctfile.spark.local.run_spread):
    the same rows, counts, row ids and change rows as the Python builder."""
    check_engines(spark, stmt, target, source, capture=bool(len(target) % 2), path="spread")


@pytest.mark.long
@settings(max_examples=150, **{**SETTINGS, "derandomize": False})
@given(**CASES)
def test_spark_builder_matches_python_builder_and_model_long(spark, stmt, target, source):
    check_engines(spark, stmt, target, source, capture=bool(len(target) % 2), path=sorted(PATHS)[len(source) % 3])


def _by_sort_merge_join(spark, stmt, target, source) -> None:
    with spark_conf(spark, "spark.sql.autoBroadcastJoinThreshold", "-1"):
        check_engines(spark, stmt, target, source, capture=bool(len(target) % 2))


@settings(max_examples=5, **SETTINGS)
@given(**CASES)
def test_spark_builder_matches_model_by_sort_merge_join(spark, stmt, target, source):
    """With broadcasting off, one outer sort-merge join finds the matched
    pairs and the unmatched rows of both sides (and the multiple-match check
    runs only when two source rows share a key): the same results."""
    _by_sort_merge_join(spark, stmt, target, source)


@pytest.mark.long
@settings(max_examples=60, **{**SETTINGS, "derandomize": False})
@given(**CASES)
def test_spark_builder_matches_model_by_sort_merge_join_long(spark, stmt, target, source):
    _by_sort_merge_join(spark, stmt, target, source)
