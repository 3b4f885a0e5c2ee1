"""The ctfile tables the SQL text of :func:`ctfile.spark.sql` names, and
its reads of them (docs/spark.md "SQL").

A statement names a ctfile table as ``ctfile.`<uri>``` (Delta Lake's
``delta.`<path>``` convention; its storage options are those given to
``ctfile.spark.sql``), or by a name :func:`ctfile.spark.register` gave it,
with its own storage options (:class:`Names`). A registration is kept in
the Spark session's configuration (key ``ctfile.sql.table.<name in lower
case>``, a JSON object of the URI and the storage options), so it holds in
that session and in no other.

Reads are snapshots, time travel and change scans, each a temporary view of
``spark.read.format("ctfile")`` (:class:`ReadView`) that the query names
instead of the table (:func:`plan_query`).

Spark reads a ctfile table only through the ``ctfile`` data source: it
refuses ``ctfile.`<uri>``` (a Python data source cannot be read "directly
on files") and time travel on a view. So:

* ``ctfile.`<uri>``` reads the latest version;
* ``... VERSION AS OF n`` and ``... TIMESTAMP AS OF expr`` (Spark's time
  travel syntax) read with option ``versionAsOf`` or ``timestampAsOf``, the
  timestamp evaluated by Spark (a string in the session time zone, as Spark
  reads ``TIMESTAMP AS OF``);
* ``table_changes('name', start[, end[, mode]])`` (Delta Lake's table
  function, with ctfile's change mode as a fourth argument) is a change
  scan: ``start`` and ``end`` (both included; ``end`` NULL or left out: the
  latest version) are versions (integers) or timestamps (strings), ``mode``
  one of ``default`` (the default), ``append_only``, ``audit``. ``name`` is
  a registered name or ``ctfile.`<uri>```; a name that is neither is left
  to Spark (Delta Lake's ``table_changes``, where installed);
* a registered name read as it is keeps its name, and its view is created
  again: PySpark 4.3 fixes a Python data source read when it is first
  planned, so a view made earlier could show an old version.

A view is named after what it reads (``ctfile_`` and a hash of the URI,
storage options and read options), so a session does not pile up views; it
stays defined for the session, since a DataFrame a query returned may read
it later (on Spark Connect its plan is resolved again at each action).

A query with a reference to rewrite is handed to Spark as sqlglot writes it
back (Spark dialect); one without, as its user wrote it.

Examples
--------
>>> import sqlglot
>>> names = Names({"ctfile.sql.table.orders": '{"uri": "/data/orders"}'}.get)
>>> plan = plan_query(sqlglot.parse_one(
...     "SELECT o.id, c.* FROM orders VERSION AS OF 3 AS o JOIN table_changes('orders', 4, NULL, 'audit') c "
...     "ON o.id = c.id", dialect="spark"), names)
>>> print(plan.text.replace(plan.views[0].name, "<v0>").replace(plan.views[1].name, "<v1>"))
SELECT o.id, c.* FROM `<v0>` AS o JOIN `<v1>` AS c ON o.id = c.id
>>> [(v.ref.uri, v.options) for v in plan.views]
[('/data/orders', (('versionAsOf', '3'),)), ('/data/orders', (('changes', 'audit'), ('startingVersion', '4')))]
"""

from __future__ import annotations

import datetime
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable

from sqlglot import exp

import ctfile
REGISTRY_PREFIX = "ctfile.sql.table."  # session configuration key of a registered name (lower case)
CTFILE_SCHEMA = "ctfile"


@dataclass(frozen=True)
class CtfileRef:
    """A ctfile table as a statement names it: its ``uri``, the storage
    options to open it with, and the ``name`` it is registered under (None
    for ``ctfile.`<uri>```)."""

    uri: str
    storage_options: dict | None = field(default=None, hash=False)
    name: str | None = None

    def table(self, spark: Any):
        """A :class:`ctfile.spark.CtfileTable` of it (the table must exist)."""
        from ctfile.spark.table import CtfileTable

        return CtfileTable.for_path(spark, self.uri, storage_options=self.storage_options)

    def read_options(self) -> dict[str, str]:
        opts = {"path": self.uri}
        if self.storage_options:
            opts["storageOptions"] = json.dumps(self.storage_options, sort_keys=True)
        return opts

    def __str__(self) -> str:
        return self.name or f"{CTFILE_SCHEMA}.`{self.uri}`"


