"""``table.update_schema()``: one schema change per block (SPEC §Schema evolution).

The builder follows PyIceberg's ``with table.update_schema() as u:``. Each
call is checked at once against the schema as changed so far (a typed
:class:`~ctfile.format.errors.SchemaMismatchError` names the field and why),
and the block commits one ``SCHEMA CHANGE`` version when it exits without an
exception; an exception commits nothing. At commit the recorded calls are
applied again to the schema the transaction reads, so a concurrent change is
either composed with (re-run after a conflict, like a statement) or reported
by the same error.
"""

from __future__ import annotations

from typing import Any, Callable

import pyarrow as pa

from ctfile.format.actions import Metadata
from ctfile.format.schema_evolution import Path, SchemaChange, SchemaEditor
from ctfile.log.transaction import CommitResult

OPERATION = "SCHEMA CHANGE"


class UpdateSchema:
    """A schema change being built; see :meth:`ctfile.Table.update_schema`.

    Every method returns the builder, so calls chain. :attr:`changes` lists
    what the block changes so far; :attr:`result` is the commit's result
    after the block (None when it changed nothing).

    Examples
    --------
    >>> import ctfile, pyarrow as pa, tempfile
    >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int32()), ("name", pa.string())]))
    >>> with t.update_schema() as u:
    ...     u.add_column("email", pa.string(), doc="primary contact").rename_column("name", "full_name")
    ...     u.widen_column("id", pa.int64())
    <...>
    >>> t.schema.names, str(t.schema.field("id").type), u.result.version
    (['id', 'full_name', 'email'], 'int64', 1)
    """

    def __init__(self, metadata: Metadata, run: Callable[[dict, Callable], CommitResult]):
        """``metadata``: the table's, as read; ``run(parameters, fn)`` commits
        ``fn(transaction)`` as one ``SCHEMA CHANGE`` statement."""
        self._base = metadata
        self._run = run
        md = metadata
        self._preview = SchemaEditor(md.schema, md.assigned_field_ids)
        self._calls: list[Callable[[SchemaEditor], None]] = []
        self.result: CommitResult | None = None

    def _record(self, method: str, *args: Any, **kwargs: Any) -> "UpdateSchema":
        getattr(self._preview, method)(*args, **kwargs)  # raises before anything is recorded
        self._calls.append(lambda editor: getattr(editor, method)(*args, **kwargs))
        return self

    def add_column(
        self, path: Path, type: pa.DataType, *, doc: str | None = None, after: str | None = None, first: bool = False
    ) -> "UpdateSchema":
        """Add a nullable column or nested field (new ids, also for the fields
        inside ``type``); at the end, after sibling ``after``, or ``first``."""
        return self._record("add_column", path, type, doc=doc, after=after, first=first)

    def drop_column(self, path: Path) -> "UpdateSchema":
        """Drop a column or nested field; its values never reappear, even
        under a name added again."""
        return self._record("drop_column", path)

    def rename_column(self, path: Path, new_name: str) -> "UpdateSchema":
        """Rename a column or nested field (``"address.zip"``)."""
        return self._record("rename_column", path, new_name)

    def widen_column(self, path: Path, type: pa.DataType) -> "UpdateSchema":
        """Widen a column, nested field, list element (``"tags.element"``) or
        map value: integers to wider integers, float to double, decimal
        precision up with the same scale."""
        return self._record("widen_column", path, type)

    def make_nullable(self, path: Path) -> "UpdateSchema":
        """Let a non-nullable column (or nested field, element, value) hold nulls."""
        return self._record("make_nullable", path)

    def move_column(self, path: Path, *, after: str | None = None, first: bool = False) -> "UpdateSchema":
        """Move a column or nested field ``first`` or ``after`` a sibling."""
        return self._record("move_column", path, after=after, first=first)

    @property
    def changes(self) -> list[SchemaChange]:
        return list(self._preview.changes)

    def commit(self) -> CommitResult | None:
        """Commit the changes as one version (None if there are none)."""
        if self.result is not None:
            return self.result
        if self._preview.schema == self._base.schema:
            return None

        def edit(editor: SchemaEditor) -> None:
            for call in self._calls:
                call(editor)

        def fn(tx) -> None:
            tx.evolve_schema(edit)
            tx.data_change = False  # SPEC §Schema evolution: not a data change

        params = {"changes": [c.to_json() for c in self._preview.changes]}
        self.result = self._run(params, fn)
        return self.result

    def __enter__(self) -> "UpdateSchema":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
