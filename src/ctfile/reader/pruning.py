"""Partition pruning by statistics (SPEC §Statistics, reader requirements).

The decision "can any row of this partition satisfy the filter?" is made by
pyarrow's own expression simplifier: each partition becomes a dataset
fragment whose *guarantee* encodes its statistics, and
``FileSystemDataset.get_fragments(filter=...)`` drops the fragments whose
guarantee makes the filter unsatisfiable. No file is opened.

pyarrow only uses conjunctions of comparisons as guarantees, and a range
guarantee ``min <= x <= max`` also tells it that ``x`` is never null (or NaN).
A partition whose column holds nulls or NaNs as well as values is therefore
described by several fragments, one per *kind* of row (in-range, null, NaN),
for the columns the filter references; the partition is kept when any of them
survives. Combinations are capped: beyond :data:`MAX_ALTERNATIVES` a column's
guarantee is dropped, which only weakens pruning, never correctness.

A column with one value (``min == max``, not a float) is guaranteed *equal*
to it, which pyarrow substitutes: any expression of that column then folds
to a constant (a bare boolean column, ``~b``, ``x + 1 > 5``). What pyarrow
does not prune, and ctfile does not either (pyarrow does not expose the
expression's tree to bound it by a range): arithmetic or string functions
of a column with a range (``x + 1 > 5``, ``starts_with``), and ``is_nan``
(a guarantee cannot say "not NaN"); a NaN row is only known to be valid.
Comparisons (column on either side, through numeric casts; not through a
date-to-timestamp cast), ``is_in``, ``is_null``,
``is_valid``, ``~``, ``&``, ``|`` and constants prune.

pyarrow's simplifier misjudges a comparison with a NaN literal against a
range (it folds ``x < nan`` to true over ``-1.5 <= x <= -1.5``, so ``~(x <
nan)`` would prune a partition whose rows all satisfy it). A filter that
mentions NaN therefore gets no range guarantee for floating-point columns,
only their null and valid kinds (:func:`_mentions_nan`).
"""

from __future__ import annotations

import itertools
import re
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from ctfile.format.actions import Partition
from ctfile.format.errors import CorruptLogError
from ctfile.format.schema import Schema
from ctfile.format.stats import decode_bound, has_bounds
from ctfile.reader.expressions import referenced_columns

MAX_ALTERNATIVES = 16
_NAN = re.compile(r"\bnan\b", re.IGNORECASE)


def _mentions_nan(filter: pc.Expression) -> bool:
    """Whether ``filter``'s text holds a NaN literal (or a name or string
    spelled ``nan``, which only costs pruning): pyarrow exposes no tree to
    look for the literal itself."""
    return _NAN.search(str(filter)) is not None


def column_bounds(p: Partition, name: str, fid: int, typ: Any) -> tuple[Any, Any] | None:
    """The decoded ``(min, max)`` of column ``name`` (field ``fid``, of type
    ``typ``) in ``p``'s statistics; None when ``p`` has no statistics or no
    usable bound for it (SPEC §Statistics: a bound may be absent, e.g. a
    long string's maximum, or a binary or nested column).

    Raises :class:`~ctfile.format.errors.CorruptLogError` for a bound that
    does not decode as a value of the type.
    """
    s = p.stats
    if s is None or not has_bounds(typ):
        return None
    lo, hi = s.min_values.get(fid), s.max_values.get(fid)
    if lo is None or hi is None:
        return None
    try:
        return decode_bound(typ, lo), decode_bound(typ, hi)
    except ValueError as e:
        raise CorruptLogError(f"{p.path}: bad statistics for column {name!r} (field {fid}): {e}") from e


def _range(p: Partition, name: str, fid: int, typ: str, atype: pa.DataType, bounds: tuple, *,
           equalities: bool) -> pc.Expression:
    """``min <= x <= max``; with ``equalities``, ``x == v`` for a single
    value ``v``, which pyarrow substitutes for the column: then any
    expression of it folds to a constant (a bare boolean column, ``~b``,
    ``x + 1 > 5``, starts_with). Not for floats, whose bounds -0.0 and 0.0
    are equal but not the same value."""
    x = pc.field(name)
    try:
        lo_s, hi_s = (pa.scalar(b, type=atype) for b in bounds)
    except (TypeError, pa.ArrowException) as e:
        raise CorruptLogError(f"{p.path}: bad statistics for column {name!r} (field {fid}): {e}") from e
    single = equalities and bounds[0] == bounds[1] and typ not in ("float", "double")
    return x == lo_s if single else (x >= lo_s) & (x <= hi_s)


