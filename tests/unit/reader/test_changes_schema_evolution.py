"""Change scans across schema changes (SPEC §Change scans, "Schema changes"):
regressions found by ``tests/property/test_schema_model.py``."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile

CAPTURE = {"ctfile.changeCapture": "before_after"}
ACTION, ISUPDATE = "METADATA$ACTION", "METADATA$ISUPDATE"
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("a", pa.string()), ("b", pa.string())])


def people(root, *, capture: bool) -> ctfile.Table:
    """v1 insert (1, x, p), (2, y, q); v2 update b of id 1; v3 drop b."""
    t = ctfile.create_table(str(root), SCHEMA, properties=CAPTURE if capture else None)
    t.insert(pa.table({"id": [1, 2], "a": ["x", "y"], "b": ["p", "q"]}, schema=SCHEMA))
    t.update(pc.field("id") == 1, {"b": "changed"})
    with t.update_schema() as u:
        u.drop_column("b")
    return t


def summary(cs) -> list[tuple]:
    return [(r["id"], r["a"], r.get("b"), r[ACTION], r[ISUPDATE]) for r in cs.to_arrow().to_pylist()]


@pytest.mark.parametrize("capture", [False, True])
@pytest.mark.parametrize("information", ["default", "audit"])
def test_a_pair_differing_only_in_a_dropped_column_is_not_output(tmp_path, capture, information):
    """The UPDATE of v2 changed only ``b``; in the schema of v3 its images are
    equal, so a scan ending at v3 outputs nothing, captured or not (a
    captured commit's change file holds the pair as the writer saw it)."""
    t = people(tmp_path / "t", capture=capture)
    assert t.changes(start_version=2, end_version=3, information=information).to_arrow().num_rows == 0
    assert t.changes(start_version=2, end_version=3, information=information, changelog="op").to_arrow().num_rows == 0
    # Ending at v2, b is there and the pair is output.
    assert summary(t.changes(start_version=2, end_version=2, information=information)) == [
        (1, "x", "p", "DELETE", True), (1, "x", "changed", "INSERT", True)]


def test_a_filter_names_the_columns_of_the_interval_end(tmp_path):
    """A filter is checked against the schema the scan outputs (that of the
    end version), not the latest: a column dropped or renamed later can be
    filtered on, and one that only exists later cannot."""
    t = people(tmp_path / "t", capture=False)
    with t.update_schema() as u:
        u.rename_column("a", "a2")  # v4
    cs = t.changes(start_version=2, end_version=2, filter=pc.field("b") == "changed")
    assert summary(cs) == [(1, "x", "changed", "INSERT", False)]
    assert summary(t.changes(start_version=1, end_version=2, filter=pc.field("a") == "y")) == [(2, "y", "q", "INSERT", False)]
    with pytest.raises(ctfile.SchemaMismatchError, match="a2"):
        t.changes(start_version=1, end_version=2, filter=pc.field("a2") == "y")
    assert t.changes(start_version=1, filter=pc.field("a2") == "y").to_arrow().column("a2").to_pylist() == ["y"]
