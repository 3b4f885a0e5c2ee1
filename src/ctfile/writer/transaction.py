"""A transaction with DML statements: ``with table.transaction() as tx: ...``."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import pyarrow.compute as pc

from ctfile.log.transaction import Transaction
from ctfile.writer import dml
from ctfile.writer import merge as merge_


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
    """

    def insert(self, data: Any) -> int:
        self._check_open()
        return 0 if self.is_replay else dml.insert(self, data)

    def delete(self, where: pc.Expression) -> int:
        self._check_open()
        return 0 if self.is_replay else dml.delete(self, where)

    def update(self, where: pc.Expression | None, set: Mapping[str, Any]) -> int:
        self._check_open()
        return 0 if self.is_replay else dml.update(self, where, set)

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
        return merge_.merge(self, source, on, when_matched=when_matched, when_not_matched=when_not_matched)

    def compact(self, *, target_rows: int | None = None) -> int:
        self._check_open()
        return 0 if self.is_replay else dml.compact(self, target_rows=target_rows)

    def truncate(self) -> int:
        self._check_open()
        return 0 if self.is_replay else dml.truncate(self)
