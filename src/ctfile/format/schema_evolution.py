"""Schema changes by field id (SPEC §Schema evolution).

Pure functions over :class:`~ctfile.format.schema.Schema`: a
:class:`SchemaEditor` applies the allowed changes one after another, checking
each against the schema it has so far, and :func:`diff_schemas` tells what
changed between two schemas by field id (for history, and for whether the
change needs the ``schemaEvolution`` protocol feature). Nothing here does
I/O; :mod:`ctfile.table.maintenance` commits the result.

A *path* names a field from the top level, joined by ``.``, with
``element`` for a list's element and ``key`` / ``value`` for a map's
(Iceberg's convention); a name holding a ``.`` or a backtick is quoted in
backticks, as in Spark SQL (:mod:`ctfile.format.column_paths`, the one
parser and formatter of path text). A path may also be given as a tuple of
names, unquoted.
"""

from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass, replace
from typing import Sequence, Union

import pyarrow as pa

from ctfile.format.column_paths import format_field_path, parse_field_path, quote_field_name
from ctfile.format.derived import is_derived_column
from ctfile.format.errors import InvalidArgumentError, SchemaMismatchError
from ctfile.format.schema import (
    ArrayType,
    DataType,
    Field,
    MapType,
    Schema,
    StructType,
    schema_from_arrow,
    type_from_arrow,
    type_to_json,
    validate_column_name,
)

Path = Union[str, Sequence[str]]

# SPEC §Schema evolution, widen: each type and the types it may become.
_INTEGERS = ("byte", "short", "integer", "long")
_WIDER = {t: set(_INTEGERS[i + 1:]) for i, t in enumerate(_INTEGERS)} | {"float": {"double"}}
_COLLECTION_PARTS = ("element", "key", "value")


class SchemaChangeKind(enum.Enum):
    """The kinds of schema change (SPEC §Schema evolution, allowed changes)."""

    ADD = "add"
    DROP = "drop"
    RENAME = "rename"
    WIDEN = "widen"
    MAKE_NULLABLE = "make_nullable"
    MOVE = "move"


@dataclass(frozen=True)
class SchemaChange:
    """One change: its kind, the path it applies to (in the schema before it,
    except for ADD, whose path is the new field's), and a detail for people
    (the new name, the new type)."""

    kind: SchemaChangeKind
    path: str
    detail: str = ""

    @property
    def top_level(self) -> bool:
        return len(parse_field_path(self.path)) == 1

    @property
    def needs_feature(self) -> bool:
        """True when readers of revision 3 would misread the result (SPEC
        §Schema evolution, protocol): anything but top-level adds, moves and
        nullability."""
        return not (self.top_level and self.kind in (SchemaChangeKind.ADD, SchemaChangeKind.MOVE, SchemaChangeKind.MAKE_NULLABLE))

    def to_json(self) -> dict:
        out = {"change": self.kind.value, "path": self.path}
        if self.detail:
            out["detail"] = self.detail
        return out

    def __str__(self) -> str:
        return f"{self.kind.value} {self.path}" + (f" ({self.detail})" if self.detail else "")


def can_widen(old: DataType, new: DataType) -> bool:
    """Whether primitive type ``old`` may become ``new`` (SPEC §Schema evolution)."""
    if not (isinstance(old, str) and isinstance(new, str)):
        return False
    if new in _WIDER.get(old, ()):
        return True
    if old.startswith("decimal(") and new.startswith("decimal("):
        (p, s), (q, t) = (_decimal(old), _decimal(new))
        return s == t and q > p
    return False


def _decimal(t: str) -> tuple[int, int]:
    p, s = t[len("decimal("):-1].split(",")
    return int(p), int(s)


def split_path(path: Path) -> tuple[str, ...]:
    """``path`` as a tuple of names ("a.b" -> ("a", "b"), "`a.b`" -> ("a.b",):
    :func:`~ctfile.format.column_paths.parse_field_path`); a tuple as it is."""
    if isinstance(path, str):
        if not path:
            raise SchemaMismatchError("a column path must not be empty")
        return parse_field_path(path)
    parts = tuple(path) if isinstance(path, (list, tuple)) else ()
    if not parts or not all(isinstance(p, str) and p for p in parts):
        raise SchemaMismatchError(f"a column path must be a non-empty string or tuple of names, found {path!r}")
    return parts


