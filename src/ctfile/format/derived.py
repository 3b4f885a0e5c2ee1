"""Derived tables: the definition, the frontier and the refresh record (SPEC §Derived tables).

A derived table's ``metadata`` carries a ``derived`` object (a
:class:`DerivedDefinition`: the query, its sources bound to tables, the refresh
mode and the frontier of the version); each refresh commit's ``commitInfo``
carries a ``refresh`` object (a :class:`RefreshInfo`). This module is pure: it
models both, encodes and decodes their JSON and validates them, raising
:class:`~ctfile.format.errors.InvalidArgumentError` for values given to the
API and :class:`~ctfile.format.errors.CorruptLogError` for values read from a
log, each naming the field, what was expected and what was found.

Examples
--------
>>> d = DerivedDefinition("SELECT id FROM src", (SourceBinding("src", "t-1", "/lake/src"),), RefreshMode.AUTO,
...                       None, 1, ("_ct_dt_key",))
>>> d.frontier, d.data_timestamp
((), None)
>>> d2 = d.with_frontier((SourceVersion("src", "t-1", 3, 17),), 1000)
>>> derived_from_json(derived_to_json(d2), where="test") == d2
True
>>> derived_to_json(d2)["frontier"]
[{'name': 'src', 'tableId': 't-1', 'version': 3, 'schemaId': 17}]
>>> RefreshMode.parse("full"), RefreshAction("NO_DATA")
(<RefreshMode.FULL: 'full'>, <RefreshAction.NO_DATA: 'NO_DATA'>)
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, replace
from typing import Any, Callable

import xxhash

from ctfile.format.errors import CorruptLogError, InvalidArgumentError
from ctfile.format.schema import Schema, schema_to_json
from ctfile.format.validators import is_int

#: SPEC §Derived tables: the protocol feature (reader and writer).
FEATURE_DERIVED_TABLES = "derivedTables"
#: The prefix of derivation columns, the one exception to the ``_ct_`` reservation (SPEC §Hidden columns).
DERIVED_COLUMN_PREFIX = "_ct_dt_"
#: The derivation key, first of ``hiddenColumns``.
DERIVED_KEY_COLUMN = "_ct_dt_key"
#: ``commitInfo.operation`` of a refresh commit.
REFRESH_OPERATION = "REFRESH"
#: ``commitInfo.operation`` of an alter commit (SPEC §Derived tables, changing a definition).
ALTER_OPERATION = "ALTER DERIVED"

_SOURCE_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LONG_MAX = 2**63 - 1


class RefreshMode(str, enum.Enum):
    """How a derived table is refreshed (``metadata.derived.refreshMode``)."""

    FULL = "full"
    INCREMENTAL = "incremental"
    AUTO = "auto"

    @classmethod
    def parse(cls, value: Any) -> "RefreshMode":
        """``value`` as a member (a member or its string); InvalidArgumentError otherwise.

        >>> RefreshMode.parse("incremental")
        <RefreshMode.INCREMENTAL: 'incremental'>
        """
        return _parse_enum(cls, value, "refreshMode")


class RefreshAction(str, enum.Enum):
    """What a refresh did (``commitInfo.refresh.action``)."""

    NO_DATA = "NO_DATA"
    INCREMENTAL = "INCREMENTAL"
    FULL = "FULL"
    REINITIALIZE = "REINITIALIZE"

    @classmethod
    def parse(cls, value: Any) -> "RefreshAction":
        """``value`` as a member (a member or its string); InvalidArgumentError otherwise.

        >>> RefreshAction.parse("FULL")
        <RefreshAction.FULL: 'FULL'>
        """
        return _parse_enum(cls, value, "action")


def _parse_enum(cls: Any, value: Any, what: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        allowed = ", ".join(m.value for m in cls)
        raise InvalidArgumentError(f"{what}: expected one of {allowed}; found {value!r:.80}") from None


#: SPEC §Derived tables, target lag: the ``targetLag`` of a table refreshed only for its consumers.
DOWNSTREAM_LAG = "downstream"
_LAG_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(second|minute|hour|day)s?\s*", re.IGNORECASE)
_LAG_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


@dataclass(frozen=True)
class TargetLagSpec:
    """A ``targetLag`` as a scheduler reads it (SPEC §Derived tables, target
    lag): ``seconds`` of lag allowed, or None for ``downstream`` (refreshed
    only when a table reading it is).

    >>> TargetLagSpec.parse("5 minutes"), TargetLagSpec.parse("1.5 Hours").seconds
    (TargetLagSpec(seconds=300.0), 5400.0)
    >>> TargetLagSpec.parse("DOWNSTREAM").is_downstream
    True
    >>> TargetLagSpec.parse("soon")
    Traceback (most recent call last):
      ...
    ctfile.format.errors.InvalidArgumentError: targetLag: expected a duration such as '5 minutes' (a positive number \
and a unit: seconds, minutes, hours or days) or 'downstream'; found 'soon'
    """

    seconds: float | None

    @property
    def is_downstream(self) -> bool:
        return self.seconds is None

    @classmethod
    def parse(cls, text: Any) -> "TargetLagSpec":
        """``text`` read as SPEC §Derived tables, target lag says;
        InvalidArgumentError naming the forms otherwise."""
        if isinstance(text, str) and text.strip().lower() == DOWNSTREAM_LAG:
            return cls(None)
        m = _LAG_RE.fullmatch(text) if isinstance(text, str) else None
        seconds = float(m.group(1)) * _LAG_UNIT_SECONDS[m.group(2).lower()] if m else 0.0
        if seconds <= 0 or seconds == float("inf"):
            raise InvalidArgumentError(
                "targetLag: expected a duration such as '5 minutes' (a positive number and a unit: seconds, "
                f"minutes, hours or days) or 'downstream'; found {text!r:.80}"
            )
        return cls(seconds)


def check_target_lag(value: Any) -> None:
    """What a writer checks of a ``targetLag`` it writes: None or a lag
    :meth:`TargetLagSpec.parse` reads (readers accept any string)."""
    if value is not None:
        TargetLagSpec.parse(value)


def _require_str(value: Any, what: str, *, nonempty: bool = True) -> str:
    if not isinstance(value, str) or (nonempty and not value):
        raise InvalidArgumentError(f"{what}: expected a non-empty string; found {value!r:.80}")
    return value


def _require_long(value: Any, what: str, *, minimum: int = 0) -> int:
    if not is_int(value) or not minimum <= value <= _LONG_MAX:
        raise InvalidArgumentError(f"{what}: expected an integer from {minimum} to 2**63-1; found {value!r:.80}")
    return value


def _require_tuple_of(value: Any, kind: type, what: str) -> tuple:
    if not isinstance(value, (tuple, list)) or not all(isinstance(v, kind) for v in value):
        raise InvalidArgumentError(f"{what}: expected a tuple of {kind.__name__}; found {value!r:.120}")
    return tuple(value)


@dataclass(frozen=True)
class SourceBinding:
    """A source of a derived table: the ``name`` its query uses, bound to the
    table ``table_id`` at ``uri`` (SPEC §Derived tables, source binding)."""

    name: str
    table_id: str
    uri: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or _SOURCE_NAME_RE.fullmatch(self.name) is None:
            raise InvalidArgumentError(
                f"sources.name: expected a SQL identifier (letters, digits, '_', not starting with a digit); "
                f"found {self.name!r:.80}"
            )
        _require_str(self.table_id, f"sources[{self.name}].tableId")
        _require_str(self.uri, f"sources[{self.name}].uri")


@dataclass(frozen=True)
class SourceVersion:
    """One item of a frontier: source ``name`` (table ``table_id``) at
    ``version``, whose schema there has id ``schema_id`` (:func:`schema_id`)."""

    name: str
    table_id: str
    version: int
    schema_id: int

    def __post_init__(self) -> None:
        _require_str(self.name, "frontier.name")
        _require_str(self.table_id, f"frontier[{self.name}].tableId")
        _require_long(self.version, f"frontier[{self.name}].version")
        _require_long(self.schema_id, f"frontier[{self.name}].schemaId")


def _check_frontier(frontier: tuple, data_timestamp: Any, names: set[str] | None) -> None:
    """The frontier rules shared by the definition and the refresh record."""
    seen = [v.name for v in frontier]
    if len(set(seen)) != len(seen):
        raise InvalidArgumentError(f"frontier: expected each source once; found names {seen}")
    unknown = [n for n in seen if names is not None and n not in names]
    if unknown:
        raise InvalidArgumentError(f"frontier: expected names of sources {sorted(names or ())}; found {unknown}")
    _check_data_timestamp(frontier, data_timestamp)


def _check_data_timestamp(frontier: tuple, data_timestamp: Any) -> None:
    """``dataTimestamp`` is present exactly with a frontier, a long >= 0."""
    if frontier and data_timestamp is None:
        raise InvalidArgumentError("dataTimestamp: expected a timestamp (ms) with a non-empty frontier; found none")
    if not frontier and data_timestamp is not None:
        raise InvalidArgumentError(f"dataTimestamp: expected none before the first refresh (empty frontier); found {data_timestamp!r}")
    if data_timestamp is not None:
        _require_long(data_timestamp, "dataTimestamp")


@dataclass(frozen=True)
class DerivedDefinition:
    """``metadata.derived`` (SPEC §Derived tables): what a derived table is and
    the frontier of its version.

    ``refresh_mode`` may be given as its string; ``hidden_columns`` starts with
    ``_ct_dt_key``; ``frontier`` is empty (and ``data_timestamp`` None) before
    the first refresh.
    """

    query: str
    sources: tuple[SourceBinding, ...]
    refresh_mode: RefreshMode
    target_lag: str | None
    plan_version: int
    hidden_columns: tuple[str, ...]
    frontier: tuple[SourceVersion, ...] = ()
    data_timestamp: int | None = None

    def __post_init__(self) -> None:
        _require_str(self.query, "query")
        sources = _require_tuple_of(self.sources, SourceBinding, "sources")
        if not sources:
            raise InvalidArgumentError("sources: expected at least one source; found none")
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            raise InvalidArgumentError(f"sources: expected unique names; found {names}")
        object.__setattr__(self, "sources", sources)
        object.__setattr__(self, "refresh_mode", RefreshMode.parse(self.refresh_mode))
        if self.target_lag is not None:
            _require_str(self.target_lag, "targetLag")
        _require_long(self.plan_version, "planVersion", minimum=1)
        object.__setattr__(self, "hidden_columns", _checked_hidden(self.hidden_columns))
        frontier = _require_tuple_of(self.frontier, SourceVersion, "frontier")
        object.__setattr__(self, "frontier", frontier)
        _check_frontier(frontier, self.data_timestamp, set(names))

    @property
    def source_names(self) -> tuple[str, ...]:
        """The sources' names, in definition order."""
        return tuple(s.name for s in self.sources)

    @property
    def lag(self) -> TargetLagSpec | None:
        """``targetLag`` as a scheduler reads it (None: no lag);
        InvalidArgumentError for a lag written in another form by an older
        writer."""
        return None if self.target_lag is None else TargetLagSpec.parse(self.target_lag)

    def source(self, name: str) -> SourceBinding:
        """The binding of source ``name``; InvalidArgumentError naming the sources if none."""
        for s in self.sources:
            if s.name == name:
                return s
        raise InvalidArgumentError(f"source: expected one of {list(self.source_names)}; found {name!r}")

    def frontier_of(self, name: str) -> SourceVersion | None:
        """The frontier item of source ``name`` (None before the first refresh)."""
        return next((v for v in self.frontier if v.name == name), None)

    def with_frontier(self, frontier: tuple[SourceVersion, ...], data_timestamp: int) -> "DerivedDefinition":
        """This definition at a new frontier (validated as the constructor does)."""
        return replace(self, frontier=tuple(frontier), data_timestamp=data_timestamp)

    def same_definition(self, other: "DerivedDefinition") -> bool:
        """Whether ``other`` defines the same table (all but the frontier equal)."""
        return replace(self, frontier=(), data_timestamp=None) == replace(other, frontier=(), data_timestamp=None)

    def altered(self, *, refresh_mode: Any, target_lag: str | None) -> "DerivedDefinition":
        """This definition with ``refresh_mode`` and ``target_lag`` (None: no
        lag), all else kept: what an alter commit records (SPEC §Derived
        tables, changing a definition); validated as the constructor does.

        >>> d = DerivedDefinition("SELECT id FROM src", (SourceBinding("src", "t-1", "/src"),), "auto", None, 1,
        ...                       ("_ct_dt_key",))
        >>> a = d.altered(refresh_mode="full", target_lag="1 hour")
        >>> a.refresh_mode, a.target_lag, d.is_altered_by(a), a.is_altered_by(a.altered(refresh_mode="full",
        ...                                                                            target_lag=None))
        (<RefreshMode.FULL: 'full'>, '1 hour', True, True)
        """
        check_target_lag(target_lag)
        return replace(self, refresh_mode=RefreshMode.parse(refresh_mode), target_lag=target_lag)

    def is_altered_by(self, other: "DerivedDefinition") -> bool:
        """Whether ``other`` equals this definition but for ``refreshMode``
        and ``targetLag`` (an alter commit may change nothing else)."""
        return replace(self, refresh_mode=other.refresh_mode, target_lag=other.target_lag) == other


