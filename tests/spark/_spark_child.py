"""Child process of test_spark_clusters.py: runs scenarios on the session
``SparkSession.builder.getOrCreate()`` gives in its environment, as a user's
program would get it: a classic driver on the standalone cluster
(``PYSPARK_SUBMIT_ARGS`` names the master) or a Spark Connect client
(``SPARK_REMOTE``). A classic SparkContext exists already in the test
process, and a Connect client cannot share a process with it (PySpark's
functions build Connect or classic Columns by the process's mode), hence a
child.

usage: python _spark_child.py WORK_DIR SCENARIO[,SCENARIO...]

The last line printed is ``CHILD-RESULT <json>``: each scenario's outcome
("ok" or its traceback) and facts the parent checks (``app``: the classic
application's completed tasks by executor, read from its UI's REST API).
Environment: ``CTFILE_TEST_S3`` (storage options of an S3 server, JSON) for
the ``s3_upsert`` scenario, ``CTFILE_TEST_UI`` (the Connect server's UI
port and application id, JSON) for ``connect_broadcast`` and, on Connect,
``derived_readme``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "objectstore")]

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

import ctfile  # noqa: E402


def _rows(uri: str, **kw) -> list[tuple]:
    return sorted(tuple(r.values()) for r in ctfile.open_table(uri, **kw).to_arrow().to_pylist())


def pyspark_readme(spark, work: Path) -> None:
    from readme_examples import check_pyspark_examples

    check_pyspark_examples(spark, work)


def upsert_readme(spark, work: Path) -> None:
    from readme_examples import check_upsert_examples

    check_upsert_examples(spark, work)


def derived_readme(spark, work: Path) -> dict:
    """The README's derived-tables example and more (readme_examples.check_derived_examples);
    the application's completed tasks by executor before and after."""
    from readme_examples import check_derived_examples

    before = app_tasks(spark)
    check_derived_examples(spark, work)
    return {"derived_tasks": [before, app_tasks(spark)]}


def declared_pipeline(spark, work: Path) -> dict:
    """docs/spark.md's declared pipeline (derived_pipeline.run_pipeline) on
    ``s3://`` tables, kept current by the scheduler; the application's
    completed tasks by executor before and after."""
    from derived_pipeline import run_pipeline

    opts = json.loads(os.environ["CTFILE_TEST_S3"])
    bucket = opts.pop("bucket")
    before = app_tasks(spark)
    run_pipeline(spark, f"s3://{bucket}/{uuid.uuid4().hex[:12]}-pipeline", storage_options=opts)
    return {"pipeline_tasks": [before, app_tasks(spark)]}