def _type_name(t: DataType) -> str:
    j = type_to_json(t)
    return j if isinstance(j, str) else j["type"]


class SchemaEditor:
    """Apply schema changes, checking each; :attr:`schema` is the result so far.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from ctfile.format.schema import schema_from_arrow
    >>> e = SchemaEditor(schema_from_arrow(pa.schema([("id", pa.int32()), ("legacy", pa.string())])), 2)
    >>> e.drop_column("legacy"); e.add_column("email", pa.string()); e.widen_column("id", pa.int64())
    >>> [(f.id, f.name, f.type) for f in e.schema.fields], e.last_field_id
    ([(1, 'id', 'long'), (3, 'email', 'string')], 3)
    >>> [str(c) for c in e.changes]
    ['drop legacy', 'add email (string)', 'widen id (integer -> long)']
    """

    def __init__(self, schema: Schema, last_field_id: int, *, derived_columns: bool = False):
        self.schema = schema
        self.last_field_id = max(last_field_id, schema.max_field_id())
        self.changes: list[SchemaChange] = []
        #: SPEC §Derived tables: a refresh may add derivation columns (``_ct_dt_*``).
        self.derived_columns = derived_columns

    # ------------------------------------------------------------ changes

    def add_column(
        self, path: Path, type: pa.DataType, *, doc: str | None = None, after: str | None = None, first: bool = False
    ) -> None:
        """Add a nullable field (with new ids) at the end of its struct, after
        sibling ``after``, or ``first``."""
        parts = split_path(path)
        parent, name = parts[:-1], parts[-1]
        if not isinstance(type, pa.DataType):
            raise SchemaMismatchError(f"add_column({format_field_path(parts)!r}): type must be a pyarrow DataType, found {type!r}")
        if doc is not None and not isinstance(doc, str):
            raise SchemaMismatchError(f"add_column({format_field_path(parts)!r}): doc must be a string, found {doc!r}")
        self._check_name(parent, name)
        next_id = [self.last_field_id]
        fid = next_id[0] = next_id[0] + 1
        new = Field(fid, name, type_from_arrow(type, next_id, format_field_path(parts)), True, {"comment": doc} if doc else {})

        def edit(fields: tuple[Field, ...]) -> tuple[Field, ...]:
            if any(f.name == name for f in fields):
                raise SchemaMismatchError(f"cannot add {format_field_path(parts)!r}: a field of that name exists; drop or rename it first")
            return _place(fields + (new,), name, after=after, first=first, where=format_field_path(parts))

        self._edit_struct(parent, edit, "add a field to")
        self.last_field_id = next_id[0]
        self.changes.append(SchemaChange(SchemaChangeKind.ADD, format_field_path(parts), _type_name(new.type)))

    def drop_column(self, path: Path) -> None:
        """Drop a field; its ids are retired, never reused."""
        parts = split_path(path)
        self._field(parts)

        def edit(fields: tuple[Field, ...]) -> tuple[Field, ...]:
            return tuple(f for f in fields if f.name != parts[-1])

        if len(parts) == 1 and len(self.schema.fields) == 1:
            raise SchemaMismatchError(f"cannot drop {parts[0]!r}: it is the table's only column")
        parent = self._type_at(parts[:-1]) if len(parts) > 1 else None
        if isinstance(parent, StructType) and len(parent.fields) == 1:  # Parquet cannot store an empty struct
            where = format_field_path(parts[:-1])
            raise SchemaMismatchError(
                f"cannot drop {format_field_path(parts)!r}: it is the only field of {where!r}; drop {where!r} instead"
            )
        self._edit_struct(parts[:-1], edit, "drop a field of")
        self.changes.append(SchemaChange(SchemaChangeKind.DROP, format_field_path(parts)))

    def rename_column(self, path: Path, new_name: str) -> None:
        """Give a field a new name; its id, and so its values, stay."""
        parts = split_path(path)
        self._field(parts)
        if not isinstance(new_name, str):
            raise SchemaMismatchError(f"rename_column({'.'.join(parts)!r}): new_name must be a string, found {new_name!r:.80}")
        if new_name == parts[-1]:
            return
        self._check_name(parts[:-1], new_name)

        def edit(fields: tuple[Field, ...]) -> tuple[Field, ...]:
            return tuple(replace(f, name=new_name) if f.name == parts[-1] else f for f in fields)

        self._edit_struct(parts[:-1], edit, "rename a field of")
        self.changes.append(SchemaChange(SchemaChangeKind.RENAME, format_field_path(parts), new_name))

    def widen_column(self, path: Path, type: pa.DataType) -> None:
        """Widen a primitive field, list element or map value (SPEC §Schema
        evolution: integers up, float to double, decimal precision up)."""
        parts = split_path(path)
        where = format_field_path(parts)
        if not isinstance(type, pa.DataType):
            raise SchemaMismatchError(f"widen_column({where!r}): type must be a pyarrow DataType, found {type!r}")
        new = type_from_arrow(type, [0], where)
        old = self._type_at(parts)
        if old == new:
            return
        if not can_widen(old, new):
            raise SchemaMismatchError(
                f"cannot change {where!r} from {_type_name(old)} to {_type_name(new)}: a schema change may only widen "
                f"a type (byte -> short -> integer -> long, float -> double, decimal(p,s) -> decimal(p',s) with p' > p)"
            )
        self._set_slot(parts, lambda f: replace(f, type=new), lambda t, k: _with_child(t, k, type=new))
        self.changes.append(SchemaChange(SchemaChangeKind.WIDEN, where, f"{_type_name(old)} -> {_type_name(new)}"))

    def make_nullable(self, path: Path) -> None:
        """Let a field (or a list element, map value) hold nulls."""
        parts = split_path(path)
        if parts[-1] == "key" and isinstance(self._type_at(parts[:-1]), MapType):
            raise SchemaMismatchError(f"cannot make {format_field_path(parts)!r} nullable: map keys are never null")
        self._type_at(parts)
        self._set_slot(parts, lambda f: replace(f, nullable=True), lambda t, k: _with_child(t, k, nullable=True))
        self.changes.append(SchemaChange(SchemaChangeKind.MAKE_NULLABLE, format_field_path(parts)))

    def move_column(self, path: Path, *, after: str | None = None, first: bool = False) -> None:
        """Move a field first, or after sibling ``after``, within its struct."""
        parts = split_path(path)
        self._field(parts)
        if (after is None) == (not first):
            raise SchemaMismatchError(f"move_column({format_field_path(parts)!r}): give exactly one of after= or first=True")

        def edit(fields: tuple[Field, ...]) -> tuple[Field, ...]:
            return _place(fields, parts[-1], after=after, first=first, where=format_field_path(parts))

        self._edit_struct(parts[:-1], edit, "move a field of")
        self.changes.append(SchemaChange(SchemaChangeKind.MOVE, format_field_path(parts), "first" if first else f"after {after}"))

    # ------------------------------------------------------------ navigation

    def _check_name(self, parent: tuple[str, ...], name: str) -> None:
        if not parent and not (self.derived_columns and is_derived_column(name)):
            validate_column_name(name)
        elif not isinstance(name, str) or not name:
            raise SchemaMismatchError(f"field names must be non-empty strings; found {name!r}")
        st = self._type_at(parent) if parent else StructType(self.schema.fields)
        if isinstance(st, StructType) and any(f.name == name for f in st.fields):
            raise SchemaMismatchError(f"a field {format_field_path((*parent, name))!r} already exists")

    def _type_at(self, parts: tuple[str, ...]) -> DataType:
        """The type at ``parts`` (a field's type, or a collection's child)."""
        t: DataType = StructType(self.schema.fields)
        for i, part in enumerate(parts):
            t = _child(t, part, format_field_path(parts[: i + 1]))
        return t

    def _field(self, parts: tuple[str, ...]) -> Field:
        parent = self._type_at(parts[:-1]) if len(parts) > 1 else StructType(self.schema.fields)
        if not isinstance(parent, StructType):
            raise SchemaMismatchError(f"{format_field_path(parts)!r} is not a struct field")
        for f in parent.fields:
            if f.name == parts[-1]:
                return f
        raise SchemaMismatchError(f"no field {format_field_path(parts)!r}; fields there are {[f.name for f in parent.fields]}")

    def _edit_struct(self, parent: tuple[str, ...], edit, what: str) -> None:
        if parent and not isinstance(self._type_at(parent), StructType):
            raise SchemaMismatchError(f"cannot {what} {format_field_path(parent)!r}: it is not a struct")
        root = _rewrite(StructType(self.schema.fields), parent, lambda st: StructType(edit(st.fields)))
        self.schema = Schema(root.fields)

    def _set_slot(self, parts: tuple[str, ...], on_field, on_collection) -> None:
        """Apply ``on_field`` to the field at ``parts``, or ``on_collection(type,
        part)`` to the list or map holding the element/key/value at ``parts``."""
        parent = parts[:-1]
        holder = self._type_at(parent) if parent else StructType(self.schema.fields)
        if isinstance(holder, StructType):
            self._edit_struct(parent, lambda fs: tuple(on_field(f) if f.name == parts[-1] else f for f in fs), "change")
        else:
            root = _rewrite(StructType(self.schema.fields), parent, lambda t: on_collection(t, parts[-1]))
            self.schema = Schema(root.fields)


