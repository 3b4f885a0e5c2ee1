"""The Spark Connect front end of condition translation: the condition's SQL
text, parsed with sqlglot (dialect ``spark``).

A Spark Connect client has no JVM, so Spark's own translation
(:func:`ctfile.spark.conditions.catalyst_tree`) is out of reach; the SQL text of a string
condition is all there is. sqlglot parses it; this module turns the parse
into the tree of :mod:`ctfile.spark.predicates`, doing itself the part of
Spark's work the rules depend on, and only where it is sure to do it as
Spark does (anything else becomes None, which only prunes less):

* literals are typed as Spark's parser types them: ``5`` an integer (a
  decimal beyond the ``bigint`` range), ``1.5`` a decimal, ``1.5E0`` a
  double (unless ``spark.sql.legacy.exponentLiteralAsDecimal.enabled``),
  the suffixes ``L``, ``S``, ``Y``, ``D``, ``F``; ``date'...'``,
  ``timestamp'...'`` (``timestamp_ntz`` where ``spark.sql.timestampType``
  says so), ``timestamp_ltz'...'``, ``timestamp_ntz'...'`` in their strict
  ISO forms only, an instant read in ``spark.sql.session.timeZone``
  (a local time that zone skips or repeats is dropped);
* Spark's implicit cast of a literal to the column's type is done where it
  is exact: an integer or decimal literal compared with a floating-point
  column becomes the double Spark casts it to only when the value is exactly
  a double (an integer always: both round it the same way), an integer
  compared with a decimal column a decimal, and a strict ``'yyyy-MM-dd'``
  string compared with a date column a date (Spark casts the string to a
  date, or with ANSI off compares the date as that same string: both agree);
* string literals only in single quotes and with no escape sequence, so
  that their value is the text between the quotes in every Spark
  configuration (``spark.sql.parser.escapedStringLiterals``,
  ``spark.sql.ansi.doubleQuotedIdentifiers``), and no adjacent literals;
* column names resolve as Spark resolves them: case-insensitively unless
  ``spark.sql.caseSensitive``; a dotted name is a nested field (not
  translated), a backquoted one a column;
* ``BETWEEN`` is the conjunction Spark rewrites it to, ``x <=> NULL`` is
  ``x IS NULL``, a bare boolean column ``b`` is ``b = true``.

A Column condition has no SQL text through PySpark's public API; it is not
translated (no pruning).
"""

from __future__ import annotations

import datetime
import re
import struct
import zoneinfo
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from ctfile.spark.predicates import Lit, Pred, Ref

_INT = re.compile(r"\d+")
_DECIMAL = re.compile(r"(\d+\.\d*|\.\d+)")
_EXPONENT = re.compile(r"(\d+\.?\d*|\.\d+)[eE][+-]?\d+")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2}(\.\d{1,6})?)")
_OFFSET = re.compile(r"([+-])(\d{2}):(\d{2})")
_EPOCH = datetime.datetime(1970, 1, 1)
_INT_KINDS = {"BIGINT": ("long", 63), "INT": ("integer", 31), "SMALLINT": ("short", 15), "TINYINT": ("byte", 7)}
_INTEGRAL = {"byte", "short", "integer", "long"}


@dataclass(frozen=True)
class SqlConf:
    """The session settings that change what a condition's text means."""

    time_zone: str = "UTC"
    timestamp_ntz: bool = False  # spark.sql.timestampType = TIMESTAMP_NTZ
    case_sensitive: bool = False
    exponent_as_decimal: bool = False
    ansi: bool = True  # spark.sql.ansi.enabled (Spark 4's default): integer overflow raises

    @classmethod
    def of(cls, spark: Any) -> "SqlConf":
        """The settings of ``spark`` (a classic or Connect session: ``spark.conf`` only)."""
        get = spark.conf.get
        return cls(
            time_zone=get("spark.sql.session.timeZone"),
            timestamp_ntz=get("spark.sql.timestampType").upper() == "TIMESTAMP_NTZ",
            case_sensitive=get("spark.sql.caseSensitive").lower() == "true",
            exponent_as_decimal=get("spark.sql.legacy.exponentLiteralAsDecimal.enabled").lower() == "true",
            ansi=get("spark.sql.ansi.enabled").lower() == "true",
        )