def _checked_hidden(value: Any) -> tuple[str, ...]:
    hidden = _require_tuple_of(value, str, "hiddenColumns")
    if not hidden or hidden[0] != DERIVED_KEY_COLUMN:
        raise InvalidArgumentError(f"hiddenColumns: expected {DERIVED_KEY_COLUMN!r} first; found {list(hidden)}")
    bad = [h for h in hidden if not h.startswith(DERIVED_COLUMN_PREFIX) or h == DERIVED_COLUMN_PREFIX]
    if bad or len(set(hidden)) != len(hidden):
        raise InvalidArgumentError(
            f"hiddenColumns: expected unique names beginning with {DERIVED_COLUMN_PREFIX!r}; found {list(hidden)}"
        )
    return hidden


@dataclass(frozen=True)
class RefreshInfo:
    """``commitInfo.refresh`` (SPEC §Derived tables): what a refresh commit did.

    ``action`` may be given as its string; ``duration_ms`` is optional.

    >>> r = RefreshInfo("FULL", "first refresh", (SourceVersion("src", "t-1", 0, 5),), 1000, 2, 2)
    >>> r.action, refresh_from_json(refresh_to_json(r), where="test") == r
    (<RefreshAction.FULL: 'FULL'>, True)
    """

    action: RefreshAction
    reason: str
    frontier: tuple[SourceVersion, ...]
    data_timestamp: int
    rows_in: int
    rows_out: int
    duration_ms: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "action", RefreshAction.parse(self.action))
        if not isinstance(self.reason, str):
            raise InvalidArgumentError(f"reason: expected a string; found {self.reason!r:.80}")
        frontier = _require_tuple_of(self.frontier, SourceVersion, "frontier")
        if not frontier:
            raise InvalidArgumentError("frontier: expected one item per source; found none")
        object.__setattr__(self, "frontier", frontier)
        _check_frontier(frontier, _require_long(self.data_timestamp, "dataTimestamp"), None)
        _require_long(self.rows_in, "rowsIn")
        _require_long(self.rows_out, "rowsOut")
        if self.duration_ms is not None:
            _require_long(self.duration_ms, "durationMs")


