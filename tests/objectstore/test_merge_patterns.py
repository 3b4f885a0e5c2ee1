"""The five MERGE patterns of pipelines (issue 27, docs/merge.md "MERGE"), each
one statement and one version through ``Table.merge_builder``, on local
disk and on the S3 server (moto): a conditional upsert (only if newer), an
upsert that also deletes, an accumulation (``total = t.total +
s.amount``), a sync to a full snapshot (``NOT MATCHED BY SOURCE THEN
DELETE``) and a slowly changing dimension of type 2 (close the current row,
insert the new version, with the null-merge-key source of Delta Lake's
documentation). Each checks the rows, the row ids kept, and the change
scan of its version.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile

def f(name: str) -> pc.Expression:
    return pc.field(name)


@pytest.fixture(params=["local", "s3"])
def new_table(request, tmp_path):
    """``new_table(name, schema)`` on local disk or on moto's S3 server."""
    if request.param == "local":
        return lambda name, schema, **kw: ctfile.create_table(tmp_path / name, schema, **kw)
    s3 = request.getfixturevalue("moto_s3")
    return lambda name, schema, **kw: ctfile.create_table(
        s3.new_uri(name), schema, storage_options=s3.storage_options(), **kw
    )


def _ids(t: ctfile.Table) -> dict:
    """Row id of each row by its ``id`` column."""
    return {r["id"]: r[ctfile.ROW_ID_COLUMN] for r in t.to_arrow(include_hidden=True).to_pylist()}


def _delta(t: ctfile.Table, version: int) -> list[tuple]:
    rows = t.changes(start_version=version, end_version=version).to_arrow()
    return sorted((r["METADATA$ACTION"], r["METADATA$ISUPDATE"], r["id"]) for r in rows.to_pylist())


EVENTS = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("ts", pa.int64())])


def _events(t: ctfile.Table) -> list[tuple]:
    return sorted((r["id"], r["name"], r["ts"]) for r in t.to_arrow().to_pylist())


def test_conditional_upsert_only_if_newer(new_table):
    t = new_table("silver", EVENTS, properties={"ctfile.changeCapture": "before_after"})
    t.insert(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"], "ts": [10, 10, 10]}, schema=EVENTS))
    ids = _ids(t)
    batch = pa.table({"id": [1, 2, 4], "name": ["A", "old", "D"], "ts": [11, 9, 1]}, schema=EVENTS)
    r = (t.merge_builder(batch, on="id")
         .when_matched_update_all(condition=f("s.ts") > f("t.ts"))
         .when_not_matched_insert_all()
         .execute())
    assert (r.version, r.num_updated_rows, r.num_inserted_rows) == (2, 1, 1)
    assert _events(t) == [(1, "A", 11), (2, "b", 10), (3, "c", 10), (4, "D", 1)]
    assert {k: v for k, v in _ids(t).items() if k in ids} == ids
    assert _delta(t, 2) == [("DELETE", True, 1), ("INSERT", False, 4), ("INSERT", True, 1)]


def test_upsert_and_delete_in_one_statement(new_table):
    t = new_table("silver", EVENTS)
    t.insert(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"], "ts": [1, 1, 1]}, schema=EVENTS))
    ids = _ids(t)
    batch = pa.table({"id": [1, 2, 4, 5], "name": ["A", None, "D", None], "ts": [2, 2, 2, 2],
                      "op": ["upsert", "delete", "upsert", "delete"]})
    r = (t.merge_builder(batch, on="id")
         .when_matched_delete(condition=f("s.op") == "delete")
         .when_matched_update_all()
         .when_not_matched_insert_all(condition=f("s.op") != "delete")
         .execute())
    assert (r.version, r.num_deleted_rows, r.num_updated_rows, r.num_inserted_rows) == (2, 1, 1, 1)
    assert _events(t) == [(1, "A", 2), (3, "c", 1), (4, "D", 2)]  # `op` is no table column: not written
    assert t.schema.names == ["id", "name", "ts"] and _ids(t)[1] == ids[1]
    assert _delta(t, 2) == [("DELETE", False, 2), ("DELETE", True, 1), ("INSERT", False, 4), ("INSERT", True, 1)]


TOTALS = pa.schema([pa.field("id", pa.int64(), nullable=False), ("total", pa.int64())])


def test_accumulate(new_table):
    t = new_table("gold", TOTALS)
    t.insert(pa.table({"id": [1, 2], "total": [100, 200]}, schema=TOTALS))
    ids = _ids(t)
    sales = pa.table({"id": [1, 3], "amount": [5, 7]})
    r = (t.merge_builder(sales, on="id")
         .when_matched_update(set={"total": f("t.total") + f("s.amount")})
         .when_not_matched_insert(values={"id": f("s.id"), "total": f("s.amount")})
         .execute())
    assert (r.num_updated_rows, r.num_inserted_rows) == (1, 1)
    assert sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "total": 105}, {"id": 2, "total": 200}, {"id": 3, "total": 7}]
    assert _ids(t)[1] == ids[1]
    assert _delta(t, 2) == [("DELETE", True, 1), ("INSERT", False, 3), ("INSERT", True, 1)]


