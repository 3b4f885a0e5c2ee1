"""MERGE on a table (:class:`TableMerges`, the helper behind the MERGE methods of :class:`ctfile.Table`):
the builder of SPEC §Copy-on-write, MERGE, and the shorthand ``merge``.
Each runs as one statement of its own transaction, re-run at the latest
version after a conflict (:func:`~ctfile.writer.statement.run_statement`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import pyarrow.compute as pc

from ctfile.log.commit_options import CommitOptions, commit_options
from ctfile.log.transaction import CommitResult
from ctfile.writer.input import to_table
from ctfile.writer.merge import shorthand_statement
from ctfile.writer.merge_builder import MergeBuilder
from ctfile.writer.merge_statement import MergeStatement

if TYPE_CHECKING:
    from ctfile.table.table import Table


class TableMerges:
    """The MERGE statements of ``table``, behind the MERGE methods of
    :class:`ctfile.Table`: a helper over the table's public surface (each
    statement runs through :meth:`~ctfile.Table.run_statement`)."""

    def __init__(self, table: "Table"):
        self.table = table

    def merge(
        self,
        source: Any,
        on: str | Sequence[str],
        *,
        when_matched: str | None = "update",
        when_not_matched: str | None = "insert",
        commit: CommitOptions | None = None,
        app_id: str | None = None,
        app_version: int | None = None,
    ) -> CommitResult:
        """Upsert ``source`` on the key columns ``on`` (a shorthand for
        :meth:`merge_builder`).

        ``when_matched``: "update" (set the source's columns), "delete" or
        None; ``when_not_matched``: "insert" or None. The source must hold at
        most one row per key, and only the columns the MERGE uses: the keys,
        the columns to set, and when inserting every non-nullable column.
        Concurrent MERGEs of the same keys are serialized (SPEC §Conflict
        detection): the loser re-runs against the winner's rows, so a key is
        never inserted twice. ``commit`` (or its shorthand
        ``app_id``/``app_version``) makes a ``foreachBatch`` upsert
        exactly-once (see :meth:`transaction`).
        """
        statement = shorthand_statement(on, when_matched=when_matched, when_not_matched=when_not_matched)
        params = {"on": on if isinstance(on, str) else list(statement.target_keys), "whenMatched": when_matched,
                  "whenNotMatched": when_not_matched}
        source = to_table(source, what="merge source")  # a stream is read once, whatever the re-runs
        return self.table.run_statement(
            "MERGE", lambda tx: tx.merge(source, on, when_matched=when_matched, when_not_matched=when_not_matched),
            parameters=params, commit=commit_options(commit, app_id=app_id, app_version=app_version),
        )

    def merge_builder(
        self, source: Any, on: Any, *, on_condition: pc.Expression | None = None, source_alias: str = "s",
        target_alias: str = "t",
    ) -> MergeBuilder:
        """A MERGE of ``source`` into this table, ON the key columns ``on``
        (a name, a sequence of names, or a mapping of table column to source
        column) and ``on_condition`` (a further predicate over both rows):
        add ``when_...`` clauses in order, then ``execute()`` commits one
        version (SPEC §Copy-on-write, MERGE; see
        :class:`~ctfile.writer.merge_builder.MergeBuilder`).

        For each matched (table row, source row) pair the first ``MATCHED``
        clause whose condition holds applies, for each unmatched source row
        the first ``NOT MATCHED`` clause, for each table row no source row
        matches the first ``NOT MATCHED BY SOURCE`` clause. A table row
        matched by two source rows one of which would update it is refused
        before anything is written. Rows keep their row ids; a row set to
        its own values is not rewritten. The statement is re-run at the
        latest version after a conflict, as :meth:`merge` is.

        Examples
        --------
        >>> import ctfile, pyarrow as pa, pyarrow.compute as pc, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64()), ("ts", pa.int64())]))
        >>> _ = t.insert(pa.table({"id": [1, 2], "ts": [5, 5]}))
        >>> batch = pa.table({"id": [1, 2, 3], "ts": [9, 1, 9], "op": ["upsert", "delete", "upsert"]})
        >>> r = (t.merge_builder(batch, on="id")
        ...       .when_matched_delete(condition=pc.field("s.op") == "delete")
        ...       .when_matched_update_all(condition=pc.field("s.ts") > pc.field("t.ts"))
        ...       .when_not_matched_insert_all(condition=pc.field("s.op") != "delete")
        ...       .execute())
        >>> (r.num_deleted_rows, r.num_updated_rows, r.num_inserted_rows), t.to_arrow().sort_by("id").to_pylist()
        ((1, 1, 1), [{'id': 1, 'ts': 9}, {'id': 3, 'ts': 9}])
        """
        source = to_table(source, what="merge source")

        def run(statement: MergeStatement, commit: CommitOptions) -> CommitResult:
            return self.table.run_statement("MERGE", lambda tx: tx.execute_merge(statement, source),
                                            parameters=statement.parameters(), commit=commit)

        return MergeBuilder.start(run, on, on_condition=on_condition, source_alias=source_alias,
                                  target_alias=target_alias)
