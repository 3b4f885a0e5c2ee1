"""A MERGE of a small source over many partitions: the Python engine on
each worker, one candidate partition each (SPEC §Copy-on-write,
distributed statements, a spread MERGE).

A MERGE whose source the coordinator can hold but whose candidates it
should not read itself (an upsert of ten thousand rows into a table of
millions) needs no join engine: every worker gets the whole planned
statement (:class:`~ctfile.writer.merge.ArrowMerge`, source included, as
Spark broadcasts a small join side) and rewrites the candidates it is given
exactly as :func:`ctfile.writer.merge_run.run_merge` rewrites them in one
process (:func:`~ctfile.writer.merge_run.rewrite_partition`: pairs, first
clauses, the multiple-match rule per partition, one rewrite). The
coordinator then inserts the source rows no worker matched and stages
everything as one statement, with the read set and read predicates of the
Python engine's MERGE. The two paths run the same functions, so they
cannot differ in the rows they write.

Not spread (the caller runs the statement another way): a statement with
schema evolution (the workers would read in a schema the coordinator has
not yet changed), and one whose source repeats a key while a ``MATCHED``
clause updates, whose multiple-match error must come before any worker
writes (:func:`~ctfile.writer.merge_run.check_multiple_matches` reads the
partitions such a key may lie in, which this path is meant not to do).

Examples
--------
>>> import ctfile, pyarrow as pa, pyarrow.compute as pc, tempfile
>>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64()), ("n", pa.int64())]), partition_rows=2)
>>> _ = t.insert(pa.table({"id": [1, 2, 3, 4], "n": [10, 20, 30, 40]}))
>>> source = pa.table({"id": [2, 9], "n": [5, 7]})
>>> stmt = t.merge_builder(source, on="id").when_matched_update({"n": pc.field("s.n")}).when_not_matched_insert_all().statement
>>> with t.transaction(operation="MERGE") as tx, tx.statement():
...     spread = SpreadMerge.plan(tx, tx.prepare_merge(stmt, source))
...     done = [spread.rewrite(p.path) for p in spread.job.candidates]   # on the workers
...     counts = spread.finish(tx, done)
>>> counts, sorted(t.to_arrow().column("n").to_pylist())
({'inserted': 1, 'updated': 1, 'deleted': 0}, [5, 7, 10, 30, 40])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

import numpy as np

from ctfile.writer.dml import insert
from ctfile.writer.merge import ArrowMerge
from ctfile.writer.merge_run import (
    PreparedMerge, has_repeated_updated_keys, record_reads, rewrite_partition, unmatched_rows,
)
from ctfile.writer.rewrite_job import PartitionRewrite, RewriteJob

if TYPE_CHECKING:
    from ctfile.writer.transaction import WriteTransaction


@dataclass(frozen=True)
class SpreadMerge:
    """A prepared MERGE spread over workers (module docstring): ``job``
    holds the candidates and what a worker needs to rewrite one
    (picklable, like every :class:`~ctfile.writer.rewrite_job.RewriteJob`),
    ``merge`` the planned statement with its source."""

    job: RewriteJob
    merge: ArrowMerge

    @classmethod
    def plan(cls, tx: "WriteTransaction", prepared: PreparedMerge) -> "SpreadMerge | None":
        """The spread form of ``prepared`` (planned over ``tx``'s current
        state), or None when it must run otherwise (module docstring)."""
        m = prepared.merge
        if m.plan.evolution is not None or has_repeated_updated_keys(m):
            return None
        if not tx.holds_prepared(prepared):
            return None
        return cls(RewriteJob.for_prepared_merge(tx, prepared), m)

    def rewrite(self, path: str) -> PartitionRewrite:
        """A worker's part: rewrite the candidate at ``path``, recording
        which source rows matched there."""
        return self.job.rewrite_by(path, lambda tx, p, t: rewrite_partition(tx, self.merge, p, t))

    def finish(self, tx: "WriteTransaction", rewrites: Iterable[PartitionRewrite]) -> dict[str, int]:
        """The coordinator's part, once every candidate was rewritten, in
        the statement (``tx.statement()``) the MERGE was prepared in:
        insert the source rows no worker matched, stage the rewrites and
        the statement's read predicates in ``tx``; returns the counts. When
        an unmatched row does not fit the table, nothing of the statement
        stays: the workers' files are deleted."""
        rewrites = list(rewrites)
        matched = np.zeros(self.merge.source.num_rows, dtype=bool)
        for r in rewrites:
            if r.matched_source is not None:
                matched[r.matched_source] = True
        try:
            inserts = unmatched_rows(tx, self.merge, matched)
        except BaseException:
            self.job.discard(rewrites)
            raise
        self.job.stage(tx, rewrites)
        record_reads(tx, self.merge)
        inserted = 0 if inserts is None else insert(tx, inserts)
        changed = [r for r in rewrites if not r.unchanged]
        return {
            "inserted": inserted,
            "updated": sum(r.updated for r in changed),
            "deleted": sum(r.deleted for r in changed),
        }
