"""spark.read.format("ctfile"): registration, schemas, time travel, change scans,
planning into partitions, types, and the PySpark plan-reuse bug (issue 4)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pyspark
import pytest
from pyspark.sql.datasource import DataSourceReader, GreaterThan
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import ctfile
from ctfile.spark_datasource import CtfileDataSource
from ctfile.spark_datasource.batch import REUSE_SAFE_PYSPARK, CtfilePruningReader, CtfileReader
from ctfile.spark_datasource.types import spark_arrow_schema
from spark_helpers import PUSHDOWN_CONF, id_x_table, read, sorted_rows, spark_conf

PEOPLE_V5 = [(1, "Jeffrey"), (3, "Walter"), (4, "Maude")]
PEOPLE_V2 = [(1, "Jeff"), (2, "Donny"), (3, "Walter"), (4, "Maud"), (5, "Uli")]
ACTION, ISUPDATE, ROW_ID = "METADATA$ACTION", "METADATA$ISUPDATE", "METADATA$ROW_ID"


def in_process_rows(reader) -> list[dict]:
    """Plan and read a reader in this process, as Spark's workers would."""
    out = []
    for part in reader.partitions():
        for batch in reader.read(part):
            assert batch.schema.equals(reader.arrow_schema), (batch.schema, reader.arrow_schema)
            out.extend(batch.to_pylist())
    return out


# ---------------------------------------------------------------- registration


def test_auto_registration_in_a_fresh_session(spark, people):
    # No spark.dataSource.register anywhere on these sessions: the
    # pyspark_ctfile module's DefaultSource is found by PySpark's lookup.
    fresh = spark.newSession()
    assert sorted_rows(fresh.read.format("ctfile").load(people.uri)) == PEOPLE_V5


def test_explicit_register_also_works(spark, people):
    session = spark.newSession()
    session.dataSource.register(CtfileDataSource)
    assert sorted_rows(session.read.format("ctfile").load(people.uri)) == PEOPLE_V5

    # Registration takes effect: a subclass under another name resolves only
    # where it was registered.
    class Explicit(CtfileDataSource):
        @classmethod
        def name(cls):
            return "ctfile_explicit"

    session.dataSource.register(Explicit)
    df = session.read.format("ctfile_explicit").option("versionAsOf", "2").load(people.uri)
    assert sorted_rows(df) == PEOPLE_V2
    with pytest.raises(Exception, match="ctfile_explicit"):
        spark.newSession().read.format("ctfile_explicit").load(people.uri).collect()


# ---------------------------------------------------------------- schemas


def test_schemas_match_exactly(spark, people):
    snap = read(spark, people.uri)
    assert snap.schema == StructType(
        [StructField("id", LongType(), False), StructField("name", StringType(), True)]
    )
    change_fields = [
        StructField("id", LongType(), False),
        StructField("name", StringType(), True),
        StructField(ACTION, StringType(), False),
        StructField(ISUPDATE, BooleanType(), False),
        StructField(ROW_ID, StringType(), False),
    ]
    for mode in ("default", "append_only"):
        assert read(spark, people.uri, changes=mode).schema == StructType(change_fields)
    audit = read(spark, people.uri, changes="audit").schema
    assert audit == StructType(
        change_fields
        + [
            StructField("METADATA$COMMIT_VERSION", LongType(), False),
            StructField("METADATA$COMMIT_TIMESTAMP", TimestampType(), False),
        ]
    )
    op = read(spark, people.uri, changes="default", changelog="op").schema
    assert op == StructType(
        [
            StructField("id", LongType(), False),
            StructField("name", StringType(), True),
            StructField("op", ByteType(), False),
            StructField(ROW_ID, StringType(), False),
        ]
    )


def test_read_yields_arrow_batches_of_exactly_the_spark_schema(people):
    # What Spark's worker checks (DATA_SOURCE_RETURN_SCHEMA_MISMATCH), for every
    # batch rather than only the first: plain string, nullability, UTC timestamps.
    for options in (
        {"path": people.uri},
        {"path": people.uri, "changes": "audit", "startingversion": "2"},
        {"path": people.uri, "changes": "default", "changelog": "op", "startingversion": "2"},
    ):
        source = CtfileDataSource(options)
        schema = source.schema()
        reader = source.reader(schema)
        expected = spark_arrow_schema(schema)
        rows = in_process_rows(reader)
        assert rows
        assert reader.arrow_schema.equals(expected)
        assert expected.field("name").type == pa.string()
        if "changes" in options:
            assert expected.field(ROW_ID).type == pa.string()
            assert not expected.field(ROW_ID).nullable


