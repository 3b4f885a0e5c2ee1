"""MERGE in the Python engine: execution (SPEC §Copy-on-write, MERGE).

:func:`run_merge` runs an :class:`~ctfile.writer.merge.ArrowMerge` in a
transaction:

1. the candidates: the live partitions whose statistics can hold a source
   key, and those that can hold a row a ``NOT MATCHED BY SOURCE`` clause
   selects (:func:`candidates`);
2. the multiple-match rule, checked before any file is written: only a
   key two source rows share can match a table row twice, so only the
   candidates that may hold such a key are read for it
   (:func:`check_multiple_matches`);
3. the schema change of a statement with schema evolution, and the read
   predicates of SPEC §Conflict detection;
4. each candidate is read, its rows paired with the source rows they match
   (:func:`find_pairs`), each pair and each unmatched row given the first
   clause of its kind whose condition holds (:func:`first_clauses`), and
   the partition rewritten once with its deletes and updates
   (:func:`~ctfile.writer.dml.rewrite_positions`);
5. the source rows no table row matched go to the ``NOT MATCHED`` clauses
   (:func:`unmatched_rows`); only once their rows are checked do the
   rewrites join the transaction, and the rows are inserted.

Examples
--------
>>> import ctfile, tempfile
>>> from ctfile.writer.merge_statement import MatchKind, MergeAction, MergeClause, MergeStatement
>>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64()), ("n", pa.int64())]))
>>> _ = t.insert(pa.table({"id": [1, 2, 3], "n": [10, 20, 30]}))
>>> stmt = MergeStatement(keys=(("id", "id"),), clauses=(
...     MergeClause(MatchKind.MATCHED, MergeAction.DELETE, condition=pc.field("s.n") < 0),
...     MergeClause(MatchKind.MATCHED, MergeAction.UPDATE, assignments=(("n", pc.field("t.n") + pc.field("s.n")),)),
...     MergeClause(MatchKind.NOT_MATCHED_BY_SOURCE, MergeAction.DELETE)))
>>> with t.transaction(operation="MERGE") as tx:
...     counts = execute(tx, stmt, pa.table({"id": [1, 2], "n": [-1, 5]}))
>>> counts, t.to_arrow().to_pylist()
({'inserted': 0, 'updated': 1, 'deleted': 2}, [{'id': 2, 'n': 25}])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.actions import Partition
from ctfile.format.errors import InvalidArgumentError
from ctfile.reader.expressions import evaluate_mask, evaluate_values
from ctfile.reader.partition_reader import read_partition_table
from ctfile.reader.pruning import prune
from ctfile.writer.conflicts import KeyPredicate, RowPredicate, comparable_keys
from ctfile.writer.dml import (
    Rewrite, discard_rewrites, insert, rewrite_partitions, rewrite_positions, stage_rewrites,
)
from ctfile.writer.input import Conformer, cast_column
from ctfile.writer.merge import (
    SOURCE_ROW, ArrowMerge, BoundClause, check_shorthand_source, check_unique_keys, plan_merge,
    shorthand_statement,
)
from ctfile.writer.merge_plan import SourceColumn
from ctfile.writer.merge_rows import scatter
from ctfile.writer.merge_statement import MatchKind, MergeAction, MergeStatement, Side

if TYPE_CHECKING:
    from ctfile.writer.transaction import WriteTransaction

_POS = "__ct_pos"  # a row's position in its partition
_PAIR: tuple[Side, ...] = MatchKind.MATCHED.sees


@dataclass(frozen=True)
class Pairs:
    """The matching (table row, source row) pairs of one partition:
    ``positions`` in the partition and ``sources`` (source row numbers),
    ordered by position, then source row."""

    positions: np.ndarray
    sources: np.ndarray

    def __len__(self) -> int:
        return len(self.positions)


def find_pairs(m: ArrowMerge, t: pa.Table) -> Pairs:
    """The pairs of ``t``'s rows and the source's rows that match: equal
    keys by SPEC's key equality (a null matches nothing), and the ON
    condition true."""
    keys = list(m.plan.keys)
    numbered = comparable_keys(t.select(keys), keys).append_column(_POS, pa.array(np.arange(t.num_rows, dtype=np.int64)))
    joined = numbered.join(m.match_keys, keys, join_type="inner", use_threads=False)
    pos, src = joined.column(_POS).to_numpy(), joined.column(SOURCE_ROW).to_numpy()
    order = np.lexsort((src, pos))
    pos, src = pos[order], src[order]
    if m.on_condition is not None and len(pos):
        rows = m.scopes.table(_PAIR, t.take(pa.array(pos)), m.source.take(pa.array(src)))
        keep = _numpy(evaluate_mask(rows, m.on_condition, what="ON condition"))
        pos, src = pos[keep], src[keep]
    return Pairs(pos, src)


def _numpy(mask: pa.Array) -> np.ndarray:
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


def first_clauses(clauses: Sequence[BoundClause], rows: pa.Table) -> np.ndarray:
    """Per row of ``rows`` (a scope table), the index in ``clauses`` of the
    first whose condition is true, -1 for none. A clause's condition is
    evaluated only on the rows no earlier clause took (an expression that
    would fail on another row, a division by zero, does not fail the
    statement)."""
    chosen = np.full(rows.num_rows, -1, dtype=np.int64)
    open_rows = np.arange(rows.num_rows)
    for i, c in enumerate(clauses):
        if not len(open_rows):
            break
        if c.condition is None:
            chosen[open_rows] = i
            break
        part = rows if len(open_rows) == rows.num_rows else rows.take(pa.array(open_rows))
        hit = _numpy(evaluate_mask(part, c.condition, what=f"{c.kind.sql} condition"))
        chosen[open_rows[hit]] = i
        open_rows = open_rows[~hit]
    return chosen


def _takes(clauses: Sequence[BoundClause], chosen: np.ndarray, want) -> np.ndarray:
    """Which rows fall to a clause satisfying ``want(clause)``."""
    hits = np.array([want(c) for c in clauses] + [False], dtype=bool)
    return hits[chosen]  # chosen == -1 reads the trailing False


def _is_update(c: BoundClause) -> bool:
    return c.action.updates


def _is_delete(c: BoundClause) -> bool:
    return c.action is MergeAction.DELETE


def check_single_update(m: ArrowMerge, t: pa.Table, pairs: Pairs, chosen: np.ndarray) -> None:
    """The multiple-match rule (SPEC §Copy-on-write, MERGE): a table row in
    more than one pair may not have a pair that falls to an UPDATE."""
    clauses = m.of(MatchKind.MATCHED)
    updates = _takes(clauses, chosen, _is_update)
    if not updates.any():
        return
    uniq, counts = np.unique(pairs.positions, return_counts=True)
    twice = np.isin(pairs.positions, uniq[counts > 1]) & updates
    if not twice.any():
        return
    i = int(np.flatnonzero(twice)[0])
    pos = pairs.positions[i]
    key = {k: t.column(k)[int(pos)].as_py() for k in m.plan.keys}
    raise InvalidArgumentError(
        f"{int(counts[np.searchsorted(uniq, pos)])} source rows match the table row with key {key}, and "
        f"{clauses[chosen[i]].clause} applies to one of them: a table row may be updated by one source row "
        f"only (deduplicate the source, or give the clause a condition that tells them apart)"
    )


@dataclass(frozen=True)
class RowChanges:
    """What a statement does to rows of one partition: per row at
    ``positions`` (distinct), whether it is ``deleted``, and ``values``: per
    column an update sets, one value per position (the row's own where its
    clause does not set it)."""

    positions: np.ndarray
    deleted: np.ndarray
    values: dict[str, pa.Array]

    @classmethod
    def combine(cls, parts: Sequence["RowChanges"]) -> "RowChanges":
        """Changes of disjoint rows, in position order."""
        positions = np.concatenate([p.positions for p in parts])
        order = pa.array(np.argsort(positions, kind="stable"))
        values = {c: pa.concat_arrays([p.values[c] for p in parts]).take(order) for c in parts[0].values}
        return cls(positions[order.to_numpy()], np.concatenate([p.deleted for p in parts])[order.to_numpy()], values)


def clause_values(m: ArrowMerge, clause: BoundClause, rows: pa.Table, sources: np.ndarray | None) -> dict[str, pa.Array]:
    """The values ``clause`` sets, in the table's types, for its ``rows`` (a
    scope table) whose source rows are ``sources`` (None when it sees none)."""
    arrow = m.plan.schema.to_arrow(field_ids=False)
    exprs = {c: v for c, v in clause.values.items() if isinstance(v, pc.Expression)}
    computed = evaluate_values(rows, exprs, what=f"{clause.clause}") if exprs else None
    out = {}
    for name, value in clause.values.items():
        if isinstance(value, SourceColumn):
            column = m.source.column(value.name).take(pa.array(sources))
        else:
            column = computed.column(name)
        out[name] = cast_column(column.combine_chunks(), name, arrow.field(name).type, what=str(clause.clause))
    return out


def _changes(m: ArrowMerge, t: pa.Table, clauses: Sequence[BoundClause], rows: pa.Table, positions: np.ndarray,
             sources: np.ndarray | None, chosen: np.ndarray) -> RowChanges:
    """The changes of the scope ``rows`` (of table rows at ``positions``,
    paired with ``sources``) that fall to ``clauses`` as ``chosen`` says. A
    position listed twice falls to DELETE or to no clause in every listing
    (:func:`check_single_update`): it is deleted if one deletes it."""
    acting = chosen >= 0
    unique, inverse = np.unique(positions[acting], return_inverse=True)
    deleted = np.zeros(len(unique), dtype=bool)
    np.logical_or.at(deleted, inverse, _takes(clauses, chosen, _is_delete)[acting])
    at_unique = pa.array(unique)
    pieces: dict[str, list] = {c: [] for c in m.plan.update_columns}
    for i, clause in enumerate(clauses):
        mine = np.flatnonzero(chosen == i)
        if not len(mine) or not clause.action.updates or not clause.values:
            continue
        values = clause_values(m, clause, rows.take(pa.array(mine)), None if sources is None else sources[mine])
        at = np.searchsorted(unique, positions[mine])
        for name, column in values.items():
            pieces[name].append((at, column))
    values = {c: scatter(t.column(c).take(at_unique).combine_chunks(), pieces[c]) for c in m.plan.update_columns}
    return RowChanges(unique, deleted, values)


def matched_changes(m: ArrowMerge, t: pa.Table, pairs: Pairs) -> RowChanges | None:
    """The changes the ``MATCHED`` clauses make to ``t``'s matched rows."""
    clauses = m.of(MatchKind.MATCHED)
    if not clauses or not len(pairs):
        return None
    rows = m.scopes.table(_PAIR, t.take(pa.array(pairs.positions)), m.source.take(pa.array(pairs.sources)))
    chosen = first_clauses(clauses, rows)
    check_single_update(m, t, pairs, chosen)
    return _changes(m, t, clauses, rows, pairs.positions, pairs.sources, chosen)