def schema_id(schema: Schema) -> int:
    """The ``schemaId`` of a source's schema (SPEC §Derived tables, frontier
    item): XXH3-64 of its compact JSON, top bit cleared.

    >>> from ctfile.format.schema import schema_from_arrow
    >>> import pyarrow as pa
    >>> a = schema_from_arrow(pa.schema([("id", pa.int64())]))
    >>> schema_id(a) == schema_id(schema_from_arrow(pa.schema([("id", pa.int64())]))), 0 <= schema_id(a) < 2**63
    (True, True)
    >>> schema_id(a) == schema_id(schema_from_arrow(pa.schema([("id", pa.int32())])))
    False
    """
    if not isinstance(schema, Schema):
        raise InvalidArgumentError(
            f"schema: expected a ctfile.format.Schema (Table.schema_at()); found {type(schema).__name__}"
        )
    text = json.dumps(schema_to_json(schema), separators=(",", ":"), ensure_ascii=False)
    return xxhash.xxh3_64_intdigest(text.encode("utf-8")) & _LONG_MAX


def is_derived_column(name: str) -> bool:
    """Whether ``name`` has the derivation-column prefix ``_ct_dt_``."""
    return name.startswith(DERIVED_COLUMN_PREFIX)


def check_derived_schema(derived: DerivedDefinition | None, schema: Schema) -> None:
    """InvalidArgumentError unless ``schema`` and ``derived`` agree (SPEC
    §Derived tables): every hidden column is a top-level column of the schema,
    ``_ct_dt_key`` a string, and no ``_ct_dt_`` column is left unlisted."""
    listed = () if derived is None else derived.hidden_columns
    names = schema.names
    unlisted = [n for n in names if is_derived_column(n) and n not in listed]
    if unlisted:
        raise InvalidArgumentError(
            f"schema: expected {DERIVED_COLUMN_PREFIX}* columns only as listed in derived.hiddenColumns "
            f"{list(listed)}; found {unlisted}"
        )
    missing = [h for h in listed if h not in names]
    if missing:
        raise InvalidArgumentError(f"hiddenColumns: expected columns of the schema {names}; found {missing}")
    if derived is not None and schema.field(DERIVED_KEY_COLUMN).type != "string":
        found = schema.field(DERIVED_KEY_COLUMN).type
        raise InvalidArgumentError(f"schema: expected {DERIVED_KEY_COLUMN} of type string; found {found!r}")