def sql_tree(text: str, schema: pa.Schema, conf: SqlConf) -> Any:
    """The predicate tree of the Spark SQL condition ``text`` over a table of
    ``schema``; None when nothing of it translates (or sqlglot does not parse it).

    Examples
    --------
    >>> s = pa.schema([("id", pa.int64()), ("f", pa.float64())])
    >>> sql_tree("ID > 5 AND upper(name) = 'X'", s, SqlConf()).children  # a function of a column: None
    (Pred(name='>', children=(Ref(name='id'), Lit(kind='long', value=5))), Pred(name='=', children=(None, Lit(kind='string', value='X'))))
    >>> sql_tree("f < 2", s, SqlConf())
    Pred(name='<', children=(Ref(name='f'), Lit(kind='double', value=2.0)))
    """
    import sqlglot
    from sqlglot.errors import SqlglotError

    try:
        parsed = sqlglot.parse_one(text, dialect="spark")
        plain = plain_strings(text)
    except SqlglotError:
        return None
    return _Translator(schema, conf, plain).predicate(parsed)


def sql_columns(texts: list[str], schema: pa.Schema, conf: SqlConf) -> list[str] | None:
    """The table columns the SQL texts may use, in table order: every column
    whose name is one of their tokens (a superset of what Spark resolves:
    a name sqlglot reads as a function, ``current_date``, is a column to
    Spark when the table has one); None when a text does not tokenize."""
    words = _words(texts)
    if words is None:
        return None
    if not conf.case_sensitive:
        words = {w.lower() for w in words}
        return [n for n in schema.names if n.lower() in words]
    return [n for n in schema.names if n in words]


def _words(texts: list[str]) -> set[str] | None:
    """The text of every token of ``texts``; None when one does not tokenize."""
    from sqlglot.dialects.spark import Spark
    from sqlglot.errors import SqlglotError

    try:
        return {t.text for text in texts for t in Spark().tokenize(text)}
    except SqlglotError:
        return None


def plain_strings(text: str) -> bool:
    """Whether every string literal of ``text`` is in single quotes without
    escapes, so that its value is the text between its quotes."""
    from sqlglot.dialects.spark import Spark
    from sqlglot.tokens import TokenType

    for t in Spark().tokenize(text):
        if t.token_type == TokenType.STRING and text[t.start:t.end + 1] != f"'{t.text}'":
            return False
    return True


