"""``WriteTransaction.prepare_merge`` / ``execute_prepared_merge``: a MERGE
planned once runs with the candidates it found, and is planned again when
another statement or a schema change came between (its candidates would
be stale)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

import ctfile

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])


def _table(tmp_path) -> ctfile.Table:
    t = ctfile.create_table(str(tmp_path / "t"), SCHEMA, partition_rows=2)
    t.insert(pa.table({"id": [1, 2, 3, 4], "v": [10, 20, 30, 40]}, schema=SCHEMA))
    return t


def _upsert(t: ctfile.Table, source: pa.Table) -> ctfile.MergeStatement:
    return (t.merge_builder(source, on="id").when_matched_update({"v": pc.field("s.v")})
            .when_not_matched_insert({"id": pc.field("s.id"), "v": pc.field("s.v")}).statement)


def test_a_prepared_merge_runs_over_the_candidates_it_found(tmp_path):
    t = _table(tmp_path)
    source = pa.table({"id": [4, 9], "v": [41, 90]}, schema=SCHEMA)
    with t.transaction(operation="MERGE") as tx:
        prepared = tx.prepare_merge(_upsert(t, source), source)
        assert [p.num_records for p in prepared.candidates] == [2] and prepared.candidate_rows == 2
        assert tx.execute_prepared_merge(prepared) == {"inserted": 1, "updated": 1, "deleted": 0}
    assert sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])[-2:] == [{"id": 4, "v": 41}, {"id": 9, "v": 90}]


def test_a_statement_between_makes_it_plan_again(tmp_path):
    """The insert between prepare and execute adds the row ``id=5`` in a
    partition the prepared candidates do not hold: run as prepared, the
    MERGE would insert a second ``id=5``; planned again, it updates it."""
    t = _table(tmp_path)
    source = pa.table({"id": [5], "v": [55]}, schema=SCHEMA)
    with t.transaction(operation="MERGE") as tx:
        prepared = tx.prepare_merge(_upsert(t, source), source)
        assert prepared.candidates == ()
        tx.insert(pa.table({"id": [5], "v": [50]}, schema=SCHEMA))
        assert tx.execute_prepared_merge(prepared) == {"inserted": 0, "updated": 1, "deleted": 0}
    rows = t.to_arrow().to_pylist()
    assert [r for r in rows if r["id"] == 5] == [{"id": 5, "v": 55}]
