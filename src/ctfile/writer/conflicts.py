"""The read predicates of DML statements, for conflict detection (SPEC
§Conflict detection, rule 4).

A statement that selects rows records what it selected, so that a
concurrent commit adding a row it would have selected is caught instead of
slipping past it (the defect this closes: four processes MERGEing the same
new key each found it absent and each inserted it):

* :class:`RowPredicate` -- the ``where`` of a DELETE or UPDATE;
* :class:`KeyPredicate` -- the keys of a MERGE's source: a row is selected
  when its key columns equal those of some source row, by the one key
  equality of SPEC §Copy-on-write (:func:`comparable_keys`; null keys
  select nothing, as in the MERGE's join).

Both answer :meth:`first_match` for the partitions a winner added: first
from their statistics (no I/O), then, for those the statistics cannot
exclude, by reading only the columns the predicate uses. They never report
"no match" for partitions that hold a selected row.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.actions import Partition
from ctfile.format.errors import InvalidArgumentError, SchemaMismatchError
from ctfile.format.schema import Field, Schema
from ctfile.log.storage import Storage
from ctfile.reader.expressions import ColumnAliases, evaluate_mask, referenced_columns
from ctfile.reader.partition_reader import read_partition_table
from ctfile.reader.pruning import column_bounds, prune


@dataclass(frozen=True)
class RowPredicate:
    """The rows a DELETE or UPDATE selects: those where ``where`` is true;
    and the rows a MERGE's ``NOT MATCHED BY SOURCE`` clauses may select,
    whose ``where`` names columns by the ``aliases`` of the target side
    (``t.x`` as well as ``x``).

    Examples
    --------
    >>> RowPredicate(pc.field("id") == 1).describe()
    'rows where (id == 1)'
    """

    where: pc.Expression
    aliases: ColumnAliases | None = None

    def describe(self) -> str:
        return f"rows where {self.where}"

    def first_match(self, storage: Storage, schema: Schema, partitions: Sequence[Partition]) -> Partition | None:
        named = schema if self.aliases is None else self.aliases.schema(schema)
        candidates = prune([p for p in partitions if p.num_records], named, self.where)
        columns = referenced_columns(self.where, named.to_arrow(field_ids=False))
        if self.aliases is not None:
            columns = self.aliases.columns(columns)
        for p in candidates:
            # Without columns, a constant predicate that pruning kept is true.
            if not columns or self._holds_for_a_row(storage, schema, p, columns):
                return p
        return None

    def _holds_for_a_row(self, storage: Storage, schema: Schema, p: Partition, columns: list[str]) -> bool:
        """Whether ``where`` is true for some row of ``p`` (reading
        ``columns``), or fails on one: the predicate failing on the winner's
        rows (a checked division by zero, say) is a conflict that cannot be
        ruled out; the statement's re-run meets the error on its own read."""
        t = read_partition_table(storage, p, schema, columns=columns)
        if self.aliases is not None:
            t = self.aliases.table(t)
        try:
            return bool(pc.any(evaluate_mask(t, self.where)).as_py())
        except InvalidArgumentError:
            return True


