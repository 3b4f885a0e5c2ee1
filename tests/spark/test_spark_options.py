"""Option validation: the parsers directly (fast), then through Spark, where a
Python error reaches the user wrapped in a Spark exception."""

from __future__ import annotations

import json

import pytest

import ctfile
from ctfile import InvalidArgumentError
from ctfile.spark_datasource.options import ReadOptions, parse_read_options, parse_write_options
from spark_helpers import id_x_table

P = "/tmp/some/table"


def parse(**options) -> ReadOptions:
    return parse_read_options({"path": P, **options})


# ---------------------------------------------------------------- parsers


def test_read_defaults():
    o = parse()
    assert (o.path, o.changes, o.version_as_of, o.timestamp_as_of) == (P, None, None, None)
    assert (o.initial_rows, o.changelog, o.pushdown_pruning, o.storage_options) == (False, None, "auto", None)
    assert not o.is_change_scan


def test_read_keys_are_case_insensitive_and_values_are_parsed():
    # Spark hands over lower-cased keys; the documented camelCase works too.
    o = parse_read_options(
        {"PATH": P, "changes": "audit", "startingversion": " 3 ", "EndingVersion": "7",
         "initialRows": "TRUE", "changelog": "op", "maxRowsPerTask": "500", "pushdownpruning": "True"}
    )
    assert (o.starting_version, o.ending_version, o.initial_rows) == (3, 7, True)
    assert (o.changes, o.changelog, o.max_rows_per_task, o.pushdown_pruning) == ("audit", "op", 500, "true")
    assert o.is_change_scan
    assert parse(versionAsOf="2").version_as_of == 2
    assert parse(timestampAsOf="2024-01-01T00:00:00Z").timestamp_as_of == "2024-01-01T00:00:00Z"
    s = parse_read_options({"path": P, "changes": "default", "maxversionspertrigger": "4"}, streaming=True)
    assert s.max_versions_per_trigger == 4


@pytest.mark.parametrize(
    "options, message",
    [
        ({"bogusOption": "1"}, "unknown read option 'bogusoption'"),
        ({"versionAsOf": "two"}, "option versionAsOf must be an integer, found 'two'"),
        ({"versionAsOf": "1.5"}, "option versionAsOf must be an integer"),
        ({"versionAsOf": "-1"}, "option versionAsOf must be >= 0"),
        ({"versionAsOf": "1", "timestampAsOf": "2024-01-01"}, "versionAsOf or timestampAsOf, not both"),
        ({"startingVersion": "1"}, "options startingVersion apply to change scans"),
        ({"initialRows": "true"}, "options initialRows apply to change scans"),
        ({"changes": "bogus"}, "option changes must be one of default, append_only, audit, found 'bogus'"),
        ({"changes": "default", "changelog": "bogus"}, "option changelog must be 'op', found 'bogus'"),
        ({"changes": "default", "versionAsOf": "1"}, "cannot be combined with changes"),
        ({"changes": "default", "initialRows": "yes"}, "option initialRows must be true or false"),
        ({"changes": "default", "startingVersion": "x"}, "option startingVersion must be an integer"),
        ({"changes": "default", "endingVersion": "x"}, "option endingVersion must be an integer"),
        ({"changes": "default", "startingVersion": "1", "startingTimestamp": "2024-01-01"},
         "startingVersion or startingTimestamp, not both"),
        ({"changes": "default", "endingVersion": "1", "endingTimestamp": "2024-01-01"},
         "endingVersion or endingTimestamp, not both"),
        ({"changes": "default", "maxVersionsPerTrigger": "2"}, "option maxVersionsPerTrigger applies to streaming"),
        ({"changes": "default", "allowSchemaChanges": "true"}, "option allowSchemaChanges applies to streaming reads"),
        ({"maxRowsPerTask": "0"}, "option maxRowsPerTask must be >= 1"),
        ({"pushdownPruning": "maybe"}, "option pushdownPruning must be one of auto, true, false, found 'maybe'"),
        ({"storageOptions": "{not json"}, "option storageOptions must be a JSON object"),
        ({"storageOptions": "[1, 2]"}, "option storageOptions must be a JSON object"),
    ],
)
def test_read_option_errors_name_the_option(options, message):
    with pytest.raises(InvalidArgumentError) as ei:
        parse(**options)
    assert message in str(ei.value)
    assert isinstance(ei.value, ValueError)


