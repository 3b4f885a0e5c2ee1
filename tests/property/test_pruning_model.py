"""Pruning never drops a partition that holds a selected row (SPEC
§Statistics, reader requirements; SPEC §Copy-on-write).

Random rows are written as a real table of small micro-partitions, then:

* for a random predicate from a grammar of the shapes DELETE and UPDATE
  accept (comparisons with the column on either side, ``&``, ``|``, ``~``,
  ``is_in`` with and without null, ``is_null``, ``is_valid``, ``is_nan``,
  casts, arithmetic, ``starts_with``, bare boolean columns, constants),
  :func:`~ctfile.reader.pruning.prune` keeps every partition with a row
  where the predicate is true, and, for DELETE's metadata-only removal,
  every partition with a row where it is false or null;
* for a random MERGE source (nulls, NaN, composite keys of every orderable
  type), :meth:`~ctfile.writer.conflicts.KeyPredicate.candidates` keeps
  every partition with a row whose key the source has, by the MERGE's own
  join.
"""

from __future__ import annotations

import datetime as dt
import decimal
import shutil
import tempfile

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctfile
from ctfile.reader.partition_reader import read_partition_table
from ctfile.reader.pruning import prune
from ctfile.writer.conflicts import KeyPredicate

UTC = dt.timezone.utc
D0 = dt.date(2024, 1, 1)
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
LONG = "k" * 40  # longer than the 32-character statistics prefix
STRINGS = ["", "a", "ab", "b", "k", LONG, LONG + "z", LONG[:32], "\u00e9", "\U0001f600"]
COLUMNS = {
    "i": (pa.int64(), st.integers(-4, 4)),
    "f": (pa.float64(), st.sampled_from([-1.5, -0.0, 0.0, 1.0, 2.5, float("nan"), float("inf")])),
    "s": (pa.string(), st.sampled_from(STRINGS)),
    "b": (pa.bool_(), st.booleans()),
    "d": (pa.date32(), st.integers(0, 5).map(lambda n: D0 + dt.timedelta(days=n))),
    "ts": (pa.timestamp("us", tz="UTC"), st.integers(0, 5).map(lambda n: T0 + dt.timedelta(hours=n))),
    "dec": (pa.decimal128(6, 2), st.integers(-8, 8).map(lambda n: decimal.Decimal(n) / 4)),
}
SCHEMA = pa.schema([(name, typ) for name, (typ, _) in COLUMNS.items()])
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
f = pc.field


def _value(name: str):
    return st.one_of(st.none(), COLUMNS[name][1])


@st.composite
def tables(draw, min_rows: int = 1) -> pa.Table:
    n = draw(st.integers(min_rows, 24))
    cols = {name: draw(st.lists(_value(name), min_size=n, max_size=n)) for name in COLUMNS}
    t = pa.table(cols, schema=SCHEMA)
    if draw(st.booleans()):  # sorted data gives narrow ranges, as clustering would
        t = t.sort_by([(draw(st.sampled_from(list(COLUMNS))), "ascending")])
    return t


def _literal(draw, name: str):
    return pa.scalar(draw(COLUMNS[name][1]), COLUMNS[name][0])


@st.composite
def leaves(draw) -> pc.Expression:
    name = draw(st.sampled_from(list(COLUMNS)))
    x = f(name)
    kind = draw(st.sampled_from(["cmp", "cmp_right", "is_in", "is_null", "is_valid", "special"]))
    op = draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]))
    if kind == "cmp":
        return _compare(x, op, _literal(draw, name))
    if kind == "cmp_right":
        return _compare(pc.scalar(_literal(draw, name)), op, x)
    if kind == "is_in":
        values = draw(st.lists(_value(name), max_size=4))
        return x.isin(pa.array(values, COLUMNS[name][0]))
    if kind == "is_null":
        return x.is_null()
    if kind == "is_valid":
        return x.is_valid()
    return draw(st.sampled_from([
        pc.is_nan(f("f")),
        f("i").cast(pa.float64()) > draw(COLUMNS["f"][1]),
        _compare(f("i") + draw(st.integers(-3, 3)), op, _literal(draw, "i")),
        pc.starts_with(f("s"), draw(st.sampled_from(["", "a", "k" * 33, "\u00e9"]))),
        f("b"),
        pc.scalar(draw(st.sampled_from([True, False]))),
        pc.scalar(None).cast(pa.bool_()),
    ]))


def _compare(a, op: str, b) -> pc.Expression:
    return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


predicates = st.recursive(
    leaves(),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda ab: ab[0] & ab[1]),
        st.tuples(inner, inner).map(lambda ab: ab[0] | ab[1]),
        inner.map(lambda a: ~a),
    ),
    max_leaves=5,
)


class _Written:
    """``rows`` written as a real table with ``partitionRows`` rows per partition."""

    def __init__(self, rows: pa.Table, partition_rows: int):
        self.root = tempfile.mkdtemp(prefix="ct-prune-")
        props = {"ctfile.partitionRows": str(partition_rows)}
        self.table = ctfile.create_table(self.root + "/t", SCHEMA, properties=props)
        self.table.insert(rows)
        snap = self.table.snapshot()
        self.schema, self.partitions = snap.metadata.schema, snap.partitions

    def rows(self, p) -> pa.Table:
        return read_partition_table(self.table.storage, p, self.schema)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.root, ignore_errors=True)


def _truth(t: pa.Table, where: pc.Expression) -> pa.Array:
    """``where`` per row: true, false or null."""
    return ds.dataset(t).to_table(columns={"m": where}, use_threads=False).column("m").combine_chunks()


@SETTINGS
@given(rows=tables(), where=predicates, partition_rows=st.integers(1, 6))
def test_prune_keeps_every_partition_with_a_selected_row(rows, where, partition_rows):
    with _Written(rows, partition_rows) as w:
        try:
            kept = {p.path for p in prune(w.partitions, w.schema, where)}
            survivors = {p.path for p in prune(w.partitions, w.schema, ~where | where.is_null())}
        except pa.ArrowInvalid:
            return  # the predicate fails on these values (an overflow): the statement fails too
        for p in w.partitions:
            truth = _truth(w.rows(p), where)
            if pc.any(pc.fill_null(truth, False)).as_py():
                assert p.path in kept, (where, w.rows(p).to_pylist())
            if pc.any(pc.fill_null(pc.invert(truth), True)).as_py():
                assert p.path in survivors, (where, w.rows(p).to_pylist())


KEYS = st.lists(st.sampled_from(list(COLUMNS)), min_size=1, max_size=3, unique=True)


@SETTINGS
@given(rows=tables(), source=tables(min_rows=0), keys=KEYS, partition_rows=st.integers(1, 6))
def test_merge_candidates_keep_every_partition_with_a_source_key(rows, source, keys, partition_rows):
    with _Written(rows, partition_rows) as w:
        predicate = KeyPredicate.from_source(source, keys)
        kept = {p.path for p in predicate.candidates(w.partitions, w.schema)}
        for p in w.partitions:
            t = w.rows(p).select(keys)
            if t.join(predicate.source_keys, keys, join_type="left semi", use_threads=False).num_rows:
                assert p.path in kept, (keys, t.to_pylist(), predicate.source_keys.to_pylist())