def _column_alternatives(
    p: Partition, name: str, fid: int, typ: str, atype: pa.DataType, *, equalities: bool, float_ranges: bool = True
) -> list[pc.Expression]:
    """Guarantees on column ``name`` (field id ``fid``, ctfile type ``typ``,
    Arrow type ``atype``) whose union covers every row of ``p`` (see
    :func:`partition_guarantees`)."""
    s = p.stats
    x = pc.field(name)
    if s is None:
        return [pc.scalar(True)]
    nulls = s.null_count.get(fid)
    if nulls is not None and nulls == s.num_records:
        return [x.is_null()]
    is_float = typ in ("float", "double")
    values = _values_guarantee(
        p, name, fid, typ, atype, nulls, equalities=equalities, ranged=float_ranges or not is_float,
    )
    if values is None:
        return [pc.scalar(True)]
    alts = [values]
    if _may_hold_nulls(nulls):
        alts.append(x.is_null())
    if is_float and _may_hold_nans(s.nan_count.get(fid)):
        # pyarrow ignores is_nan in a guarantee; is_valid (NaN is not
        # null) at least prunes is_null for these rows.
        alts.append(x.is_valid())
    return alts


def _may_hold_nulls(nulls: int | None) -> bool:
    """Whether a column with ``nulls`` nulls (None: unknown) may hold one."""
    return nulls is None or nulls > 0


def _may_hold_nans(nans: int | None) -> bool:
    """Whether a floating-point column with ``nans`` NaNs (None: unknown) may hold one."""
    return nans != 0


def _values_guarantee(
    p: Partition, name: str, fid: int, typ: str, atype: pa.DataType, nulls: int | None, *, equalities: bool, ranged: bool,
) -> pc.Expression | None:
    """A guarantee on the non-null values of the column: within its bounds
    (when ``ranged`` and the statistics have them), else valid when it holds
    no null (``nulls`` of them); None when nothing is known."""
    bounds = column_bounds(p, name, fid, typ) if ranged else None
    if bounds is not None:
        return _range(p, name, fid, typ, atype, bounds, equalities=equalities)
    if nulls == 0:
        return pc.field(name).is_valid()
    return None


def partition_guarantees(
    p: Partition, schema: Schema, columns: Sequence[str], *, equalities: bool = False, float_ranges: bool = True
) -> list[pc.Expression]:
    """Conjunctive guarantees whose union covers every row of ``p``;
    ``equalities``: a column with one value is guaranteed equal to it (for
    :func:`prune`, which retries without them when folding fails; off for
    other uses, such as a dataset's partition expressions); ``float_ranges``
    False: a floating-point column is only guaranteed valid, not within its
    bounds (a filter with a NaN literal, see the module docstring)."""
    per_column = []
    arrow = schema.to_arrow(field_ids=False)
    for name in columns:
        f = schema.field(name)
        if not isinstance(f.type, str):
            continue
        per_column.append(_column_alternatives(p, name, f.id, f.type, arrow.field(name).type, equalities=equalities,
                                               float_ranges=float_ranges))
    # Cap the cross product: drop the widest columns' guarantees first.
    per_column.sort(key=len)
    while per_column and _product(len(a) for a in per_column) > MAX_ALTERNATIVES:
        per_column.pop()
    return [_conjunction(combo) for combo in itertools.product(*per_column)] or [pc.scalar(True)]


def _conjunction(pieces: Sequence[pc.Expression]) -> pc.Expression:
    """``pieces`` and-ed, left to right (true when there is none)."""
    g = None
    for piece in pieces:
        g = piece if g is None else g & piece
    return pc.scalar(True) if g is None else g


def _product(xs) -> int:
    r = 1
    for x in xs:
        r *= x
    return r


def prune(partitions: Sequence[Partition], schema: Schema, filter: pc.Expression | None) -> list[Partition]:
    """The partitions that may hold a row satisfying ``filter``, in input order.

    Folding ``filter`` over a partition's single value can fail where its
    rows would too (``x / 0``, an overflowing checked operation or cast);
    pruning then retries with ranges only, and the error, if any, is met
    where the rows are evaluated.

    Examples
    --------
    >>> import ctfile, tempfile
    >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("b", pa.bool_())]),
    ...                         properties={"ctfile.partitionRows": "2"})
    >>> t.insert(pa.table({"b": [False, False, True, True]})).num_added_partitions
    2
    >>> s = t.snapshot()
    >>> [p.num_records for p in prune(s.partitions, s.metadata.schema, ~pc.field("b"))]
    [2]
    """
    if filter is None or not partitions:
        return list(partitions)
    try:
        return _prune(partitions, schema, filter, equalities=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return _prune(partitions, schema, filter, equalities=False)


def _prune(partitions: Sequence[Partition], schema: Schema, filter: pc.Expression, *, equalities: bool) -> list[Partition]:
    import pyarrow.dataset as ds  # imports pandas: only where used (reader/expressions.py)

    arrow = schema.to_arrow(field_ids=False)
    cols = referenced_columns(filter, arrow)
    float_ranges = not _mentions_nan(filter)
    paths: list[str] = []
    guarantees: list[pc.Expression] = []
    for p in partitions:
        for g in partition_guarantees(p, schema, cols, equalities=equalities, float_ranges=float_ranges):
            paths.append(p.path)
            guarantees.append(g)
    dataset = ds.FileSystemDataset.from_paths(
        paths, schema=arrow, format=ds.ParquetFileFormat(),
        filesystem=pafs.LocalFileSystem(), partitions=guarantees,
    )
    keep = {f.path for f in dataset.get_fragments(filter=filter)}
    return [p for p in partitions if p.path in keep]
