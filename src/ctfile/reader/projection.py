"""Reading a file into a read schema by field id (SPEC §Schema evolution,
projection).

A data file or change file keeps the names, types and ids it was written
with. A :class:`Projection` is planned once per file from its Arrow schema
(pyarrow exposes each Parquet ``field_id``, nested ones included, as field
metadata) and then applied to every batch read from it:

- a field of the read schema whose id the file has is read from that file
  column, whatever its name there, recursively through structs, lists and
  maps;
- a field whose id the file lacks is all nulls (added after the file);
- a narrower type is cast to the read type (widened since the file);
- file columns whose id the read schema lacks are not read (dropped).

A file without field ids (not written by ctfile) is matched by name.
:attr:`Projection.by_name` says whether a reader that matches top-level
columns by name (pyarrow's dataset scanner, the fast path of snapshot
reads) gets the same result: true for every file written since the last
rename, drop or widening of the columns read. :attr:`Projection.by_name_widening`
says the same for a name-matching reader that also widens integers and
``float`` to ``double`` as it reads, as Spark's Parquet reader does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

import pyarrow as pa

from ctfile.format.errors import SchemaMismatchError
from ctfile.format.schema import (
    PARQUET_FIELD_ID_KEY,
    ArrayType,
    DataType,
    Field,
    MapType,
    Schema,
    StructType,
)


@dataclass(frozen=True)
class _Same:
    """The file's values are already in the read type."""


@dataclass(frozen=True)
class _Cast:
    type: pa.DataType


@dataclass(frozen=True)
class _Nulls:
    type: pa.DataType


@dataclass(frozen=True)
class _Struct:
    type: pa.DataType
    children: tuple[tuple[int | None, "Plan"], ...]  # (file child index or None, plan)


@dataclass(frozen=True)
class _List:
    type: pa.DataType
    element: "Plan"


@dataclass(frozen=True)
class _Map:
    type: pa.DataType
    key: "Plan"
    value: "Plan"


Plan = Union[_Same, _Cast, _Nulls, _Struct, _List, _Map]
_SAME = _Same()


def field_id(f: pa.Field) -> int | None:
    """The Parquet field id pyarrow attached to ``f``, if any."""
    md = f.metadata
    if md and PARQUET_FIELD_ID_KEY in md:
        return int(md[PARQUET_FIELD_ID_KEY])
    return None


def field_ids(t: pa.Schema | pa.DataType) -> set[int]:
    """Every Parquet field id in ``t``: its fields' and, recursively, those
    of their struct fields, list elements, map keys and values.

    Examples
    --------
    >>> from ctfile.format.schema import schema_from_arrow
    >>> sorted(field_ids(schema_from_arrow(pa.schema([("a", pa.struct([("b", pa.list_(pa.int32()))]))])).to_arrow()))
    [1, 2, 3]
    """
    fields = list(t) if isinstance(t, pa.Schema) else [t.field(i) for i in range(t.num_fields)]
    out: set[int] = set()
    for f in fields:
        fid = field_id(f)
        if fid is not None:
            out.add(fid)
        if f.type.num_fields:  # struct, list, map (its entries struct)
            out |= field_ids(f.type)
    return out


def _plan(file_type: pa.DataType, want: DataType, want_arrow: pa.DataType) -> Plan:
    """How to turn values of ``file_type`` into ``want`` (ctfile type, with
    ids) / ``want_arrow`` (the output type)."""
    if pa.types.is_dictionary(file_type):
        file_type = file_type.value_type
    if isinstance(want, str):
        return _SAME if file_type.equals(want_arrow) else _Cast(want_arrow)
    for kind, file_is, planner in _NESTED_PLANNERS:
        if isinstance(want, kind) and file_is(file_type):
            return planner(file_type, want, want_arrow)
    # A type that no allowed change produces: let the cast say what it found.
    return _Cast(want_arrow)


def _plan_struct(file_type: pa.DataType, want: StructType, want_arrow: pa.DataType) -> Plan:
    """:func:`_plan` of a struct: each wanted field from the file child of
    its id (of its name in a file without ids), or nulls."""
    by_id = {field_id(file_type.field(i)): i for i in range(file_type.num_fields)}
    children = tuple(_child_plan(file_type, by_id, f, out) for f, out in zip(want.fields, want_arrow))
    same = _same_struct(file_type, want, children) and file_type.equals(want_arrow)
    return _SAME if same else _Struct(want_arrow, children)