# ---------------------------------------------------------------- the worked example


def test_worked_example_snapshots_and_time_travel(spark, people):
    assert sorted_rows(read(spark, people.uri, versionAsOf=2)) == PEOPLE_V2
    assert sorted_rows(read(spark, people.uri, versionAsOf=5)) == PEOPLE_V5
    assert sorted_rows(read(spark, people.uri)) == PEOPLE_V5
    v2_time = {h.version: h.timestamp for h in people.history()}[2]
    # Delta-style UTC timestamp string ("...Z") selects the version committed at that instant.
    ts = v2_time.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    assert sorted_rows(read(spark, people.uri, timestampAsOf=ts)) == PEOPLE_V2


def test_timestamp_as_of_after_the_latest_commit_fails(spark, people):
    latest = people.history(limit=1)[0]
    iso = lambda t: t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"  # noqa: E731
    # Exactly the latest commit time reads the latest version ...
    assert sorted_rows(read(spark, people.uri, timestampAsOf=iso(latest.timestamp))) == PEOPLE_V5
    # ... a millisecond later is refused (it used to read the latest version).
    later = latest.timestamp + dt.timedelta(milliseconds=1)
    with pytest.raises(Exception) as ei:
        read(spark, people.uri, timestampAsOf=iso(later)).collect()
    text = str(ei.value)
    assert "VersionNotFoundError" in text
    assert f"timestamp {later.isoformat(timespec='milliseconds')} is after the latest version available" in text
    assert f"version 5, committed at {latest.timestamp.isoformat(timespec='milliseconds')}" in text


def test_worked_example_changes_default(spark, people):
    df = read(spark, people.uri, changes="default", startingVersion=2, endingVersion=5)
    rows = df.collect()
    assert len(rows) == 5
    assert sorted_rows(rows, ["id", "name", ACTION, ISUPDATE]) == [
        (1, "Jeff", "DELETE", True),
        (1, "Jeffrey", "INSERT", True),
        (2, "Donny", "DELETE", False),
        (3, "Walter", "INSERT", False),
        (4, "Maude", "INSERT", False),
    ]
    # The update pair shares one row id; everything equals the Python API's answer.
    assert len({r[ROW_ID] for r in rows if r["id"] == 1}) == 1
    expected = people.changes(start_version=2, end_version=5).to_arrow().to_pylist()
    assert sorted_rows(rows) == sorted_rows(expected)


def test_worked_example_changes_append_only_and_audit(spark, people):
    app = read(spark, people.uri, changes="append_only", startingVersion=2, endingVersion=5)
    assert sorted_rows(app, ["id", "name", ACTION, ISUPDATE]) == [
        (3, "Walter", "INSERT", False),
        (4, "Maud", "INSERT", False),
        (5, "Uli", "INSERT", False),
    ]
    audit = read(spark, people.uri, changes="audit", startingVersion=2, endingVersion=5).toArrow()
    assert audit.num_rows == 9
    assert sorted_rows(audit.select(["id", "name", ACTION, "METADATA$COMMIT_VERSION"]).to_pylist()) == [
        (1, "Jeff", "DELETE", 3),
        (1, "Jeffrey", "INSERT", 3),
        (2, "Donny", "DELETE", 5),
        (3, "Walter", "INSERT", 2),
        (4, "Maud", "DELETE", 4),
        (4, "Maud", "INSERT", 2),
        (4, "Maude", "INSERT", 4),
        (5, "Uli", "DELETE", 5),
        (5, "Uli", "INSERT", 2),
    ]
    # Commit timestamps are the log's, to the microsecond (compared as instants).
    expected = people.changes(start_version=2, end_version=5, information="audit").to_arrow()
    assert sorted_rows(audit.to_pylist()) == sorted_rows(expected.to_pylist())


