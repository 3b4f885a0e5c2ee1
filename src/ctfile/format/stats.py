"""Encoding of per-partition statistic values (SPEC §Statistics).

Bounds are stored in JSON in a type-dependent form chosen to stay readable in
a ``cat`` of the log: numbers for numeric and boolean columns, ISO-8601 strings
for dates and timestamps, strings for decimals. Strings are truncated to
:data:`STRING_PREFIX_LENGTH` characters: the minimum is cut to a prefix (still
a lower bound), the maximum is cut and its last character incremented (still an
upper bound); when no upper bound that short exists, the maximum is omitted.
Binary and nested columns, and non-finite float bounds, carry no min/max.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
from typing import Any, Callable

STRING_PREFIX_LENGTH = 32
_MAX_CODE_POINT = 0x10FFFF
_UTC = _dt.timezone.utc


def has_bounds(type_name: Any) -> bool:
    """Whether a column of this type carries min/max values."""
    return isinstance(type_name, str) and type_name != "binary"


def truncate_min(value: str) -> str:
    return value[:STRING_PREFIX_LENGTH]


def truncate_max(value: str) -> str | None:
    if len(value) <= STRING_PREFIX_LENGTH:
        return value
    prefix = list(value[:STRING_PREFIX_LENGTH])
    # Increment the last character that can be incremented (skipping the
    # surrogate range), dropping what follows it: the result sorts above
    # every string with the original prefix.
    while prefix:
        cp = ord(prefix[-1]) + 1
        if 0xD800 <= cp <= 0xDFFF:
            cp = 0xE000
        if cp <= _MAX_CODE_POINT:
            prefix[-1] = chr(cp)
            return "".join(prefix)
        prefix.pop()
    return None


def encode_bound(type_name: str, value: Any, *, is_max: bool) -> Any:
    """Encode a Python bound value for JSON; ``None`` means "omit this bound"."""
    if value is None or not has_bounds(type_name):
        return None
    encode = _ENCODERS.get(type_name) or (_encode_decimal if type_name.startswith("decimal(") else None)
    return None if encode is None else encode(value, is_max)


def _encode_float(value: Any, is_max: bool) -> float | None:
    """A finite float; none for NaN and the infinities (min/max exclude NaN)."""
    f = float(value)
    return f if math.isfinite(f) else None


def _encode_string(value: str, is_max: bool) -> str | None:
    """A prefix: truncated, a max rounded up (SPEC §Statistics)."""
    return truncate_max(value) if is_max else truncate_min(value)


def _encode_timestamp(value: _dt.datetime, is_max: bool) -> str:
    """An instant in UTC, ``Z``-suffixed (a naive value is taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=_UTC)
    # isoformat, not strftime: strftime("%Y") does not zero-pad years < 1000.
    return value.astimezone(_UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _encode_timestamp_ntz(value: _dt.datetime, is_max: bool) -> str:
    return value.replace(tzinfo=None).isoformat(timespec="microseconds")


def _encode_decimal(value: Any, is_max: bool) -> str:
    return str(value)


def _encode_bool(value: Any, is_max: bool) -> bool:
    return bool(value)


def _encode_int(value: Any, is_max: bool) -> int:
    return int(value)


def _encode_date(value: _dt.date, is_max: bool) -> str:
    return value.isoformat()


#: Each type with bounds (but decimals) -> how a Python bound is encoded for JSON.
_ENCODERS: dict[str, Callable[[Any, bool], Any]] = {
    "boolean": _encode_bool,
    "byte": _encode_int,
    "short": _encode_int,
    "integer": _encode_int,
    "long": _encode_int,
    "float": _encode_float,
    "double": _encode_float,
    "string": _encode_string,
    "date": _encode_date,
    "timestamp": _encode_timestamp,
    "timestamp_ntz": _encode_timestamp_ntz,
}


_INT_BITS = {"byte": 8, "short": 16, "integer": 32, "long": 64}


def decode_bound(type_name: str, value: Any) -> Any:
    """Decode a JSON bound into the Python value pyarrow scalars accept.

    Raises ``ValueError`` on a value that does not decode as a value of the
    type (a wrong JSON type, an integer outside the column type's range, a
    non-finite number, a malformed date); the caller turns that into a
    :class:`~ctfile.format.errors.CorruptLogError` (SPEC §Statistics).

    Examples
    --------
    >>> decode_bound("short", -3), decode_bound("date", "2024-01-02")
    (-3, datetime.date(2024, 1, 2))
    >>> decode_bound("byte", 300)
    Traceback (most recent call last):
      ...
    ValueError: expected a byte (-128..127), found 300
    """
    try:
        return _decode_bound(type_name, value)
    except (TypeError, AttributeError, ArithmeticError) as e:  # e.g. decimal.InvalidOperation, OverflowError
        raise ValueError(f"expected a {type_name} bound, found {value!r} ({e})") from e


def _decode_bound(type_name: str, value: Any) -> Any:
    decode = _DECODERS.get(type_name)
    if decode is not None:
        return decode(type_name, value)
    if type_name.startswith("decimal("):
        return _decode_decimal(type_name, value)
    raise ValueError(f"type {type_name!r} carries no bounds")


def _decode_boolean(type_name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected a boolean, found {value!r}")
    return value


def _decode_integer(type_name: str, value: Any) -> int:
    """An int (not a bool) in the range of the integer type ``type_name``."""
    if isinstance(value, bool) or not isinstance(value, int):  # is_int inlined: pruning decodes every bound
        raise ValueError(f"expected an integer, found {value!r}")
    bits = _INT_BITS[type_name]
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    if not lo <= value <= hi:
        raise ValueError(f"expected a {type_name} ({lo}..{hi}), found {value}")
    return value


def _decode_number(type_name: str, value: Any) -> float:
    """A finite float, from a JSON integer or float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, found {value!r}")
    if not math.isfinite(float(value)):
        raise ValueError(f"expected a finite number, found {value!r}")
    return float(value)


def _decode_string(type_name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, found {value!r}")
    return value


def _decode_date(type_name: str, value: Any) -> _dt.date:
    return _dt.date.fromisoformat(value)


def _decode_timestamp(type_name: str, value: Any) -> _dt.datetime:
    """An aware UTC datetime (the text is ``Z``-suffixed)."""
    return _dt.datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(_UTC)


def _decode_timestamp_ntz(type_name: str, value: Any) -> _dt.datetime:
    return _dt.datetime.fromisoformat(value)


def _decode_decimal(type_name: str, value: Any) -> decimal.Decimal:
    d = decimal.Decimal(value)
    if not d.is_finite():
        raise ValueError(f"expected a finite decimal, found {value!r}")
    return d


#: Each type with bounds (but decimals) -> how a JSON bound decodes.
_DECODERS: dict[str, Callable[[str, Any], Any]] = {
    "boolean": _decode_boolean,
    "byte": _decode_integer,
    "short": _decode_integer,
    "integer": _decode_integer,
    "long": _decode_integer,
    "float": _decode_number,
    "double": _decode_number,
    "string": _decode_string,
    "date": _decode_date,
    "timestamp": _decode_timestamp,
    "timestamp_ntz": _decode_timestamp_ntz,
}
