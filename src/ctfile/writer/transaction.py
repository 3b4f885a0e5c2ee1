"""A transaction with DML statements: ``with table.transaction() as tx: ...``."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import pyarrow.compute as pc

from ctfile.log.transaction import Transaction
from ctfile.writer import dml


class WriteTransaction(Transaction):
    """A :class:`~ctfile.log.transaction.Transaction` whose statements are DML.

    Every statement sees the effects of the earlier ones in the same
    transaction; all of them commit as one version.
    """

    def insert(self, data: Any) -> int:
        self._check_open()
        return dml.insert(self, data)

    def delete(self, where: pc.Expression) -> int:
        self._check_open()
        return dml.delete(self, where)

    def update(self, where: pc.Expression | None, set: Mapping[str, Any]) -> int:
        self._check_open()
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
        return dml.merge(self, source, on, when_matched=when_matched, when_not_matched=when_not_matched)

    def compact(self, *, target_rows: int | None = None) -> int:
        self._check_open()
        return dml.compact(self, target_rows=target_rows)

    def truncate(self) -> int:
        self._check_open()
        return dml.truncate(self)
