"""Entry points of the public API: :func:`create_table` and :func:`open_table`
(defined beside :class:`~ctfile.table.table.Table`, whose streams open the
targets of their claims with it)."""

from __future__ import annotations

import os
import uuid
from typing import Any, Mapping

import pyarrow as pa

from ctfile.format import properties as table_properties
from ctfile.format.actions import Metadata
from ctfile.format.derived import DerivedDefinition, check_derived_schema, check_target_lag
from ctfile.format.errors import InvalidArgumentError
from ctfile.format.schema import Schema, schema_from_arrow
from ctfile.format.validators import require_positive_int
from ctfile.log.creation import create_table_log
from ctfile.log.transaction import now_ms
from ctfile.table.table import Table, open_table, storage_at

__all__ = ["create_table", "open_table"]


def create_table(
    uri: str | os.PathLike,
    schema: pa.Schema,
    *,
    partition_rows: int | None = None,
    compression: str | None = None,
    properties: Mapping[str, str] | None = None,
    name: str | None = None,
    description: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    derived: DerivedDefinition | None = None,
) -> "Table":
    """Create an empty table at ``uri`` (version 0) and return it.

    Parameters
    ----------
    uri : str or path
        A local directory or an fsspec URL such as ``s3://bucket/prefix``.
    schema : pyarrow.Schema
        The columns; field ids 1, 2, ... are assigned in order.
    partition_rows : int, optional
        Target rows per micro-partition (default 1,048,576).
    compression : str, optional
        Parquet codec for data files (default ``zstd``).
    properties : mapping of str to str, optional
        Table properties (``ctfile.checkpointInterval``, user keys ...).
    derived : ctfile.DerivedDefinition, optional
        Create a derived table (SPEC §Derived tables): ``schema`` holds the
        query's output columns and the derivation columns the definition's
        ``hidden_columns`` name; its frontier must be empty. The protocol
        lists ``derivedTables``; rows change only in refresh transactions.

    Raises
    ------
    TableExistsError
        If a table already exists at ``uri``.

    Examples
    --------
    >>> import ctfile, pyarrow as pa, tempfile
    >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
    >>> t.version
    0
    """
    storage = storage_at(uri, storage_options)
    if not isinstance(schema, pa.Schema):
        raise InvalidArgumentError(f"schema must be a pyarrow.Schema, found {type(schema).__name__}")
    for what, text in (("name", name), ("description", description)):
        if text is not None and not isinstance(text, str):  # SPEC §metadata: strings
            raise InvalidArgumentError(f"{what} must be a string, found {text!r:.80}")
    table_schema: Schema = schema_from_arrow(schema, derived_columns=_derived_columns(derived))
    check_derived_schema(derived, table_schema)
    if derived is not None:
        check_target_lag(derived.target_lag)
    props = _creation_properties(table_schema, properties, partition_rows=partition_rows, compression=compression)
    metadata = Metadata(
        table_id=str(uuid.uuid4()), schema=table_schema, created_time=now_ms(),
        properties=props, name=name, description=description, derived=derived,
    )
    create_table_log(storage, metadata)
    return Table(storage)


def _derived_columns(derived: Any) -> tuple[str, ...]:
    """The derivation columns ``derived`` lists (SPEC §Derived tables);
    InvalidArgumentError for a definition that is not new."""
    if derived is None:
        return ()
    if not isinstance(derived, DerivedDefinition):
        raise InvalidArgumentError(f"derived: expected a ctfile.DerivedDefinition; found {type(derived).__name__}")
    if derived.frontier:
        raise InvalidArgumentError(
            f"derived.frontier: expected none for a new table (it has no rows yet); found {len(derived.frontier)} items"
        )
    return derived.hidden_columns


def _creation_properties(
    schema: Schema, properties: Mapping[str, str] | None, *, partition_rows: Any, compression: Any,
) -> dict[str, str]:
    """The properties of a new table: ``properties`` checked (SPEC §Table
    properties), with ``partition_rows`` and ``compression`` when given."""
    props = table_properties.validate_properties({} if properties is None else properties, schema=schema)
    if partition_rows is not None:
        require_positive_int(partition_rows, "partition_rows")
        props[table_properties.PARTITION_ROWS] = str(partition_rows)
    if compression is not None:
        if compression not in table_properties.COMPRESSIONS:
            raise InvalidArgumentError(
                f"compression must be one of {', '.join(table_properties.COMPRESSIONS)}, found {compression!r}"
            )
        props[table_properties.COMPRESSION] = compression
    return props
