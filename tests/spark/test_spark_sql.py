"""``ctfile.spark.sql`` and ``ctfile.spark.register`` on local tables: each
statement form runs as the ``CtfileTable`` call it is planned into (the
same table as the Python call, hidden columns and counts included), reads
see time travel and change scans, and a refused statement leaves the table
directory as it was. Planning alone: ``test_spark_sql_plan.py``.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
import ctfile.spark
from dml_helpers import SCHEMA, assert_same, files, row_ids, twins
from spark_helpers import sorted_rows


def user_rows(t: ctfile.Table, version: int | None = None) -> list[tuple]:
    rows = t.refresh().snapshot(version).to_arrow().to_pylist()
    return sorted_rows(rows)


def test_register_makes_the_name_readable_with_time_travel_and_changes(spark, people):
    ctfile.spark.register(spark, "people", people.uri)
    assert sorted_rows(spark.sql("SELECT id, name FROM people")) == [(1, "Jeffrey"), (3, "Walter"), (4, "Maude")]
    v2 = ctfile.spark.sql(spark, "SELECT id, name FROM people VERSION AS OF 2 WHERE id > 1")
    assert sorted_rows(v2) == [(2, "Donny"), (3, "Walter"), (4, "Maud"), (5, "Uli")]
    (h3,) = [h for h in people.history() if h.version == 3]
    at = (h3.timestamp + dt.timedelta(milliseconds=1)).strftime("%Y-%m-%d %H:%M:%S.%f")  # the session is UTC
    travelled = ctfile.spark.sql(spark, f"SELECT p.name FROM people TIMESTAMP AS OF '{at}' AS p WHERE p.id = 1")
    assert sorted_rows(travelled) == [("Jeffrey",)]
    changes = ctfile.spark.sql(
        spark, f"SELECT id, name, `METADATA$ACTION` FROM table_changes('ctfile.`{people.uri}`', 4, 5)")
    assert sorted_rows(changes) == [
        (2, "Donny", "DELETE"), (4, "Maud", "DELETE"), (4, "Maude", "INSERT"), (5, "Uli", "DELETE")]
    people.insert(pa.table({"id": [9], "name": ["Nine"]}, schema=people.schema))
    assert spark.sql("SELECT count(*) FROM people").first()[0] == 3  # the view's version until made again
    assert ctfile.spark.sql(spark, "SELECT count(*) FROM people").first()[0] == 4
    assert spark.sql("SELECT count(*) FROM people").first()[0] == 4


def test_register_refuses_a_missing_table_and_a_bad_name(spark, tmp_path, people):
    with pytest.raises(ctfile.TableNotFoundError):
        ctfile.spark.register(spark, "nothing", str(tmp_path / "none"))
    with pytest.raises(ctfile.InvalidArgumentError, match="plain identifier"):
        ctfile.spark.register(spark, "db.people", people.uri)


def test_update_and_delete_are_the_python_calls(spark, tmp_path):
    st, pt = twins(tmp_path, partition_rows=3)
    ctfile.spark.register(spark, "twin", st.uri)
    old = row_ids(pt)
    r1 = ctfile.spark.sql(spark, "UPDATE twin AS t SET t.qty = t.qty * 2, name = upper(name) WHERE t.id IN (1, 5, 9)")
    r2 = pt.update(pc.field("id").isin([1, 5, 9]), {"qty": pc.field("qty") * 2, "name": pc.utf8_upper(pc.field("name"))})
    assert r1.num_updated_rows == 3
    assert_same(st, pt, r1, r2, old)
    old = row_ids(pt)
    r1 = ctfile.spark.sql(spark, f"DELETE FROM ctfile.`{st.uri}` WHERE qty > 60 AND name IS NOT NULL")
    r2 = pt.delete((pc.field("qty") > 60) & pc.field("name").is_valid())
    assert r1.num_deleted_rows == 7
    assert_same(st, pt, r1, r2, old)
    assert sorted_rows(spark.sql("SELECT id FROM twin")) == [(i,) for i in (1, 2, 3, 4, 6)]


def test_insert_values_query_by_name_and_overwrite(spark, tmp_path):
    t = ctfile.create_table(str(tmp_path / "t"), SCHEMA)
    src = ctfile.create_table(str(tmp_path / "src"), SCHEMA)
    src.insert(pa.table({"id": [7, 8], "name": ["s7", None], "qty": [70, 80]}, schema=SCHEMA))
    ctfile.spark.register(spark, "dest", t.uri)
    r = ctfile.spark.sql(spark, "INSERT INTO dest VALUES (1, 'one', 10), (2, NULL, 20.0)")
    assert (r.version, r.operation, r.num_inserted_rows) == (1, "WRITE", 2)
    ctfile.spark.sql(spark, "INSERT INTO TABLE dest (qty, id) VALUES (30, 3)")
    ctfile.spark.sql(spark, f"INSERT INTO dest SELECT id + 10, name, qty FROM ctfile.`{src.uri}` WHERE id = 7")
    ctfile.spark.sql(spark, f"INSERT INTO dest BY NAME SELECT qty, id FROM ctfile.`{src.uri}` WHERE id = 8")
    assert user_rows(t) == [(1, "one", 10), (2, None, 20), (3, None, 30), (8, None, 80), (17, "s7", 70)]
    assert sorted_rows(spark.sql("SELECT id FROM dest")) == [(1,), (2,), (3,), (8,), (17,)]
    r = ctfile.spark.sql(spark, "INSERT OVERWRITE dest SELECT * FROM dest VERSION AS OF 1")
    assert (r.version, r.num_inserted_rows) == (5, 2)
    assert user_rows(t) == [(1, "one", 10), (2, None, 20)]


def test_restore_by_version_and_by_timestamp(spark, tmp_path, people):
    r = ctfile.spark.sql(spark, f"RESTORE TABLE ctfile.`{people.uri}` TO VERSION AS OF 2")
    assert (r.version, r.operation) == (6, "RESTORE")
    assert user_rows(people) == user_rows(people, 2)
    (h4,) = [h for h in people.history() if h.version == 4]
    at = h4.timestamp.strftime("%Y-%m-%d %H:%M:%S.%f")
    ctfile.spark.register(spark, "ppl", people.uri)
    r = ctfile.spark.sql(spark, f"RESTORE ppl TIMESTAMP AS OF '{at}'")
    assert r.version == 7 and user_rows(people) == user_rows(people, 4)


@pytest.mark.parametrize("statement, error", [
    ("DELETE FROM {t} WHERE id IN (SELECT 1)", ctfile.UnsupportedFeatureError),
    ("MERGE INTO {t} AS t USING (SELECT 1 AS id) AS s ON t.id = s.id WHEN NOT MATCHED THEN INSERT VALUES (1)",
     ctfile.UnsupportedFeatureError),
    ("INSERT INTO {t} VALUES (1, 'x')", ctfile.SchemaMismatchError),
    ("INSERT INTO {t} VALUES ('x', 'y', 'z')", ctfile.SchemaMismatchError),
    ("INSERT INTO {t} VALUES (NULL, 'y', 1)", ctfile.SchemaMismatchError),
    ("UPDATE {t} SET nope = 1", ctfile.SchemaMismatchError),
    ("RESTORE TABLE {t} TO VERSION AS OF 9", ctfile.VersionNotFoundError),
])
def test_refused_statements_change_nothing(spark, tmp_path, statement, error):
    (t, _) = twins(tmp_path)
    before = files(t)
    with pytest.raises(error):
        ctfile.spark.sql(spark, statement.format(t=f"ctfile.`{t.uri}`"))
    assert files(t) == before and t.refresh().version == 2


def test_other_text_is_spark_sql(spark):
    df = ctfile.spark.sql(spark, "SELECT 1 AS x")
    assert df.collect()[0].x == 1