def unmatched_target_changes(m: ArrowMerge, t: pa.Table, pairs: Pairs) -> RowChanges | None:
    """The changes the ``NOT MATCHED BY SOURCE`` clauses make to the rows
    of ``t`` that no source row matches."""
    clauses = m.of(MatchKind.NOT_MATCHED_BY_SOURCE)
    if not clauses:
        return None
    unmatched = np.ones(t.num_rows, dtype=bool)
    unmatched[pairs.positions] = False
    positions = np.flatnonzero(unmatched)
    if not len(positions):
        return None
    rows = m.scopes.table(MatchKind.NOT_MATCHED_BY_SOURCE.sees, t.take(pa.array(positions)))
    return _changes(m, t, clauses, rows, positions, None, first_clauses(clauses, rows))


def rewrite_partition(tx: "WriteTransaction", m: ArrowMerge, p: Partition, t: pa.Table) -> Rewrite | None:
    """The rewrite of candidate ``p`` (read as ``t``): its matched and
    unmatched rows' changes applied at once. The rewrite records the source
    rows that matched (``matched_source``); None when nothing matched and
    nothing changes."""
    pairs = find_pairs(m, t)
    parts = [c for c in (matched_changes(m, t, pairs), unmatched_target_changes(m, t, pairs)) if c is not None]
    r = None
    if parts:
        changes = RowChanges.combine(parts)
        if len(changes.positions):
            r = rewrite_positions(tx, p, t, changes.positions, changes.values, deleted=changes.deleted)
    if r is None and len(pairs):
        r = Rewrite(p, [], unchanged=True)  # matched, but nothing to change: keep the partition
    if r is not None:
        r.matched_source = pairs.sources
    return r


