"""ctfile.format.stats: bound encoding and string truncation."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctfile.format.stats import (
    STRING_PREFIX_LENGTH,
    decode_bound,
    encode_bound,
    has_bounds,
    truncate_max,
    truncate_min,
)

UTC = dt.timezone.utc


def test_prefix_length_is_32():
    assert STRING_PREFIX_LENGTH == 32


def test_short_strings_unchanged():
    s = "x" * 32
    assert truncate_min(s) == s and truncate_max(s) == s
    assert encode_bound("string", "", is_max=True) == ""


def test_min_is_prefix():
    s = "abcdefghij" * 4
    assert truncate_min(s) == s[:32]
    assert encode_bound("string", s, is_max=False) == s[:32]


def test_max_increments_last_char():
    s = "a" * 40
    assert truncate_max(s) == "a" * 31 + "b"
    assert encode_bound("string", s, is_max=True) == "a" * 31 + "b"


def test_max_skips_surrogates():
    s = "a" * 31 + "\ud7ff" + "zzz"
    assert truncate_max(s) == "a" * 31 + "\ue000"


def test_max_carries_over_max_code_point():
    s = "a" * 30 + "q" + chr(0x10FFFF) + "tail"
    assert truncate_max(s) == "a" * 30 + "r"


def test_max_omitted_when_impossible():
    s = chr(0x10FFFF) * 40
    assert truncate_max(s) is None
    assert encode_bound("string", s, is_max=True) is None
    assert encode_bound("string", s, is_max=False) == chr(0x10FFFF) * 32


def _utf8(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60))
def test_truncated_bounds_still_bound(s):
    lo = truncate_min(s)
    hi = truncate_max(s)
    assert len(lo) <= 32 and lo <= s
    # Parquet and readers compare UTF-8 bytes; code point order is the same.
    assert _utf8(lo) <= _utf8(s)
    if hi is not None:
        assert len(hi) <= 32 and hi >= s and _utf8(hi) >= _utf8(s)
    else:
        assert all(c == chr(0x10FFFF) for c in s[:32])


@pytest.mark.parametrize(
    "type_name, value, expected_json",
    [
        ("boolean", True, True),
        ("byte", -128, -128),
        ("short", 32767, 32767),
        ("integer", -(2**31), -(2**31)),
        ("long", 2**63 - 1, 2**63 - 1),
        ("float", 1.5, 1.5),
        ("double", -0.0, -0.0),
        ("string", "héllo", "héllo"),
        ("date", dt.date(2024, 2, 29), "2024-02-29"),
        ("date", dt.date(1, 1, 1), "0001-01-01"),
        ("timestamp", dt.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC), "2024-01-02T03:04:05.678901Z"),
        ("timestamp_ntz", dt.datetime(2024, 1, 2, 3, 4, 5, 6), "2024-01-02T03:04:05.000006"),
        ("decimal(10,2)", decimal.Decimal("-12345678.90"), "-12345678.90"),
        ("decimal(38,0)", decimal.Decimal("9" * 38), "9" * 38),
    ],
)
def test_encode_decode_round_trip(type_name, value, expected_json):
    for is_max in (False, True):
        enc = encode_bound(type_name, value, is_max=is_max)
        assert enc == expected_json
        back = decode_bound(type_name, json.loads(json.dumps(enc)))
        assert back == value
        assert type(back) is type(value)


def test_timestamp_converted_to_utc():
    paris = dt.timezone(dt.timedelta(hours=2))
    v = dt.datetime(2024, 6, 1, 12, 0, tzinfo=paris)
    enc = encode_bound("timestamp", v, is_max=False)
    assert enc == "2024-06-01T10:00:00.000000Z"
    assert decode_bound("timestamp", enc) == v
    # A naive timestamp statistic is taken as UTC.
    assert encode_bound("timestamp", dt.datetime(2024, 6, 1, 10), is_max=False) == enc


@pytest.mark.parametrize("type_name", ["timestamp", "timestamp_ntz"])
@pytest.mark.parametrize("year", [1, 999, 9999])
def test_timestamp_extreme_years_round_trip(type_name, year):
    tz = UTC if type_name == "timestamp" else None
    v = dt.datetime(year, 12, 31, 23, 59, 59, 999999, tzinfo=tz)
    enc = encode_bound(type_name, v, is_max=True)
    assert enc.startswith(f"{year:04d}-")
    assert decode_bound(type_name, enc) == v


@pytest.mark.parametrize("v", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("t", ["float", "double"])
def test_non_finite_floats_have_no_bound(t, v):
    assert encode_bound(t, v, is_max=False) is None
    assert encode_bound(t, v, is_max=True) is None


def test_types_without_bounds():
    assert not has_bounds("binary")
    assert encode_bound("binary", b"abc", is_max=False) is None
    from ctfile.format.schema import ArrayType

    assert not has_bounds(ArrayType(2, "long"))
    assert encode_bound("long", None, is_max=True) is None
    with pytest.raises(ValueError):
        decode_bound("binary", "abc")


@pytest.mark.parametrize(
    "type_name, bad",
    [
        ("boolean", 1), ("long", True), ("long", 1.5), ("long", "1"), ("double", "1.0"),
        ("double", False), ("string", 5), ("date", "2024-13-01"), ("timestamp", "yesterday"),
        ("decimal(10,2)", "abc"),
        # out of the column type's range, or not finite (SPEC §Statistics)
        ("byte", 128), ("byte", -129), ("short", 2**15), ("integer", -(2**31) - 1), ("long", 2**63),
        ("double", math.inf), ("float", math.nan), ("double", 10**400),
        ("decimal(10,2)", "NaN"), ("decimal(10,2)", "-Infinity"), ("decimal(10,2)", [1]),
        # wrong JSON type for a string-encoded bound, and a UTC conversion out of range
        ("timestamp", 5), ("timestamp_ntz", 5), ("date", None), ("timestamp", "0001-01-01T00:00:00+01:00"),
    ],
)
def test_decode_rejects_mistyped_bounds(type_name, bad):
    """Only ValueError, whatever the type: callers turn it into CorruptLogError
    (no OverflowError, AttributeError or decimal.InvalidOperation escapes)."""
    with pytest.raises(ValueError):
        decode_bound(type_name, bad)


@pytest.mark.parametrize(
    "type_name, bound", [("byte", -128), ("short", 2**15 - 1), ("integer", 2**31 - 1), ("long", -(2**63))]
)
def test_decode_accepts_the_limits_of_integer_types(type_name, bound):
    assert decode_bound(type_name, bound) == bound


def test_decode_int_as_double():
    assert decode_bound("double", 3) == 3.0 and isinstance(decode_bound("double", 3), float)
