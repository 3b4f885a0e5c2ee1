"""A small aggregate refresh computed in the driver, without a Spark job
(SPEC §Derived tables, "Incremental rules"; issue 29's goal of a refresh
that costs what changed).

An incremental refresh of a linear aggregate (count, sum, avg; min and max
when the source only appended) over ONE source computes, per group of the
changed rows, the signed change of its count and sums: the MERGE source of
:func:`ctfile.derived.aggregates.linear_delta_sql`. When the source's
minimum-delta change scan reads at most ``spark.ctfile.local.changeRows``
rows (:class:`ctfile.spark.local.LocalLimits`), this module computes that
source with pyarrow in the driver from ctfile's own change scan, and the
refresh MERGEs the Arrow rows in the driver too when its SET expressions
translate (:meth:`ctfile.spark.transaction.SparkTransaction.merge_rows_builder`;
an ``avg``'s division does not, and that MERGE runs on Spark): no temp
view, no DataFrame, no Spark job. Spark's fixed cost (a job and its
shuffle, about a second) is what a 1% change of a large table otherwise
pays.

The values must be Spark's. Expressions go through
:mod:`ctfile.spark.arrow_sql`, which translates only what both engines
compute alike; the aggregation itself is limited to what pyarrow's hash
aggregation computes as Spark's does:

* GROUP BY keys of strings without control characters, signed integers
  or booleans: the derivation key is Spark's ``to_json`` of them, which
  for these types is JSON with no spaces (``{"k0":"DE","k1":3}``, NULL
  fields left out), written here with :func:`json.dumps`;
* arguments of ``sum``/``avg`` that are signed integers (summed as
  ``bigint``, after checking that no sum can leave its range, where Spark
  would raise) or floating point (summed as ``double``; a float sum
  depends on the order of its terms in any engine, as a recomputation's
  does);
* ``min``/``max`` of signed integers or strings (both engines order
  strings by their UTF-8 bytes);
* ``avg``'s value of a new group is ``double`` division, as Spark's.

Anything else, an expression that does not translate, or one that fails on
the rows (an overflow Spark's ANSI mode raises), leaves the refresh to
Spark, logged at INFO on ``ctfile.spark``.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ctfile.derived import KEY_COLUMN, ROWS_COLUMN, AggKind, LinearAggregate, LinearOutput
from ctfile.spark.arrow_sql import SideColumns, SqlScope, Untranslatable, to_arrow
from ctfile.spark.derived_sources import SourceState
from ctfile.spark.local import LocalLimits
from ctfile.spark.sqltext import SqlConf

log = logging.getLogger("ctfile.spark")

_ACTION = "METADATA$ACTION"
_SIGN = "_ct_sign"
_INT64_MAX = (1 << 63) - 1


def linear_delta_in_driver(spark: Any, parts: LinearAggregate | None, sources: Sequence[SourceState],
                           target: pa.Schema) -> pa.Table | None:
    """The MERGE source of ``parts`` (the refresh's linear delta), computed
    in the driver and cast to ``target`` (the derived table's visible
    schema), or None when Spark must compute it (module docstring).

    Raises
    ------
    ctfile.CtfileError
        From the change scan: damage found, history gone.
    """
    if parts is None:
        return None
    source = next(s for s in sources if s.name == parts.source)
    limit = LocalLimits.of(spark).change_rows
    if limit == 0 or source.previous is None or not source.moved:
        return None
    changes = source.table.changes(start_version=source.previous.version + 1, end_version=source.version,
                                   information="default")
    if changes.plan.rows_to_read > limit:
        return None
    try:
        aggregate = _Aggregate(parts, changes.schema, SqlConf.of(spark))
        changed = changes.to_arrow()
        rows = _typed(aggregate.delta(changed), parts.columns, target)
    except Untranslatable as e:
        log.info("refresh delta of %s computed by Spark: %s is not computed alike in the driver", parts.source, e)
        return None
    log.info("refresh delta of %s computed in the driver: %d change rows, %d groups", parts.source,
             changed.num_rows, rows.num_rows)
    return rows


class _Aggregate:
    """The translated expressions of ``parts`` over change rows of
    ``schema``; :meth:`delta` computes the MERGE source from them.

    Raises :class:`Untranslatable` for what the driver does not compute as
    Spark does."""

    def __init__(self, parts: LinearAggregate, schema: pa.Schema, conf: SqlConf) -> None:
        self.parts = parts
        self.side = SideColumns(parts.alias, schema)
        scope = SqlScope((self.side,), conf)
        self.where = to_arrow(parts.where, scope, condition=True) if parts.where is not None else None
        self.keys = {f"_ct_g{j}": to_arrow(k, scope) for j, k in enumerate(parts.keys)}
        self.args = _arguments(parts, scope)
        _check_types(parts, _types({**self.keys, **self.args}, schema, self.side))

    def delta(self, changes: pa.Table) -> pa.Table:
        """The signed change per group of ``changes`` (the minimum-delta
        rows), in the columns of :func:`linear_delta_sql`'s source."""
        named = changes.rename_columns([self.side.name(c) for c in changes.column_names])
        sign = pc.if_else(pc.equal(changes[_ACTION], "INSERT"), 1, -1).cast(pa.int64())
        named = named.append_column(_SIGN, sign)
        try:
            inputs = ds.dataset(named).to_table(
                columns={**self.keys, **self.args, _SIGN: pc.field(_SIGN)}, filter=self.where, use_threads=False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise Untranslatable(f"the delta's expressions fail on its rows ({e})") from e
        return _Grouped(self.parts, inputs).table()


class _Grouped:
    """The per-group signed sums of ``inputs`` (keys ``_ct_g*``, arguments
    ``_ct_a*``, ``_ct_sign``), as the MERGE source's columns."""

    def __init__(self, parts: LinearAggregate, inputs: pa.Table) -> None:
        self.parts = parts
        self.keys = [n for n in inputs.column_names if n.startswith("_ct_g")]
        columns = {n: inputs[n] for n in self.keys}
        if not self.keys:  # one group: a constant key
            columns["_ct_one"] = pa.array([0] * inputs.num_rows, pa.int8())
        aggs = [(_SIGN, "sum")]
        for i, o in enumerate(parts.outputs):
            if o.arg is not None and o.kind is not None:
                aggs += _aggregated(i, o.kind, inputs[f"_ct_a{i}"], inputs[_SIGN], columns)
        columns[_SIGN] = inputs[_SIGN]
        table = pa.table(columns)
        by = self.keys or ["_ct_one"]
        self.grouped = table.group_by(by, use_threads=False).aggregate(aggs) if table.num_rows else None

    def value(self, name: str) -> pa.ChunkedArray:
        return self.grouped[name]

    def table(self) -> pa.Table:
        if self.grouped is None:
            return pa.table({c: pa.array([], pa.null()) for c in self.parts.columns})
        n = self.grouped.num_rows
        out: dict[str, Any] = {}
        for i, o in enumerate(self.parts.outputs):
            out[o.name] = self._output(i, o)
        out[KEY_COLUMN] = pa.array(_json_keys(self.grouped.select(self.keys).to_pylist(), len(self.keys), n))
        out[ROWS_COLUMN] = self.value(f"{_SIGN}_sum")
        for name in self.parts.columns[len(self.parts.outputs) + 2:]:
            out[name] = self._state(name)
        return pa.table({c: out[c] for c in self.parts.columns})

    def _output(self, i: int, o: LinearOutput) -> Any:
        if o.kind is None:
            return self.value(f"_ct_g{o.key}")
        if o.kind is AggKind.COUNT_STAR:
            return self.value(f"{_SIGN}_sum")
        if o.kind is AggKind.COUNT:
            return self.value(f"n{i}_sum")
        if o.kind in (AggKind.MIN, AggKind.MAX):
            return self.value(f"m{i}_{o.kind.value}")
        total = self.value(f"s{i}_sum")
        if o.kind is AggKind.SUM:
            return total
        return _avg(total, self.value(f"n{i}_sum"))

    def _state(self, name: str) -> Any:
        i = int(name.rsplit("_", 1)[1])
        return self.value(f"{'s' if name.startswith('_ct_dt_sum_') else 'n'}{i}_sum")


def _aggregated(i: int, kind: AggKind, arg: pa.ChunkedArray, sign: pa.ChunkedArray,
                columns: dict[str, Any]) -> list[tuple[str, str]]:
    """Add output ``i``'s per-row columns to ``columns`` (its signed
    non-null count, and its signed value or, for min/max, the value); the
    aggregations that total them per group."""
    columns[f"n{i}"] = pc.if_else(pc.is_valid(arg), sign, 0)
    if kind in (AggKind.MIN, AggKind.MAX):
        columns[f"m{i}"] = arg
        return [(f"n{i}", "sum"), (f"m{i}", kind.value)]
    if kind in (AggKind.SUM, AggKind.AVG):
        columns[f"s{i}"] = _signed(arg, sign)
        return [(f"n{i}", "sum"), (f"s{i}", "sum")]
    return [(f"n{i}", "sum")]


def _signed(arg: pa.ChunkedArray, sign: pa.ChunkedArray) -> pa.ChunkedArray:
    """``arg`` negated where the change is a delete, as ``bigint`` or
    ``double`` (the types of Spark's sums)."""
    if pa.types.is_floating(arg.type):
        return pc.multiply(arg.cast(pa.float64()), sign.cast(pa.float64()))
    wide = arg.cast(pa.int64())
    bounds = pc.min_max(wide)
    largest = max(abs(bounds["min"].as_py() or 0), abs(bounds["max"].as_py() or 0))
    # Every partial sum stays within bigint when the largest term times the
    # number of terms does: otherwise Spark might raise where pyarrow wraps.
    _require(largest * len(wide) <= _INT64_MAX, "a sum that may leave bigint's range")
    return pc.multiply(wide, sign)


def _avg(total: pa.ChunkedArray, count: pa.ChunkedArray) -> pa.Array:
    """Spark's ``CASE WHEN n = 0 THEN NULL ELSE sum / n END`` in double."""
    nonzero = pc.not_equal(count, 0)
    quotient = pc.divide(total.cast(pa.float64()), count.cast(pa.float64()))
    return pc.if_else(nonzero, quotient, pa.scalar(None, pa.float64()))


def _json_keys(groups: list[dict], n_keys: int, n: int) -> list[str]:
    """Spark's ``to_json(named_struct('k0', g0, ...))`` of each group, ``{}``
    without GROUP BY (NULL fields are left out, as Spark's are)."""
    if n_keys == 0:
        return ["{}"] * n
    keys = []
    for group in groups:
        fields = {f"k{j}": group[f"_ct_g{j}"] for j in range(n_keys) if group[f"_ct_g{j}"] is not None}
        for value in fields.values():
            _require(not _has_control(value), "a string key with a control character")
        keys.append(json.dumps(fields, separators=(",", ":"), ensure_ascii=False))
    return keys


def _has_control(value: Any) -> bool:
    """Whether a key value is a string that Spark's JSON writer and
    :func:`json.dumps` would escape differently (a control character)."""
    return isinstance(value, str) and any(ord(ch) < 0x20 for ch in value)


def _arguments(parts: LinearAggregate, scope: SqlScope) -> dict[str, pc.Expression]:
    """Each aggregate's argument, translated, as ``_ct_a<output number>``."""
    return {f"_ct_a{i}": to_arrow(o.arg, scope) for i, o in enumerate(parts.outputs) if o.arg is not None}


def _check_types(parts: LinearAggregate, types: dict[str, pa.DataType]) -> None:
    """Raise :class:`Untranslatable` unless pyarrow aggregates each key and
    argument type as Spark does (module docstring)."""
    for name, t in types.items():
        if name.startswith("_ct_g"):
            _require(_is_key_type(t), f"a GROUP BY key of type {t}")
    for i, o in enumerate(parts.outputs):
        if o.kind is not None and o.arg is not None:
            t = types[f"_ct_a{i}"]
            _require(_aggregates_alike(o.kind, t), f"{o.kind.value} of {t}")


def _is_key_type(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_signed_integer(t) or pa.types.is_boolean(t)


def _aggregates_alike(kind: AggKind, t: pa.DataType) -> bool:
    if kind in (AggKind.COUNT, AggKind.COUNT_STAR):
        return True
    if kind in (AggKind.MIN, AggKind.MAX):
        return pa.types.is_signed_integer(t) or pa.types.is_string(t)
    return pa.types.is_signed_integer(t) or pa.types.is_floating(t)


def _types(exprs: dict[str, pc.Expression], schema: pa.Schema, side: SideColumns) -> dict[str, pa.DataType]:
    """The Arrow type of each expression over ``schema``'s columns."""
    empty = schema.empty_table()
    named = empty.rename_columns([side.name(c) for c in empty.column_names])
    return dict(zip(exprs, ds.dataset(named).to_table(columns=exprs).schema.types))


def _typed(rows: pa.Table, columns: Sequence[str], target: pa.Schema) -> pa.Table:
    """``rows`` in the derived table's types where it has the column (the
    state and key columns it holds too); only casts that cannot round or
    fail are done here, anything else is left to Spark."""
    out = []
    for name in columns:
        column = rows[name]
        want = target.field(name).type if name in target.names else column.type
        _require(_cast_is_exact(column.type, want), f"a cast of {column.type} to {want}")
        out.append(column.cast(want))
    return pa.table(out, names=list(columns))


def _cast_is_exact(have: pa.DataType, want: pa.DataType) -> bool:
    if have == want or pa.types.is_null(have):
        return True
    if pa.types.is_signed_integer(have) and pa.types.is_signed_integer(want):
        return want.bit_width >= have.bit_width
    return pa.types.is_large_string(want) and pa.types.is_string(have)


def _require(holds: bool, what: str) -> None:
    if not holds:
        raise Untranslatable(what)