def test_read_needs_a_path():
    with pytest.raises(InvalidArgumentError, match="needs a table path"):
        parse_read_options({"versionasof": "1"})


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "set option changes"),
        ({"changes": "default", "endingVersion": "3"}, "endingVersion/endingTimestamp are for batch reads"),
        ({"changes": "default", "endingTimestamp": "2024-01-01"}, "endingVersion/endingTimestamp are for batch reads"),
        ({"changes": "default", "maxVersionsPerTrigger": "0"}, "option maxVersionsPerTrigger must be >= 1"),
        ({"changes": "default", "allowSchemaChanges": "yes"}, "option allowSchemaChanges must be true or false, found 'yes'"),
    ],
)
def test_streaming_option_errors(options, message):
    with pytest.raises(InvalidArgumentError) as ei:
        parse_read_options({"path": P, **options}, streaming=True)
    assert message in str(ei.value)


def test_schema_inference_accepts_batch_and_stream_options():
    # DataSource.schema() serves spark.read and spark.readStream alike: it must
    # accept maxVersionsPerTrigger (stream only) and a missing changes option.
    o = parse_read_options({"path": P, "changes": "default", "maxversionspertrigger": "2"}, streaming=None)
    assert o.max_versions_per_trigger == 2
    assert parse_read_options({"path": P}, streaming=None).changes is None


def test_storage_options_json_and_prefixed_keys_merge():
    o = parse(storageOptions=json.dumps({"key": "k", "client_kwargs": {"region_name": "eu"}}), **{"storage.secret": "s"})
    assert o.storage_options == {"key": "k", "client_kwargs": {"region_name": "eu"}, "secret": "s"}
    assert parse(**{"storage.anon": "true"}).storage_options == {"anon": "true"}


def test_write_options():
    w = parse_write_options({"path": P, "partitionrows": "1000", "storage.key": "k"})
    assert (w.path, w.properties, w.storage_options, w.txn_app_id) == (P, {"ctfile.partitionRows": "1000"}, {"key": "k"}, None)
    # A streaming sink's checkpoint location is its default application id.
    assert parse_write_options({"path": P, "checkpointlocation": "/ck"}).txn_app_id == "/ck"
    assert parse_write_options({"path": P, "checkpointlocation": "/ck", "txnappid": "app"}).txn_app_id == "app"
    with pytest.raises(InvalidArgumentError, match="unknown write option 'versionasof'"):
        parse_write_options({"path": P, "versionasof": "1"})
    with pytest.raises(InvalidArgumentError, match="needs a table path"):
        parse_write_options({})


def test_schema_options():
    s = parse_read_options({"path": P, "changes": "default", "allowschemachanges": "TRUE"}, streaming=True)
    assert s.allow_schema_changes
    assert not parse_read_options({"path": P, "changes": "default"}, streaming=True).allow_schema_changes
    assert parse_write_options({"path": P}).schema_mode is None
    assert parse_write_options({"path": P, "mergeschema": "true"}).schema_mode is ctfile.SchemaMode.MERGE
    w = parse_write_options({"path": P, "overwriteSchema": "True", "mergeSchema": "false"})
    assert (w.schema_mode, w.schema_option) == (ctfile.SchemaMode.OVERWRITE, "overwriteSchema")
    for options, message in [
        ({"mergeschema": "1"}, "option mergeSchema must be true or false, found '1'"),
        ({"overwriteschema": "yes"}, "option overwriteSchema must be true or false, found 'yes'"),
        ({"mergeschema": "true", "overwriteschema": "true"}, "give option mergeSchema or overwriteSchema, not both"),
    ]:
        with pytest.raises(InvalidArgumentError, match=message):
            parse_write_options({"path": P, **options})