def comparable_keys(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """``table`` with its floating-point ``keys`` columns in the canonical
    form SPEC §Copy-on-write (MERGE, key equality) compares them in:
    ``-0.0`` as ``0.0``, every NaN as one NaN; nulls stay null (a join
    matches no null). Arrow's hash joins and grouping compare a float's
    bits, so without it ``-0.0`` would miss ``0.0``, and a NaN another NaN
    with a different payload. The other columns are left as they are.

    >>> t = comparable_keys(pa.table({"k": [-0.0, 0.0, None], "v": [-0.0, 1.0, 2.0]}), ["k"])
    >>> t.column("k").to_pylist(), t.column("v").to_pylist()
    ([0.0, 0.0, None], [-0.0, 1.0, 2.0])
    >>> t.group_by("k").aggregate([([], "count_all")]).column("count_all").to_pylist()
    [2, 1]
    """
    for k in keys:
        i = table.schema.get_field_index(k)
        col = table.column(i)
        if not pa.types.is_floating(col.type):
            continue
        zero, nan = pa.scalar(0.0, col.type), pa.scalar(float("nan"), col.type)
        canonical = pc.if_else(pc.is_nan(col), nan, pc.if_else(pc.equal(col, zero), zero, col))
        table = table.set_column(i, table.schema.field(i), canonical)
    return table


@dataclass(frozen=True)
class _KeyValues:
    """The distinct non-null values of one key column of a MERGE source,
    sorted, for "does some value lie in ``[lo, hi]``?" by bisection.

    NaN is kept apart (it has no place in the order, and partition bounds
    exclude it): ``has_nan`` says the source holds one. Numeric values are a
    numpy array, others (strings, dates, timestamps, decimals, booleans)
    Python values, which order as the statistics do (strings by code point,
    that is by UTF-8 bytes).

    Examples
    --------
    >>> kv = _KeyValues.of(pa.chunked_array([[3.0, float("nan"), 1.0, 3.0]]))
    >>> kv.any_within(1.5, 2.5), kv.any_within(2.5, 9.0), kv.has_nan
    (False, True, True)
    """

    values: Any
    has_nan: bool = False

    @classmethod
    def of(cls, column: pa.ChunkedArray) -> "_KeyValues":
        distinct = pc.unique(column.combine_chunks())
        has_nan = False
        if pa.types.is_floating(distinct.type):
            nan = pc.fill_null(pc.is_nan(distinct), False)
            has_nan = bool(pc.any(nan).as_py())
            distinct = distinct.filter(pc.invert(nan))
        distinct = distinct.drop_null().sort()
        numeric = pa.types.is_integer(distinct.type) or pa.types.is_floating(distinct.type)
        return cls(distinct.to_numpy() if numeric else distinct.to_pylist(), has_nan)

    def any_within(self, lo: Any, hi: Any) -> bool:
        """True if some value ``v`` has ``lo <= v <= hi``."""
        i = bisect.bisect_left(self.values, lo)
        return bool(i < len(self.values) and self.values[i] <= hi)


@dataclass(frozen=True)
class KeyPredicate:
    """The rows a MERGE selects: those whose ``keys`` equal a source row's.

    ``source_keys`` holds the key columns of the source rows with no null
    key part, in the form keys compare in (:func:`comparable_keys`): the
    keys of the source as SPEC §Copy-on-write (MERGE, key equality) counts
    them. :meth:`candidates` keeps the partitions whose
    statistics can hold one of those keys, column by column (SPEC
    §Copy-on-write, MERGE): both the MERGE's own candidates and, in conflict
    detection, a winner's partitions. :meth:`range_filter` is the coarser
    conjunction of each key column's source range.

    Examples
    --------
    >>> k = KeyPredicate.from_source(pa.table({"id": [3, 1, None], "v": ["a", "b", "c"]}), ["id"])
    >>> k.source_keys.num_rows, str(k.range_filter())
    (2, '((id >= 1) and (id <= 3))')
    """

    keys: tuple[str, ...]
    source_keys: pa.Table
    _values: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def from_source(cls, source: pa.Table, keys: Sequence[str]) -> "KeyPredicate":
        """The key predicate of ``source`` (its rows with no null key part:
        a null matches nothing)."""
        key_table = source.select(list(keys))
        valid = None
        for k in keys:
            v = pc.is_valid(key_table.column(k))
            valid = v if valid is None else pc.and_(valid, v)
        if valid is not None and key_table.num_rows:
            key_table = key_table.filter(valid)
        return cls(tuple(keys), comparable_keys(key_table, keys))

    def describe(self) -> str:
        return f"rows whose key ({', '.join(self.keys)}) is one of the {self.source_keys.num_rows} source keys"

    def range_filter(self) -> pc.Expression:
        """``min <= key <= max`` for every key column (false for no key)."""
        if self.source_keys.num_rows == 0:
            return pc.scalar(False)
        out = None
        for k in self.keys:
            mm = pc.min_max(self.source_keys.column(k))
            bound = (pc.field(k) >= mm["min"]) & (pc.field(k) <= mm["max"])
            out = bound if out is None else out & bound
        return out

    def _key_values(self, name: str) -> _KeyValues:
        kv = self._values.get(name)
        if kv is None:  # computed once per statement; a benign race at worst computes it twice
            kv = self._values[name] = _KeyValues.of(self.source_keys.column(name))
        return kv

    def may_hold_key(self, p: Partition, schema: Schema) -> bool:
        """False only if ``p``'s statistics show that no row of it has a
        source key: for some key column, no source value lies within the
        partition's ``[min, max]`` (and no source NaN meets a NaN of it), or
        the column is null in every row (a null key matches nothing).
        Without statistics for a column, that column cannot rule ``p`` out.

        Examples
        --------
        >>> from ctfile.format.actions import PartitionStats
        >>> from ctfile.format.schema import schema_from_arrow
        >>> schema = schema_from_arrow(pa.schema([("id", pa.int64())]))
        >>> fid = schema.field("id").id
        >>> p = Partition("p", 1, 10, 0, 1, 0, None, PartitionStats(10, {fid: 5}, {fid: 9}, {fid: 0}, {}))
        >>> k = KeyPredicate.from_source(pa.table({"id": [1, 1_000_000]}), ["id"])
        >>> k.may_hold_key(p, schema), KeyPredicate.from_source(pa.table({"id": [7]}), ["id"]).may_hold_key(p, schema)
        (False, True)
        """
        if self.source_keys.num_rows == 0:
            return False
        s = p.stats
        if s is None:
            return True
        for name in self.keys:
            try:
                f = schema.field(name)
            except SchemaMismatchError:
                continue  # not in this schema (a winner's): cannot rule p out
            if self._rules_out(p, name, f):
                return False
        return True

    def _rules_out(self, p: Partition, name: str, f: Field) -> bool:
        """Whether the statistics of key column ``name`` (field ``f``) show
        that no row of ``p`` has a source key: the column is null in every
        row, or no source value lies within its bounds (and no source NaN
        meets a NaN of it). No bounds: it cannot rule ``p`` out."""
        s = p.stats
        if s.null_count.get(f.id) == s.num_records:
            return True
        bounds = column_bounds(p, name, f.id, f.type)
        if bounds is None:
            return False
        kv = self._key_values(name)
        return not (kv.any_within(*bounds) or (kv.has_nan and s.nan_count.get(f.id) != 0))

    def candidates(self, partitions: Sequence[Partition], schema: Schema) -> list[Partition]:
        """The partitions of ``partitions`` (in order) that may hold a row
        with a source key (:meth:`may_hold_key`)."""
        return [p for p in partitions if p.num_records and self.may_hold_key(p, schema)]

    def first_match(self, storage: Storage, schema: Schema, partitions: Sequence[Partition]) -> Partition | None:
        if self.source_keys.num_rows == 0:
            return None
        for p in self.candidates(partitions, schema):
            t = comparable_keys(read_partition_table(storage, p, schema, columns=list(self.keys)), self.keys)
            if t.join(self.source_keys, list(self.keys), join_type="left semi", use_threads=False).num_rows:
                return p
        return None