class _Translator:
    """One condition's sqlglot AST as a predicate tree (module docstring)."""

    def __init__(self, schema: pa.Schema, conf: SqlConf, plain_strings: bool):
        self.schema = schema
        self.conf = conf
        self.plain_strings = plain_strings

    def predicate(self, e: Any) -> Any:
        from sqlglot import exp

        while isinstance(e, exp.Paren):
            e = e.this
        if isinstance(e, (exp.And, exp.Or)):
            return Pred("AND" if isinstance(e, exp.And) else "OR", (self.predicate(e.left), self.predicate(e.right)))
        if isinstance(e, exp.Not):
            return Pred("NOT", (self.predicate(e.this),))
        if isinstance(e, exp.Boolean):
            return Pred("ALWAYS_TRUE" if e.this else "ALWAYS_FALSE")
        handler = _PREDICATES.get(type(e).__name__)
        return handler(self, e) if handler is not None else self.boolean_column(e)

    def boolean_column(self, e: Any) -> Pred | None:
        """A boolean column alone, as ``column = true``; None for anything else."""
        col = self.column(e)
        if col is not None and pa.types.is_boolean(self.schema.field(col.name).type):
            return Pred("=", (col, Lit("boolean", True)))
        return None

    def comparison(self, e: Any) -> Any:
        from sqlglot import exp

        op = _OPERATORS[type(e).__name__]
        left, right = self.operand(e.left), self.operand(e.right)
        if op == "<=>" and isinstance(e.right, exp.Null) and isinstance(left, Ref):
            return Pred("IS_NULL", (left,))
        if isinstance(left, Ref):
            right = self.coerce(right, left)
        elif isinstance(right, Ref):
            left = self.coerce(left, right)
        return Pred(op, (left, right))

    def membership(self, e: Any) -> Any:
        if e.args.get("query") is not None or e.args.get("unnest") is not None or e.args.get("field") is not None:
            return None
        col = self.operand(e.this)
        if not isinstance(col, Ref):
            return None
        return Pred("IN", (col, *(self.coerce(self.operand(v), col) for v in e.expressions)))

    def null_test(self, e: Any) -> Any:
        from sqlglot import exp

        if not isinstance(e.expression, exp.Null):
            return None  # IS TRUE, IS FALSE
        return Pred("IS_NULL", (self.operand(e.this),))

    def between(self, e: Any) -> Any:
        if e.args.get("symmetric"):
            return None
        col, low, high = self.operand(e.this), self.operand(e.args["low"]), self.operand(e.args["high"])
        if isinstance(col, Ref):
            low, high = self.coerce(low, col), self.coerce(high, col)
        return Pred("AND", (Pred(">=", (col, low)), Pred("<=", (col, high))))

    # ------------------------------------------------------------ operands

    def column(self, e: Any) -> Ref | None:
        """A top-level table column named as Spark resolves it, or None."""
        from sqlglot import exp

        if not isinstance(e, exp.Column) or e.table or not isinstance(e.this, exp.Identifier):
            return None
        name = e.this.name
        if name in self.schema.names:
            return Ref(name)
        if self.conf.case_sensitive:
            return None
        found = [n for n in self.schema.names if n.lower() == name.lower()]
        return Ref(found[0]) if len(found) == 1 else None

    def operand(self, e: Any) -> Any:
        """A column, a literal as Spark types it, or None."""
        from sqlglot import exp

        while isinstance(e, exp.Paren):
            e = e.this
        if isinstance(e, exp.Column):
            return self.column(e)
        if isinstance(e, exp.Null):
            return Lit("null", None)
        if isinstance(e, exp.Boolean):
            return Lit("boolean", bool(e.this))
        if isinstance(e, exp.Neg):
            return _negated(self.operand(e.this))
        if isinstance(e, exp.Literal):
            return self.literal(e)
        if isinstance(e, (exp.Cast, exp.TryCast)) and isinstance(e.this, exp.Literal):
            return self.typed(e.this, e.to)
        return None

    def literal(self, e: Any) -> Lit | None:
        if e.is_string:
            return Lit("string", e.this) if self.plain_strings else None
        return _number(e.this, exponent_as_decimal=self.conf.exponent_as_decimal)

    def typed(self, lit: Any, to: Any) -> Lit | None:
        """``date'...'``, ``timestamp'...'``, ``5L``, ``1.5D`` ... (sqlglot
        reads them as casts of a literal; an explicit CAST of a literal to
        these types has the same value in Spark)."""
        kind = to.this.name
        if lit.is_string:
            return self._typed_text(lit.this, kind) if self.plain_strings else None
        n = _number(lit.this, exponent_as_decimal=self.conf.exponent_as_decimal)
        return None if n is None else _typed_number(n, kind, lit.this)

    def _typed_text(self, text: str, kind: str) -> Lit | None:
        """A date or timestamp literal's value (a timestamp without a zone
        in the session's time zone, unless it is local by default)."""
        if kind == "DATE":
            return _date(text)
        if kind in ("TIMESTAMPTZ", "TIMESTAMPLTZ", "TIMESTAMP"):
            local = self.conf.timestamp_ntz and kind != "TIMESTAMPLTZ"
            return _timestamp(text, None if local else self.conf.time_zone)
        if kind == "TIMESTAMPNTZ":
            return _timestamp(text, None)
        return None

    def coerce(self, lit: Any, col: Ref) -> Any:
        """``lit`` as Spark casts it for a comparison with ``col`` (where that is
        exact), or as it is (the back end drops a literal of another family)."""
        if not isinstance(lit, Lit) or lit.value is None:
            return lit
        t = self.schema.field(col.name).type
        for is_column_type, kinds, convert in _COERCIONS:
            if is_column_type(t) and lit.kind in kinds:
                return convert(lit)
        return lit


def _typed_number(n: Lit, kind: str, text: str) -> Lit | None:
    """The number ``n`` (written ``text``) as the literal of type ``kind``
    (``BIGINT`` ... ``TINYINT``, ``DOUBLE``, ``FLOAT``), if it holds it exactly."""
    if kind in _INT_KINDS:
        name, bits = _INT_KINDS[kind]
        return Lit(name, int(n.value)) if _fits_integer(n, bits) and _INT.fullmatch(text) else None
    if kind == "DOUBLE":
        return _as_double(n)
    if kind == "FLOAT":
        d = _as_double(n)
        return d if d is not None and _fits_float(d.value) else None
    return None