def unmatched_rows(tx: "WriteTransaction", m: ArrowMerge, matched: np.ndarray) -> pa.Table | None:
    """The rows the ``NOT MATCHED`` clauses make of the source rows no table
    row matched (``matched`` false), in source order and conformed to the
    table (None: no row); a value that does not fit is refused here,
    before anything of the statement is staged."""
    clauses = m.of(MatchKind.NOT_MATCHED)
    sources = np.flatnonzero(~matched)
    if not clauses or not len(sources):
        return None
    rows = m.scopes.table(MatchKind.NOT_MATCHED.sees, source=m.source.take(pa.array(sources)))
    chosen = first_clauses(clauses, rows)
    conformer = Conformer(tx.schema, what="merge insert")
    pieces, order = [], []
    for i, clause in enumerate(clauses):
        mine = np.flatnonzero(chosen == i)
        if not len(mine):
            continue
        values = clause_values(m, clause, rows.take(pa.array(mine)), sources[mine])
        arrays = [values.get(f.name, pa.nulls(len(mine), f.type)) for f in conformer.target]
        pieces.append(conformer.conform(pa.RecordBatch.from_arrays(arrays, names=conformer.target.names)))
        order.append(sources[mine])
    if not pieces:
        return None
    table = pa.Table.from_batches(pieces, schema=conformer.target)
    return table.take(pa.array(np.argsort(np.concatenate(order), kind="stable")))