def test_worked_example_changelog_op_and_initial_rows(spark, people):
    op = read(spark, people.uri, changes="default", changelog="op", startingVersion=2, endingVersion=5)
    assert sorted_rows(op, ["id", "name", "op"]) == [
        (1, "Jeff", 2),
        (1, "Jeffrey", 3),
        (2, "Donny", 1),
        (3, "Walter", 0),
        (4, "Maude", 0),
    ]
    initial = read(spark, people.uri, changes="default", startingVersion=3, initialRows="true")
    assert sorted_rows(initial, ["id", "name", ACTION, ISUPDATE]) == [
        (i, n, "INSERT", False) for i, n in PEOPLE_V5
    ]


def test_changes_by_timestamps(spark, people):
    times = {h.version: h.timestamp for h in people.history()}
    df = read(
        spark, people.uri, changes="default",
        startingTimestamp=times[2].isoformat(), endingTimestamp=times[5].isoformat(),
    )
    expected = people.changes(start_version=2, end_version=5).to_arrow().to_pylist()
    assert sorted_rows(df) == sorted_rows(expected)


# ---------------------------------------------------------------- planning


def test_one_spark_partition_per_micro_partition(spark, tmp_path):
    t = id_x_table(tmp_path / "t", 10, partition_rows=1)
    assert len(t.snapshot().partitions) == 10
    df = read(spark, t.uri)
    assert df.rdd.getNumPartitions() == 10
    assert sorted_rows(df) == [(i, i) for i in range(10)]


def test_max_rows_per_task_splits_a_partition_of_several_row_groups(spark, tmp_path):
    t = id_x_table(tmp_path / "t", 1000, partition_rows=1000, properties={"ctfile.rowGroupRows": "100"})
    assert len(t.snapshot().partitions) == 1
    assert read(spark, t.uri).rdd.getNumPartitions() == 1
    df = read(spark, t.uri, maxRowsPerTask=250)
    assert df.rdd.getNumPartitions() == 5  # 2 row groups of 100 per task
    ids = [r.id for r in df.collect()]
    assert sorted(ids) == list(range(1000))  # every row exactly once
    # ... and every task reads its own 200 rows.
    from pyspark.sql.functions import spark_partition_id

    per_task = df.groupBy(spark_partition_id().alias("p")).count().collect()
    assert sorted(r["count"] for r in per_task) == [200] * 5


def _changing_table(root, **kwargs) -> ctfile.Table:
    """Micro-partitions of 2 rows and every kind of change: v1 insert (5
    partitions); v2 update over several partitions; v3 delete; v4 insert;
    v5 merge (an update and an insert); v6 delete of rows inserted in v4."""
    import pyarrow.compute as pc

    t = id_x_table(root, 10, partition_rows=2, **kwargs)
    t.update(pc.field("id").isin([1, 4, 7]), {"x": pc.field("x") + 100})
    t.delete(pc.field("id").isin([2, 8]))
    schema = t.schema
    t.insert(pa.table({"id": [10, 11, 12], "x": [10, 11, 12]}, schema=schema))
    t.merge(pa.table({"id": [3, 20], "x": [-3, -20]}, schema=schema), "id")
    t.delete(pc.field("id") == 11)
    assert t.version == 6
    return t


@pytest.fixture(scope="module")
def changing_table(tmp_path_factory) -> ctfile.Table:
    return _changing_table(tmp_path_factory.mktemp("changes") / "t")


@pytest.fixture(scope="module")
def captured_table(tmp_path_factory) -> ctfile.Table:
    """The same history with change capture on: its DML commits have change files."""
    return _changing_table(tmp_path_factory.mktemp("captured") / "t", properties={"ctfile.changeCapture": "before_after"})


@pytest.mark.parametrize("mode", ["default", "audit"])
def test_change_scans_of_a_captured_table(spark, captured_table, changing_table, mode):
    # Tasks over change files (CAPTURED plans): several Spark partitions, and
    # together the Python scan's rows, which equal the uncaptured twin's.
    t = captured_table
    for start in (2, 3):
        cs = t.changes(information=mode, start_version=start)
        assert str(cs.plan_shape) == "CAPTURED"
        expected = cs.to_arrow()
        df = read(spark, t.uri, changes=mode, maxRowsPerTask=1, startingVersion=str(start))
        assert df.rdd.getNumPartitions() > 1, (mode, start)
        got = df.toArrow()
        assert sorted_rows(got.to_pylist()) == sorted_rows(expected.to_pylist()), (mode, start)
        twin = changing_table.changes(information=mode, start_version=start).to_arrow()
        drop = [c for c in ("METADATA$ROW_ID", "METADATA$COMMIT_TIMESTAMP") if c in twin.schema.names]
        assert sorted_rows(got.drop_columns(drop).to_pylist()) == sorted_rows(twin.drop_columns(drop).to_pylist())


