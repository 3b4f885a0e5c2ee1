"""XXH3-64 of row ids in Spark SQL: ``METADATA$ROW_ID`` without a Python
worker (SPEC §Change scans).

``METADATA$ROW_ID`` is XXH3-64 of the 8-byte little-endian row id, seeded
with XXH3-64 of the table id, as 16 lower-case hex digits; this module
computes XXH3's 4-to-8-byte path with Spark SQL bit operations on ``bigint``
(as :mod:`ctfile.reader.row_ids` does over numpy arrays), the query text
rendered by sqlglot. ``tests/spark/test_spark_native.py`` checks it against
the ``xxhash`` package.
"""

from __future__ import annotations

import functools

_M64 = (1 << 64) - 1
# XXH3's default secret, bytes 8..15 and 16..23 read little-endian, and its
# rrmxmx multiplier (as in ctfile.reader.row_ids, which checks them against
# the xxhash package).
_SECRET_8, _SECRET_16 = 0x1CAD21F72C81017C, 0xDB979083E96DD4DE
_PRIME_MX2 = 0x9FB21C651E98DF25


def _signed(u: int) -> int:
    """An unsigned 64-bit value as the Spark ``bigint`` with the same bits."""
    u &= _M64
    return u - (1 << 64) if u >= 1 << 63 else u


def _paren(cls, a, b):
    """``(a <op> b)`` for the sqlglot binary node ``cls``: parenthesised,
    so Spark's operator precedence (``&`` over ``^`` over ``|``) never
    regroups the tree."""
    from sqlglot import exp

    return exp.Paren(this=cls(this=a, expression=b))


def _call(name: str, *args):
    from sqlglot import exp

    return exp.Anonymous(this=name, expressions=list(args))


def _int(n: int):
    """A bigint literal (``123L``; -2**63 as a sum, which no literal spells)."""
    from sqlglot import exp

    if n == -(1 << 63):
        return _paren(exp.Sub, exp.Literal.number(f"{n + 1}L"), exp.Literal.number("1L"))
    return exp.Literal.number(f"{n}L")


def _rotl(c, n: int):
    from sqlglot import exp

    return _paren(exp.BitwiseOr, _call("shiftleft", c, exp.Literal.number(n)),
                  _call("shiftrightunsigned", c, exp.Literal.number(64 - n)))


def _xor(a, b):
    from sqlglot import exp

    return _paren(exp.BitwiseXor, a, b)


def _mul_const_stages(k: int) -> list:
    """``h * k`` modulo 2**64 for the bigint column ``h``, without overflow
    (Spark's ANSI mode fails a bigint product that overflows), as three
    projections: the 16-bit limbs of ``h``; the four partial sums of the
    limb products, each carrying the one before (each stays below 2**36);
    their low 16 bits put back together. Each stage maps a column name to
    a function from a column-name lookup to its expression."""
    from sqlglot import exp

    m = _int(0xFFFF)
    b = [(k >> (16 * i)) & 0xFFFF for i in range(4)]
    limbs = {f"a{i}": (lambda col, i=i: _paren(exp.BitwiseAnd, _call("shiftrightunsigned", col("h"), exp.Literal.number(16 * i)), m))
             for i in range(4)}

    def partial(col, j: int):
        s = _int(0) if j == 0 else _call("shiftright", partial(col, j - 1), exp.Literal.number(16))
        for i in range(j + 1):
            if b[j - i]:
                s = _paren(exp.Add, s, _paren(exp.Mul, col(f"a{i}"), _int(b[j - i])))
        return s

    sums = {f"s{j}": (lambda col, j=j: partial(col, j)) for j in range(4)}

    def joined(col):
        out = _paren(exp.BitwiseAnd, col("s0"), m)
        for j in range(1, 4):
            out = _paren(exp.BitwiseOr, out, _call("shiftleft", _paren(exp.BitwiseAnd, col(f"s{j}"), m), exp.Literal.number(16 * j)))
        return out

    return [limbs, sums, {"h": joined}]