def _child(t: DataType, part: str, where: str) -> DataType:
    """The type of the child ``part`` of ``t`` (a struct's field, a list's
    element, a map's key or value); ``where`` names it for the error."""
    if isinstance(t, StructType):
        return _field_type(t, part, where)
    if isinstance(t, ArrayType) and part == "element":
        return t.element_type
    if isinstance(t, MapType) and part in ("key", "value"):
        return t.key_type if part == "key" else t.value_type
    raise SchemaMismatchError(f"no field {where!r}: a {_type_name(t)} has {_children_of(t)}")


def _field_type(t: StructType, name: str, where: str) -> DataType:
    for f in t.fields:
        if f.name == name:
            return f.type
    raise SchemaMismatchError(f"no field {where!r}; fields there are {[f.name for f in t.fields]}")


def _children_of(t: DataType) -> str:
    """The children a list or a map has, in words."""
    if isinstance(t, ArrayType):
        return "an 'element'"
    return "a 'key' and a 'value'" if isinstance(t, MapType) else "no fields"


def _rewrite(t: DataType, parts: tuple[str, ...], fn) -> DataType:
    """``t`` with the type at ``parts`` replaced by ``fn(that type)``."""
    if not parts:
        return fn(t)
    head, rest = parts[0], parts[1:]
    if isinstance(t, StructType):
        return StructType(tuple(replace(f, type=_rewrite(f.type, rest, fn)) if f.name == head else f for f in t.fields))
    if isinstance(t, ArrayType):
        return replace(t, element_type=_rewrite(t.element_type, rest, fn))
    if head == "key":
        return replace(t, key_type=_rewrite(t.key_type, rest, fn))
    return replace(t, value_type=_rewrite(t.value_type, rest, fn))


