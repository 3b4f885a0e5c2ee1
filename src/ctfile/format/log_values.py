"""The values a log may hold, as readers accept them (SPEC §Conventions).

A writer that puts a value into the log that its own reader refuses loses the
table to one argument: every later read of the entry fails. This module holds
the two sides of that rule for the values the codec does not type field by
field, and the helpers that keep a valid value from crashing a reader:

- :func:`require_long`: the check of an argument about to become a ``long``
  of the log (an application's batch number, a version), refused with
  :class:`~ctfile.format.errors.InvalidArgumentError` naming the argument
  before anything is written (:func:`ctfile.format.validators.require_int_in`
  over a ``long``);
- :func:`check_json_value`: the check of a free-form JSON value about to be
  written (a commit's ``operationParameters``): JSON types only, string
  keys, finite numbers, integers that fit a ``long``, at most
  :data:`MAX_JSON_DEPTH` levels of nesting;
- :func:`parse_json`: ``json.loads`` for a reader, which turns a value nested
  too deeply for the parser into :class:`~ctfile.format.errors.CorruptLogError`
  instead of a raw ``RecursionError``; :func:`loads_line`, ``json.loads`` of
  one log line without its wrapper (the decoders' hot path);
- :func:`get_field` and :func:`nonneg`: a field of a decoded JSON object of
  its JSON type (an ``int`` a ``long``), and a count ``>= 0``, or
  :class:`~ctfile.format.errors.CorruptLogError` naming the field;
- :func:`utc_datetime` and :func:`format_timestamp`: a timestamp of the log
  (any ``long`` of milliseconds, SPEC §Commit timestamps) as a ``datetime``
  where Python's can hold it (years 1 to 9999), as its milliseconds otherwise.

Examples
--------
>>> require_long(7, "app_version", minimum=0)
7
>>> require_long(2**63, "app_version", minimum=0)
Traceback (most recent call last):
  ...
ctfile.format.errors.InvalidArgumentError: app_version must be an int in 0..9223372036854775807, found 9223372036854775808
>>> check_json_value({"a": [1, 2.5, None]}, "parameters")
>>> check_json_value({"a": {1, 2}}, "parameters")
Traceback (most recent call last):
  ...
ctfile.format.errors.InvalidArgumentError: parameters['a'] must be a JSON value (str, int, float, bool, None, list or dict with str keys), found set {1, 2}
>>> format_timestamp(0), format_timestamp(2**63 - 1)
('1970-01-01T00:00:00.000+00:00', '9223372036854775807 ms after 1970-01-01T00:00:00Z')
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

from ctfile.format.errors import CorruptLogError, InvalidArgumentError
from ctfile.format.schema import LONG_MAX, LONG_MIN, check_long
from ctfile.format.validators import require_int_in

#: SPEC §Conventions: writers nest a JSON value of the log (an action line,
#: a stream state) at most this many levels deep (objects and arrays, the
#: line's own object counting one); readers read at least that. Deeper
#: values are refused by ctfile's writer and may be by readers.
MAX_JSON_DEPTH = 256

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_SCALARS = (str, bool, type(None))
_SCAN_ONCE = json.JSONDecoder().scan_once  # what json.loads runs, minus its Python wrapper


def require_long(value: Any, what: str, *, minimum: int = LONG_MIN, maximum: int = LONG_MAX) -> int:
    """``value`` if it is an int (not a bool) in ``minimum..maximum``, which
    lie within the ``long`` range; else :class:`InvalidArgumentError`
    naming ``what``, the range and the value."""
    return require_int_in(value, what, minimum, maximum)


def check_json_value(value: Any, what: str, *, depth: int = 1) -> None:
    """Refuse a value a writer must not put into the log as JSON (SPEC
    §Conventions): anything but str, int, float, bool, None, list, tuple and
    dict with str keys; a float that is not finite (JSON has no NaN or
    Infinity); an int outside the ``long`` range; nesting deeper than
    :data:`MAX_JSON_DEPTH`, counting ``depth`` for ``value`` itself (the
    level it sits at in its line).

    Raises
    ------
    InvalidArgumentError
        Naming the path of the bad value under ``what``, what was expected
        and what was found.
    """
    if isinstance(value, _SCALARS):
        return
    if isinstance(value, int):
        require_long(value, what)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgumentError(f"{what} must be a finite number (JSON has no NaN or Infinity), found {value!r}")
    elif isinstance(value, (dict, list, tuple)):
        if depth > MAX_JSON_DEPTH:
            raise InvalidArgumentError(
                f"{what} nests deeper than {MAX_JSON_DEPTH} levels of JSON arrays and objects (SPEC §Conventions)"
            )
        for key, item in _items(value, what):
            check_json_value(item, f"{what}[{key!r}]", depth=depth + 1)
    else:
        raise InvalidArgumentError(
            f"{what} must be a JSON value (str, int, float, bool, None, list or dict with str keys), "
            f"found {type(value).__name__} {_short(value)}"
        )


def _items(value: dict | list | tuple, what: str):
    if not isinstance(value, dict):
        return enumerate(value)
    for key in value:
        if not isinstance(key, str):
            raise InvalidArgumentError(f"{what} must have str keys (JSON object keys are strings), found key {key!r}")
    return value.items()


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # a repr that raises says nothing more than the type
        return "?"
    return text if len(text) <= 80 else text[:77] + "..."


def loads_line(line: str) -> Any:
    """``json.loads(line)``; a line that is exactly one JSON value skips the wrapper."""
    try:
        obj, end = _SCAN_ONCE(line, 0)
        if end == len(line):
            return obj
    except Exception:  # StopIteration, JSONDecodeError ...: json.loads reports it
        pass
    return json.loads(line)


def parse_json(text: str | bytes, *, where: str) -> Any:
    """``json.loads(text)`` for a reader: a value nested too deeply for the
    parser (far beyond :data:`MAX_JSON_DEPTH`) raises :class:`CorruptLogError`
    naming ``where``; invalid JSON raises ``json.JSONDecodeError`` as usual
    (callers word it for their file)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise nested_too_deeply(where) from None