def _child_plan(
    file_type: pa.DataType, by_id: dict[int | None, int], f: Field, out: pa.Field,
) -> tuple[int | None, Plan]:
    """``(file child index or None, plan)`` of wanted struct field ``f``
    (output field ``out``)."""
    i = by_id.get(f.id)
    if i is None and None in by_id:  # no ids in the file: by name
        found = file_type.get_field_index(f.name)
        i = found if found >= 0 else None
    if i is None:
        return None, _Nulls(out.type)
    return i, _plan(file_type.field(i).type, f.type, out.type)


def _same_struct(file_type: pa.DataType, want: StructType, children: tuple[tuple[int | None, Plan], ...]) -> bool:
    """Whether the file struct's children are the wanted ones, in order,
    with the same names and values."""
    return (
        file_type.num_fields == len(children)
        and all(i == k and isinstance(p, _Same) for k, (i, p) in enumerate(children))
        and all(file_type.field(k).name == want.fields[k].name for k in range(len(children)))
    )


def _plan_list(file_type: pa.DataType, want: ArrayType, want_arrow: pa.DataType) -> Plan:
    elem = _plan(file_type.value_type, want.element_type, want_arrow.value_type)
    return _SAME if isinstance(elem, _Same) and file_type.equals(want_arrow) else _List(want_arrow, elem)


def _plan_map(file_type: pa.DataType, want: MapType, want_arrow: pa.DataType) -> Plan:
    key = _plan(file_type.key_type, want.key_type, want_arrow.key_type)
    value = _plan(file_type.item_type, want.value_type, want_arrow.item_type)
    same = isinstance(key, _Same) and isinstance(value, _Same) and file_type.equals(want_arrow)
    return _SAME if same else _Map(want_arrow, key, value)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


# (wanted ctfile type, test of the file type, planner): the nested types a
# file column may be read as.
_NESTED_PLANNERS = (
    (StructType, pa.types.is_struct, _plan_struct),
    (ArrayType, _is_list, _plan_list),
    (MapType, pa.types.is_map, _plan_map),
)


def _apply(plan: Plan, arr: pa.Array) -> pa.Array:
    if pa.types.is_dictionary(arr.type):
        # A take of the dictionary: faster than dictionary_decode's kernel.
        arr = arr.dictionary.take(arr.indices)
    if isinstance(plan, _Same):
        return arr
    if isinstance(plan, _Cast):
        return arr.cast(plan.type)
    if isinstance(plan, _Nulls):
        return pa.nulls(len(arr), plan.type)
    mask = arr.is_null() if arr.null_count else None
    if isinstance(plan, _Struct):
        return _apply_struct(plan, arr, mask)
    offsets = _offsets(arr, mask)
    if isinstance(plan, _List):
        return pa.ListArray.from_arrays(offsets, _apply(plan.element, arr.values), type=plan.type, mask=mask)
    return pa.MapArray.from_arrays(
        offsets, _apply(plan.key, arr.keys), _apply(plan.value, arr.items), type=plan.type, mask=mask
    )


def _apply_struct(plan: _Struct, arr: pa.StructArray, mask: pa.Array | None) -> pa.Array:
    children = [
        pa.nulls(len(arr), out.type) if i is None else _apply(p, arr.field(i))
        for (i, p), out in zip(plan.children, plan.type)
    ]
    return pa.StructArray.from_arrays(children, fields=list(plan.type), mask=mask)


def _offsets(arr: pa.Array, mask: pa.Array | None) -> pa.Array:
    """The offsets of list or map array ``arr``, to rebuild it with ``mask``."""
    offsets = arr.offsets
    if mask is not None and offsets.offset:
        # pyarrow takes no validity mask with a sliced offsets array: copy
        # the offsets (one integer per row) into a fresh array.
        offsets = pa.array(offsets.to_numpy(), offsets.type)
    return offsets


