"""MERGE: upsert a source by key columns (SPEC §Copy-on-write, MERGE).

Planning is apart from execution. :func:`plan_merge` checks everything
before a file is written -- the actions, the keys, the source's columns and
types, one source row per key -- and builds a :class:`MergePlan`: the
conformed source and its :class:`~ctfile.writer.conflicts.KeyPredicate`.
Keys match by the one key equality of SPEC §Copy-on-write (MERGE):
``-0.0`` matches ``0.0``, NaN matches NaN, a null matches nothing
(:func:`~ctfile.writer.conflicts.comparable_keys`).
:func:`run_merge` then records the key predicate in the transaction (SPEC
§Conflict detection: a concurrent commit adding a row with one of these keys
conflicts), rewrites the candidate partitions (those whose key statistics
can hold one of the source's keys, :meth:`KeyPredicate.candidates`) where
a key matches, and inserts the
unmatched source rows.

The source needs only the columns the MERGE uses: the keys, the columns it
sets when it updates, and every non-nullable column when it inserts. A
keyed delete (``when_matched="delete", when_not_matched=None``) needs the
keys alone.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.actions import Partition
from ctfile.format.errors import InvalidArgumentError, SchemaMismatchError
from ctfile.log.transaction import Transaction
from ctfile.writer.conflicts import KeyPredicate, comparable_keys
from ctfile.writer.dml import Rewrite, insert, rewrite_all, rewrite_positions
from ctfile.writer.input import Conformer, to_table

_SRC = "__ct_src"  # position of a row in the source
_POS = "__ct_pos"  # position of a row in a partition


class WhenMatched(str, enum.Enum):
    """What a MERGE does with a table row whose key a source row has."""

    UPDATE = "update"
    DELETE = "delete"


class WhenNotMatched(str, enum.Enum):
    """What a MERGE does with a source row whose key no table row has."""

    INSERT = "insert"


def _enum(value: Any, cls: type[enum.Enum], what: str):
    if value is None:
        return None
    try:
        return cls(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in cls)
        raise InvalidArgumentError(f"{what} must be {allowed} or None, found {value!r}") from None


@dataclass(frozen=True)
class MergePlan:
    """A checked MERGE, ready to run: ``source`` is conformed to the table
    types, holds the columns the MERGE uses plus a ``__ct_src`` position
    column, and at most one row per key."""

    keys: tuple[str, ...]
    source: pa.Table
    update_columns: tuple[str, ...]
    when_matched: WhenMatched | None
    when_not_matched: WhenNotMatched | None
    predicate: KeyPredicate
    #: The source's key columns as keys compare (:func:`comparable_keys`),
    #: with the ``__ct_src`` position column: one side of every match.
    match_keys: pa.Table


def plan_merge(
    tx: Transaction, source: Any, on: str | Sequence[str], *, when_matched: Any, when_not_matched: Any
) -> MergePlan:
    """Check a MERGE and conform its source; raises before anything is written.

    Raises
    ------
    InvalidArgumentError
        Unknown actions, no action, bad ``on``, or two source rows with one key.
    SchemaMismatchError
        A key missing from the source or the table, a column not in the
        table, a type that does not fit, or (when inserting) a missing
        non-nullable column.
    """
    matched = _enum(when_matched, WhenMatched, "when_matched")
    not_matched = _enum(when_not_matched, WhenNotMatched, "when_not_matched")
    if matched is None and not_matched is None:
        raise InvalidArgumentError("merge needs when_matched or when_not_matched; both are None")
    keys = merge_keys(on)
    table_cols = tx.schema.names
    src = to_table(source, what="merge source")
    for k in keys:
        if k not in table_cols:
            raise SchemaMismatchError(f"merge key {k!r} is not a table column ({table_cols})")
        if k not in src.schema.names:
            raise SchemaMismatchError(f"merge key {k!r} is missing from the source (source columns: {src.schema.names})")
    given = [c for c in table_cols if c in src.schema.names]
    # An update sets the columns the source has (a missing one keeps its
    # value); an insert needs whole rows, so missing nullable columns are
    # filled with nulls for the inserted rows only.
    update_columns = [c for c in given if c not in keys] if matched is WhenMatched.UPDATE else []
    columns = None if not_matched is WhenNotMatched.INSERT else given
    conformer = Conformer(tx.schema, what="merge source", columns=columns)
    conformer.check_schema(src.schema)
    src = pa.Table.from_batches([conformer.conform(b) for b in src.to_batches()], schema=conformer.target)
    predicate = KeyPredicate.from_source(src, keys)
    _check_unique_keys(predicate.source_keys, keys)
    src = src.append_column(_SRC, pa.array(np.arange(src.num_rows, dtype=np.int64)))
    match_keys = comparable_keys(src.select(keys + [_SRC]), keys)
    return MergePlan(tuple(keys), src, tuple(update_columns), matched, not_matched, predicate, match_keys)


def merge_keys(on: Any) -> list[str]:
    """The key columns ``on`` names (one name, or a sequence of names).

    >>> merge_keys("id"), merge_keys(("a", "b"))
    (['id'], ['a', 'b'])
    """
    keys = [on] if isinstance(on, str) else list(on) if isinstance(on, Sequence) else []
    if not keys or not all(isinstance(k, str) for k in keys):
        raise InvalidArgumentError(f"on must name one or more key columns, found {on!r}")
    return keys


def _check_unique_keys(source_keys: pa.Table, keys: list[str]) -> None:
    """At most one source row per key. ``source_keys``: the keys of the
    source rows with no null key part, as keys compare
    (:attr:`KeyPredicate.source_keys`): ``0.0`` and ``-0.0`` are one key,
    and a row with a null key part is no key (SPEC §Copy-on-write, MERGE,
    key equality)."""
    if not source_keys.num_rows:
        return
    counts = source_keys.group_by(keys).aggregate([([], "count_all")]).column("count_all")
    worst = pc.max(counts).as_py()
    if worst and worst > 1:
        raise InvalidArgumentError(
            f"merge source has {worst} rows with the same key {keys}; a MERGE needs at most one "
            f"source row per key (deduplicate the source first)"
        )


def _matches(plan: MergePlan, t: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(positions in ``t``, source rows) of the matched keys, by position."""
    keys = list(plan.keys)
    tk = comparable_keys(t.select(keys), keys).append_column(_POS, pa.array(np.arange(t.num_rows, dtype=np.int64)))
    j = tk.join(plan.match_keys, keys, join_type="inner", use_threads=False)
    pos = j.column(_POS).to_numpy()
    sidx = j.column(_SRC).to_numpy()
    order = np.argsort(pos)
    return pos[order], sidx[order]