def test_write_options_set_table_properties_through_the_properties_table():
    # Spark lower-cases option names; they come back as the property keys.
    w = parse_write_options({"path": P, "ctfile.checkpointinterval": "10", "ctfile.compression": "snappy"})
    assert w.properties == {"ctfile.checkpointInterval": "10", "ctfile.compression": "snappy"}
    # A value the property does not accept fails, naming the option and what it expects.
    for option, value, message in [
        ("partitionrows", "many", "option partitionRows: table property ctfile.partitionRows must be a positive integer, found 'many'"),
        ("partitionrows", "0", "option partitionRows: table property ctfile.partitionRows must be a positive integer, found '0'"),
        ("ctfile.checkpointinterval", "soon", "option ctfile.checkpointInterval: table property ctfile.checkpointInterval must be a non-negative integer"),
        ("ctfile.isolationlevel", "SnapshotIsolation", "option ctfile.isolationLevel: table property ctfile.isolationLevel must be WriteSerializable or Serializable"),
        ("ctfile.partitionsize", "10", "option ctfile.partitionsize: unknown table property ctfile.partitionsize"),
    ]:
        with pytest.raises(InvalidArgumentError) as ei:
            parse_write_options({"path": P, option: value})
        assert message in str(ei.value)
    with pytest.raises(InvalidArgumentError, match="options partitionRows and ctfile.partitionRows both set table property ctfile.partitionRows"):
        parse_write_options({"path": P, "partitionrows": "1", "ctfile.partitionrows": "2"})
    # Table properties are write options only.
    with pytest.raises(InvalidArgumentError, match="unknown read option 'ctfile.checkpointinterval'"):
        parse_read_options({"path": P, "ctfile.checkpointinterval": "10"})


# ---------------------------------------------------------------- through Spark


@pytest.fixture(scope="module")
def small_table(tmp_path_factory):
    return id_x_table(tmp_path_factory.mktemp("opts") / "t", 3).uri


SPARK_ERRORS = [
    ({"bogusOption": "1"}, "unknown read option 'bogusoption'"),
    ({"versionAsOf": "two"}, "option versionAsOf must be an integer"),
    ({"versionAsOf": "1", "timestampAsOf": "2024-01-01"}, "versionAsOf or timestampAsOf, not both"),
    ({"startingVersion": "1"}, "options startingVersion apply to change scans"),
    ({"changes": "bogus"}, "option changes must be one of"),
    ({"changes": "default", "changelog": "bogus"}, "option changelog must be 'op'"),
    ({"changes": "default", "maxVersionsPerTrigger": "2"}, "option maxVersionsPerTrigger applies to streaming"),
    ({"pushdownPruning": "maybe"}, "option pushdownPruning must be one of"),
]


@pytest.mark.parametrize("options, message", SPARK_ERRORS, ids=[next(iter(o)) + ("+" if len(o) > 1 else "") for o, _ in SPARK_ERRORS])
def test_spark_read_fails_naming_the_option(spark, small_table, options, message):
    with pytest.raises(Exception) as ei:
        r = spark.read.format("ctfile")
        for k, v in options.items():
            r = r.option(k, v)
        r.load(small_table).collect()
    text = str(ei.value)
    assert message in text
    assert "InvalidArgumentError" in text


def test_spark_read_of_a_missing_version_or_table(spark, small_table, tmp_path):
    with pytest.raises(Exception, match="VersionNotFoundError"):
        spark.read.format("ctfile").option("versionAsOf", "99").load(small_table).collect()
    with pytest.raises(Exception, match="TableNotFoundError"):
        spark.read.format("ctfile").load(str(tmp_path / "nothing")).collect()


def test_spark_read_stream_without_changes_fails(spark, small_table, tmp_path):
    with pytest.raises(Exception) as ei:
        q = (
            spark.readStream.format("ctfile").load(small_table)
            .writeStream.format("memory").queryName("nochanges")
            .option("checkpointLocation", str(tmp_path / "ck")).start()
        )
        try:
            q.awaitTermination(120)
        finally:
            q.stop()
    assert "set option changes" in str(ei.value)


def test_spark_write_fails_on_unknown_option(spark, tmp_path):
    target = tmp_path / "w"
    with pytest.raises(Exception) as ei:
        spark.range(3).write.format("ctfile").option("versionAsOf", "1").mode("append").save(str(target))
    assert "unknown write option 'versionasof'" in str(ei.value)
    assert not target.exists()
