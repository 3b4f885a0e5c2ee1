"""Table schema with stable field ids (SPEC §Schema).

A schema is a struct of fields; every field, including nested list elements
and map keys/values, carries an integer id that never changes for the life of
the column (Iceberg's rule), so statistics and future renames are keyed by id,
not by name. Type names are Spark's (``long``, ``string``, ``timestamp``...)
because ctfile's users meet them in PySpark first.

This module is pure: it maps between the JSON form, the model, and pyarrow
types, and does no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Union

import pyarrow as pa

from ctfile.format.errors import CorruptLogError, InvalidArgumentError, SchemaMismatchError

# SPEC §Hidden columns: reserved names and field ids.
ROW_ID_COLUMN = "_ct_row_id"
ROW_VERSION_COLUMN = "_ct_row_version"
ROW_ID_FIELD_ID = 2147483540
ROW_VERSION_FIELD_ID = 2147483539
HIDDEN_COLUMNS = (ROW_ID_COLUMN, ROW_VERSION_COLUMN)
RESERVED_PREFIXES = ("_ct_", "METADATA$")

PARQUET_FIELD_ID_KEY = b"PARQUET:field_id"

# SPEC §Conventions: a `long` of the log (and of the `long` column type) is a
# signed 64-bit integer.
LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1

PRIMITIVE_TYPES = (
    "boolean",
    "byte",
    "short",
    "integer",
    "long",
    "float",
    "double",
    "string",
    "binary",
    "date",
    "timestamp",
    "timestamp_ntz",
)
_DECIMAL_RE = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")

_PRIMITIVE_TO_ARROW = {
    "boolean": pa.bool_(),
    "byte": pa.int8(),
    "short": pa.int16(),
    "integer": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    # SPEC §Schema: timestamps are microseconds; `timestamp` is an instant
    # (stored adjusted to UTC), `timestamp_ntz` a wall-clock value.
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}


@dataclass(frozen=True)
class ArrayType:
    element_id: int
    element_type: "DataType"
    contains_null: bool = True


@dataclass(frozen=True)
class MapType:
    key_id: int
    key_type: "DataType"
    value_id: int
    value_type: "DataType"
    value_contains_null: bool = True


@dataclass(frozen=True)
class StructType:
    fields: tuple["Field", ...]


# A primitive type is its name ("long", "decimal(10,2)", ...).
DataType = Union[str, ArrayType, MapType, StructType]


@dataclass(frozen=True)
class Field:
    id: int
    name: str
    type: DataType
    nullable: bool = True
    metadata: dict[str, str] = field(default_factory=dict, compare=True, hash=False)


@dataclass(frozen=True)
class Schema:
    """The table's columns, in order. Hidden columns are never part of it."""

    fields: tuple[Field, ...]

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def field(self, name: str) -> Field:
        if not isinstance(name, str):
            raise InvalidArgumentError(f"a column name must be a string, found {name!r:.80}")
        for f in self.fields:
            if f.name == name:
                return f
        raise SchemaMismatchError(
            f"no column {name!r} in the table schema; expected one of {self.names}"
        )

    def field_by_id(self, field_id: int) -> Field | None:
        for f in self.fields:
            if f.id == field_id:
                return f
        return None

    def max_field_id(self) -> int:
        return max((_max_id(f) for f in self.fields), default=0)

    def to_arrow(self, *, include_hidden: bool = False, field_ids: bool = True) -> pa.Schema:
        # Readers ask for the Arrow schema on every partition they open, and
        # building it costs ~0.2 ms for a 16-column table; the schema is
        # immutable, so each variant is built once per instance.
        cache = self.__dict__.get("_arrow_cache")
        if cache is None:
            cache = {}
            object.__setattr__(self, "_arrow_cache", cache)
        key = (include_hidden, field_ids)
        out = cache.get(key)
        if out is None:
            fields = [_field_to_arrow(f, field_ids) for f in self.fields]
            if include_hidden:
                fields.extend(hidden_arrow_fields(field_ids=field_ids))
            out = cache[key] = pa.schema(fields)
        return out


def hidden_arrow_fields(*, field_ids: bool = True) -> list[pa.Field]:
    def meta(fid: int):
        return {PARQUET_FIELD_ID_KEY: str(fid).encode()} if field_ids else None

    return [
        pa.field(ROW_ID_COLUMN, pa.int64(), nullable=True, metadata=meta(ROW_ID_FIELD_ID)),
        pa.field(
            ROW_VERSION_COLUMN, pa.int64(), nullable=True, metadata=meta(ROW_VERSION_FIELD_ID)
        ),
    ]