@pytest.mark.parametrize("mode", ["default", "append_only", "audit"])
def test_change_scans_run_as_parallel_tasks(spark, changing_table, mode):
    # Several Spark partitions, and together exactly the rows of the Python
    # API's change scan (as a multiset): plain, with initial rows, and with a
    # filter that prunes partitions (pushdownPruning=true on a fresh DataFrame).
    import pyarrow.compute as pc

    t = changing_table
    cases = [
        ({"startingVersion": "2"}, dict(start_version=2), None),
        ({"startingVersion": "3", "initialRows": "true"}, dict(start_version=3, initial_rows=True), None),
        ({"startingVersion": "1", "pushdownPruning": "true"}, dict(start_version=1, filter=pc.field("x") > 5), "x > 5"),
    ]
    for options, kwargs, where in cases:
        expected = t.changes(information=mode, **kwargs).to_arrow()
        with spark_conf(spark, PUSHDOWN_CONF, "true" if where else "false"):
            df = read(spark, t.uri, changes=mode, maxRowsPerTask=1, **options)
            if where:
                df = df.filter(where)
            assert df.rdd.getNumPartitions() > 1, (mode, options)
            got = df.toArrow()
        assert got.num_rows == expected.num_rows > 0, (mode, options)
        assert sorted_rows(got.to_pylist()) == sorted_rows(expected.to_pylist()), (mode, options)


def test_change_scan_tasks_are_packed_by_rows(spark, changing_table):
    # By default small partitions share a task (about 1 Mi rows per task).
    assert read(spark, changing_table.uri, changes="default", startingVersion=1).rdd.getNumPartitions() == 1
    df = read(spark, changing_table.uri, changes="append_only", startingVersion=1, maxRowsPerTask=4)
    planned = changing_table.changes(start_version=1, information="append_only").tasks(max_rows_per_task=4)
    assert df.rdd.getNumPartitions() == len(planned) > 1


# ---------------------------------------------------------------- types


ALL_TYPES = pa.schema(
    [
        ("bool", pa.bool_()),
        ("byte", pa.int8()),
        ("short", pa.int16()),
        ("int", pa.int32()),
        ("long", pa.int64()),
        ("float", pa.float32()),
        ("double", pa.float64()),
        ("string", pa.string()),
        ("binary", pa.binary()),
        ("date", pa.date32()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestamp_ntz", pa.timestamp("us")),
        ("decimal", pa.decimal128(10, 2)),
    ]
)
ALL_TYPES_SPARK = (
    "struct<bool:boolean,byte:tinyint,short:smallint,int:int,long:bigint,float:float,double:double,"
    "string:string,binary:binary,date:date,timestamp:timestamp,timestamp_ntz:timestamp_ntz,"
    "decimal:decimal(10,2)>"
)


def all_types_rows() -> pa.Table:
    utc = dt.timezone.utc
    return pa.table(
        {
            "bool": [True, False, None],
            "byte": [-128, 127, None],
            "short": [-32768, 32767, None],
            "int": [-(2**31), 2**31 - 1, None],
            "long": [-(2**63), 2**63 - 1, None],
            "float": [1.5, float("inf"), None],
            "double": [-2.25, 1e300, None],
            "string": ["héllo wörld ✓", "", None],
            "binary": [b"\x00\xffbin", b"", None],
            "date": [dt.date(1969, 7, 20), dt.date(2038, 1, 19), None],
            "timestamp": [
                dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=utc),
                dt.datetime(2024, 2, 29, 12, 30, 45, 123456, tzinfo=utc),
                None,
            ],
            "timestamp_ntz": [dt.datetime(2001, 1, 1, 0, 0, 0, 1), dt.datetime(1900, 6, 1, 8, 0), None],
            "decimal": [Decimal("-12345678.90"), Decimal("0.01"), None],
        },
        schema=ALL_TYPES,
    )


