"""The read predicates of DML statements, for conflict detection (SPEC
§Conflict detection, rule 4).

A statement that selects rows records what it selected, so that a
concurrent commit adding a row it would have selected is caught instead of
slipping past it (the defect this closes: four processes MERGEing the same
new key each found it absent and each inserted it):

* :class:`RowPredicate` -- the ``where`` of a DELETE or UPDATE;
* :class:`KeyPredicate` -- the keys of a MERGE's source: a row is selected
  when its key columns equal those of some source row (null keys select
  nothing, as in the MERGE's join).

Both answer :meth:`first_match` for the partitions a winner added: first
from their statistics (no I/O), then, for those the statistics cannot
exclude, by reading only the columns the predicate uses. They never report
"no match" for partitions that hold a selected row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.actions import Partition
from ctfile.format.errors import InvalidArgumentError
from ctfile.format.schema import Schema
from ctfile.log.storage import Storage
from ctfile.reader.expressions import evaluate_mask, referenced_columns
from ctfile.reader.partition_reader import read_partition_table
from ctfile.reader.pruning import prune

_FALSE = pc.scalar(False)


@dataclass(frozen=True)
class RowPredicate:
    """The rows a DELETE or UPDATE selects: those where ``where`` is true.

    Examples
    --------
    >>> RowPredicate(pc.field("id") == 1).describe()
    'rows where (id == 1)'
    """

    where: pc.Expression

    def describe(self) -> str:
        return f"rows where {self.where}"

    def first_match(self, storage: Storage, schema: Schema, partitions: Sequence[Partition]) -> Partition | None:
        candidates = prune([p for p in partitions if p.num_records], schema, self.where)
        columns = referenced_columns(self.where, schema.to_arrow(field_ids=False))
        for p in candidates:
            if not columns:
                return p  # a constant predicate that pruning kept is true
            t = read_partition_table(storage, p, schema, columns=columns)
            try:
                if pc.any(evaluate_mask(t, self.where)).as_py():
                    return p
            except InvalidArgumentError:
                # The predicate fails on the winner's rows (a checked division
                # by zero, say): a conflict that cannot be ruled out. The
                # statement's re-run meets the error on its own read.
                return p
        return None


@dataclass(frozen=True)
class KeyPredicate:
    """The rows a MERGE selects: those whose ``keys`` equal a source row's.

    ``source_keys`` holds the key columns of the source rows with no null
    key, one row per key. :meth:`range_filter` is the conjunction of each key
    column's source range, which prunes by statistics both the MERGE's own
    candidates and a winner's partitions.

    Examples
    --------
    >>> k = KeyPredicate.from_source(pa.table({"id": [3, 1, None], "v": ["a", "b", "c"]}), ["id"])
    >>> k.source_keys.num_rows, str(k.range_filter())
    (2, '((id >= 1) and (id <= 3))')
    """

    keys: tuple[str, ...]
    source_keys: pa.Table

    @classmethod
    def from_source(cls, source: pa.Table, keys: Sequence[str]) -> "KeyPredicate":
        """The key predicate of ``source`` (its rows with no null key)."""
        key_table = source.select(list(keys))
        valid = None
        for k in keys:
            v = pc.is_valid(key_table.column(k))
            valid = v if valid is None else pc.and_(valid, v)
        if valid is not None and key_table.num_rows:
            key_table = key_table.filter(valid)
        return cls(tuple(keys), key_table)

    def describe(self) -> str:
        return f"rows whose key ({', '.join(self.keys)}) is one of the {self.source_keys.num_rows} source keys"

    def range_filter(self) -> pc.Expression:
        """``min <= key <= max`` for every key column (false for no key)."""
        if self.source_keys.num_rows == 0:
            return _FALSE
        out = None
        for k in self.keys:
            mm = pc.min_max(self.source_keys.column(k))
            bound = (pc.field(k) >= mm["min"]) & (pc.field(k) <= mm["max"])
            out = bound if out is None else out & bound
        return out

    def first_match(self, storage: Storage, schema: Schema, partitions: Sequence[Partition]) -> Partition | None:
        if self.source_keys.num_rows == 0:
            return None
        for p in prune([p for p in partitions if p.num_records], schema, self.range_filter()):
            t = read_partition_table(storage, p, schema, columns=list(self.keys))
            if t.join(self.source_keys, list(self.keys), join_type="left semi", use_threads=False).num_rows:
                return p
        return None