def s3_upsert(spark, work: Path) -> None:
    """docs/spark.md's streaming upsert on ``s3://`` tables (storage options in
    the stream's options and ``for_path``), a replayed batch included."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from ctfile.spark import CtfileTable

    opts = json.loads(os.environ["CTFILE_TEST_S3"])
    bucket = opts.pop("bucket")
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("seq", pa.int64())])
    prefix = f"s3://{bucket}/{uuid.uuid4().hex[:12]}"
    bronze_uri, silver_uri = f"{prefix}-bronze", f"{prefix}-silver"
    bronze = ctfile.create_table(bronze_uri, schema, storage_options=opts)
    ctfile.create_table(silver_uri, schema, storage_options=opts)
    bronze.insert(pa.table({"id": [1, 2, 1], "name": ["jeff", "donny", "the dude"], "seq": [1, 2, 3]}, schema=schema))
    newest_first = Window.partitionBy("id").orderBy(F.col("seq").desc())

    def upsert_to_silver(batch_df, batch_id):
        latest = batch_df.select("id", "name", "seq").withColumn("n", F.row_number().over(newest_first)).where("n = 1").drop("n")
        silver = CtfileTable.for_path(batch_df.sparkSession, silver_uri, storage_options=opts)
        silver.merge(latest, on="id", app_id="s3-upsert", app_version=batch_id)

    query = (
        spark.readStream.format("ctfile").option("storageOptions", json.dumps(opts))
        .option("changes", "append_only").option("startingVersion", 0).load(bronze_uri)
        .writeStream.foreachBatch(upsert_to_silver)
        .option("checkpointLocation", str(work / "checkpoint")).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    assert _rows(silver_uri, storage_options=opts) == [(1, "the dude", 3), (2, "donny", 2)]
    silver = ctfile.open_table(silver_uri, storage_options=opts)
    version, last = silver.version, silver.app_version("s3-upsert")
    upsert_to_silver(spark.createDataFrame([(1, "walter", 9)], "id long, name string, seq long"), last)
    assert silver.refresh().version == version
    assert ctfile.verify_table(silver_uri, storage_options=opts).healthy


def connect_dml(spark, work: Path) -> None:
    """MERGE, UPDATE, DELETE, ``to_df`` and ``changes_df`` from a Connect
    client give what the Python API gives; bad statements fail typed,
    before anything is written."""
    from pyspark.sql import functions as F

    from ctfile.spark import CtfileTable

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("score", pa.int64())])
    rows = {"id": [1, 2, 3, 4], "name": ["a", "b", "c", "d"], "score": [10, 20, 30, 40]}
    spark_t = ctfile.create_table(str(work / "spark"), schema, partition_rows=2)
    model = ctfile.create_table(str(work / "model"), schema, partition_rows=2)
    for t in (spark_t, model):
        t.insert(pa.table(rows, schema=schema))
    ct = CtfileTable.for_path(spark, spark_t.uri)
    source = {"id": [2, 5], "name": ["B", "e"], "score": [21, 50]}
    r = ct.merge(spark.createDataFrame(list(zip(*source.values())), "id long, name string, score long"), on="id")
    m = model.merge(pa.table(source, schema=schema), on="id")
    assert (r.num_updated_rows, r.num_inserted_rows) == (m.num_updated_rows, m.num_inserted_rows) == (1, 1)
    r = ct.update("score < 25 AND name <> 'zz'", {"score": "score + 1", "name": F.upper("name")})
    m = model.update(pc.field("score") < 25, {"score": pc.field("score") + 1, "name": pc.utf8_upper(pc.field("name"))})
    assert r.num_updated_rows == m.num_updated_rows == 2
    r = ct.delete(F.col("id") == 3)
    assert r.num_deleted_rows == model.delete(pc.field("id") == 3).num_deleted_rows == 1
    assert _rows(spark_t.uri) == _rows(model.uri)
    assert [h.operation for h in ctfile.open_table(spark_t.uri).history(limit=3)] == ["DELETE", "UPDATE", "MERGE"]
    got = sorted(tuple(x) for x in ct.to_df().collect())
    assert got == _rows(model.uri) and ct.to_df(version=1).count() == 4
    assert [x.id for x in ct.changes_df(2, 2).collect()] == [5]
    version = ctfile.open_table(spark_t.uri).version
    for bad, error in [
        (lambda: ct.delete("nope > 1"), ctfile.SchemaMismatchError),
        (lambda: ct.update("id >", {"score": 1}), ctfile.InvalidArgumentError),
        (lambda: ct.merge(spark.createDataFrame([(1, "x", 1), (1, "y", 2)], "id long, name string, score long"), "id"),
         ctfile.InvalidArgumentError),
    ]:
        try:
            bad()
        except error:
            pass
        else:
            raise AssertionError(f"{error.__name__} expected")
    assert ctfile.open_table(spark_t.uri).version == version


def connect_pruning(spark, work: Path) -> None:
    """A SQL-text condition prunes on Connect (sqlglot front end): the
    partitions it rules out are garbage while the statements run and are
    never opened. A Column condition reads every partition (stated cost)."""
    from pyspark.sql import functions as F

    from ctfile.spark import CtfileTable

    from spark_helpers import by_first_id, ranged_table, spoiled

    t = ranged_table(work / "t")
    ct = CtfileTable.for_path(spark, t.uri)
    with spoiled(t, by_first_id(t)[:6]):
        r1 = ct.update("ID >= 650 AND v <> 'x'", {"v": F.upper(F.col("v"))})
        r2 = ct.delete("id BETWEEN 741 AND 10000")
    assert (r1.num_updated_rows, r2.num_deleted_rows) == (150, 59)
    r3 = ct.update(F.col("id") == 5, {"v": "'five'"})  # not pruned: every partition is read, as they are whole again
    assert r3.num_updated_rows == 1
    got = ctfile.open_table(t.uri).to_arrow().sort_by("id")
    assert got.num_rows == 741 and got.column("v")[650].as_py() == "V650" and got.column("v")[5].as_py() == "five"


def connect_broadcast(spark, work: Path) -> None:
    """A small MERGE source is broadcast on Connect (estimated within
    ``autoBroadcastJoinThreshold``), and not with the threshold at -1: the
    plans the Connect server ran, from its UI's REST API."""
    from ctfile.spark import CtfileTable
    from spark_servers import http_json

    ui = json.loads(os.environ["CTFILE_TEST_UI"])
    base = f"http://127.0.0.1:{ui['port']}/api/v1/applications/{ui['app']}/sql"

    def broadcasts_since(first: int) -> list[bool]:
        runs = http_json(f"{base}?details=true&planDescription=true&offset={first}&length=1000")
        return ["BroadcastHashJoin" in e.get("planDescription", "") for e in runs if e["id"] >= first]

    t = ctfile.create_table(str(work / "t"), pa.schema([("id", pa.int64()), ("x", pa.int64())]), partition_rows=10)
    t.insert(pa.table({"id": list(range(40)), "x": list(range(40))}))
    ct = CtfileTable.for_path(spark, t.uri)
    found = []
    for threshold in ("10MB", "-1"):
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", threshold)
        first = len(http_json(f"{base}?offset=0&length=100000"))
        ct.merge(spark.createDataFrame([(3, -3), (99, 99)], "id long, x long"), on="id")
        found.append(any(broadcasts_since(first)))
    spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")
    assert found == [True, False], found
    assert _rows(t.uri)[3] == (3, -3) and _rows(t.uri)[-1] == (99, 99)


