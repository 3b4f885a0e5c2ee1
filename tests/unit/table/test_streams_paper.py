"""The paper's stream example, Listing 9 (shared/reference/snowflake-changes-sigmod23.txt,
section 2.3), on ctfile (SPEC §Streams).

``people_stream`` is created on ``people`` (Listing 1) with initial rows and
consumed three times into ``people_changes`` by
``INSERT INTO people_changes SELECT name, $ACTION, $ISUPDATE FROM
people_stream``: the first consumption returns the table as it was, the
second the inserts of 12:01, the third -- a transaction begun at 12:03, before
the DELETE of 12:04, whose INSERT runs after it -- only the updates of 12:02
and 12:03: the stream's changes are pinned when the transaction begins. The
DELETE stays pending for the next consumption.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile

PEOPLE = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
CHANGES = pa.schema([("name", pa.string()), ("action", pa.string()), ("isUpdate", pa.string())])


def select_from_stream(stream: ctfile.Stream) -> pa.Table:
    """``SELECT name, $ACTION, $ISUPDATE FROM people_stream`` (isUpdate
    rendered as the paper prints it, TRUE / FALSE)."""
    t = stream.pending().to_arrow()
    is_update = ["TRUE" if b else "FALSE" for b in t.column("METADATA$ISUPDATE").to_pylist()]
    return pa.table([t.column("name"), t.column("METADATA$ACTION"), pa.array(is_update, pa.string())], schema=CHANGES)


def rows(table: ctfile.Table) -> list[tuple]:
    return [(r["name"], r["action"], r["isUpdate"]) for r in table.refresh().to_arrow().to_pylist()]


@pytest.fixture
def people(tmp_path) -> ctfile.Table:
    """Listing 1."""
    t = ctfile.create_table(tmp_path / "people", PEOPLE)
    t.insert(pa.table({"id": [1, 2], "name": ["Jeff", "Donny"]}, schema=PEOPLE))
    return t


def test_listing_9_transactional_stream_consumption(people, tmp_path):
    # 12:00> CREATE STREAM people_stream ON TABLE people SHOW_INITIAL_ROWS=true;
    stream = people.create_stream("people_stream", initial_rows=True)
    # 12:00> CREATE TABLE people_changes(name varchar, action varchar, isUpdate varchar);
    people_changes = ctfile.create_table(tmp_path / "people_changes", CHANGES)

    # 12:00> INSERT INTO people_changes SELECT name, $ACTION, $ISUPDATE FROM people_stream;
    with people_changes.transaction(consuming=stream) as tx:
        tx.insert(select_from_stream(stream))
    assert sorted(rows(people_changes)) == [("Donny", "INSERT", "FALSE"), ("Jeff", "INSERT", "FALSE")]
    people_changes.truncate()  # 12:01> TRUNCATE TABLE people_changes;

    # 12:01> INSERT INTO people VALUES (3, 'Walter'), (4, 'Maud'), (5, 'Uli');  (Listing 2)
    people.insert(pa.table({"id": [3, 4, 5], "name": ["Walter", "Maud", "Uli"]}, schema=PEOPLE))
    # 12:01> INSERT INTO people_changes SELECT ... FROM people_stream;
    with people_changes.transaction(consuming=stream) as tx:
        tx.insert(select_from_stream(stream))
    assert rows(people_changes) == [("Walter", "INSERT", "FALSE"), ("Maud", "INSERT", "FALSE"),
                                    ("Uli", "INSERT", "FALSE")]
    people_changes.truncate()  # 12:01> TRUNCATE TABLE people_changes;

    people.update(pc.field("id") == 1, {"name": "Jeffrey"})  # 12:02
    people.update(pc.field("id") == 4, {"name": "Maude"})  # 12:03
    at_1203 = people.version
    with people_changes.transaction(consuming=stream) as tx:  # 12:03> BEGIN;
        people.delete(pc.field("id").isin([2, 5]))  # 12:04, by another session
        # 12:06> INSERT INTO people_changes SELECT ... FROM people_stream;
        tx.insert(select_from_stream(stream))
    # 12:09> COMMIT;  12:10> SELECT * FROM people_changes;
    got = rows(people_changes)
    assert sorted(got) == sorted([("Jeff", "DELETE", "TRUE"), ("Jeffrey", "INSERT", "TRUE"),
                                  ("Maud", "DELETE", "TRUE"), ("Maude", "INSERT", "TRUE")])
    # Each update is a DELETE-then-INSERT pair (SPEC §Change scans), as printed.
    assert {got[i][0]: got[i + 1][0] for i in range(0, 4, 2)} == {"Jeff": "Jeffrey", "Maud": "Maude"}
    assert all(got[i][1] == "DELETE" and got[i + 1][1] == "INSERT" for i in range(0, 4, 2))

    # The stream consumed up to the version the transaction began at; the
    # DELETE of 12:04 is what it has pending now.
    assert stream.offset == at_1203 == people.version - 1
    assert sorted(rows_of(select_from_stream(stream))) == [("Donny", "DELETE", "FALSE"), ("Uli", "DELETE", "FALSE")]
    assert people.snapshot().to_arrow().sort_by("id").to_pylist() == [
        {"id": 1, "name": "Jeffrey"}, {"id": 3, "name": "Walter"}, {"id": 4, "name": "Maude"}]


def rows_of(t: pa.Table) -> list[tuple]:
    return [tuple(r.values()) for r in t.to_pylist()]
