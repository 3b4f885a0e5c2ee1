"""The schema change of a merging write (SPEC §Schema evolution, merging write).

A write with Spark's ``mergeSchema`` (``Table.write_job(schema_mode="merge")``)
changes the table's schema so that its incoming rows fit, and commits the
change with the rows in one version. :func:`plan_schema_merge` computes that change
from the schema read and the incoming Arrow schema, as allowed changes only:

- an incoming field the table lacks is *added* (nullable, new ids, at the end
  of the top level or of its struct);
- an incoming primitive type that is a wider type of the field's (``int`` ->
  ``long``, ``float`` -> ``double``, ``decimal(p,s)`` -> ``decimal(p',s)``
  with p' > p) *widens* the field, also inside structs, list elements and map
  values.

Every other difference is left to the write's ordinary check
(:class:`~ctfile.writer.input.Conformer`), as without the option: a narrower
incoming type is cast into the table's type, a missing nullable column is
written as nulls, and an incompatible type is refused, naming the column,
before anything is written. The table's types are never narrowed.

The change is recorded as steps (:class:`MergeStep`) rather than as the
resulting schema, so that the commit can apply them to the schema it commits
on with :meth:`~ctfile.writer.transaction.WriteTransaction.evolve_schema`
and check that the ids come out as planned.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from ctfile.format.column_paths import format_field_path
from ctfile.format.errors import SchemaMismatchError
from ctfile.format.schema import HIDDEN_COLUMNS, ArrayType, DataType, MapType, Schema, StructType, type_from_arrow
from ctfile.format.schema_evolution import SchemaChangeKind, SchemaEditor, can_widen


@dataclass(frozen=True)
class MergeStep:
    """One change of a merge: ``ADD`` a field of type ``type`` at ``path``,
    or ``WIDEN`` the field (element, value) at ``path`` to ``type``."""

    kind: SchemaChangeKind
    path: tuple[str, ...]
    type: pa.DataType

    def apply(self, editor: SchemaEditor) -> None:
        if self.kind is SchemaChangeKind.ADD:
            editor.add_column(self.path, self.type)
        else:
            editor.widen_column(self.path, self.type)

    def __str__(self) -> str:
        return f"{self.kind.value} {format_field_path(self.path)} ({self.type})"


@dataclass(frozen=True)
class SchemaMerge:
    """The steps of a merging write's schema change and the schema they
    give (with its ids). Not a MERGE statement's plan
    (:class:`ctfile.writer.merge_plan.MergePlan`): a MERGE with schema
    evolution makes its change as one of these."""

    steps: tuple[MergeStep, ...]
    schema: Schema
    last_field_id: int

    def apply(self, editor: SchemaEditor) -> None:
        for step in self.steps:
            step.apply(editor)


def plan_schema_merge(schema: Schema, last_field_id: int, incoming: pa.Schema) -> SchemaMerge:
    """The adds and widenings that let ``schema`` take rows of ``incoming``.

    ``last_field_id``: the table's ``metadata.lastFieldId`` (new fields get
    ids above it). Raises :class:`SchemaMismatchError` when an incoming
    column differs from a table column only in case (readers such as Spark
    resolve names case-insensitively) or when a step is not allowed (a name
    ctfile reserves, an unsupported type). Incoming columns that the write's
    own check refuses anyway (duplicates, hidden columns) are skipped here.

    Examples
    --------
    >>> from ctfile.format.schema import schema_from_arrow
    >>> table = schema_from_arrow(pa.schema([("id", pa.int32()), ("name", pa.string())]))
    >>> plan = plan_schema_merge(table, 2, pa.schema([("id", pa.int64()), ("email", pa.string())]))
    >>> [str(s) for s in plan.steps]
    ['widen id (int64)', 'add email (string)']
    >>> [(f.id, f.name, f.type) for f in plan.schema.fields], plan.last_field_id
    ([(1, 'id', 'long'), (2, 'name', 'string'), (3, 'email', 'string')], 3)
    """
    names = incoming.names
    by_lower = {f.name.lower(): f.name for f in schema.fields}
    steps: list[MergeStep] = []
    clashes = []
    for f in incoming:
        if names.count(f.name) > 1 or f.name in HIDDEN_COLUMNS:
            continue
        try:
            existing = schema.field(f.name)
        except SchemaMismatchError:
            if f.name.lower() in by_lower:
                clashes.append(f"{f.name!r} (table column {by_lower[f.name.lower()]!r})")
            else:
                steps.append(MergeStep(SchemaChangeKind.ADD, (f.name,), f.type))
            continue
        steps.extend(_merge_type((f.name,), existing.type, f.type))
    if clashes:
        raise SchemaMismatchError(
            f"cannot merge the written data's columns {', '.join(clashes)} into the table: they differ from a "
            f"table column only in case, which readers that resolve names case-insensitively (Spark) cannot "
            f"tell apart; rename them to the table's spelling"
        )
    editor = SchemaEditor(schema, last_field_id)
    for step in steps:
        step.apply(editor)
    return SchemaMerge(tuple(steps), editor.schema, editor.last_field_id)


def _merge_type(path: tuple[str, ...], have: DataType, incoming: pa.DataType) -> list[MergeStep]:
    """The steps that let the field at ``path`` (of type ``have``) take
    values of ``incoming``: nested fields added, primitives widened."""
    if pa.types.is_dictionary(incoming):
        incoming = incoming.value_type
    if isinstance(have, StructType) and pa.types.is_struct(incoming):
        return _merge_struct(path, have, incoming)
    inner = _inner_types(path, have, incoming)
    if inner is not None:
        return _merge_type(*inner)
    if isinstance(have, str) and not pa.types.is_nested(incoming):
        return _widening(path, have, incoming)
    return []


def _merge_struct(path: tuple[str, ...], have: StructType, incoming: pa.StructType) -> list[MergeStep]:
    """A struct's steps: each incoming child the struct lacks added, the
    others merged in turn."""
    out: list[MergeStep] = []
    known = {f.name: f for f in have.fields}
    for child in incoming:
        if child.name in known:
            out.extend(_merge_type((*path, child.name), known[child.name].type, child.type))
        else:
            out.append(MergeStep(SchemaChangeKind.ADD, (*path, child.name), child.type))
    return out


def _inner_types(
    path: tuple[str, ...], have: DataType, incoming: pa.DataType,
) -> tuple[tuple[str, ...], DataType, pa.DataType] | None:
    """For a list field (a map field) written with a list (a map): the path,
    type and incoming type of its element (its value); None otherwise. A
    map key cannot change (SPEC §Schema evolution): the write's check sees
    a different one."""
    if isinstance(have, ArrayType) and (pa.types.is_list(incoming) or pa.types.is_large_list(incoming)):
        return (*path, "element"), have.element_type, incoming.value_type
    if isinstance(have, MapType) and pa.types.is_map(incoming):
        return (*path, "value"), have.value_type, incoming.item_type
    return None


def _widening(path: tuple[str, ...], have: str, incoming: pa.DataType) -> list[MergeStep]:
    """The widening of the primitive field at ``path`` to ``incoming``, if
    that is a wider type of ``have``; nothing for a type ctfile does not
    store (the write's check names it) or one that is not wider."""
    try:
        wanted = type_from_arrow(incoming, [0], format_field_path(path))
    except SchemaMismatchError:
        return []
    return [MergeStep(SchemaChangeKind.WIDEN, path, incoming)] if can_widen(have, wanted) else []
