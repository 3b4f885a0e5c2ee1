"""Spark SQL text as pyarrow expressions that compute exactly what Spark
computes, for statements run in the driver by the Python engine
(:mod:`ctfile.spark.local`), and a MERGE's ON condition split into key
pairs and the rest.

Unlike the pruning translation of :mod:`ctfile.spark.conditions` (any
expression true wherever Spark's is true will do), a statement run by the
Python engine must give Spark's values, so only what means the same in both
engines is translated, and anything else raises :class:`Untranslatable`
(the statement then runs on the executors):

* columns by name, qualified by a side's alias (``t.total``) or alone, as
  Spark resolves them (case-insensitively unless ``spark.sql.caseSensitive``);
  a name no visible side has, or that two have, is Spark's analysis error,
  raised as :class:`ctfile.SchemaMismatchError`;
* literals: integers typed as Spark's parser types them (``INT``, ``BIGINT``
  beyond, ``5L``, ``5S``, ``5Y``), strings in single quotes without escapes,
  ``TRUE``, ``FALSE``, ``NULL``;
* ``=``, ``<>``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``<=>`` between two
  integers, two strings, two booleans (``=``, ``<>``, ``<=>`` only), or two
  columns of one type that is not floating point (Spark's NaN equals NaN
  and sorts above every number; Arrow's does neither); ``IN`` of literals,
  ``BETWEEN``;
* ``+``, ``-``, ``*`` and unary ``-`` of integers, in the wider type,
  raising on overflow as Spark's ANSI mode does (``spark.sql.ansi.enabled``;
  wrapping around without it, as both engines do);
* ``AND``, ``OR``, ``NOT`` (three-valued, as both engines' are),
  ``IS [NOT] NULL``, ``coalesce`` of integers or of one type;
* ``CASE WHEN ... THEN ... [ELSE ...] END`` (a NULL condition counts as
  false, as in Spark), ``least`` and ``greatest`` (NULLs skipped, as Spark
  does), of integers or of one type that is not floating point;
* ``CAST`` to the value's own type, or of an integer to a wider integer: the
  casts that cannot fail or round (a refresh of a derived table writes its
  SET values so, :mod:`ctfile.spark.derived_refresh`).

Division, floating-point arithmetic, other functions and casts, the simple
``CASE x WHEN`` form and string operators are not translated: their results
differ between the engines in corner cases (division by zero, NaN, locale,
rounding).

Examples
--------
>>> scope = SqlScope((SideColumns("t", pa.schema([("id", pa.int64()), ("total", pa.int64())])),
...                   SideColumns("s", pa.schema([("id", pa.int64()), ("amount", pa.int64())]))))
>>> to_arrow("t.total + amount", scope)
<pyarrow.compute.Expression add_checked(t.total, s.amount)>
>>> to_arrow("s.amount > 5 AND NOT (T.TOTAL IS NULL)", scope, condition=True)
<pyarrow.compute.Expression ((s.amount > 5) and invert(is_null(t.total, {nan_is_null=false})))>
>>> to_arrow("upper(s.amount)", scope)
Traceback (most recent call last):
...
ctfile.spark.arrow_sql.Untranslatable: UPPER(s.amount)
>>> to_arrow("id > 1", scope)
Traceback (most recent call last):
...
ctfile.format.errors.SchemaMismatchError: id > 1 names id, which both t and s have: write t.id or s.id
>>> split_on("t.k = s.key AND t.region = 'EU'", "t", "s", ["k", "region"], ["key"])
((('k', 'key'),), "t.region = 'EU'")
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

import ctfile
from ctfile.spark.sqltext import SqlConf, plain_strings


class Untranslatable(Exception):
    """The text has a part whose value the Python engine would not compute
    as Spark does (the message is that part's SQL)."""


@dataclass(frozen=True)
class SideColumns:
    """The columns of one side of a statement: ``alias`` (None: a table
    statement, whose columns have no qualifier) and its Arrow schema."""

    alias: str | None
    schema: pa.Schema

    def name(self, column: str) -> str:
        """The name the Python engine knows the column by."""
        return column if self.alias is None else f"{self.alias}.{column}"


@dataclass(frozen=True)
class SqlScope:
    """The sides an expression sees and the settings that change its meaning."""

    sides: tuple[SideColumns, ...]
    conf: SqlConf = field(default_factory=SqlConf)
    unseen: tuple[str, ...] = ()  # aliases of the statement's sides this expression does not see

    def same(self, a: str, b: str) -> bool:
        return a == b if self.conf.case_sensitive else a.lower() == b.lower()

    def find(self, side: SideColumns, name: str) -> str | None:
        found = [n for n in side.schema.names if self.same(n, name)]
        return found[0] if len(found) == 1 else (name if name in found else None)


@dataclass(frozen=True)
class _Typed:
    """A translated expression and the Arrow type of its value (``null``: a NULL literal)."""

    expr: pc.Expression
    type: pa.DataType
    literal: int | None = None  # an integer literal's value, cast as a value rather than as an expression


def _family(t: pa.DataType) -> str:
    if pa.types.is_null(t):
        return "null"
    if pa.types.is_signed_integer(t):
        return "integer"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_floating(t) or pa.types.is_nested(t) or pa.types.is_unsigned_integer(t):
        return "inexact"
    return str(t)  # a type compared only with itself (dates, timestamps, decimals, binaries)


_ORDERED = {"integer", "string"}
_INT_BITS = {"BIGINT": pa.int64(), "INT": pa.int32(), "SMALLINT": pa.int16(), "TINYINT": pa.int8()}
_COMPARE: dict[str, Callable] = {
    "EQ": lambda a, b: a == b, "NEQ": lambda a, b: a != b, "LT": lambda a, b: a < b,
    "LTE": lambda a, b: a <= b, "GT": lambda a, b: a > b, "GTE": lambda a, b: a >= b,
}
_ARITHMETIC = {"Add": ("add", "add_checked"), "Sub": ("subtract", "subtract_checked"),
               "Mul": ("multiply", "multiply_checked")}
_NULL_BOOL = pc.scalar(pa.scalar(None, pa.bool_()))


def to_arrow(text: str, scope: SqlScope, *, condition: bool = False) -> pc.Expression:
    """The pyarrow expression computing Spark's value of the SQL ``text``
    over ``scope`` (a boolean when ``condition``).

    Raises
    ------
    Untranslatable
        A part the Python engine would not compute as Spark does.
    ctfile.SchemaMismatchError
        A column no side of ``scope`` has, or that two have; a condition
        that is not a boolean.
    """
    return _to_arrow(text, scope, condition)


@functools.lru_cache(maxsize=1024)
def _to_arrow(text: str, scope: SqlScope, condition: bool) -> pc.Expression:
    """:func:`to_arrow`, remembered: a refresh or a scheduler translates the
    same statement text over the same schemas each time, and parsing it
    costs more than the rest of a small MERGE (a translation depends on the
    text and the scope alone, and pyarrow expressions are immutable)."""
    import sqlglot
    from sqlglot.errors import SqlglotError

    try:
        parsed = sqlglot.parse_one(text, dialect="spark")
        plain = plain_strings(text)
    except SqlglotError:
        raise Untranslatable(text) from None
    typed = _Translator(scope, plain, text).node(parsed)
    if condition:
        if pa.types.is_null(typed.type):
            return _NULL_BOOL
        if not pa.types.is_boolean(typed.type):
            raise ctfile.SchemaMismatchError(f"condition {text} is not a boolean (its type is {typed.type})")
    return typed.expr


class _Translator:
    """One text's sqlglot AST as typed pyarrow expressions (module docstring)."""

    def __init__(self, scope: SqlScope, plain_strings: bool, text: str):
        self.scope = scope
        self.plain_strings = plain_strings
        self.text = text

    def node(self, e: Any) -> _Typed:
        handler = getattr(self, f"_{type(e).__name__}", None)
        if handler is None:
            if type(e).__name__ in _COMPARE:
                return self._comparison(e)
            if type(e).__name__ in _ARITHMETIC:
                return self._arithmetic(e)
            raise Untranslatable(e.sql(dialect="spark"))
        return handler(e)

    # ------------------------------------------------------------ leaves

    def _Paren(self, e: Any) -> _Typed:
        return self.node(e.this)

    def _Column(self, e: Any) -> _Typed:
        """A column of exactly one of the sides the scope sees: by name,
        or by ``alias.name``; a nested field's path is for Spark."""
        if e.args.get("db") is not None or e.args.get("catalog") is not None:
            raise Untranslatable(e.sql(dialect="spark"))  # a nested field
        qualifier = e.table or None
        sides = list(self.scope.sides) if qualifier is None else self._qualified_sides(e, qualifier)
        found = [(s, col) for s in sides if (col := self.scope.find(s, e.name)) is not None]
        if len(found) != 1:
            raise self._not_one_column(e, found)
        side, col = found[0]
        return _Typed(pc.field(side.name(col)), side.schema.field(col).type)

    def _qualified_sides(self, e: Any, qualifier: str) -> list[Any]:
        """The sides the column ``e`` qualified by ``qualifier`` names: a
        qualifier naming a side the text does not see is a mistake, one
        naming none a struct's field (which Spark resolves)."""
        sides = [s for s in self.scope.sides if s.alias is not None and self.scope.same(s.alias, qualifier)]
        if sides:
            return sides
        if any(self.scope.same(a, qualifier) for a in self.scope.unseen):
            raise ctfile.SchemaMismatchError(f"{self.text} names {e.sql(dialect='spark')}, a column of a side "
                                             f"it does not see")
        raise Untranslatable(e.sql(dialect="spark"))  # a struct's field: Spark decides

    def _not_one_column(self, e: Any, found: list[tuple[Any, str]]) -> ctfile.SchemaMismatchError:
        """The error for a column name that no side, or more than one, has."""
        if not found:
            known = [s.name(n) for s in self.scope.sides for n in s.schema.names]
            return ctfile.SchemaMismatchError(f"{self.text} names {e.sql(dialect='spark')}, which is not a column "
                                              f"it sees ({known})")
        both = " or ".join(s.name(c) for s, c in found)
        return ctfile.SchemaMismatchError(
            f"{self.text} names {e.sql(dialect='spark')}, which both {' and '.join(s.alias for s, _ in found)} "
            f"have: write {both}"
        )

    def _Literal(self, e: Any) -> _Typed:
        if e.is_string:
            if not self.plain_strings:
                raise Untranslatable(e.sql(dialect="spark"))
            return _Typed(pc.scalar(e.this), pa.string())
        return _integer(e.this, None, e)

    def _Boolean(self, e: Any) -> _Typed:
        return _Typed(pc.scalar(bool(e.this)), pa.bool_())

    def _Null(self, e: Any) -> _Typed:
        return _Typed(pc.scalar(None), pa.null())

    def _TryCast(self, e: Any) -> _Typed:
        """``5L``, ``5S``, ``5Y`` (sqlglot reads the suffixes as casts), and
        the casts that cannot fail or round: to the value's own type, or of
        an integer to a wider integer (sqlglot reads Spark's ``CAST`` as a
        ``TryCast`` too: where it cannot fail the two are one)."""
        from sqlglot import exp

        kind = e.to.this.name
        if isinstance(e.this, exp.Literal) and not e.this.is_string and kind in _INT_BITS:
            return _integer(e.this.this, _INT_BITS[kind], e)
        value = self.node(e.this)
        to = _spark_type(e.to)
        if to is None or not _exact_cast(value.type, to):
            raise Untranslatable(e.sql(dialect="spark"))
        return _Typed(_typed_as(value, to), to)

    _Cast = _TryCast

    def _Case(self, e: Any) -> _Typed:
        """A searched ``CASE``: the first branch whose condition is true (a
        NULL condition is not), else the ``ELSE`` value or NULL; the values
        of one type, integers widened (Spark's common type)."""
        if e.this is not None:
            raise Untranslatable(e.sql(dialect="spark"))  # CASE x WHEN ...: Spark's equality coercions
        branches = [(self._boolean(b.this), self.node(b.args["true"])) for b in e.args["ifs"]]
        given = e.args.get("default")
        default = self.node(given) if given is not None else _Typed(pc.scalar(None), pa.null())
        typ = _common_type(e, [v for _, v in branches] + [default])
        out = _typed_as(default, typ)
        for cond, value in reversed(branches):
            out = pc.if_else(pc.coalesce(cond, pc.scalar(False)), _typed_as(value, typ), out)
        return _Typed(out, typ)

    def _extreme(self, e: Any, fn: Callable) -> _Typed:
        if not e.expressions:
            raise Untranslatable(e.sql(dialect="spark"))  # one argument: Spark's analysis error
        args = [self.node(a) for a in [e.this, *e.expressions]]
        typed = [a for a in args if not pa.types.is_null(a.type)]
        if not typed:
            return _Typed(pc.scalar(None), pa.null())
        typ = _common_type(e, typed)
        return _Typed(fn(*[_cast(a, typ) for a in typed], skip_nulls=True), typ)

    def _Least(self, e: Any) -> _Typed:
        return self._extreme(e, pc.min_element_wise)

    def _Greatest(self, e: Any) -> _Typed:
        return self._extreme(e, pc.max_element_wise)

    # ------------------------------------------------------------ operators

    def _comparison(self, e: Any) -> _Typed:
        a, b = self.node(e.left), self.node(e.right)
        op = type(e).__name__
        if pa.types.is_null(a.type) or pa.types.is_null(b.type):
            return _Typed(_NULL_BOOL, pa.bool_())
        _comparable(a, b, ordered=op not in ("EQ", "NEQ"), e=e)
        a, b = _aligned(a, b)
        return _Typed(_COMPARE[op](a, b), pa.bool_())

    def _NullSafeEQ(self, e: Any) -> _Typed:
        a, b = self.node(e.left), self.node(e.right)
        if pa.types.is_null(a.type) or pa.types.is_null(b.type):
            other = b if pa.types.is_null(a.type) else a
            return _Typed(other.expr.is_null(), pa.bool_())
        _comparable(a, b, ordered=False, e=e)
        x, y = _aligned(a, b)
        either = x.is_null() | y.is_null()
        return _Typed(pc.if_else(either, x.is_null() & y.is_null(), x == y), pa.bool_())

    def _arithmetic(self, e: Any) -> _Typed:
        a, b = self.node(e.left), self.node(e.right)
        typ = _integers(e, a, b)
        plain, checked = _ARITHMETIC[type(e).__name__]
        fn = getattr(pc, checked if self.scope.conf.ansi else plain)
        return _Typed(fn(_cast(a, typ), _cast(b, typ)), typ)  # cast: Arrow would narrow a literal to a column's type

    def _Neg(self, e: Any) -> _Typed:
        from sqlglot import exp

        if isinstance(e.this, exp.Literal) and not e.this.is_string:
            return _integer("-" + e.this.this, None, e)
        a = self.node(e.this)
        typ = _integers(e, a)
        fn = pc.negate_checked if self.scope.conf.ansi else pc.negate
        return _Typed(a.expr if pa.types.is_null(typ) else fn(a.expr), typ)

    def _logical(self, e: Any, combine: Callable) -> _Typed:
        a, b = self._boolean(e.left), self._boolean(e.right)
        return _Typed(combine(a, b), pa.bool_())

    def _And(self, e: Any) -> _Typed:
        return self._logical(e, lambda a, b: a & b)

    def _Or(self, e: Any) -> _Typed:
        return self._logical(e, lambda a, b: a | b)

    def _Not(self, e: Any) -> _Typed:
        return _Typed(~self._boolean(e.this), pa.bool_())

    def _boolean(self, e: Any) -> pc.Expression:
        t = self.node(e)
        if pa.types.is_null(t.type):
            return _NULL_BOOL
        if not pa.types.is_boolean(t.type):
            raise ctfile.SchemaMismatchError(f"{self.text}: {e.sql(dialect='spark')} is not a boolean ({t.type})")
        return t.expr

    def _Is(self, e: Any) -> _Typed:
        from sqlglot import exp

        if not isinstance(e.expression, exp.Null):
            raise Untranslatable(e.sql(dialect="spark"))  # IS TRUE, IS FALSE
        return _Typed(self.node(e.this).expr.is_null(), pa.bool_())

    def _In(self, e: Any) -> _Typed:
        if e.args.get("query") is not None or e.args.get("unnest") is not None or e.args.get("field") is not None:
            raise Untranslatable(e.sql(dialect="spark"))
        from sqlglot import exp

        if not e.expressions:
            raise Untranslatable(e.sql(dialect="spark"))
        parts = [self._comparison(exp.EQ(this=e.this, expression=v)).expr for v in e.expressions]
        out = parts[0]
        for p in parts[1:]:
            out = out | p  # Kleene OR: null when no value is equal and one comparison is null, as Spark's IN
        return _Typed(out, pa.bool_())

    def _Between(self, e: Any) -> _Typed:
        from sqlglot import exp

        if e.args.get("symmetric"):
            raise Untranslatable(e.sql(dialect="spark"))
        low = self._comparison(exp.GTE(this=e.this, expression=e.args["low"])).expr
        high = self._comparison(exp.LTE(this=e.this, expression=e.args["high"])).expr
        return _Typed(low & high, pa.bool_())

    def _Coalesce(self, e: Any) -> _Typed:
        args = [self.node(a) for a in [e.this, *e.expressions]]
        typed = [a for a in args if not pa.types.is_null(a.type)]
        if not typed:
            return _Typed(pc.scalar(None), pa.null())
        typ = _common_type(e, typed)
        return _Typed(pc.coalesce(*[_cast(a, typ) for a in typed]), typ)


def _common_type(e: Any, args: Sequence[_Typed]) -> pa.DataType:
    """The one type of ``args`` (NULL literals aside) that is not floating
    point, or the widest when they are integers; else untranslatable."""
    typed = [a for a in args if not pa.types.is_null(a.type)]
    if not typed:
        return pa.null()
    if all(a.type.equals(typed[0].type) for a in typed) and _family(typed[0].type) != "inexact":
        return typed[0].type
    return _integers(e, *typed)


def _typed_as(a: _Typed, typ: pa.DataType) -> pc.Expression:
    """``a`` as a value of ``typ``: cast, or a NULL of ``typ`` for a NULL literal."""
    return pc.scalar(pa.scalar(None, typ)) if pa.types.is_null(a.type) else _cast(a, typ)


def _spark_type(to: Any) -> pa.DataType | None:
    """The Arrow type of a cast's Spark type, for the types a cast is
    translated to (integers, string, boolean, decimal); None otherwise."""
    kind = to.this.name
    if kind in _INT_BITS:
        return _INT_BITS[kind]
    if kind == "DECIMAL" and len(to.expressions) == 2:
        precision, scale = (int(p.this.this) for p in to.expressions)
        return pa.decimal128(precision, scale)
    return {"TEXT": pa.string(), "BOOLEAN": pa.bool_()}.get(kind)


def _exact_cast(source: pa.DataType, to: pa.DataType) -> bool:
    """Whether a cast from ``source`` to ``to`` keeps every value as it is
    (the same type, or an integer into a wider one; NULL to anything)."""
    if pa.types.is_null(source) or source.equals(to):
        return True
    both_integers = _family(source) == "integer" and _family(to) == "integer"
    return both_integers and to.bit_width >= source.bit_width


def _integer(text: str, typ: pa.DataType | None, e: Any) -> _Typed:
    """An integer literal as Spark types it: ``INT`` when it fits, else
    ``BIGINT`` (``typ`` when a suffix gives it); anything else untranslatable."""
    try:
        value = int(text)
    except ValueError:
        raise Untranslatable(e.sql(dialect="spark")) from None
    for t in ([typ] if typ is not None else [pa.int32(), pa.int64()]):
        bits = t.bit_width - 1
        if -(2**bits) <= value < 2**bits:
            return _Typed(pc.scalar(pa.scalar(value, t)), t, value)
    raise Untranslatable(e.sql(dialect="spark"))


def _comparable(a: _Typed, b: _Typed, *, ordered: bool, e: Any) -> None:
    fa, fb = _family(a.type), _family(b.type)
    if fa != fb or fa == "inexact" or (ordered and fa == "boolean"):
        raise Untranslatable(e.sql(dialect="spark"))


def _aligned(a: _Typed, b: _Typed) -> tuple[pc.Expression, pc.Expression]:
    """Two comparable operands in one type: integers in the wider one (as
    Spark compares them; Arrow would narrow a literal to a column's type)."""
    if _family(a.type) != "integer":
        return a.expr, b.expr
    typ = max((a.type, b.type), key=lambda t: t.bit_width)
    return _cast(a, typ), _cast(b, typ)


def _integers(e: Any, *args: _Typed) -> pa.DataType:
    """The wider integer type of ``args`` (null: null), or untranslatable."""
    typed = [a.type for a in args if not pa.types.is_null(a.type)]
    if any(_family(t) != "integer" for t in typed):
        raise Untranslatable(e.sql(dialect="spark"))
    return max(typed, key=lambda t: t.bit_width) if typed else pa.null()


def _cast(a: _Typed, typ: pa.DataType) -> pc.Expression:
    if pa.types.is_null(typ) or a.type.equals(typ) or pa.types.is_null(a.type):
        return a.expr
    if a.literal is not None:
        return pc.scalar(pa.scalar(a.literal, typ))
    return a.expr.cast(typ)


# ---------------------------------------------------------------- ON


def _is_qualified_column(e: Any) -> bool:
    """Whether ``e`` is a column written ``alias.name`` (not a nested field)."""
    from sqlglot import exp

    return isinstance(e, exp.Column) and e.args.get("db") is None and bool(e.table)


def split_on(text: str, target_alias: str, source_alias: str, target: Sequence[str], source: Sequence[str],
             conf: SqlConf | None = None) -> tuple[tuple[tuple[str, str], ...], str | None]:
    """The key pairs of the ON condition ``text`` (its conjuncts
    ``target_alias.a = source_alias.b``, ``a`` a column of ``target`` and
    ``b`` of ``source``, either way round) and the rest of it as SQL text
    (None: nothing else).

    Raises
    ------
    ctfile.InvalidArgumentError
        Text that does not parse, or has no such conjunct.
    """
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    conf = conf or SqlConf()
    try:
        parsed = sqlglot.parse_one(text, dialect="spark")
    except SqlglotError as e:
        raise ctfile.InvalidArgumentError(f"on is not a Spark SQL condition: {text!r} ({e})") from None
    sides = SqlScope((_names_only(target_alias, target), _names_only(source_alias, source)), conf)
    keys, rest = _keys_and_rest(parsed.flatten() if isinstance(parsed, exp.And) else [parsed], sides)
    if not keys:
        raise ctfile.InvalidArgumentError(
            f"on {text!r} has no equality of a table column and a source column ({target_alias}.a = "
            f"{source_alias}.b): a MERGE matches rows by such key pairs"
        )
    return tuple(keys), (exp.and_(*rest).sql(dialect="spark") if rest else None)


def _names_only(alias: str, names: Sequence[str]) -> SideColumns:
    """A side of ``alias`` that has the columns ``names`` (of no known type)."""
    return SideColumns(alias, pa.schema([(n, pa.null()) for n in names]))


def _keys_and_rest(conjuncts: Sequence[Any], sides: SqlScope) -> tuple[list[tuple[str, str]], list[Any]]:
    """The key pairs among ``conjuncts`` (a table column's first pair only)
    and the other conjuncts."""
    keys, rest = [], []
    for conjunct in conjuncts:
        pair = _key_pair(conjunct, sides)
        if pair is None or pair[0] in [t for t, _ in keys]:
            rest.append(conjunct)
        else:
            keys.append(pair)
    return keys, rest


def _key_pair(e: Any, scope: SqlScope) -> tuple[str, str] | None:
    """(table column, source column) of ``t.a = s.b`` or ``s.b = t.a``, or None."""
    from sqlglot import exp

    if not isinstance(e, exp.EQ):
        return None
    target, source = scope.sides
    found = {}
    for side in (e.left, e.right):
        if not _is_qualified_column(side):
            return None
        for s in (target, source):
            if scope.same(s.alias, side.table) and (col := scope.find(s, side.name)) is not None:
                found.setdefault(s.alias, col)
    if len(found) != 2:
        return None
    return found[target.alias], found[source.alias]