def _max_id(f: Field) -> int:
    return max(f.id, _max_type_id(f.type))


def _max_type_id(t: DataType) -> int:
    if isinstance(t, StructType):
        return max((_max_id(f) for f in t.fields), default=0)
    if isinstance(t, ArrayType):
        return max(t.element_id, _max_type_id(t.element_type))
    if isinstance(t, MapType):
        return max(t.key_id, t.value_id, _max_type_id(t.key_type), _max_type_id(t.value_type))
    return 0


# ---------------------------------------------------------------- arrow mapping


def _type_to_arrow(t: DataType, field_ids: bool) -> pa.DataType:
    if isinstance(t, str):
        if t in _PRIMITIVE_TO_ARROW:
            return _PRIMITIVE_TO_ARROW[t]
        m = _DECIMAL_RE.match(t)
        if m:
            return pa.decimal128(int(m.group(1)), int(m.group(2)))
        raise CorruptLogError(f"unknown type {t!r}; expected one of {PRIMITIVE_TYPES} or decimal(p,s)")
    if isinstance(t, StructType):
        return pa.struct([_field_to_arrow(f, field_ids) for f in t.fields])
    if isinstance(t, ArrayType):
        elem = pa.field(
            "element",
            _type_to_arrow(t.element_type, field_ids),
            nullable=t.contains_null,
            metadata=_id_meta(t.element_id, field_ids),
        )
        return pa.list_(elem)
    if isinstance(t, MapType):
        key = pa.field(
            "key", _type_to_arrow(t.key_type, field_ids), nullable=False,
            metadata=_id_meta(t.key_id, field_ids),
        )
        value = pa.field(
            "value", _type_to_arrow(t.value_type, field_ids), nullable=t.value_contains_null,
            metadata=_id_meta(t.value_id, field_ids),
        )
        return pa.map_(key, value)
    raise TypeError(f"not a ctfile type: {t!r}")


def _id_meta(fid: int, field_ids: bool):
    return {PARQUET_FIELD_ID_KEY: str(fid).encode()} if field_ids else None


def _field_to_arrow(f: Field, field_ids: bool) -> pa.Field:
    return pa.field(
        f.name, _type_to_arrow(f.type, field_ids), nullable=f.nullable,
        metadata=_id_meta(f.id, field_ids),
    )


def type_from_arrow(t: pa.DataType, next_id: list[int], where: str) -> DataType:
    """Map an Arrow type to a ctfile type, assigning nested ids from ``next_id``."""
    for is_kind, name in _ARROW_PRIMITIVES:
        if is_kind(t):
            return name
    for is_kind, convert in _ARROW_COMPOUNDS:
        if is_kind(t):
            return convert(t, next_id, where)
    raise SchemaMismatchError(
        f"{where}: Arrow type {t} has no ctfile equivalent; expected a signed integer, "
        f"floating point, boolean, string, binary, date, timestamp, decimal, struct, list or map"
    )


#: Arrow's primitive types and the ctfile type of each (strings and binaries
#: in any of their three layouts).
_ARROW_PRIMITIVES: tuple[tuple[Callable[[pa.DataType], bool], str], ...] = (
    (pa.types.is_boolean, "boolean"),
    (pa.types.is_int8, "byte"),
    (pa.types.is_int16, "short"),
    (pa.types.is_int32, "integer"),
    (pa.types.is_int64, "long"),
    (pa.types.is_float32, "float"),
    (pa.types.is_float64, "double"),
    (pa.types.is_string, "string"),
    (pa.types.is_large_string, "string"),
    (pa.types.is_string_view, "string"),
    (pa.types.is_binary, "binary"),
    (pa.types.is_large_binary, "binary"),
    (pa.types.is_binary_view, "binary"),
    (pa.types.is_date, "date"),
)


def _from_dictionary(t: pa.DictionaryType, next_id: list[int], where: str) -> DataType:
    """A dictionary-encoded column is its values' type."""
    return type_from_arrow(t.value_type, next_id, where)


def _from_timestamp(t: pa.TimestampType, next_id: list[int], where: str) -> DataType:
    """``timestamp`` with a time zone (an instant), ``timestamp_ntz`` without."""
    return "timestamp" if t.tz is not None else "timestamp_ntz"


def _from_decimal(t: pa.DataType, next_id: list[int], where: str) -> DataType:
    """``decimal(p,s)`` of a precision ctfile stores (at most 38)."""
    if t.precision > 38:
        raise SchemaMismatchError(f"{where}: decimal precision {t.precision} > 38 is not supported")
    return f"decimal({t.precision},{t.scale})"