def visible_schema(schema: Schema, derived: DerivedDefinition | None) -> Schema:
    """``schema`` without the derivation columns: the schema ordinary reads
    return (SPEC §Derived tables). ``schema`` itself when not derived."""
    if derived is None:
        return schema
    hidden = set(derived.hidden_columns)
    return Schema(tuple(f for f in schema.fields if f.name not in hidden))


# ---------------------------------------------------------------- JSON


def _source_version_to_json(v: SourceVersion) -> dict:
    return {"name": v.name, "tableId": v.table_id, "version": v.version, "schemaId": v.schema_id}


def derived_to_json(d: DerivedDefinition) -> dict:
    """The ``metadata.derived`` object, fields in the order of SPEC §Derived tables."""
    out: dict[str, Any] = {
        "query": d.query,
        "sources": [{"name": s.name, "tableId": s.table_id, "uri": s.uri} for s in d.sources],
        "refreshMode": d.refresh_mode.value,
        "targetLag": d.target_lag,
        "planVersion": d.plan_version,
        "hiddenColumns": list(d.hidden_columns),
        "frontier": [_source_version_to_json(v) for v in d.frontier],
    }
    if d.data_timestamp is not None:
        out["dataTimestamp"] = d.data_timestamp
    return out


def refresh_to_json(r: RefreshInfo) -> dict:
    """The ``commitInfo.refresh`` object."""
    out: dict[str, Any] = {
        "action": r.action.value,
        "reason": r.reason,
        "frontier": [_source_version_to_json(v) for v in r.frontier],
        "dataTimestamp": r.data_timestamp,
        "rowsIn": r.rows_in,
        "rowsOut": r.rows_out,
    }
    if r.duration_ms is not None:
        out["durationMs"] = r.duration_ms
    return out


