"""What a MERGE with ``NOT MATCHED BY SOURCE`` clauses reads, for conflict
detection (SPEC §Conflict detection): every row its conditions may select.
A concurrent commit that adds such a row conflicts (always at
``Serializable``; at ``WriteSerializable`` unless it is a blind append,
which then counts as committed after the MERGE and survives it); a row
its condition does not select does not conflict. The concurrent writer is
another process (a plain INSERT) or another transaction (a MERGE that
inserts, not a blind append). A single statement that loses is re-run at
the latest version and deletes the winner's row too.
"""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.errors import CommitConflictError

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("region", pa.string())])
SNAPSHOT = pa.table({"id": [1, 2], "region": ["EU", "US"]}, schema=SCHEMA)


def _rows(ids, regions) -> pa.Table:
    return pa.table({"id": ids, "region": regions}, schema=SCHEMA)


def _table(tmp_path, level: str | None) -> ctfile.Table:
    props = {"ctfile.isolationLevel": level} if level else None
    t = ctfile.create_table(tmp_path / "t", SCHEMA, partition_rows=2, properties=props)
    t.insert(_rows([1, 2, 3, 4], ["EU", "US", "EU", "US"]))
    return t


def _insert_in_another_process(uri: str, id_: int, region: str) -> None:
    code = (f"import ctfile, pyarrow as pa; t = ctfile.open_table({uri!r}); "
            f"t.insert(pa.table({{'id': [{id_}], 'region': [{region!r}]}}, schema=t.schema))")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _sync(builder, condition=None):
    return builder.when_not_matched_by_source_delete(condition=condition).execute()


def _ids(t: ctfile.Table) -> list[int]:
    return sorted(ctfile.open_table(t.uri).to_arrow().column("id").to_pylist())


def test_serializable_a_concurrent_insert_it_would_delete_conflicts(tmp_path):
    t = _table(tmp_path, "Serializable")
    with pytest.raises(CommitConflictError) as e:
        with t.transaction() as tx:
            _sync(tx.merge_builder(SNAPSHOT, on="id"))
            _insert_in_another_process(t.uri, 9, "EU")  # a blind append, after the MERGE read
    assert e.value.kind.name == "READ_PREDICATE" and _ids(t) == [1, 2, 3, 4, 9]
    # As a statement of its own, the MERGE is re-run after the insert: it deletes row 9 too.
    r = _sync(t.merge_builder(SNAPSHOT, on="id"))
    assert r.num_deleted_rows == 3 and _ids(t) == [1, 2]


def test_write_serializable_a_blind_append_survives_as_if_after_it(tmp_path):
    t = _table(tmp_path, None)
    with t.transaction() as tx:
        _sync(tx.merge_builder(SNAPSHOT, on="id"))
        _insert_in_another_process(t.uri, 9, "EU")
    assert tx.result.committed and tx.result.num_deleted_rows == 2 and _ids(t) == [1, 2, 9]


def test_write_serializable_a_concurrent_merge_that_inserts_conflicts(tmp_path):
    t = _table(tmp_path, None)
    other = ctfile.open_table(t.uri)
    with pytest.raises(CommitConflictError):
        with t.transaction() as tx:
            _sync(tx.merge_builder(SNAPSHOT, on="id"))
            other.merge(_rows([9], ["US"]), on="id")  # reads by key: not a blind append
    assert _ids(t) == [1, 2, 3, 4, 9]


@pytest.mark.parametrize("region, conflicts", [("US", False), ("EU", True)])
def test_a_conditional_clause_reads_only_the_rows_it_selects(tmp_path, region, conflicts):
    """``WHEN NOT MATCHED BY SOURCE AND t.region = 'EU' THEN DELETE``: an
    added US row is none of its business, an added EU row is."""
    t = _table(tmp_path, "Serializable")

    def run() -> ctfile.WriteTransaction:
        with t.transaction() as tx:
            _sync(tx.merge_builder(SNAPSHOT, on="id"), pc.field("t.region") == "EU")
            _insert_in_another_process(t.uri, 9, region)
        return tx

    if conflicts:
        with pytest.raises(CommitConflictError):
            run()
        assert _ids(t) == [1, 2, 3, 4, 9]
    else:
        assert run().result.num_deleted_rows == 1 and _ids(t) == [1, 2, 4, 9]


def test_the_conditional_clause_reads_only_the_partitions_it_may_select(tmp_path):
    """Statistics prune the partitions a NOT MATCHED BY SOURCE condition
    cannot select: a concurrent delete of a row in one of them does not
    conflict (rule 2 needs a partition the MERGE read)."""
    t = ctfile.create_table(tmp_path / "t", SCHEMA, partition_rows=2)
    t.insert(_rows([1, 2], ["EU", "EU"]))
    t.insert(_rows([3, 4], ["US", "US"]))
    other = ctfile.open_table(t.uri)
    with t.transaction() as tx:
        n = _sync(tx.merge_builder(_rows([1], ["EU"]), on="id"), pc.field("region") == "EU")
        other.delete(pc.field("id") == 4)
    assert n["deleted"] == 1 and tx.result.committed and _ids(t) == [1, 3]