def candidates(tx: "WriteTransaction", m: ArrowMerge) -> list[Partition]:
    """The live partitions the statement reads, in table order (SPEC
    §Copy-on-write, MERGE, candidates)."""
    live = [p for p in tx.live_partitions() if p.num_records]
    paths: set[str] = set()
    if m.matches_source:
        paths.update(p.path for p in m.predicate.candidates(live, tx.schema))
    if m.has(MatchKind.NOT_MATCHED_BY_SOURCE):
        paths.update(p.path for p in _unmatched_target_candidates(tx, m, live))
    return [p for p in live if p.path in paths]


def _unmatched_target_candidates(tx: "WriteTransaction", m: ArrowMerge, live: list[Partition]) -> list[Partition]:
    """The partitions of ``live`` that may hold a row the ``NOT MATCHED BY
    SOURCE`` clauses select: by statistics, when each clause has a
    condition; every one otherwise."""
    condition = m.unmatched_target_condition
    if condition is None:
        return live
    return prune(live, m.scopes.target_aliases().schema(tx.schema), condition)


def _duplicate_keys(m: ArrowMerge) -> KeyPredicate | None:
    """The keys more than one source row has (None: none)."""
    keys = m.predicate.source_keys
    if keys.num_rows < 2:
        return None
    counted = keys.group_by(list(m.plan.keys)).aggregate([([], "count_all")])
    twice = counted.filter(pc.greater(counted.column("count_all"), 1)).select(list(m.plan.keys))
    return KeyPredicate(m.plan.keys, twice) if twice.num_rows else None


def has_repeated_updated_keys(m: ArrowMerge) -> bool:
    """Whether two source rows share a key while a ``MATCHED`` clause
    updates: only then can the multiple-match rule fail."""
    return _repeated_updated_keys(m) is not None


def _repeated_updated_keys(m: ArrowMerge) -> KeyPredicate | None:
    if not any(_is_update(c) for c in m.of(MatchKind.MATCHED)):
        return None
    return _duplicate_keys(m)