class _Fields:
    """Typed access to the fields of one JSON object read from a log: a
    missing or mistyped field is a CorruptLogError naming ``where`` and the
    field, what was expected and what was found."""

    def __init__(self, body: Any, where: str):
        if not isinstance(body, dict):
            raise CorruptLogError(f"{where}: expected an object; found {body!r:.120}")
        self.body, self.where = body, where

    def get(self, key: str, kind: type | tuple, *, required: bool = True) -> Any:
        value = self.body.get(key)
        if value is None and not required:
            return None
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not _is_of(value, kinds):
            expected = " or ".join(k.__name__ for k in kinds)
            found = "nothing" if value is None else repr(value)[:80]
            raise CorruptLogError(f"{self.where}: field {key!r}: expected {expected}; found {found}")
        return value

    def items(self, key: str, decode: Callable[["_Fields"], Any], *, required: bool = True) -> tuple:
        values = self.get(key, list, required=required) or []
        return tuple(decode(_Fields(v, f"{self.where}.{key}[{i}]")) for i, v in enumerate(values))

    def build(self, make: Callable[[], Any]) -> Any:
        """``make()``, its InvalidArgumentError turned into CorruptLogError at ``where``."""
        try:
            return make()
        except InvalidArgumentError as e:
            raise CorruptLogError(f"{self.where}: {e}") from None