def _from_struct(t: pa.StructType, next_id: list[int], where: str) -> DataType:
    """A struct of at least one field (SPEC §Schema, writer requirements:
    Parquet cannot store an empty one), its field names unique (a path such
    as ``s.a`` would name both)."""
    if t.num_fields == 0:
        raise SchemaMismatchError(
            f"{where}: a struct needs at least one field (Parquet cannot store an empty one); found {t}"
        )
    names = [t.field(i).name for i in range(t.num_fields)]
    if len(set(names)) < len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise SchemaMismatchError(f"{where}: duplicate field name {dup!r} in struct {t}")
    return StructType(tuple(_field_from_arrow(t.field(i), next_id, where) for i in range(t.num_fields)))


def _from_list(t: pa.ListType, next_id: list[int], where: str) -> DataType:
    """An array; its element takes the next id."""
    eid = _take_id(next_id)
    return ArrayType(eid, type_from_arrow(t.value_type, next_id, where), t.value_field.nullable)


def _from_map(t: pa.MapType, next_id: list[int], where: str) -> DataType:
    """A map; its key and value take the next two ids."""
    kid, vid = _take_id(next_id), _take_id(next_id)
    return MapType(
        kid, type_from_arrow(t.key_type, next_id, where),
        vid, type_from_arrow(t.item_type, next_id, where), t.item_field.nullable,
    )


#: The Arrow types converted by a function of their own: the nested types
#: (whose fields take ids from ``next_id``) and those with parameters.
_ARROW_COMPOUNDS: tuple[tuple[Callable[[pa.DataType], bool], Callable[..., DataType]], ...] = (
    (pa.types.is_dictionary, _from_dictionary),
    (pa.types.is_timestamp, _from_timestamp),
    (pa.types.is_decimal, _from_decimal),
    (pa.types.is_struct, _from_struct),
    (pa.types.is_list, _from_list),
    (pa.types.is_large_list, _from_list),
    (pa.types.is_map, _from_map),
)


def _take_id(next_id: list[int]) -> int:
    next_id[0] += 1
    return next_id[0]


def _field_from_arrow(f: pa.Field, next_id: list[int], where: str) -> Field:
    fid = _take_id(next_id)
    return Field(fid, f.name, type_from_arrow(f.type, next_id, f"{where}.{f.name}"), f.nullable)


def schema_from_arrow(arrow_schema: pa.Schema, *, derived_columns: tuple[str, ...] = ()) -> Schema:
    """Build a new table schema from Arrow, assigning field ids 1, 2, 3, ...

    ``derived_columns`` are the derivation columns of a derived table, the
    only ``_ct_`` names allowed (SPEC §Derived tables).

    Raises
    ------
    SchemaMismatchError
        On a reserved or duplicate column name, or a type with no ctfile equivalent.
    InvalidArgumentError
        ``arrow_schema`` is not a ``pyarrow.Schema``.
    """
    if not isinstance(arrow_schema, pa.Schema):
        raise InvalidArgumentError(f"schema must be a pyarrow.Schema, found {type(arrow_schema).__name__}")
    seen: set[str] = set()
    next_id = [0]
    fields = []
    for f in arrow_schema:
        if f.name not in derived_columns:
            validate_column_name(f.name)
        if f.name in seen:
            raise SchemaMismatchError(f"duplicate column name {f.name!r} in schema")
        seen.add(f.name)
        fields.append(_field_from_arrow(f, next_id, f.name))
    if not fields:
        raise SchemaMismatchError("a table needs at least one column; the schema given has none")
    return Schema(tuple(fields))


def validate_column_name(name: str) -> None:
    if not isinstance(name, str) or not name:
        raise SchemaMismatchError(f"column names must be non-empty strings; found {name!r}")
    for prefix in RESERVED_PREFIXES:
        if name.startswith(prefix):
            raise SchemaMismatchError(
                f"column name {name!r} uses the reserved prefix {prefix!r} "
                f"(SPEC §Hidden columns); rename the column"
            )


# ---------------------------------------------------------------- JSON codec