def check_multiple_matches(tx: "WriteTransaction", m: ArrowMerge, parts: Sequence[Partition]) -> None:
    """Raise the multiple-match error before anything is written: read the
    candidates that may hold a key two source rows share (only those can
    hold a row matched twice) and check their pairs."""
    twice = _repeated_updated_keys(m)
    if twice is None:
        return
    for p in twice.candidates(parts, tx.schema):
        t = read_partition_table(tx.storage, p, m.plan.schema)
        pairs = find_pairs(m, t)
        if len(pairs):
            rows = m.scopes.table(_PAIR, t.take(pa.array(pairs.positions)), m.source.take(pa.array(pairs.sources)))
            check_single_update(m, t, pairs, first_clauses(m.of(MatchKind.MATCHED), rows))


def record_reads(tx: "WriteTransaction", m: ArrowMerge) -> None:
    """The statement's read predicates (SPEC §Conflict detection)."""
    if m.matches_source:
        tx.record_read_predicate(m.predicate)
    if m.has(MatchKind.NOT_MATCHED_BY_SOURCE):
        condition = m.unmatched_target_condition
        where = pc.scalar(True) if condition is None else condition
        tx.record_read_predicate(RowPredicate(where, m.scopes.target_aliases()))


@dataclass(frozen=True)
class PreparedMerge:
    """A MERGE planned against the state a transaction had when it was
    prepared (:meth:`~ctfile.WriteTransaction.prepare_merge`): the checked
    plan and the candidates it reads, found once, so that sizing the work
    (as the Spark engine does before it runs a MERGE in the driver) and
    running it plan the statement once. ``state`` is the transaction's
    state then; a prepared MERGE runs only over that state."""

    merge: ArrowMerge
    candidates: tuple[Partition, ...]
    state: tuple[int, Any]
    source: Any  # as given, to plan again over another state

    @property
    def candidate_rows(self) -> int:
        """The rows of the candidates: what running it reads."""
        return sum(p.num_records for p in self.candidates)


def prepare(tx: "WriteTransaction", statement: MergeStatement, source: Any, state: tuple[int, Any]) -> PreparedMerge:
    """Plan ``statement`` over ``source`` in ``tx`` and find its candidates."""
    m = plan_merge(tx, statement, source)
    return PreparedMerge(m, tuple(candidates(tx, m)), state, source)


def run_merge(tx: "WriteTransaction", m: ArrowMerge, parts: Sequence[Partition] | None = None) -> dict[str, int]:
    """Run a planned MERGE in ``tx`` (see the module docstring); returns
    ``inserted``/``updated``/``deleted`` counts. ``parts``: its candidates,
    when a :class:`PreparedMerge` found them over the same state."""
    parts = candidates(tx, m) if parts is None else list(parts)
    check_multiple_matches(tx, m, parts)
    if m.plan.evolution is not None:
        tx.evolve_schema(m.plan.evolution.apply)
    record_reads(tx, m)
    results = rewrite_partitions(tx, parts, lambda p, t: rewrite_partition(tx, m, p, t))
    matched = np.zeros(m.source.num_rows, dtype=bool)
    for r in results:
        if r.matched_source is not None:
            matched[r.matched_source] = True
    try:
        inserts = unmatched_rows(tx, m, matched)
    except BaseException:
        discard_rewrites(tx, results)
        raise
    stage_rewrites(tx, results)
    return {
        "inserted": 0 if inserts is None else insert(tx, inserts),
        "updated": sum(r.updated for r in results),
        "deleted": sum(r.deleted for r in results),
    }


def execute(tx: "WriteTransaction", statement: MergeStatement, source: Any) -> dict[str, int]:
    """Plan ``statement`` over ``source`` and run it in ``tx``."""
    return run_merge(tx, plan_merge(tx, statement, source))


def merge(tx: "WriteTransaction", source: Any, on: Any, *, when_matched: Any, when_not_matched: Any) -> dict[str, int]:
    """The shorthand MERGE in ``tx`` (SPEC §Copy-on-write, MERGE, the
    shorthand): upsert ``source`` by the key columns ``on``, one source row
    per key."""
    statement = shorthand_statement(on, when_matched=when_matched, when_not_matched=when_not_matched)
    m = plan_merge(tx, statement, source)
    check_shorthand_source(tx.schema, m.source.schema, statement)
    check_unique_keys(m.predicate.source_keys, m.plan.keys)
    return run_merge(tx, m)