def _with_child(t: DataType, part: str, *, type: DataType | None = None, nullable: bool | None = None) -> DataType:
    """A list or map with its element/key/value type or nullability changed."""
    if isinstance(t, ArrayType) and part == "element":
        return _with_element(t, type, nullable)
    if isinstance(t, MapType) and part == "value":
        return _with_value(t, type, nullable)
    if isinstance(t, MapType) and part == "key" and nullable is None:
        raise SchemaMismatchError("a map key cannot be changed (SPEC §Schema evolution)")
    raise SchemaMismatchError(f"no {part!r} in a {_type_name(t)}")


def _with_element(t: ArrayType, type: DataType | None, nullable: bool | None) -> ArrayType:
    """``t`` with the element type ``type`` and nullability ``nullable``,
    each kept where not given (or false: nullability is only ever gained)."""
    return replace(t, element_type=type or t.element_type, contains_null=nullable or t.contains_null)


def _with_value(t: MapType, type: DataType | None, nullable: bool | None) -> MapType:
    """``t`` with the value type ``type`` and nullability ``nullable``, as
    :func:`_with_element`."""
    return replace(t, value_type=type or t.value_type, value_contains_null=nullable or t.value_contains_null)


def _place(fields: tuple[Field, ...], name: str, *, after: str | None, first: bool, where: str) -> tuple[Field, ...]:
    moving = next(f for f in fields if f.name == name)
    rest = tuple(f for f in fields if f.name != name)
    if first:
        return (moving,) + rest
    if after is None:
        return rest + (moving,)
    return _insert_after(rest, moving, after, where)