def _as_decimal(lit: Lit) -> Lit:
    return Lit("decimal", Decimal(lit.value))


def _as_date_if_one(lit: Lit) -> Lit:
    """A string literal as the date it writes; as it is if it writes none."""
    return _date(lit.value) or lit


def _fits_integer(n: Lit, bits: int) -> bool:
    """Whether the number ``n`` is a whole number a signed ``bits + 1``-bit integer holds."""
    return n.kind in _INTEGRAL | {"decimal"} and n.value == int(n.value) and -(2**bits) <= n.value < 2**bits


def _fits_float(value: float) -> bool:
    """Whether ``value`` survives a round trip through a 32-bit float."""
    return struct.unpack("f", struct.pack("f", value))[0] == value


_OPERATORS = {"EQ": "=", "NEQ": "<>", "LT": "<", "LTE": "<=", "GT": ">", "GTE": ">=", "NullSafeEQ": "<=>"}
_PREDICATES = {
    **{name: _Translator.comparison for name in _OPERATORS},
    "In": _Translator.membership, "Is": _Translator.null_test, "Between": _Translator.between,
}


def _number(text: str, *, exponent_as_decimal: bool) -> Lit | None:
    """A numeric literal as Spark's parser types it."""
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    if _INT.fullmatch(text):
        n = int(text)
        return Lit("long", n) if n < 2**63 else Lit("decimal", value)
    if _DECIMAL.fullmatch(text) or (exponent_as_decimal and _EXPONENT.fullmatch(text)):
        return Lit("decimal", value)
    if _EXPONENT.fullmatch(text):
        return Lit("double", float(value))
    return None


def _negated(lit: Any) -> Lit | None:
    if not isinstance(lit, Lit) or lit.kind not in _INTEGRAL | {"decimal", "double", "float"} or lit.value is None:
        return None
    return Lit(lit.kind, -lit.value)


def _as_double(lit: Lit) -> Lit | None:
    """The double Spark casts a numeric literal to, where Python's is surely
    the same: an integer (both round to nearest), a decimal exactly a double."""
    if lit.kind in ("double", "float"):
        return Lit("double", float(lit.value))
    if lit.kind in _INTEGRAL:
        return Lit("double", float(lit.value))
    value = Decimal(lit.value)
    d = float(value)
    return Lit("double", d) if Decimal(d) == value else None


def _date(text: str) -> Lit | None:
    if not _DATE.fullmatch(text):
        return None
    try:
        return Lit("date", datetime.date.fromisoformat(text))
    except ValueError:
        return None


def _timestamp(text: str, zone: str | None) -> Lit | None:
    """A strict ISO local date-time as microseconds: local (``zone`` None) or
    the instant it is in ``zone``; None for another form, an unknown zone, or
    a local time the zone skips or repeats."""
    m = _TIMESTAMP.fullmatch(text)
    if not m:
        return None
    try:
        local = datetime.datetime.fromisoformat(f"{m.group(1)} {m.group(2)}")
    except ValueError:
        return None
    if zone is None:
        return Lit("timestamp_ntz", _micros(local))
    tz = _zone(zone)
    if tz is None:
        return None
    first, second = local.replace(tzinfo=tz, fold=0), local.replace(tzinfo=tz, fold=1)
    if first.utcoffset() != second.utcoffset():  # skipped or repeated wall time
        return None
    return Lit("timestamp", _micros(first.astimezone(datetime.timezone.utc).replace(tzinfo=None)))


def _zone(name: str) -> datetime.tzinfo | None:
    m = _OFFSET.fullmatch(name)
    if m:
        sign = -1 if m.group(1) == "-" else 1
        return datetime.timezone(sign * datetime.timedelta(hours=int(m.group(2)), minutes=int(m.group(3))))
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None


def _micros(local: datetime.datetime) -> int:
    delta = local - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


#: How Spark casts a literal compared with a column, where that is exact:
#: (the column's type, the literal kinds cast, the cast).
_COERCIONS = (
    (pa.types.is_floating, _INTEGRAL | {"decimal"}, _as_double),
    (pa.types.is_decimal, _INTEGRAL, _as_decimal),
    (pa.types.is_date, {"string"}, _as_date_if_one),
)