def project_column(plan: Plan, col: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """``col`` (as read from the file) in the read type."""
    if isinstance(plan, _Same) and not pa.types.is_dictionary(col.type):
        return col
    if isinstance(col, pa.ChunkedArray):
        out_type = plan.type if not isinstance(plan, _Same) else col.type.value_type
        return pa.chunked_array([_apply(plan, c) for c in col.chunks], type=out_type)
    return _apply(plan, col)


def reader_widens(file_type: pa.DataType, want: pa.DataType) -> bool:
    """Whether ``file_type`` to ``want`` is a widening that a reader of
    Parquet's physical types gets exactly right by itself: a signed integer
    to a wider one, ``float`` to ``double``.

    Decimals are left out: Spark 4.3's Parquet reader widens their values
    but fails on a pushed-down literal wider than the file's precision.

    Examples
    --------
    >>> reader_widens(pa.int32(), pa.int64()), reader_widens(pa.float32(), pa.float64())
    (True, True)
    >>> reader_widens(pa.decimal128(5, 2), pa.decimal128(9, 2)), reader_widens(pa.int64(), pa.int32())
    (False, False)
    """
    if pa.types.is_signed_integer(file_type) and pa.types.is_signed_integer(want):
        return want.bit_width > file_type.bit_width
    return pa.types.is_float32(file_type) and pa.types.is_float64(want)


def _index_by_id(file_schema: pa.Schema) -> dict[int, int]:
    """The index of each top-level file column, by its field id (columns
    without an id left out)."""
    by_id: dict[int, int] = {}
    for i, f in enumerate(file_schema):
        fid = field_id(f)
        if fid is not None:
            by_id[fid] = i
    return by_id


class Projection:
    """The columns ``columns`` of read schema ``schema``, from a file whose
    Arrow schema is ``file_schema``.

    Attributes
    ----------
    sources : dict[str, str | None]
        Each wanted column's file column name, None when the file lacks it.
    read_columns : list[str]
        The file columns to read, each once.
    by_name : bool
        Whether matching top-level columns by name, with no cast, gives the
        same values (see the module docstring).
    by_name_widening : bool
        The same, for a reader that also widens a top-level integer column
        to a wider integer and ``float`` to ``double`` (:func:`reader_widens`).
    """

    def __init__(self, file_schema: pa.Schema, schema: Schema, columns: Sequence[str]):
        target = schema.to_arrow(field_ids=False)
        by_id = _index_by_id(file_schema)
        self.sources: dict[str, str | None] = {}
        self._plans: dict[str, Plan] = {}
        self.by_name = self.by_name_widening = True
        for name in columns:
            f: Field = schema.field(name)
            want = target.field(name).type
            i = by_id.get(f.id) if by_id else file_schema.get_field_index(name)
            if i is None or i < 0:
                self._add_missing(name, want, file_schema)
            else:
                self._add_read(name, f, want, file_schema.field(i))
        self.read_columns = list(dict.fromkeys(s for s in self.sources.values() if s is not None))

    def _add_missing(self, name: str, want: pa.DataType, file_schema: pa.Schema) -> None:
        """Wanted column ``name`` (of type ``want``), which the file lacks: nulls."""
        self.sources[name] = None
        self._plans[name] = _Nulls(want)
        # A name-matching reader would read a same-named column of
        # another id (a dropped column whose name was added again).
        absent = file_schema.get_field_index(name) < 0
        self.by_name &= absent
        self.by_name_widening &= absent

    def _add_read(self, name: str, f: Field, want: pa.DataType, src: pa.Field) -> None:
        """Wanted column ``name`` (field ``f``, of type ``want``), read from file column ``src``."""
        self.sources[name] = src.name
        self._plans[name] = plan = _plan(src.type, f.type, want)
        same_name = src.name == name
        self.by_name &= same_name and isinstance(plan, _Same)
        self.by_name_widening &= same_name and (isinstance(plan, _Same) or reader_widens(src.type, want))

    def column(self, name: str, data: pa.RecordBatch | pa.Table, n: int) -> pa.Array | pa.ChunkedArray:
        """Wanted column ``name`` of ``n`` rows, from ``data`` read with
        :attr:`read_columns` (``data`` may be None when nothing is read)."""
        src = self.sources[name]
        plan = self._plans[name]
        if src is None:
            return pa.nulls(n, plan.type)
        try:
            return project_column(plan, data.column(src))
        except pa.ArrowInvalid as e:
            # Only a read schema older than a widening casts to a narrower
            # type (Table.changes(read_schema=...)): the file is not damaged.
            raise SchemaMismatchError(
                f"column {src!r} of the file holds a value that column {name!r} of the read schema cannot hold: {e}"
            ) from e