class Names:
    """How a statement's table names resolve: ``ctfile.`<uri>``` with
    ``storage_options``, registered names through ``lookup`` (a session
    configuration getter: key -> value or None).

    Examples
    --------
    >>> import sqlglot
    >>> names = Names({"ctfile.sql.table.people": '{"uri": "s3://b/people"}'}.get)
    >>> table = lambda text: sqlglot.parse_one(f"SELECT * FROM {text}", dialect="spark").find(exp.Table)
    >>> names.resolve(table("ctfile.`/data/events`")), names.resolve(table("People"))
    (CtfileRef(uri='/data/events', storage_options=None, name=None), CtfileRef(uri='s3://b/people', storage_options=None, name='People'))
    >>> names.resolve(table("other")) is None, names.resolve(table("db.people")) is None
    (True, True)
    """

    def __init__(self, lookup: Callable[[str], str | None], storage_options: dict | None = None):
        self._lookup = lookup
        self.storage_options = storage_options

    @classmethod
    def of(cls, spark: Any, storage_options: dict | None = None) -> "Names":
        return cls(lambda key: spark.conf.get(key, None), storage_options)

    def resolve(self, table: exp.Table) -> CtfileRef | None:
        """The ctfile table ``table`` names, or None (not a ctfile table)."""
        if not isinstance(table.this, exp.Identifier) or table.args.get("catalog"):
            return None
        db = table.args.get("db")
        if db is not None:
            if db.name.lower() != CTFILE_SCHEMA:
                return None
            return CtfileRef(table.name, self.storage_options)
        raw = self._lookup(REGISTRY_PREFIX + table.name.lower())
        if raw is None:
            return None
        entry = json.loads(raw)
        return CtfileRef(entry["uri"], entry.get("storageOptions"), table.name)


def registration(name: str, uri: str, storage_options: dict | None) -> tuple[str, str]:
    """The session configuration key and value that register ``name``
    (read back by :meth:`Names.resolve`)."""
    entry = {"uri": uri, **({"storageOptions": storage_options} if storage_options else {})}
    return REGISTRY_PREFIX + name.lower(), json.dumps(entry)


# ---------------------------------------------------------------- reads

TABLE_CHANGES = "table_changes"
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


@dataclass(frozen=True)
class ReadView:
    """A temporary view of one read of a ctfile table: ``options`` (read
    options with literal values) and ``instants`` (timestamp options whose
    values are Spark SQL expressions, evaluated when the view is created)."""

    ref: CtfileRef
    options: tuple[tuple[str, str], ...] = ()
    instants: tuple[tuple[str, str], ...] = ()

    @property
    def is_registered_view(self) -> bool:
        """A plain read of a registered table: the view of its name."""
        return self.ref.name is not None and not self.options and not self.instants

    @property
    def name(self) -> str:
        if self.is_registered_view:
            return self.ref.name
        key = json.dumps([self.ref.read_options(), self.options, self.instants])
        return "ctfile_" + hashlib.sha256(key.encode()).hexdigest()[:16]

    def create(self, spark: Any) -> None:
        opts = {**self.ref.read_options(), **dict(self.options)}
        opts.update({k: instant(spark, sql) for k, sql in self.instants})
        spark.read.format("ctfile").options(**opts).load().createOrReplaceTempView(self.name)


def instant(spark: Any, sql: str) -> str:
    """The timestamp the Spark SQL expression ``sql`` evaluates to, as
    ISO-8601 in UTC (one query on the driver; a string is read in the
    session time zone, as Spark reads one).

    Raises
    ------
    InvalidArgumentError
        The expression is null.
    """
    micros = spark.sql(f"SELECT unix_micros(CAST(({sql}) AS TIMESTAMP)) AS us").first()[0]
    if micros is None:
        raise ctfile.InvalidArgumentError(f"the timestamp {sql} is null")
    return (_EPOCH + datetime.timedelta(microseconds=micros)).isoformat()


@dataclass(frozen=True)
class QueryPlan:
    """A query as ``spark.sql`` runs it: its ``text`` and the ``views`` to
    create first."""

    text: str
    views: tuple[ReadView, ...] = ()

    def dataframe(self, spark: Any) -> Any:
        for view in self.views:
            view.create(spark)
        return spark.sql(self.text)

    run = dataframe  # a query's result, as :func:`ctfile.spark.sql` returns it


def plan_query(tree: exp.Expression, names: Names, *, text: str | None = None) -> QueryPlan:
    """The plan of the query (or statement) ``tree``: its reads of ctfile
    tables become views; ``text``, when given, is what the user wrote, used
    as it is when no reference needs another name.

    Raises
    ------
    InvalidArgumentError, UnsupportedFeatureError
        A time travel or ``table_changes`` call ctfile cannot read.
    """
    views, renamed = [], False
    for table in list(tree.find_all(exp.Table)):
        view = read_of(table, names)
        if view is None:
            continue
        views.append(view)
        if not view.is_registered_view:
            table.replace(_view_table(table, view))
            renamed = True
    sql = tree.sql(dialect="spark") if renamed or text is None else text
    return QueryPlan(sql, tuple(dict.fromkeys(views)))


