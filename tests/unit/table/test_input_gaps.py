"""Small input gaps of issue 12 (defects 9 and 11): each bad input gets a typed
CtfileError naming what was expected and found, and changes nothing on disk;
each legitimate input that was refused is accepted."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.properties import TABLE_PROPERTIES, TableProperties

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("n", pa.int8(), nullable=False), ("s", pa.string())])


@pytest.fixture
def table(tmp_path):
    t = ctfile.create_table(tmp_path / "t", SCHEMA)
    t.insert(pa.table({"id": [1, 2, 3], "n": pa.array([100, 5, 7], pa.int8()), "s": ["a", "b", "c"]}, schema=SCHEMA))
    return t


def _unchanged(table, file_tree, before):
    assert file_tree(table.uri) == before


# ---------------------------------------------------------------- table properties


@pytest.mark.parametrize(
    "props, expected",
    [
        ({"ctfile.partitionRows": "big"}, "ctfile.partitionRows must be a positive integer, found 'big'"),
        ({"ctfile.partitionRows": "0"}, "ctfile.partitionRows must be a positive integer, found '0'"),
        ({"ctfile.rowGroupRows": "-5"}, "ctfile.rowGroupRows must be a positive integer"),
        ({"ctfile.compression": "lzo"}, "ctfile.compression must be one of zstd, snappy"),
        ({"ctfile.checkpointInterval": "often"}, "ctfile.checkpointInterval must be a non-negative integer"),
        ({"ctfile.isolationLevel": "SnapshotIsolation"}, "ctfile.isolationLevel must be WriteSerializable or Serializable"),
        ({"ctfile.partitonRows": "10"}, "unknown table property ctfile.partitonRows"),
        ({"ctfile.partitionRows": 10}, "properties must map strings to strings, found 'ctfile.partitionRows': 10"),
    ],
)
def test_set_properties_validates_before_writing(table, file_tree, props, expected):
    """The defect: {"ctfile.partitionRows": "big"} was accepted and every
    later insert failed with a bare ValueError."""
    before = file_tree(table.uri)
    with pytest.raises(ctfile.InvalidArgumentError, match=expected):
        table.set_properties(props)
    _unchanged(table, file_tree, before)
    assert table.insert(pa.table({"id": [9], "n": pa.array([1], pa.int8())})).committed


def test_create_table_validates_properties(tmp_path):
    with pytest.raises(ctfile.InvalidArgumentError, match="ctfile.compression must be one of"):
        ctfile.create_table(tmp_path / "t", SCHEMA, properties={"ctfile.compression": "zip"})
    assert not (tmp_path / "t").exists()


def test_valid_properties_steer_every_writer(table):
    table.set_properties({"ctfile.partitionRows": "2", "ctfile.isolationLevel": "Serializable", "team": "x"})
    r = table.insert(pa.table({"id": [10, 11, 12, 13, 14], "n": pa.array([1] * 5, pa.int8())}))
    assert r.num_added_partitions == 3  # 2 + 2 + 1
    r = table.update(pc.field("id") >= 0, {"s": "z"})
    assert all(p.num_records <= 2 for p in table.snapshot().partitions)
    assert table.log.commit_info(r.version).isolation_level == "Serializable"
    assert table.properties["team"] == "x"


def test_a_later_revisions_property_is_kept_when_others_are_set(table):
    """SPEC §Table properties: a writer preserves ctfile. keys it does not know."""
    with table.transaction() as tx:  # as a newer writer would have stored it
        md = tx.metadata
        from ctfile.format.actions import Metadata

        tx.set_metadata(Metadata(md.table_id, md.schema, md.created_time, {"ctfile.changeCapture": "before_after"}))
    table.set_properties({"ctfile.partitionRows": "100"})
    assert table.properties == {"ctfile.changeCapture": "before_after", "ctfile.partitionRows": "100"}


def test_malformed_stored_values_mean_the_default():
    props = TableProperties.from_mapping(
        {"ctfile.partitionRows": "big", "ctfile.isolationLevel": "Nope", "ctfile.changeCapture": "BEFORE_AFTER",
         "ctfile.maxRetentionExtension": "14 days", "ctfile.autoCompact": "yes", "ctfile.clusterBy": "a,,b",
         "ctfile.autoCompactMaxDepth": "0", "ctfile.appendOnly": "TRUE"}
    )
    assert props == TableProperties()
    assert TableProperties.from_mapping({"ctfile.checkpointInterval": "0"}).checkpoint_interval == 0
    assert TableProperties.from_mapping({"ctfile.partitionRows": "10", "ctfile.rowGroupRows": "64"}).row_group_rows == 10
    assert set(TABLE_PROPERTIES) == {
        "ctfile.partitionRows", "ctfile.rowGroupRows", "ctfile.compression", "ctfile.checkpointInterval",
        "ctfile.isolationLevel", "ctfile.changeCapture", "ctfile.maxRetentionExtension",
        "ctfile.clusterBy", "ctfile.autoCompact", "ctfile.autoCompactMaxDepth", "ctfile.appendOnly",
    }


# ---------------------------------------------------------------- statements


def test_compact_target_rows_zero_is_refused(table, file_tree):
    """The defect: target_rows=0 silently used the default."""
    before = file_tree(table.uri)
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ctfile.InvalidArgumentError, match="target_rows must be an int in 1..9223372036854775807"):
            table.compact(target_rows=bad)
    _unchanged(table, file_tree, before)


def test_update_whose_set_overflows_raises_a_typed_error(table, file_tree):
    """The defect: a checked overflow in SET surfaced as a raw ArrowInvalid."""
    before = file_tree(table.uri)
    doubled = pc.multiply_checked(pc.field("n"), pc.scalar(pa.scalar(2, pa.int8())))
    with pytest.raises(ctfile.InvalidArgumentError, match="overflow") as ei:
        table.update(pc.field("id") == 1, {"n": doubled})
    assert "set ['n']" in str(ei.value)
    with pytest.raises(ctfile.InvalidArgumentError, match="overflow"):
        table.delete(pc.multiply_checked(pc.field("id"), pc.scalar(2**62)) > 0)
    with pytest.raises(ctfile.SchemaMismatchError, match="cannot be cast to int8"):
        table.update(pc.field("id") == 1, {"n": pc.add(pc.field("id"), pc.scalar(1000))})
    _unchanged(table, file_tree, before)


def test_keyed_delete_needs_only_the_key(table):
    """The defect: merge(keys, when_matched='delete', when_not_matched=None)
    demanded every non-nullable column in the source."""
    r = table.merge(pa.table({"id": [1, 3, 99]}), on="id", when_matched="delete", when_not_matched=None)
    assert (r.num_deleted_rows, r.num_inserted_rows) == (2, 0)
    assert table.to_arrow().column("id").to_pylist() == [2]


def test_update_only_merge_sets_the_given_columns(table):
    r = table.merge(pa.table({"id": [2], "s": ["B"]}), on="id", when_not_matched=None)
    assert r.num_updated_rows == 1
    assert table.to_arrow().to_pylist()[1] == {"id": 2, "n": 5, "s": "B"}


def test_merge_that_inserts_still_needs_non_nullable_columns(table, file_tree):
    before = file_tree(table.uri)
    with pytest.raises(ctfile.SchemaMismatchError, match="column 'n' .* is missing"):
        table.merge(pa.table({"id": [50]}), on="id")
    with pytest.raises(ctfile.SchemaMismatchError, match="not in the table"):
        table.merge(pa.table({"id": [1], "zzz": [1]}), on="id", when_matched="delete", when_not_matched=None)
    _unchanged(table, file_tree, before)


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"when_matched": "upsert"}, "when_matched must be 'update', 'delete' or None, found 'upsert'"),
        ({"when_not_matched": "update"}, "when_not_matched must be 'insert' or None, found 'update'"),
        ({"when_matched": None, "when_not_matched": None}, "both are None"),
    ],
)
def test_merge_actions_are_checked(table, kwargs, expected):
    with pytest.raises(ctfile.InvalidArgumentError, match=expected):
        table.merge(pa.table({"id": [1]}), on="id", **kwargs)


def test_an_unknown_url_scheme_is_a_typed_error(tmp_path):
    with pytest.raises(ctfile.InvalidArgumentError, match="cannot open 'foo://bucket/t'.*Protocol not known"):
        ctfile.open_table("foo://bucket/t")
    with pytest.raises(ctfile.InvalidArgumentError, match="cannot open"):
        ctfile.create_table("foo://bucket/t", SCHEMA)


def test_merge_keys_that_are_not_names_are_a_typed_error(table):
    for bad in (5, [], ["id", 3], None):
        with pytest.raises(ctfile.InvalidArgumentError, match="on must name one or more key columns"):
            table.merge(pa.table({"id": [1]}), on=bad)


@pytest.mark.parametrize("raw", [" 100", "+5", "1_000", "\u0663", "1e3", "0x10", "9" * 20])
def test_integer_properties_are_plain_decimal(table, raw):
    """SPEC §Table properties: integers are written in decimal. Python's int()
    alone accepts all of these, which another implementation would read as
    malformed (the default), so two writers would disagree (review finding)."""
    with pytest.raises(ctfile.InvalidArgumentError, match="ctfile.partitionRows must be a positive integer"):
        table.set_properties({"ctfile.partitionRows": raw})
    assert TableProperties.from_mapping({"ctfile.partitionRows": raw}).partition_rows == TableProperties().partition_rows