def xxh3_64_stages(seed: int) -> list:
    """XXH3-64 of a bigint's 8 little-endian bytes (XXH3's 4-to-8-byte path)
    as a list of projections from the input column ``h`` to the hash in
    ``h``: each a mapping of column name to a function from a column-name
    lookup to its sqlglot expression, over the columns of the projection
    before (:func:`with_xxh3_64`). Intermediate values are columns of their
    own, computed once; the expressions stay small, which keeps Spark's
    analysis of the plan cheap."""
    from sqlglot import exp

    s32 = seed & 0xFFFFFFFF
    s = seed ^ (int.from_bytes(s32.to_bytes(4, "little"), "big") << 32)
    bitflip = _signed((_SECRET_8 ^ _SECRET_16) - s)
    return [
        # input64 = readLE32(last 4) + (readLE32(first 4) << 32): v rotated by 32; keyed = input64 ^ bitflip
        {"h": lambda col: _xor(_rotl(col("h"), 32), _int(bitflip))},
        {"h": lambda col: _xor(_xor(col("h"), _rotl(col("h"), 49)), _rotl(col("h"), 24))},
        *_mul_const_stages(_PRIME_MX2),
        {"h": lambda col: _xor(col("h"), _paren(exp.Add, _call("shiftrightunsigned", col("h"), exp.Literal.number(35)), _int(8)))},  # + len
        *_mul_const_stages(_PRIME_MX2),
        {"h": lambda col: _xor(col("h"), _call("shiftrightunsigned", col("h"), exp.Literal.number(28)))},
    ]


_SOURCE = "__ctfile_xxh3_source__"  # where the DataFrame goes in the query text


@functools.lru_cache(maxsize=64)
def _xxh3_query(columns: tuple[str, ...], column: str, out: str, seed: int) -> str:
    """The text of :func:`with_xxh3_64`'s query (rendered once per shape)."""
    from sqlglot import exp

    prefix = f"{out}__"
    keep = [exp.column(c, quoted=True) for c in columns if not c.startswith(prefix)]
    col = lambda name: exp.column(prefix + name, quoted=True)  # noqa: E731
    query = exp.select(*keep, exp.alias_(exp.column(column, quoted=True), prefix + "h", quoted=True)).from_(_SOURCE)
    for k, stage in enumerate(xxh3_64_stages(seed)):
        outs = [exp.alias_(fn(col), prefix + name, quoted=True) for name, fn in stage.items()]
        query = exp.select(*keep, *outs).from_(query.subquery(f"s{k}"))
    hexed = _call("lpad", _call("lower", _call("hex", col("h"))), exp.Literal.number(16), exp.Literal.string("0"))
    query = exp.select(*keep, exp.alias_(hexed, out, quoted=True)).from_(query.subquery("s"))
    # spark.sql substitutes {src} (str.format): braces of the text itself are doubled.
    return query.sql(dialect="spark").replace("{", "{{").replace("}", "}}").replace(_SOURCE, "{src}")


def with_xxh3_64(df, column: str, out: str, seed: int):
    """``df`` with ``out``: the 16 lower-case hex digits of XXH3-64 of the
    bigint ``column`` with ``seed`` (``METADATA$ROW_ID``, SPEC §Change scans).

    The stages of :func:`xxh3_64_stages` are one Spark SQL query (rendered
    by sqlglot) over ``df``, each stage a projection over the one before:
    building them from PySpark Columns cost thousands of calls into the
    JVM, and one ``withColumn`` per step an analysis of the growing plan
    each (together over a second per DataFrame on a loaded machine); one
    query is analysed once. Columns of ``df`` whose names begin with
    ``<out>__`` are the query's own and are dropped."""
    return df.sparkSession.sql(_xxh3_query(tuple(df.columns), column, out, seed), src=df)