def read_of(table: exp.Table, names: Names) -> ReadView | None:
    """The read a table reference makes of a ctfile table, or None (a
    table ctfile does not own)."""
    if is_table_changes(table):
        return _changes_view(table.this, names)
    ref = names.resolve(table)
    if ref is None:
        return None
    version = table.args.get("version")
    return ReadView(ref) if version is None else travel_view(ref, version)


def is_table_changes(table: exp.Table) -> bool:
    return isinstance(table.this, exp.Anonymous) and table.this.name.lower() == TABLE_CHANGES


def _view_table(table: exp.Table, view: ReadView) -> exp.Table:
    """``table`` reading ``view``: the same alias (the table's own name
    when it had none, so that columns qualified by it still resolve),
    sample and hints."""
    new = table.copy()
    for arg in ("db", "catalog", "version"):
        new.set(arg, None)
    new.set("this", exp.to_identifier(view.name, quoted=True))
    if not table.args.get("alias") and isinstance(table.this, exp.Identifier):
        new.set("alias", exp.TableAlias(this=table.this.copy()))
    return new


def travel_view(ref: CtfileRef, version: exp.Version) -> ReadView:
    """The read of ``ref`` at the time travel ``version`` (``VERSION AS OF
    n`` or ``TIMESTAMP AS OF expr``; anything else is refused)."""
    kind, value = str(version.this).upper(), version.expression
    as_of = str(version.args.get("kind", "")).upper() == "AS OF"
    if not as_of or kind not in ("VERSION", "TIMESTAMP") or value is None:
        raise ctfile.UnsupportedFeatureError(
            f"time travel {version.sql(dialect='spark')} on {ref} is not supported: "
            f"use VERSION AS OF <integer> or TIMESTAMP AS OF <timestamp>"
        )
    if kind == "TIMESTAMP":
        return ReadView(ref, instants=(("timestampAsOf", value.sql(dialect="spark")),))
    return ReadView(ref, options=(("versionAsOf", str(_integer(value, what=f"VERSION AS OF of {ref}"))),))


def _changes_view(call: exp.Anonymous, names: Names) -> ReadView | None:
    """``table_changes('name', start[, end[, mode]])`` of a ctfile table
    (module docstring); None when ``name`` is no ctfile table."""
    args = call.expressions
    if not args or not _is_string(args[0]):
        return None
    ref = names.resolve(exp.to_table(args[0].this, dialect="spark"))
    if ref is None:
        return None
    if not 2 <= len(args) <= 4:
        raise ctfile.InvalidArgumentError(
            f"table_changes takes ('name', start[, end[, mode]]), found {len(args)} arguments: {call.sql(dialect='spark')}"
        )
    mode = _changes_mode(args[3]) if len(args) == 4 else ctfile.ChangeMode.DEFAULT
    versions, instants = _interval(args[1:3])
    return ReadView(ref, (("changes", mode.value), *versions), instants)


def _interval(bounds: list[exp.Expression]) -> tuple[tuple, tuple]:
    """The read options of ``table_changes``' start and end (a null end:
    the latest version): a version as an option, a timestamp as an instant
    (a SQL expression Spark evaluates)."""
    versions, instants = [], []
    for bound, arg in zip(("starting", "ending"), bounds):
        if bound == "ending" and isinstance(arg, exp.Null):
            continue
        if _is_string(arg):
            instants.append((f"{bound}Timestamp", arg.sql(dialect="spark")))
        else:
            versions.append((f"{bound}Version", str(_integer(arg, what=f"the {bound} version of table_changes"))))
    return tuple(versions), tuple(instants)


def _changes_mode(arg: exp.Expression) -> Any:
    """The mode argument of ``table_changes``: a string naming a :class:`ctfile.ChangeMode`."""
    if not _is_string(arg):
        raise ctfile.InvalidArgumentError(f"the mode of table_changes is a string, found {arg.sql(dialect='spark')}")
    return ctfile.ChangeMode.parse(arg.this, what="the mode of table_changes")


def _is_string(e: exp.Expression) -> bool:
    return isinstance(e, exp.Literal) and e.is_string


def _integer(e: exp.Expression, *, what: str) -> int:
    if isinstance(e, exp.Literal) and not e.is_string and e.this.isdigit():
        return int(e.this)
    raise ctfile.InvalidArgumentError(f"{what} must be a non-negative integer literal, found {e.sql(dialect='spark')}")
