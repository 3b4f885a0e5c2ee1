"""Append-only sources of a derived table (SPEC §Append-only tables): the
refresh's source state says which sources are append-only and whether the
interval since the frontier only appended, from the logs alone; ``explain()``
names them and the rules they make cheaper."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.derived import compile_query
from ctfile.spark.derived_sources import SourceState, append_only_names

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64())])


def _state(t: ctfile.Table, name: str, frontier_version: int) -> SourceState:
    b = ctfile.SourceBinding(name, t.table_id, t.uri)
    previous = ctfile.SourceVersion(name, t.table_id, frontier_version, ctfile.schema_id(t.schema_at(frontier_version)))
    return SourceState(binding=b, table=ctfile.open_table(t.uri), version=t.version, previous=previous)


def _insert(t: ctfile.Table, *ks: int) -> None:
    t.insert(pa.table({"k": list(ks), "v": list(ks)}, schema=SCHEMA))


@pytest.fixture
def tables(tmp_path):
    """``events``: append-only from creation; ``late``: a delete, then the property."""
    events = ctfile.create_table(str(tmp_path / "events"), SCHEMA, properties={"ctfile.appendOnly": "true"})
    _insert(events, 1, 2)
    late = ctfile.create_table(str(tmp_path / "late"), SCHEMA)
    _insert(late, 1, 2)  # 1
    late.delete(pc.field("k") == 1)  # 2
    late.set_properties({"ctfile.appendOnly": "true"})  # 3
    return events, late


def test_append_only_sources_only_appended(tables):
    events, late = tables
    _insert(events, 3)
    events.compact(target_rows=10)
    _insert(late, 5)
    e = _state(events, "events", 1)
    assert e.append_only and e.appended_since_frontier and e.estimate.appended_only
    before_set = _state(late, "late", 1)  # the interval holds the delete
    assert before_set.append_only and not before_set.appended_since_frontier
    assert not before_set.estimate.appended_only
    after_set = _state(late, "late", 3)
    assert after_set.appended_since_frontier and after_set.estimate.appended_only
    assert append_only_names([e, before_set]) == ("events", "late")


def test_a_source_that_turned_the_property_off_is_not_append_only(tables):
    events, _ = tables
    events.set_properties({"ctfile.appendOnly": "false"})
    events.delete(pc.field("k") == 1)
    s = _state(events, "events", 1)
    assert not s.append_only and not s.appended_since_frontier and not s.estimate.appended_only
    assert append_only_names([s]) == ()


def test_explain_names_append_only_sources_and_their_rules():
    q = compile_query("SELECT e.k, min(e.v) AS lo, count(DISTINCT d.v) AS n FROM e JOIN d ON e.k = d.k GROUP BY e.k",
                      sources=("e", "d"))
    one = q.explain(append_only=("e",))
    assert one.append_only == ("e",) and one.as_json()["appendOnlySources"] == ["e"]
    rules = {r.operator: r.rule for r in one.rows}
    assert "affected groups are recomputed" in rules["aggregate"]  # d is not append-only
    scans = [r.rule for r in one.rows if r.operator == "scan"]
    assert sum("append-only change scan" in r for r in scans) == 1
    both = str(q.explain(append_only=("e", "d")))
    assert "every source is append-only (ctfile.appendOnly), no group is recomputed" in both
    assert "count(DISTINCT): the stored count plus" in both and "are recomputed" not in both
    assert "append-only sources" not in str(q.explain())
    for bad in ("e", ("x",), 3):
        with pytest.raises(ctfile.InvalidArgumentError, match="append_only must name sources"):
            q.explain(append_only=bad)
