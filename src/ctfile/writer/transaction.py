"""A transaction with DML statements: ``with table.transaction() as tx: ...``."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping, Sequence

import pyarrow.compute as pc

from ctfile.format.errors import InvalidArgumentError
from ctfile.log.transaction import CommitResult, Transaction
from ctfile.writer import dml
from ctfile.writer import merge as merge_
from ctfile.writer.change_writer import ChangeWriter


class WriteTransaction(Transaction):
    """A :class:`~ctfile.log.transaction.Transaction` whose statements are DML.

    Every statement sees the effects of the earlier ones in the same
    transaction; all of them commit as one version. In a transaction that is
    a replay of an application batch already committed (:attr:`is_replay`,
    after :meth:`set_app_transaction`), statements do nothing and return 0.

    Examples
    --------
    >>> import ctfile, pyarrow as pa, tempfile
    >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
    >>> with t.transaction(app_id="loader", app_version=7) as tx:
    ...     tx.insert(pa.table({"id": [1, 2]}))
    2
    >>> with t.transaction(app_id="loader", app_version=7) as tx:   # the same batch again
    ...     tx.insert(pa.table({"id": [1, 2]}))
    0
    >>> tx.result.committed, tx.result.app_transaction_replayed, t.to_arrow().num_rows
    (False, True, 2)

    With ``ctfile.changeCapture = before_after`` in the version read, each
    statement's change rows go to :attr:`changes`; a statement that raises
    leaves none, and the commit consolidates the rows of statements that
    touched the same rows (:mod:`ctfile.writer.change_writer`).
    """

    _change_writer: ChangeWriter | None = None

    @property
    def changes(self) -> ChangeWriter | None:
        """The change writer of the running statement (None when the
        transaction does not capture changes)."""
        return self._change_writer

    @contextlib.contextmanager
    def _statement(self, *, compaction: bool = False) -> Iterator[None]:
        """Run one statement: its change rows are staged when it returns and
        discarded when it raises. The writer is made here, on the caller's
        thread, before the statement's workers use it.

        A compaction commits ``dataChange: false`` for every action of its
        entry (SPEC §Copy-on-write), so it cannot share a transaction with a
        statement that changes rows: either order is refused before anything
        is written (the rows changed would vanish from change scans)."""
        if compaction and not self.is_empty:
            raise InvalidArgumentError(
                "compact() must be the only statement of its transaction: it commits dataChange false, and this "
                "transaction already changed rows or metadata"
            )
        if not compaction and not self.data_change:
            raise InvalidArgumentError(
                "a transaction that compacted (dataChange false) cannot also change rows; commit the compaction first"
            )
        if self._change_writer is None and self.captures_changes:
            self._change_writer = ChangeWriter(self)
        try:
            yield
        except BaseException:
            if self._change_writer is not None:
                self._change_writer.discard_statement()
            raise
        if self._change_writer is not None:
            self._change_writer.finish_statement()

    def commit(self) -> CommitResult:
        if self._change_writer is not None and not self._done:
            try:
                self._change_writer.consolidate()
            except BaseException:
                self.abort()
                raise
        return super().commit()

    def insert(self, data: Any) -> int:
        self._check_open()
        if self.is_replay:
            return 0
        with self._statement():
            return dml.insert(self, data)

    def delete(self, where: pc.Expression) -> int:
        self._check_open()
        if self.is_replay:
            return 0
        with self._statement():
            return dml.delete(self, where)

    def update(self, where: pc.Expression | None, set: Mapping[str, Any]) -> int:
        self._check_open()
        if self.is_replay:
            return 0
        with self._statement():
            return dml.update(self, where, set)

    def merge(
        self,
        source: Any,
        on: str | Sequence[str],
        *,
        when_matched: str | None = "update",
        when_not_matched: str | None = "insert",
    ) -> dict[str, int]:
        self._check_open()
        if self.is_replay:
            return {"inserted": 0, "updated": 0, "deleted": 0}
        with self._statement():
            return merge_.merge(self, source, on, when_matched=when_matched, when_not_matched=when_not_matched)

    def compact(self, *, target_rows: int | None = None) -> int:
        self._check_open()
        if self.is_replay:
            return 0
        with self._statement(compaction=True):
            return dml.compact(self, target_rows=target_rows)

    def truncate(self) -> int:
        self._check_open()
        if self.is_replay:
            return 0
        with self._statement():
            return dml.truncate(self)