def _rewrite_matched(tx: Transaction, plan: MergePlan, p: Partition, t: pa.Table) -> Rewrite | None:
    """The rewrite of one candidate partition (None: no key matches)."""
    pos, sidx = _matches(plan, t)
    if not len(pos):
        return None
    r: Rewrite | None = None
    if plan.when_matched is WhenMatched.DELETE:
        r = rewrite_positions(tx, p, t, pos, None)
    elif plan.update_columns:
        at = pa.array(sidx)
        r = rewrite_positions(tx, p, t, pos, {c: plan.source.column(c).take(at) for c in plan.update_columns})
    if r is None:  # matched, but nothing to change: keep the partition
        r = Rewrite(p, [], unchanged=True)
    r.matched_source = sidx
    return r


def run_merge(tx: Transaction, plan: MergePlan) -> dict[str, int]:
    """Run a planned MERGE in ``tx``; returns ``inserted``/``updated``/``deleted`` counts."""
    tx.record_read_predicate(plan.predicate)
    candidates = plan.predicate.candidates(tx.live_partitions(), tx.schema)
    results = rewrite_all(tx, candidates, lambda p, t: _rewrite_matched(tx, plan, p, t))
    matched = np.zeros(plan.source.num_rows, dtype=bool)
    for r in results:
        if r.matched_source is not None:
            matched[r.matched_source] = True
    inserted = 0
    if plan.when_not_matched is WhenNotMatched.INSERT and not matched.all():
        inserted = insert(tx, plan.source.filter(pa.array(~matched)).drop_columns([_SRC]))
    return {
        "inserted": inserted,
        "updated": sum(r.updated for r in results),
        "deleted": sum(r.deleted for r in results),
    }


def merge(
    tx: Transaction, source: Any, on: str | Sequence[str], *, when_matched: Any, when_not_matched: Any
) -> dict[str, int]:
    """Upsert ``source`` by the key columns ``on`` (SQL MERGE with one source row per key)."""
    plan = plan_merge(tx, source, on, when_matched=when_matched, when_not_matched=when_not_matched)
    return run_merge(tx, plan)