def test_every_type_round_trips(spark, tmp_path):
    t = ctfile.create_table(str(tmp_path / "types"), ALL_TYPES)
    data = all_types_rows()
    t.insert(data)
    df = read(spark, t.uri)
    assert df.schema.simpleString() == ALL_TYPES_SPARK
    assert all(f.nullable for f in df.schema.fields)
    got = df.toArrow()
    assert got.num_rows == 3
    # Values as Python objects (instants for timestamps), independent of
    # whether Spark hands back large or plain string/binary arrays.
    key = lambda r: (r["long"] is None, r["long"])  # noqa: E731
    assert sorted(got.to_pylist(), key=key) == sorted(data.to_pylist(), key=key)


# ---------------------------------------------------------------- the plan-reuse bug


@pytest.mark.parametrize(
    "pushdown, options",
    [("true", {}), ("false", {}), ("true", {"pushdownPruning": "auto"}), ("false", {"pushdownPruning": "auto"})],
)
def test_reused_dataframe_counts_correctly(spark, tmp_path, pushdown, options):
    # PySpark 4.3.0 reuses the planned read of a DataFrame's first query for
    # its later queries; a source that pruned with the first query's filter
    # returned 4 rows instead of 10 for the second.
    p = id_x_table(tmp_path / "t", 10, partition_rows=1).uri
    with spark_conf(spark, PUSHDOWN_CONF, pushdown):
        r = spark.read.format("ctfile")
        for k, v in options.items():
            r = r.option(k, v)
        df = r.load(p)
        assert df.filter("x > 5").count() == 4
        assert df.count() == 10


def test_pushdown_pruning_true_prunes_a_fresh_dataframe(spark, tmp_path):
    p = id_x_table(tmp_path / "t", 10, partition_rows=1).uri
    with spark_conf(spark, PUSHDOWN_CONF, "true"):
        assert read(spark, p).filter("x > 5").rdd.getNumPartitions() == 10  # auto: no pruning on 4.3
        pruned = read(spark, p, pushdownPruning="true").filter("x > 5")
        assert pruned.rdd.getNumPartitions() == 4
        assert read(spark, p, pushdownPruning="true").filter("x > 5").count() == 4
        ch = read(spark, p, changes="default", pushdownPruning="true").filter("id = 7")
        assert sorted_rows(ch, ["id", ACTION]) == [(7, "INSERT")]


def test_pushdown_pruning_true_needs_the_pushdown_conf(spark, tmp_path):
    p = id_x_table(tmp_path / "t", 3).uri
    with spark_conf(spark, PUSHDOWN_CONF, "false"):
        with pytest.raises(Exception) as ei:
            read(spark, p, pushdownPruning="true").count()
    assert PUSHDOWN_CONF in str(ei.value)


def test_pruning_in_process(tmp_path):
    p = id_x_table(tmp_path / "t", 10, partition_rows=1).uri
    gt5 = GreaterThan(("x",), 5)

    auto = CtfileDataSource({"path": p})
    reader = auto.reader(auto.schema())
    # Not a pruning reader: no pushFilters override, so Spark accepts it with the
    # pushdown conf off, and nothing filter-dependent can end up in a cached plan.
    assert type(reader) is CtfileReader
    assert type(reader).pushFilters is DataSourceReader.pushFilters
    assert len(reader.partitions()) == 10

    on = CtfileDataSource({"path": p, "pushdownpruning": "true"})
    reader = on.reader(on.schema())
    assert isinstance(reader, CtfilePruningReader)
    assert list(reader.pushFilters([gt5])) == [gt5]  # Spark still evaluates every filter
    assert len(reader.partitions()) == 4
    assert sorted(r["x"] for r in in_process_rows(reader)) == [6, 7, 8, 9]

    off = CtfileDataSource({"path": p, "pushdownpruning": "false"})
    assert type(off.reader(off.schema())) is CtfileReader


@pytest.mark.xfail(
    pyspark.__version__ not in REUSE_SAFE_PYSPARK,
    reason=f"PySpark {pyspark.__version__} reuses a DataFrame's planned read across queries",
    strict=True,
)
def test_canary_pruning_on_a_reused_dataframe(spark, tmp_path):
    # Fails (xfail) while PySpark reuses plans; when it passes on a new PySpark,
    # add that version to REUSE_SAFE_PYSPARK so pushdownPruning=auto prunes there.
    p = id_x_table(tmp_path / "t", 10, partition_rows=1).uri
    with spark_conf(spark, PUSHDOWN_CONF, "true"):
        df = read(spark, p, pushdownPruning="true")
        assert df.filter("x > 5").count() == 4
        assert df.count() == 10
