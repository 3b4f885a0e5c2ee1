"""Turning user data into batches that fit the table schema.

Accepts a pyarrow Table, RecordBatch, RecordBatchReader, an iterable of
RecordBatches, or a pandas DataFrame. Columns are matched by name and
reordered; a missing nullable column is filled with nulls; an extra column, a
missing non-nullable column, a type that cannot be cast without loss, or a null
in a non-nullable column raises :class:`SchemaMismatchError` naming the column.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.errors import InvalidArgumentError, SchemaMismatchError
from ctfile.format.schema import HIDDEN_COLUMNS, Schema


def to_reader(data: Any, *, what: str = "data") -> pa.RecordBatchReader:
    """Wrap any accepted input as a RecordBatchReader (streams stay streams)."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.Table):
        return pa.RecordBatchReader.from_batches(data.schema, data.to_batches())
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatchReader.from_batches(data.schema, [data])
    if _is_pandas(data):
        return to_reader(pa.Table.from_pandas(data, preserve_index=False), what=what)
    if hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data)
    raise InvalidArgumentError(
        f"{what} must be a pyarrow Table, RecordBatch, RecordBatchReader or pandas "
        f"DataFrame; found {type(data).__name__}"
    )


def is_reusable(data: Any) -> bool:
    """True if ``data`` can be read more than once (a Table, a RecordBatch, a
    pandas DataFrame); a RecordBatchReader or Arrow stream is read once.

    >>> is_reusable(pa.table({"x": [1]})), is_reusable(pa.RecordBatchReader.from_batches(pa.schema([]), []))
    (True, False)
    """
    return isinstance(data, (pa.Table, pa.RecordBatch)) or _is_pandas(data)


def to_table(data: Any, *, what: str = "data") -> pa.Table:
    reader = to_reader(data, what=what)
    return reader.read_all()


def _is_pandas(obj: Any) -> bool:
    mod = type(obj).__module__
    return mod.startswith("pandas") and type(obj).__name__ == "DataFrame"


class Conformer:
    """Casts and checks batches against the table schema.

    Call :meth:`check_schema` once (it fails before anything is written), then
    :meth:`conform` per batch. ``columns`` (default: every table column)
    are the columns the output holds: a MERGE that only deletes or updates
    needs the source's keys and the columns it sets, not every non-nullable
    column of the table.
    """

    def __init__(
        self, schema: Schema, *, allow_missing: bool = True, what: str = "data",
        columns: Iterable[str] | None = None,
    ):
        self.schema = schema
        self.table = schema.to_arrow(field_ids=False)
        self.target = self.table if columns is None else pa.schema([self.table.field(c) for c in columns])
        self.allow_missing = allow_missing
        self.what = what

    def check_schema(self, source: pa.Schema) -> None:
        check_column_names(source, what=self.what)
        names = source.names
        extra = [n for n in names if n not in self.table.names]
        problems = []
        if extra:
            problems.append(f"columns {extra} are not in the table (table columns: {self.table.names})")
        for f in self.target:
            problem = self._column_problem(f, source)
            if problem is not None:
                problems.append(problem)
        if problems:
            raise SchemaMismatchError(f"{self.what} does not match the table schema: " + "; ".join(problems))

    def _column_problem(self, f: pa.Field, source: pa.Schema) -> str | None:
        """What keeps ``source`` from filling the table column ``f``: missing
        (unless nullable and :attr:`allow_missing`), or of a type the write
        does not cast; None when it fits."""
        if f.name not in source.names:
            fills_with_nulls = f.nullable and self.allow_missing
            return None if fills_with_nulls else f"column {f.name!r} ({f.type}, not null) is missing"
        src = source.field(f.name).type
        return None if _castable(src, f.type) else f"column {f.name!r} has type {src}, expected {f.type}"

    def conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        n = batch.num_rows
        arrays = []
        for f in self.target:
            idx = batch.schema.get_field_index(f.name)
            if idx < 0:
                arrays.append(pa.nulls(n, f.type))
                continue
            col = cast_column(batch.column(idx), f.name, f.type, what=self.what)
            if not f.nullable and col.null_count:
                raise SchemaMismatchError(
                    f"{self.what}: column {f.name!r} is not nullable but has {col.null_count} null(s)"
                )
            arrays.append(col)
        return pa.RecordBatch.from_arrays(arrays, schema=self.target)

    def conform_stream(self, reader: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
        self.check_schema(reader.schema)
        for batch in reader:
            if batch.num_rows:
                yield self.conform(batch)


def check_column_names(source: pa.Schema, *, what: str) -> None:
    """Refuse duplicate column names and ctfile's hidden columns in input.

    >>> check_column_names(pa.schema([("a", pa.int8()), ("a", pa.int8())]), what="data")
    Traceback (most recent call last):
    ...
    ctfile.format.errors.SchemaMismatchError: data has duplicate columns ['a']
    """
    names = source.names
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SchemaMismatchError(f"{what} has duplicate columns {dupes}")
    hidden = [n for n in names if n in HIDDEN_COLUMNS]
    if hidden:
        raise SchemaMismatchError(
            f"{what} contains hidden columns {hidden}; they are maintained by ctfile "
            f"and cannot be written directly"
        )


def cast_column(column: pa.Array | pa.ChunkedArray, name: str, typ: pa.DataType, *, what: str):
    """``column`` (of column ``name``) in type ``typ``, refusing a value
    the cast would change (``safe``).

    >>> cast_column(pa.array([300]), "n", pa.int8(), what="data")
    Traceback (most recent call last):
    ...
    ctfile.format.errors.SchemaMismatchError: data: column 'n' cannot be cast from int64 to int8 without loss: Integer value 300 not in range: -128 to 127
    """
    if column.type.equals(typ):
        return column
    try:
        return column.cast(typ, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise SchemaMismatchError(f"{what}: column {name!r} cannot be cast from {column.type} to {typ} without loss: {e}") from e


def _is_any_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_any_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)


#: (kind of the incoming type, kind of the table's type) pairs a write casts.
_CASTABLE_KINDS = (
    (pa.types.is_integer, pa.types.is_integer),
    (pa.types.is_floating, pa.types.is_floating),
    (pa.types.is_integer, pa.types.is_floating),
    (_is_any_string, pa.types.is_string),
    (_is_any_binary, pa.types.is_binary),
    (pa.types.is_timestamp, pa.types.is_timestamp),
    (pa.types.is_date, pa.types.is_date),
    (pa.types.is_decimal, pa.types.is_decimal),
    (pa.types.is_integer, pa.types.is_decimal),
)


def _castable(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether a write casts values of ``src`` into a column of ``dst``
    (the cast itself may still refuse a value)."""
    if src.equals(dst) or pa.types.is_null(src):
        return True
    if pa.types.is_dictionary(src):
        return _castable(src.value_type, dst)
    if any(a(src) and b(dst) for a, b in _CASTABLE_KINDS):
        return True
    # Nested types: rely on Arrow's cast rules, checked per batch.
    return (pa.types.is_nested(src) and pa.types.is_nested(dst)) and type(src) is type(dst)


def batches_of(table: pa.Table) -> Iterable[pa.RecordBatch]:
    return table.to_batches()


def fill_null_false(mask: pa.Array) -> pa.Array:
    return pc.fill_null(mask, False)
