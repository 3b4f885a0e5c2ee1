"""Planning of ``ctfile.spark.sql`` (no Spark session): which statements are
ctfile's, what they become, and the typed refusals of the parts ctfile does
not run (nothing runs, so nothing can change). The statements' runs:
``test_spark_sql.py``.
"""

from __future__ import annotations

import pytest

import ctfile
from ctfile.spark.sql_api import _check_name, plan_statement
from ctfile.spark.sql_merge import SqlMerge
from ctfile.spark.sql_reads import CtfileRef, Names, registration
from ctfile.spark.sql_statements import SqlDelete, SqlInsert, SqlRestore, SqlUpdate

NAMES = Names(dict([registration("orders", "/data/orders", {"anon": True})]).get)


def plan(text):
    return plan_statement(text, NAMES)


def test_writes_of_ctfile_tables_are_planned():
    assert plan("UPDATE orders AS o SET o.qty = o.qty + 1, name = 'x' WHERE o.id > 2") == SqlUpdate(
        CtfileRef("/data/orders", {"anon": True}, "orders"), (("qty", "qty + 1"), ("name", "'x'")), "id > 2")
    d = plan("DELETE FROM ctfile.`/data/t`")
    assert isinstance(d, SqlDelete) and d.target.uri == "/data/t" and d.where is None
    i = plan("INSERT INTO orders (id, qty) VALUES (1, 2), (3, NULL)")
    assert isinstance(i, SqlInsert) and i.columns == ("id", "qty") and not i.overwrite
    assert plan("INSERT OVERWRITE TABLE orders SELECT * FROM ctfile.`/x` VERSION AS OF 2").overwrite
    assert plan("RESTORE orders VERSION AS OF 2").version == 2
    r = plan("restore table ctfile.`/data/t` to timestamp as of '2024-05-01 10:00:00'")
    assert r == SqlRestore(r.target, timestamp="'2024-05-01 10:00:00'") and r.target.uri == "/data/t"


def test_merge_clauses_become_builder_calls():
    m = plan("MERGE INTO orders USING (SELECT * FROM ctfile.`/src`) ON orders.id = s.id AND s.region = 'EU' "
             "WHEN MATCHED AND s.ts > orders.ts THEN UPDATE SET * "
             "WHEN NOT MATCHED AND s.op <> 'delete' THEN INSERT (id, qty) VALUES (s.id, s.qty * 2) "
             "WHEN NOT MATCHED BY SOURCE AND orders.qty < 0 THEN UPDATE SET orders.qty = 0")
    assert isinstance(m, SqlMerge)
    assert (m.target_alias, m.source_alias, m.on) == ("orders", "s", "orders.id = s.id AND s.region = 'EU'")
    assert len(m.source.views) == 1 and m.source.views[0].ref.uri == "/src"
    assert [(c.method, dict(c.arguments)) for c in m.clauses] == [
        ("when_matched_update_all", {"condition": "s.ts > orders.ts"}),
        ("when_not_matched_insert", {"values": {"id": "s.id", "qty": "s.qty * 2"}, "condition": "s.op <> 'delete'"}),
        ("when_not_matched_by_source_update", {"set": {"qty": "0"}, "condition": "orders.qty < 0"}),
    ]


def test_merge_with_schema_evolution():
    m = plan("MERGE WITH SCHEMA EVOLUTION INTO orders t USING src s ON t.id = s.id WHEN MATCHED THEN UPDATE SET *")
    assert isinstance(m, SqlMerge) and m.schema_evolution
    assert not plan("MERGE INTO orders t USING src s ON t.id = s.id WHEN MATCHED THEN DELETE").schema_evolution
    assert plan("MERGE WITH SCHEMA EVOLUTION INTO other t USING s ON t.id = s.id WHEN MATCHED THEN DELETE") is None


@pytest.mark.parametrize("text", [
    "SELECT 1", "DELETE FROM other WHERE id = 1", "UPDATE db.orders SET x = 1", "CREATE TABLE x (a INT)",
    "RESTORE TABLE other TO VERSION AS OF 1", "SHOW TABLES", "this is not sql at all (",
    "INSERT INTO other SELECT 1; SELECT 2",
])
def test_other_statements_are_left_to_spark(text):
    assert plan(text) is None


def test_queries_reading_ctfile_tables_read_views():
    q = plan("INSERT INTO other SELECT * FROM table_changes('orders', 2, NULL, 'audit')")
    assert len(q.views) == 1 and dict(q.views[0].options) == {"changes": "audit", "startingVersion": "2"}
    assert plan("SELECT * FROM orders").text == "SELECT * FROM orders"  # the name's view, made again
    ctas = plan("CREATE TABLE copy AS SELECT * FROM ctfile.`/data/t` VERSION AS OF 3")
    assert ctas.text.startswith("CREATE TABLE copy AS SELECT * FROM `ctfile_") and len(ctas.views) == 1


@pytest.mark.parametrize("text, part", [
    ("DELETE FROM orders WHERE id IN (SELECT id FROM x)", "subquery"),
    ("UPDATE orders SET qty = (SELECT max(q) FROM x)", "subquery"),
    ("DELETE FROM orders VERSION AS OF 2 WHERE id = 1", "time travel"),
    ("MERGE INTO orders AS t USING src AS s ON t.id = s.id WHEN NOT MATCHED THEN INSERT VALUES (s.id)",
     "INSERT (column, ...)"),
    ("MERGE INTO orders AS t USING src AS s ON t.id = s.id WHEN MATCHED THEN UPDATE SET s.qty = 1", "s.qty"),
    ("MERGE INTO orders AS t USING src AS s ON t.id = s.id WHEN NOT MATCHED BY SOURCE THEN UPDATE SET *",
     "UPDATE SET *"),
    ("DROP TABLE ctfile.`/data/t`", "DROP"),
    ("DESCRIBE ctfile.`/data/t`", "DESCRIBE"),
    ("RESTORE TABLE orders TO VERSION AS OF 2 WHERE x", "RESTORE"),
    ("RESTORE TABLE orders TO VERSION AS OF 'two'", "VERSION AS OF"),
    ("RESTORE TABLE orders TO VERSION AS OF", "time travel VERSION AS OF on orders"),
    ("RESTORE TABLE orders TO VERSION AS OF 1 AS x", "RESTORE orders"),
    ("RESTORE TABLE orders TO SYSTEM_TIME AS OF 1", "RESTORE orders"),
])
def test_unsupported_parts_are_typed_errors_naming_them(text, part):
    with pytest.raises(ctfile.CtfileError) as e:
        plan(text)
    assert isinstance(e.value, (ctfile.UnsupportedFeatureError, ctfile.InvalidArgumentError))
    assert part in str(e.value)


@pytest.mark.parametrize("text", [
    "MERGE INTO orders AS t USING src AS s ON t.id = s.id WHEN MATCHED THEN UPDATE SET qty = 1, t.qty = 2",
    "MERGE INTO orders AS t USING src AS s ON t.id = s.id WHEN NOT MATCHED THEN INSERT (id, qty) VALUES (1)",
    "RESTORE TABLE orders",
    "DELETE FROM orders; DELETE FROM orders",
])
def test_malformed_statements_are_invalid_arguments(text):
    with pytest.raises(ctfile.InvalidArgumentError):
        plan(text)


@pytest.mark.parametrize("name", ["", "a.b", "`x`", "ctfile", "a b", None])
def test_registered_names_are_plain_identifiers(name):
    with pytest.raises(ctfile.InvalidArgumentError):
        _check_name(name)
