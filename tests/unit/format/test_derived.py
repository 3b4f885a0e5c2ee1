"""``ctfile.format.derived`` (SPEC §Derived tables): the definition and the
refresh record round-trip through their JSON exactly, and every value that
breaks a rule is refused with a typed error naming the field, what was
expected and what was found (InvalidArgumentError from the API,
CorruptLogError from a log)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctfile.format import derived as D
from ctfile.format.errors import CorruptLogError, InvalidArgumentError
from ctfile.format.schema import schema_from_arrow

NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
LONGS = st.integers(0, 2**63 - 1)


@st.composite
def definitions(draw) -> D.DerivedDefinition:
    names = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
    sources = tuple(D.SourceBinding(n, draw(st.text(min_size=1, max_size=5)), draw(st.text(min_size=1, max_size=9)))
                    for n in names)
    hidden = ("_ct_dt_key", *draw(st.lists(st.sampled_from(["_ct_dt_rows", "_ct_dt_sum_0", "_ct_dt_cnt_0"]),
                                            unique=True)))
    frontier = tuple(D.SourceVersion(s.name, s.table_id, draw(LONGS), draw(LONGS)) for s in sources) \
        if draw(st.booleans()) else ()
    return D.DerivedDefinition(
        draw(st.text(min_size=1)), sources, draw(st.sampled_from(list(D.RefreshMode))),
        draw(st.none() | st.text(min_size=1)), draw(st.integers(1, 2**63 - 1)), hidden, frontier,
        draw(LONGS) if frontier else None,
    )


@settings(max_examples=50, deadline=None)
@given(definitions(), st.sampled_from(list(D.RefreshAction)), st.text(), LONGS, LONGS, st.none() | LONGS)
def test_definitions_and_refreshes_round_trip(d, action, reason, rows_in, rows_out, duration):
    assert D.derived_from_json(D.derived_to_json(d), where="t") == d
    frontier = d.frontier or tuple(D.SourceVersion(s.name, s.table_id, 0, 1) for s in d.sources)
    r = D.RefreshInfo(action, reason, frontier, 5, rows_in, rows_out, duration)
    assert D.refresh_from_json(D.refresh_to_json(r), where="t") == r
    assert d.with_frontier(frontier, 5).same_definition(d)


SOURCE = D.SourceBinding("src", "t", "/src")


@pytest.mark.parametrize("make, match", [
    (lambda: D.SourceBinding("1src", "t", "/u"), "sources.name: expected a SQL identifier"),
    (lambda: D.SourceBinding("s", "", "/u"), r"sources\[s\].tableId: expected a non-empty string; found ''"),
    (lambda: D.SourceVersion("s", "t", -1, 0), r"frontier\[s\].version: expected an integer from 0"),
    (lambda: D.DerivedDefinition("q", (), "full", None, 1, ("_ct_dt_key",)), "sources: expected at least one"),
    (lambda: D.DerivedDefinition("q", (SOURCE, SOURCE), "full", None, 1, ("_ct_dt_key",)), "expected unique names"),
    (lambda: D.DerivedDefinition("q", (SOURCE,), "often", None, 1, ("_ct_dt_key",)),
     "refreshMode: expected one of full, incremental, auto; found 'often'"),
    (lambda: D.DerivedDefinition("q", (SOURCE,), "full", None, 0, ("_ct_dt_key",)), "planVersion: expected an integer from 1"),
    (lambda: D.DerivedDefinition("q", (SOURCE,), "full", None, 1, ()), "expected '_ct_dt_key' first; found \\[\\]"),
    (lambda: D.DerivedDefinition("q", (SOURCE,), "full", None, 1, ("_ct_dt_key", "x")), "beginning with '_ct_dt_'"),
    (lambda: D.DerivedDefinition("q", (SOURCE,), "full", None, 1, ("_ct_dt_key",), (), 5),
     "dataTimestamp: expected none before the first refresh"),
    (lambda: D.DerivedDefinition("q", (SOURCE,), "full", None, 1, ("_ct_dt_key",), (D.SourceVersion("src", "t", 1, 1),)),
     "dataTimestamp: expected a timestamp"),
    (lambda: D.RefreshInfo("LATER", "r", (D.SourceVersion("s", "t", 1, 1),), 1, 0, 0), "action: expected one of NO_DATA"),
    (lambda: D.RefreshInfo("FULL", "r", (), 1, 0, 0), "frontier: expected one item per source; found none"),
    (lambda: D.RefreshInfo("FULL", "r", (D.SourceVersion("s", "t", 1, 1),) * 2, 1, 0, 0), "expected each source once"),
    (lambda: D.RefreshInfo("FULL", None, (D.SourceVersion("s", "t", 1, 1),), 1, 0, 0), "reason: expected a string"),
    (lambda: D.RefreshInfo("FULL", "r", (D.SourceVersion("s", "t", 1, 1),), 1, -1, 0), "rowsIn: expected an integer"),
    (lambda: D.schema_id({"fields": []}), "schema: expected a ctfile.format.Schema"),
])
def test_bad_values_are_refused_naming_the_field(make, match):
    with pytest.raises(InvalidArgumentError, match=match):
        make()


def test_a_log_value_of_the_wrong_type_is_a_corrupt_log_error():
    good = D.derived_to_json(D.DerivedDefinition("q", (SOURCE,), "full", None, 1, ("_ct_dt_key",)))
    for key, value, match in (("planVersion", True, "field 'planVersion': expected int; found True"),
                              ("sources", {}, "field 'sources': expected list"),
                              ("hiddenColumns", ["_ct_dt_key", 3], "hiddenColumns: expected a tuple of str")):
        with pytest.raises(CorruptLogError, match=match):
            D.derived_from_json({**good, key: value}, where="v1 metadata.derived")
    with pytest.raises(CorruptLogError, match=r"v1 metadata.derived.sources\[0\]: expected an object"):
        D.derived_from_json({**good, "sources": ["src"]}, where="v1 metadata.derived")


def test_the_schema_and_the_definition_must_agree():
    d = D.DerivedDefinition("q", (SOURCE,), "full", None, 1, ("_ct_dt_key", "_ct_dt_rows"))
    fits = schema_from_arrow(pa.schema([("a", pa.int64()), ("_ct_dt_key", pa.string()), ("_ct_dt_rows", pa.int64())]),
                             derived_columns=d.hidden_columns)
    D.check_derived_schema(d, fits)
    assert D.visible_schema(fits, d).names == ["a"] and D.visible_schema(fits, None) is fits
    with pytest.raises(InvalidArgumentError, match=r"only as listed in derived.hiddenColumns \[\]; found \['_ct_dt_key'"):
        D.check_derived_schema(None, fits)
    assert D.schema_id(fits) != D.schema_id(D.visible_schema(fits, d))