def _insert_after(fields: tuple[Field, ...], moving: Field, after: str, where: str) -> tuple[Field, ...]:
    """``fields`` with ``moving`` right after the one named ``after``."""
    for i, f in enumerate(fields):
        if f.name == after:
            return fields[: i + 1] + (moving,) + fields[i + 1:]
    raise SchemaMismatchError(f"{where}: after={after!r} names no sibling; siblings are {[f.name for f in fields]}")


# ---------------------------------------------------------------- diffs


def diff_schemas(old: Schema, new: Schema) -> list[SchemaChange]:
    """What changed from ``old`` to ``new``, by field id: the fields added
    (each at its top-most new id), dropped, renamed, widened, made nullable
    and moved, in the new schema's order (drops first)."""
    _check_schema(old, "old")
    _check_schema(new, "new")
    before = dict(_walk(StructType(old.fields), ()))
    after = dict(_walk(StructType(new.fields), ()))
    out = [SchemaChange(SchemaChangeKind.DROP, format_field_path(p)) for fid, (p, _, _) in before.items()
           if fid not in after and _parent_kept(p, before, after, fid)]
    for fid, (path, t, nullable) in after.items():
        if fid in before:
            out.extend(_kept_field_changes(before[fid], (path, t, nullable)))
        elif _new_parent(fid, after, before):
            out.append(SchemaChange(SchemaChangeKind.ADD, format_field_path(path), _type_name(t)))
    out.extend(_moves(old, new))
    return out


def _kept_field_changes(old: tuple, new: tuple) -> list[SchemaChange]:
    """What changed of a field both schemas hold, each given as ``(path,
    type, nullable)``: a rename, a widening, made nullable."""
    (old_path, old_t, old_null), (path, t, nullable) = old, new
    name = format_field_path(path)
    out = []
    if old_path[-1] != path[-1]:
        out.append(SchemaChange(SchemaChangeKind.RENAME, format_field_path(old_path), path[-1]))
    if isinstance(t, str) and t != old_t:
        out.append(SchemaChange(SchemaChangeKind.WIDEN, name, f"{_type_name(old_t)} -> {_type_name(t)}"))
    if nullable and not old_null:
        out.append(SchemaChange(SchemaChangeKind.MAKE_NULLABLE, name))
    return out


def _moves(old: Schema, new: Schema) -> list[SchemaChange]:
    """The top-level fields kept by ``new`` that moved: the fewest whose
    moving explains the new order (those outside a longest run of fields
    whose old order ``new`` keeps)."""
    position = {f.id: i for i, f in enumerate(old.fields)}
    kept = [f for f in new.fields if f.id in position]
    stay = _longest_increasing_run([position[f.id] for f in kept])
    out = []
    for i, f in enumerate(kept):
        if i not in stay:
            before = kept[i - 1].name if i else None
            out.append(SchemaChange(SchemaChangeKind.MOVE, quote_field_name(f.name), f"after {before}" if before else "first"))
    return out


def _longest_increasing_run(values: list[int]) -> set[int]:
    """The indices of a longest increasing subsequence of ``values``
    (patience sorting)."""
    tails: list[int] = []
    tail_at: list[int] = []
    parent = [-1] * len(values)
    for i, v in enumerate(values):
        k = bisect.bisect_left(tails, v)
        if k == len(tails):
            tails.append(v)
            tail_at.append(i)
        else:
            tails[k], tail_at[k] = v, i
        parent[i] = tail_at[k - 1] if k else -1
    run: set[int] = set()
    i = tail_at[-1] if tail_at else -1
    while i >= 0:
        run.add(i)
        i = parent[i]
    return run