def test_sync_to_a_full_snapshot(new_table):
    t = new_table("mirror", EVENTS, partition_rows=2)
    t.insert(pa.table({"id": [1, 2, 3, 4, 5], "name": list("abcde"), "ts": [1] * 5}, schema=EVENTS))
    ids = _ids(t)
    snapshot = pa.table({"id": [1, 3, 5, 6], "name": ["a", "C", "e", "f"], "ts": [1, 2, 1, 2]}, schema=EVENTS)
    r = (t.merge_builder(snapshot, on="id")
         .when_matched_update_all()
         .when_not_matched_insert_all()
         .when_not_matched_by_source_delete()
         .execute())
    assert (r.version, r.num_updated_rows, r.num_inserted_rows, r.num_deleted_rows) == (2, 1, 1, 2)
    assert _events(t) == sorted(tuple(r.values()) for r in snapshot.to_pylist())
    assert {k: _ids(t)[k] for k in (1, 3, 5)} == {k: ids[k] for k in (1, 3, 5)}
    assert _delta(t, 2) == [("DELETE", False, 2), ("DELETE", False, 4), ("DELETE", True, 3),
                            ("INSERT", False, 6), ("INSERT", True, 3)]
    # The same snapshot again changes nothing: no version.
    again = t.merge_builder(snapshot, on="id").when_matched_update_all().when_not_matched_insert_all() \
        .when_not_matched_by_source_delete().execute()
    assert not again.committed and t.version == 2


CUSTOMERS = pa.schema([
    pa.field("customer_id", pa.int64(), nullable=False), ("address", pa.string()), ("current", pa.bool_()),
    ("effective_date", pa.date32()), ("end_date", pa.date32()),
])


def _scd2_source(updates: pa.Table, current: pa.Table) -> pa.Table:
    """Delta Lake's staged source for an SCD type 2 MERGE: every update
    under its key (to close the current row), plus, for the customers whose
    address changed, the update again under a null key (to insert the new
    version: a null key matches no row)."""
    old = current.select(["customer_id", "address"]).rename_columns(["customer_id", "old_address"])
    changed = updates.join(old, "customer_id").filter(f("address") != f("old_address")).select(updates.column_names)
    keyed = updates.append_column("merge_key", updates.column("customer_id"))
    new_versions = changed.append_column("merge_key", pa.nulls(changed.num_rows, pa.int64()))
    return pa.concat_tables([keyed, new_versions])


def test_slowly_changing_dimension_type_2(new_table):
    d = dt.date
    t = new_table("customers", CUSTOMERS)
    t.insert(pa.table({"customer_id": [1, 2], "address": ["Oak St", "Elm St"], "current": [True, True],
                       "effective_date": [d(2026, 1, 1)] * 2, "end_date": [None, None]}, schema=CUSTOMERS))
    ids = {r["customer_id"]: r[ctfile.ROW_ID_COLUMN] for r in t.to_arrow(include_hidden=True).to_pylist()}
    updates = pa.table({"customer_id": [1, 2, 3], "address": ["Pine St", "Elm St", "Ash St"],
                        "effective_date": [d(2026, 6, 1)] * 3})
    staged = _scd2_source(updates, t.to_arrow().filter(f("current")))
    r = (t.merge_builder(staged, on={"customer_id": "merge_key"})
         .when_matched_update(set={"current": False, "end_date": f("s.effective_date")},
                              condition=f("t.current") & (f("t.address") != f("s.address")))
         .when_not_matched_insert(values={"customer_id": f("s.customer_id"), "address": f("s.address"),
                                          "current": True, "effective_date": f("s.effective_date")})
         .execute())
    assert (r.version, r.num_updated_rows, r.num_inserted_rows) == (2, 1, 2)
    rows = sorted((r["customer_id"], r["address"], r["current"], r["end_date"]) for r in t.to_arrow().to_pylist())
    assert rows == [(1, "Oak St", False, d(2026, 6, 1)), (1, "Pine St", True, None),
                    (2, "Elm St", True, None), (3, "Ash St", True, None)]
    closed = t.to_arrow(include_hidden=True).filter(~f("current")).to_pylist()[0]
    assert closed[ctfile.ROW_ID_COLUMN] == ids[1] and closed[ctfile.ROW_VERSION_COLUMN] == 2
    changes = t.changes(start_version=2).to_arrow().to_pylist()
    assert sorted((c["METADATA$ACTION"], c["METADATA$ISUPDATE"], c["customer_id"], c["address"], c["current"])
                  for c in changes) == [("DELETE", True, 1, "Oak St", True), ("INSERT", False, 1, "Pine St", True),
                                        ("INSERT", False, 3, "Ash St", True), ("INSERT", True, 1, "Oak St", False)]