def nested_too_deeply(where: str) -> CorruptLogError:
    """The error for a JSON value nested too deeply to decode."""
    return CorruptLogError(
        f"{where}: a JSON value is nested too deeply to decode (writers nest at most {MAX_JSON_DEPTH} levels, "
        "SPEC §Conventions)"
    )


_MISSING = object()


def get_field(obj: dict, key: str, typ, where: str, default: Any = _MISSING) -> Any:
    """Field ``key`` of the JSON object ``obj``, of type ``typ`` (an ``int``
    a ``long``), or ``default`` when absent; :class:`CorruptLogError` naming
    ``where`` and the field otherwise."""
    if key not in obj or obj[key] is None:
        if default is not _MISSING:
            return default
        raise CorruptLogError(f"{where}: required field {key!r} is missing")
    val = obj[key]
    ok = isinstance(val, typ) and not (isinstance(val, bool) and typ in (int, (int, float)))
    if not ok:
        name = getattr(typ, "__name__", str(typ))
        raise CorruptLogError(f"{where}: field {key!r} should be {name}, found {val!r}")
    if typ is int:
        check_long(val, key, where)
    return val


def nonneg(val: int, key: str, where: str) -> int:
    """``val`` (field ``key`` of an object of ``where``) if ``>= 0``; else :class:`CorruptLogError`."""
    if val < 0:
        raise CorruptLogError(f"{where}: field {key!r} must be >= 0, found {val}")
    return val


def utc_datetime(ms: int) -> dt.datetime | None:
    """The UTC datetime ``ms`` milliseconds after the epoch; None where
    Python's datetime cannot hold it (before year 1 or after year 9999),
    which any ``long`` of the log may be (SPEC §Commit timestamps).

    >>> utc_datetime(1000).isoformat(), utc_datetime(2**63 - 1)
    ('1970-01-01T00:00:01+00:00', None)
    """
    try:
        return _EPOCH + dt.timedelta(milliseconds=ms)
    except OverflowError:
        return None


def format_timestamp(ms: int) -> str:
    """``ms`` as an ISO-8601 UTC time with milliseconds, or, where a datetime
    cannot hold it, as the milliseconds themselves."""
    when = utc_datetime(ms)
    if when is None:
        return f"{ms} ms after 1970-01-01T00:00:00Z"
    return when.isoformat(timespec="milliseconds")