def type_to_json(t: DataType) -> Any:
    if isinstance(t, str):
        return t
    if isinstance(t, StructType):
        return {"type": "struct", "fields": [field_to_json(f) for f in t.fields]}
    if isinstance(t, ArrayType):
        return {
            "type": "array",
            "elementId": t.element_id,
            "elementType": type_to_json(t.element_type),
            "containsNull": t.contains_null,
        }
    if isinstance(t, MapType):
        return {
            "type": "map",
            "keyId": t.key_id,
            "keyType": type_to_json(t.key_type),
            "valueId": t.value_id,
            "valueType": type_to_json(t.value_type),
            "valueContainsNull": t.value_contains_null,
        }
    raise TypeError(f"not a ctfile type: {t!r}")


def field_to_json(f: Field) -> dict:
    out = {"id": f.id, "name": f.name, "type": type_to_json(f.type), "nullable": f.nullable}
    if f.metadata:
        out["metadata"] = dict(f.metadata)
    return out


def schema_to_json(s: Schema) -> dict:
    return {"type": "struct", "fields": [field_to_json(f) for f in s.fields]}


def _req(obj: dict, key: str, typ, where: str):
    if not isinstance(obj, dict) or key not in obj:
        raise CorruptLogError(f"{where}: required field {key!r} is missing")
    val = obj[key]
    if typ is int and isinstance(val, bool) or not isinstance(val, typ):
        raise CorruptLogError(
            f"{where}: field {key!r} should be {getattr(typ, '__name__', typ)}, found {val!r}"
        )
    if typ is int:
        check_long(val, key, where)
    return val


def check_long(val: int, key: str, where: str) -> int:
    """``val``, if it fits a ``long`` (SPEC §Conventions); else CorruptLogError."""
    if not LONG_MIN <= val <= LONG_MAX:
        raise CorruptLogError(f"{where}: field {key!r} is {val}, which does not fit a long (a signed 64-bit integer)")
    return val


#: Parquet stores a field id as a 32-bit integer (SPEC §Schema).
MAX_FIELD_ID = 2**31 - 1


def _field_id(obj: dict, key: str, where: str) -> int:
    """A field id of the schema JSON: an integer in 1..2^31 - 1."""
    val = _req(obj, key, int, where)
    if not 1 <= val <= MAX_FIELD_ID:
        raise CorruptLogError(f"{where}: {key} {val} is not a field id (1 to {MAX_FIELD_ID}, Parquet's 32-bit field_id)")
    return val


def type_from_json(obj: Any, where: str) -> DataType:
    if isinstance(obj, str):
        return _primitive_from_json(obj, where)
    kind = _req(obj, "type", str, where)
    if kind == "struct":
        return StructType(tuple(field_from_json(f, where) for f in _req(obj, "fields", list, where)))
    if kind == "array":
        return ArrayType(
            _field_id(obj, "elementId", where),
            type_from_json(_req(obj, "elementType", (str, dict), where), where),
            bool(obj.get("containsNull", True)),
        )
    if kind == "map":
        return MapType(
            _field_id(obj, "keyId", where),
            type_from_json(_req(obj, "keyType", (str, dict), where), where),
            _field_id(obj, "valueId", where),
            type_from_json(_req(obj, "valueType", (str, dict), where), where),
            bool(obj.get("valueContainsNull", True)),
        )
    raise CorruptLogError(f"{where}: unknown nested type {kind!r}")


def _primitive_from_json(name: str, where: str) -> DataType:
    """A primitive type's name: one of :data:`PRIMITIVE_TYPES`, or a decimal
    of precision 1 to 38 whose scale is at most its precision."""
    if name in PRIMITIVE_TYPES:
        return name
    m = _DECIMAL_RE.match(name)
    if m and 1 <= int(m.group(1)) <= 38 and int(m.group(2)) <= int(m.group(1)):
        return f"decimal({int(m.group(1))},{int(m.group(2))})"
    raise CorruptLogError(f"{where}: unknown type {name!r}")


def field_from_json(obj: Any, where: str) -> Field:
    name = _req(obj, "name", str, where)
    metadata = obj.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise CorruptLogError(f"{where}.{name}: field 'metadata' should be an object, found {metadata!r:.80}")
    return Field(
        id=_field_id(obj, "id", where),
        name=name,
        type=type_from_json(_req(obj, "type", (str, dict), f"{where}.{name}"), f"{where}.{name}"),
        nullable=_req(obj, "nullable", bool, where),
        metadata=dict(metadata),
    )


def schema_from_json(obj: Any, where: str = "schema") -> Schema:
    fields = tuple(field_from_json(f, where) for f in _req(obj, "fields", list, where))
    ids = [f.id for f in fields]
    if len(set(ids)) != len(ids):
        raise CorruptLogError(f"{where}: duplicate field ids {ids}")
    return Schema(fields)