def connect_sql(spark, work: Path) -> None:
    """``ctfile.spark.register`` and ``ctfile.spark.sql`` from a Connect
    client: a registered name read by ``spark.sql``, INSERT, UPDATE, MERGE
    INTO, time travel and RESTORE give what the Python API gives."""
    import ctfile.spark

    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    t = ctfile.create_table(str(work / "sql"), schema, partition_rows=2)
    ctfile.spark.register(spark, "items", t.uri)
    r = ctfile.spark.sql(spark, "INSERT INTO items VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    assert (r.version, r.num_inserted_rows) == (1, 3)
    assert ctfile.spark.sql(spark, "UPDATE items SET v = upper(v) WHERE id = 1").num_updated_rows == 1
    r = ctfile.spark.sql(spark, "MERGE INTO items t USING (SELECT * FROM VALUES (2L, 'x'), (4L, 'd') AS s(id, v)) s "
                                "ON t.id = s.id WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT * "
                                "WHEN NOT MATCHED BY SOURCE AND t.id = 3 THEN UPDATE SET v = 'C'")
    assert (r.num_deleted_rows, r.num_inserted_rows, r.num_updated_rows) == (1, 1, 1)
    assert sorted(tuple(x) for x in spark.sql("SELECT id, v FROM items").collect()) == [(1, "A"), (3, "C"), (4, "d")]
    assert ctfile.spark.sql(spark, "SELECT count(*) FROM items VERSION AS OF 1").first()[0] == 3
    assert ctfile.spark.sql(spark, "RESTORE TABLE items TO VERSION AS OF 1").version == 4
    assert _rows(t.uri) == [(1, "a"), (2, "b"), (3, "c")]


def connect_merge_builder(spark, work: Path) -> None:
    """The MERGE builder and a transaction on Connect, on the executors and
    in the driver (ctfile.spark.local), give the rows the text says."""
    from ctfile.spark import CtfileTable

    schema = pa.schema([("id", pa.int64()), ("total", pa.int64())])
    # Spark's join on the executors, the Python engine spread over them
    # (ctfile.spark.local.run_spread), and the driver alone.
    for local, spread in (("0", "0"), ("0", "100000"), ("10000", "0")):
        t = ctfile.create_table(str(work / f"t{local}-{spread}"), schema, partition_rows=2)
        t.insert(pa.table({"id": [1, 2, 3], "total": [10, 20, 30]}, schema=schema))
        spark.conf.set("spark.ctfile.local.sourceRows", local)
        spark.conf.set("spark.ctfile.local.spreadRows", spread)
        src = spark.createDataFrame([(1, 5, "u"), (2, 0, "delete"), (4, 7, "u")], "id long, amount long, op string")
        ct = CtfileTable.for_path(spark, t.uri)
        r = (ct.merge_builder(src, on="t.id = s.id")
             .when_matched_delete(condition="s.op = 'delete'")
             .when_matched_update(set={"total": "t.total + s.amount"})
             .when_not_matched_insert(values={"id": "s.id", "total": "s.amount"})
             .when_not_matched_by_source_update(set={"total": 0}, condition="t.id = 3")
             .execute())
        assert (r.num_updated_rows, r.num_deleted_rows, r.num_inserted_rows) == (2, 1, 1), r
        assert _rows(t.uri) == [(1, 15), (3, 0), (4, 7)]
        with ct.transaction() as tx:
            tx.insert(spark.createDataFrame([(5, 50)], "id long, total long"))
            tx.update("id >= 4", {"total": "total + 1"})
        assert tx.result.version == r.version + 1 and _rows(t.uri) == [(1, 15), (3, 0), (4, 8), (5, 51)]
    spark.conf.set("spark.ctfile.local.sourceRows", "0")
    spark.conf.set("spark.ctfile.local.spreadRows", "0")


def parallelism(spark, work: Path) -> dict:
    from ctfile.spark.session import default_parallelism

    return {"parallelism": default_parallelism(spark)}


SCENARIOS = {f.__name__: f for f in (pyspark_readme, upsert_readme, derived_readme, declared_pipeline, s3_upsert,
                                     connect_dml,
                                     connect_pruning, connect_broadcast, connect_sql,
                                     connect_merge_builder, parallelism)}


def app_tasks(spark) -> dict[str, int]:
    """The completed tasks by executor of the application running ``spark``'s
    jobs: the classic driver's, or the Connect server's (``CTFILE_TEST_UI``)."""
    from spark_servers import tasks_by_executor

    classic = classic_tasks(spark)
    if classic is not None:
        return classic["tasks"]
    ui = json.loads(os.environ["CTFILE_TEST_UI"])
    return tasks_by_executor(ui["port"], ui["app"])


def classic_tasks(spark) -> dict | None:
    """The classic application's completed tasks by executor (None on Connect)."""
    from ctfile.spark.session import is_classic
    from spark_servers import tasks_by_executor

    if not is_classic(spark):
        return None
    sc = spark.sparkContext
    port = int(sc.uiWebUrl.rsplit(":", 1)[1])
    return {"tasks": tasks_by_executor(port, sc.applicationId), "default_parallelism": sc.defaultParallelism}


def main(work_dir: str, names: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    start = time.monotonic()
    spark = SparkSession.builder.getOrCreate()
    # The scenarios are about the executors' path: no small statement runs in
    # the driver (ctfile.spark.local), as in the suite's own session.
    spark.conf.set("spark.ctfile.local.sourceRows", "0")
    spark.conf.set("spark.ctfile.local.spreadRows", "0")
    out: dict = {"session": type(spark).__module__, "scenarios": {}, "facts": {},
                 "seconds": {"session": round(time.monotonic() - start, 1)}}
    for name in names.split(","):
        work = Path(work_dir) / name
        work.mkdir(parents=True)
        start = time.monotonic()
        try:
            facts = SCENARIOS[name](spark, work)
            out["scenarios"][name] = "ok"
            out["facts"].update(facts or {})
        except BaseException:  # noqa: BLE001 -- reported to the parent, which fails the test
            out["scenarios"][name] = traceback.format_exc()
        out["seconds"][name] = round(time.monotonic() - start, 1)
    out["app"] = classic_tasks(spark)
    print("CHILD-RESULT " + json.dumps(out), flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:3])
