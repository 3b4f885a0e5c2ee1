"""Field paths as text (SPEC §Schema evolution): backticks quote a name
holding a dot or a backtick, as in Spark SQL; ``parse_field_path`` reads back
what ``format_field_path`` (and so ``field_paths``) writes."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctfile
from ctfile.format.column_paths import format_field_path, parse_field_path
from ctfile.format.errors import SchemaMismatchError
from ctfile.format.schema import schema_from_arrow


@pytest.mark.parametrize(("text", "parts"), [
    ("id", ("id",)),
    ("address.zip", ("address", "zip")),
    ("`a.b`", ("a.b",)),
    ("s.`x.y`", ("s", "x.y")),
    ("`s`.`x`", ("s", "x")),
    ("`it``s`", ("it`s",)),
    ("````", ("`",)),
    ("`a..b`.`.`", ("a..b", ".")),
    ("m.value.`k.v`.element", ("m", "value", "k.v", "element")),
    ("` a `", (" a ",)),
])
def test_parse(text, parts):
    assert parse_field_path(text) == parts


@pytest.mark.parametrize(("text", "what"), [
    ("", "non-empty"),
    ("a..b", "empty"),
    (".a", "empty"),
    ("a.", "ends with '.'"),
    ("``", "quoted name at position 0 is empty"),
    ("`a.b", "never closed"),
    ("```", "never closed"),
    ("`a`b", "followed by 'b'"),
    ("a`b", "holds a backtick"),
    ("a.b`", "holds a backtick"),
])
def test_malformed_paths_are_refused(text, what):
    with pytest.raises(SchemaMismatchError, match=what):
        parse_field_path(text)


NAMES = st.text(alphabet=["a", "Z", ".", "`", " ", "é"], min_size=1, max_size=6)


@settings(max_examples=200)
@given(st.lists(NAMES, min_size=1, max_size=4))
def test_format_then_parse_round_trips(parts):
    text = format_field_path(parts)
    assert parse_field_path(text) == tuple(parts)
    assert ("`" in text) == any("." in p or "`" in p for p in parts)


def _raw_paths(t: pa.DataType, path: tuple) -> list[tuple]:
    """Every path of an Arrow type's nested fields, unquoted, in pre-order."""
    out = []
    if pa.types.is_struct(t):
        for f in t:
            out.append((*path, f.name))
            out += _raw_paths(f.type, (*path, f.name))
    elif pa.types.is_list(t):
        out.append((*path, "element"))
        out += _raw_paths(t.value_type, (*path, "element"))
    elif pa.types.is_map(t):
        out += [(*path, "key"), (*path, "value")]
        out += _raw_paths(t.item_type, (*path, "value"))
    return out


def test_field_paths_read_back_as_the_fields():
    """``field_paths`` quotes what needs it: each path parses to the names
    of its field, dots and backticks in them included."""
    arrow = pa.schema([
        ("id", pa.int64()),
        ("a.b", pa.string()),
        ("tick`name", pa.int32()),
        ("s", pa.struct([("x.y", pa.int32()), ("q", pa.list_(pa.struct([("`", pa.string())])))])),
        ("m.m", pa.map_(pa.string(), pa.struct([("v.w", pa.int64())]))),
    ])
    paths = ctfile.field_paths(schema_from_arrow(arrow))
    expected = _raw_paths(pa.struct(list(arrow)), ())
    assert [parse_field_path(p) for p in paths.values()] == expected
    assert list(paths.values()) == [
        "id", "`a.b`", "`tick``name`", "s", "s.`x.y`", "s.q", "s.q.element", "s.q.element.````",
        "`m.m`", "`m.m`.key", "`m.m`.value", "`m.m`.value.`v.w`",
    ]