def _walk(t: DataType, path: tuple[str, ...]):
    """(id, (path, type, nullable)) of every field, element, key and value,
    with the id of its parent chain encoded in the path."""
    if isinstance(t, StructType):
        for f in t.fields:
            p = (*path, f.name)
            yield f.id, (p, f.type, f.nullable)
            yield from _walk(f.type, p)
    elif isinstance(t, ArrayType):
        p = (*path, "element")
        yield t.element_id, (p, t.element_type, t.contains_null)
        yield from _walk(t.element_type, p)
    elif isinstance(t, MapType):
        yield t.key_id, ((*path, "key"), t.key_type, False)
        yield from _walk(t.key_type, (*path, "key"))
        yield t.value_id, ((*path, "value"), t.value_type, t.value_contains_null)
        yield from _walk(t.value_type, (*path, "value"))


def field_paths(schema: Schema) -> dict[int, str]:
    """Every id of ``schema`` (fields, list elements, map keys and values,
    nested ones too) and its path, in the depth-first pre-order of SPEC §Schema;
    a name holding a ``.`` or a backtick is quoted, so that each path reads
    back as the field (:mod:`ctfile.format.column_paths`).

    Examples
    --------
    >>> from ctfile.format.schema import schema_from_arrow
    >>> field_paths(schema_from_arrow(pa.schema([("id", pa.int64()), ("tags", pa.list_(pa.string()))])))
    {1: 'id', 2: 'tags', 3: 'tags.element'}
    """
    _check_schema(schema, "schema")
    return {fid: format_field_path(path) for fid, (path, _, _) in _walk(StructType(schema.fields), ())}


def _parent_kept(path, before, after, fid) -> bool:
    """A dropped id is reported only where its parent survived (the top of
    the dropped subtree)."""
    if len(path) == 1:
        return True
    parent = [i for i, (p, _, _) in before.items() if p == path[:-1]]
    return bool(parent) and parent[0] in after


def _new_parent(fid, after, before) -> bool:
    path = after[fid][0]
    if len(path) == 1:
        return True
    parent = [i for i, (p, _, _) in after.items() if p == path[:-1]]
    return bool(parent) and parent[0] in before


def changes_need_feature(changes: Sequence[SchemaChange]) -> bool:
    """Whether a schema change needs the ``schemaEvolution`` feature."""
    return any(c.needs_feature for c in changes)


def _check_schema(schema: object, what: str) -> None:
    if not isinstance(schema, Schema):
        raise InvalidArgumentError(
            f"{what} must be a ctfile.format.Schema (Table.schema_at() gives one), found {type(schema).__name__}"
        )


def replacement_schema(
    old: Schema, last_field_id: int, new: pa.Schema, *, derived_columns: tuple[str, ...] = (),
) -> tuple[Schema, int]:
    """The schema that replaces ``old`` by Arrow schema ``new`` (Spark's
    ``overwriteSchema``; SPEC §Schema evolution, replacing the schema), and
    the new ``lastFieldId``. ``derived_columns``: the derivation columns
    ``new`` may hold (a derived table's replace, SPEC §Derived tables).

    A top-level field keeps its id (and every id inside it) when ``old`` has
    a field of the same name and the same type; every other field gets new
    ids above ``last_field_id``.

    Examples
    --------
    >>> from ctfile.format.schema import schema_from_arrow
    >>> old = schema_from_arrow(pa.schema([("id", pa.int64()), ("v", pa.string())]))
    >>> s, last = replacement_schema(old, 2, pa.schema([("id", pa.int64()), ("v", pa.int32())]))
    >>> [(f.id, f.name, f.type) for f in s.fields], last
    ([(1, 'id', 'long'), (3, 'v', 'integer')], 3)
    """
    fresh = schema_from_arrow(new, derived_columns=derived_columns)  # checks names and types; ids 1.. replaced below
    next_id = [max(last_field_id, old.max_field_id())]
    fields = []
    for f, arrow_field in zip(fresh.fields, new):
        kept = next((o for o in old.fields if o.name == f.name), None)
        if kept is not None and _same_type(kept.type, f.type):
            fields.append(replace(kept, nullable=arrow_field.nullable or kept.nullable))
            continue
        fid = next_id[0] = next_id[0] + 1
        fields.append(Field(fid, f.name, type_from_arrow(arrow_field.type, next_id, f.name), arrow_field.nullable))
    return Schema(tuple(fields)), next_id[0]