def _is_of(value: Any, kinds: tuple) -> bool:
    """Whether a JSON value is of one of ``kinds`` (a boolean is not an int)."""
    if isinstance(value, bool) and bool not in kinds:
        return False
    return value is not None and isinstance(value, kinds)


def same_frontier(a: tuple[SourceVersion, ...], b: tuple[SourceVersion, ...]) -> bool:
    """Whether two frontiers hold the same items, in any order.

    >>> v = SourceVersion("a", "t", 1, 2)
    >>> same_frontier((v, SourceVersion("b", "u", 3, 4)), (SourceVersion("b", "u", 3, 4), v)), same_frontier((v,), ())
    (True, False)
    """
    return sorted(a, key=lambda v: v.name) == sorted(b, key=lambda v: v.name)


def _source_from_json(f: _Fields) -> SourceBinding:
    return f.build(lambda: SourceBinding(f.get("name", str), f.get("tableId", str), f.get("uri", str)))


def _source_version_from_json(f: _Fields) -> SourceVersion:
    return f.build(lambda: SourceVersion(f.get("name", str), f.get("tableId", str), f.get("version", int),
                                         f.get("schemaId", int)))


def derived_from_json(body: Any, *, where: str) -> DerivedDefinition:
    """Decode ``metadata.derived``; CorruptLogError naming the field otherwise."""
    f = _Fields(body, where)
    sources = f.items("sources", _source_from_json)
    frontier = f.items("frontier", _source_version_from_json, required=False)
    hidden = f.get("hiddenColumns", list)
    return f.build(lambda: DerivedDefinition(
        query=f.get("query", str), sources=sources, refresh_mode=f.get("refreshMode", str),
        target_lag=f.get("targetLag", str, required=False), plan_version=f.get("planVersion", int),
        hidden_columns=tuple(hidden), frontier=frontier, data_timestamp=f.get("dataTimestamp", int, required=False),
    ))


def refresh_from_json(body: Any, *, where: str) -> RefreshInfo:
    """Decode ``commitInfo.refresh``; CorruptLogError naming the field otherwise."""
    f = _Fields(body, where)
    frontier = f.items("frontier", _source_version_from_json)
    return f.build(lambda: RefreshInfo(
        action=f.get("action", str), reason=f.get("reason", str), frontier=frontier,
        data_timestamp=f.get("dataTimestamp", int), rows_in=f.get("rowsIn", int), rows_out=f.get("rowsOut", int),
        duration_ms=f.get("durationMs", int, required=False),
    ))