def _same_type(a: DataType, b: DataType) -> bool:
    """Equal types, ignoring the ids inside them."""
    return _strip_ids(a) == _strip_ids(b)


def _strip_ids(t: DataType):
    if isinstance(t, StructType):
        return ("struct", tuple((f.name, _strip_ids(f.type), f.nullable) for f in t.fields))
    if isinstance(t, ArrayType):
        return ("array", _strip_ids(t.element_type), t.contains_null)
    if isinstance(t, MapType):
        return ("map", _strip_ids(t.key_type), _strip_ids(t.value_type), t.value_contains_null)
    return t


def retires_ids(old: Schema, new: Schema) -> bool:
    """Whether ``new`` lacks a field id ``old`` has."""
    return bool({fid for fid, _ in _walk(StructType(old.fields), ())} - {fid for fid, _ in _walk(StructType(new.fields), ())})


def restored_schema(current: Schema, target: Schema) -> Schema:
    """The schema a RESTORE of a version whose schema is ``target`` commits
    over ``current`` (SPEC §Schema evolution, §Restore): ``target``'s fields
    by id, with their names, places and documentation, each with the type it
    has in ``current`` (a widening since is kept) and nullable if it is in
    either. A field of ``target`` that ``current`` lacks was dropped since,
    and its values never come back: refused.

    Examples
    --------
    >>> from ctfile.format.schema import schema_from_arrow
    >>> old = schema_from_arrow(pa.schema([("id", pa.int32()), ("name", pa.string())]))
    >>> e = SchemaEditor(old, 2)
    >>> e.rename_column("name", "full_name"); e.widen_column("id", pa.int64()); e.add_column("email", pa.string())
    >>> [(f.id, f.name, f.type) for f in restored_schema(e.schema, old).fields]
    [(1, 'id', 'long'), (2, 'name', 'string')]
    >>> e.drop_column("full_name")
    >>> restored_schema(e.schema, old)
    Traceback (most recent call last):
    ...
    ctfile.format.errors.SchemaMismatchError: field name (id 2) of the version restored was dropped since: a dropped field's values never come back (SPEC §Schema evolution), so the table cannot be restored to a version before the drop
    """
    now = dict(_walk(StructType(current.fields), ()))
    for fid, (path, _, _) in _walk(StructType(target.fields), ()):
        if fid not in now:
            raise SchemaMismatchError(
                f"field {format_field_path(path)} (id {fid}) of the version restored was dropped since: a dropped "
                "field's values never come back (SPEC §Schema evolution), so the table cannot be restored to a "
                "version before the drop"
            )
    return Schema(tuple(_restored_field(f, now) for f in target.fields))


def _restored_field(f: Field, now: dict) -> Field:
    return replace(f, type=_restored_type(f.type, now[f.id][1], now), nullable=f.nullable or now[f.id][2])


def _restored_type(t: DataType, current: DataType, now: dict) -> DataType:
    """``t`` (of the version restored) with the nested fields restored and a
    primitive type as ``current`` (the same id's type now) has it."""
    if isinstance(t, StructType):
        return StructType(tuple(_restored_field(f, now) for f in t.fields))
    if isinstance(t, ArrayType):
        _, typ, nullable = now[t.element_id]
        return replace(t, element_type=_restored_type(t.element_type, typ, now), contains_null=t.contains_null or nullable)
    if isinstance(t, MapType):
        _, typ, nullable = now[t.value_id]
        return replace(
            t, key_type=_restored_type(t.key_type, now[t.key_id][1], now),
            value_type=_restored_type(t.value_type, typ, now), value_contains_null=t.value_contains_null or nullable,
        )
    return current if isinstance(current, str) else t
