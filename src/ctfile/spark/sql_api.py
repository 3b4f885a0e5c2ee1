"""SQL text on ctfile tables (docs/spark.md "SQL"): :func:`register` and :func:`sql`.

:func:`sql` parses a statement with sqlglot (dialect ``spark``) and runs a
statement that writes a ctfile table as the :class:`CtfileTable` call it is
(``UPDATE``, ``DELETE FROM``, ``INSERT``, ``RESTORE``:
:mod:`ctfile.spark.sql_statements`; ``MERGE INTO``:
:mod:`ctfile.spark.sql_merge`), returning its :class:`ctfile.CommitResult`.
A query that reads ctfile tables (time travel and ``table_changes``
included, :mod:`ctfile.spark.sql_reads`) runs in ``spark.sql`` over views of
them and returns its DataFrame; everything else is ``spark.sql(text)``
unchanged, which is also what happens to text sqlglot cannot parse (Spark
then reports what is wrong with it).

Spark has no ``RESTORE`` statement and sqlglot no parse of it: a text that
starts with the ``RESTORE`` keyword is split at its ``TO`` by sqlglot's
tokenizer, and the table with its time travel parsed as the table
reference of a query (Delta Lake's syntax ``RESTORE [TABLE] t [TO]
VERSION AS OF n | TIMESTAMP AS OF expr``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

import ctfile
from ctfile.spark.sql_merge import SqlMerge, plan_merge
from ctfile.spark.sql_reads import CTFILE_SCHEMA, CtfileRef, Names, ReadView, plan_query, registration
from ctfile.spark.sql_statements import (
    plan_delete, plan_insert, plan_restore, plan_update, resolve_target, target_table,
)

DIALECT = "spark"
_RESTORE_TRAVEL = {"TO", "VERSION", "TIMESTAMP"}
_SCHEMA_EVOLUTION = ["MERGE", "WITH", "SCHEMA", "EVOLUTION"]
_WRITES = {exp.Update: "UPDATE", exp.Delete: "DELETE", exp.Insert: "INSERT", exp.Merge: "MERGE"}


def register(spark: Any, name: str, uri: str, *, storage_options: dict | None = None) -> None:
    """Make the ctfile table at ``uri`` known as ``name`` in ``spark``'s
    session: readable by ``spark.sql`` (``SELECT ... FROM name``, a
    temporary view of ``spark.read.format("ctfile")``) and a table that
    :func:`sql` reads and writes (time travel and change reads too).

    The registration lasts as long as the Spark session (it lives in the
    session's configuration and temporary views, classic and Spark Connect
    alike) and is replaced by registering the name again. The view shows
    the version that was latest when it was made: :func:`register` and each
    statement of :func:`sql` that reads or writes the name make it again;
    a commit made otherwise (``CtfileTable``, ``ctfile.Table``, another
    process) is seen by ``spark.sql`` after the next of those.

    Raises
    ------
    InvalidArgumentError
        ``name`` is not a plain identifier (or is ``ctfile``).
    TableNotFoundError
        No ctfile table at ``uri``.
    """
    _check_name(name)
    ctfile.open_table(uri, storage_options=storage_options)  # exists, opens with these options
    key, value = registration(name, uri, storage_options)
    spark.conf.set(key, value)
    ReadView(CtfileRef(uri, storage_options, name)).create(spark)


def _check_name(name: Any) -> None:
    if not _is_plain_identifier(name) or name.lower() == CTFILE_SCHEMA:
        raise ctfile.InvalidArgumentError(
            f"a registered name is a plain identifier such as orders (not {CTFILE_SCHEMA}), found {name!r}"
        )


def _is_plain_identifier(name: Any) -> bool:
    """Whether ``name`` is a table name that is one unquoted identifier,
    written as Spark SQL reads it."""
    if not isinstance(name, str) or not name:
        return False
    try:
        parsed = sqlglot.parse_one(f"SELECT * FROM {name}", dialect=DIALECT).find(exp.Table)
    except ParseError:
        return False
    return (parsed is not None and isinstance(parsed.this, exp.Identifier) and not parsed.args.get("db")
            and not parsed.this.quoted and parsed.name == name)


def sql(spark: Any, text: str, *, storage_options: dict | None = None) -> Any:
    """Run the SQL statement ``text``; ctfile tables are named
    ``ctfile.`<uri>``` (opened with ``storage_options``) or by a name
    :func:`register` gave them.

    Returns
    -------
    ctfile.CommitResult or DataFrame
        The commit of a statement that writes a ctfile table (``MERGE
        INTO``, ``UPDATE``, ``DELETE FROM``, ``INSERT``, ``RESTORE``: one
        version, as the :class:`CtfileTable` call it is); the DataFrame of
        anything else (a query, or what ``spark.sql(text)`` returns).

    Raises
    ------
    UnsupportedFeatureError
        A statement on a ctfile table with a part ctfile does not run
        (named in the message); nothing is changed.
    InvalidArgumentError, SchemaMismatchError, ...
        As the statement's :class:`CtfileTable` call.
    """
    if not isinstance(text, str):
        raise ctfile.InvalidArgumentError(f"sql takes the statement's text, found {type(text).__name__}")
    plan = plan_statement(text, Names.of(spark, storage_options))
    return spark.sql(text) if plan is None else plan.run(spark)


def plan_statement(text: str, names: Names) -> Any:
    """The plan of ``text`` (an object with ``run(spark)``), or None: hand
    the text to ``spark.sql`` unchanged.

    Examples
    --------
    >>> names = Names({"ctfile.sql.table.orders": '{"uri": "/data/orders"}'}.get)
    >>> plan_statement("RESTORE TABLE orders TO VERSION AS OF 3", names)
    SqlRestore(target=CtfileRef(uri='/data/orders', storage_options=None, name='orders'), version=3, timestamp=None)
    >>> plan_statement("DELETE FROM other WHERE id = 1", names) is None
    True
    >>> plan_statement("DELETE FROM orders AS o WHERE o.id = 1", names)
    SqlDelete(target=CtfileRef(uri='/data/orders', storage_options=None, name='orders'), where='id = 1')
    """
    tokens = _tokens(text)
    if [t.text.upper() for t in tokens[:4]] == _SCHEMA_EVOLUTION and len(tokens) > 4:
        plan = plan_statement(text[:tokens[1].start] + text[tokens[4].start:], names)
        return replace(plan, schema_evolution=True) if isinstance(plan, SqlMerge) else None
    restore = _restore(text, tokens, names)
    if restore is not False:
        return restore
    tree = _one_statement(text, names)
    return None if tree is None else _plan_tree(tree, names, text)


def _one_statement(text: str, names: Names) -> exp.Expression | None:
    """The statement ``text`` holds, or None: not one Spark reads (hand it
    to ``spark.sql``). Several statements on ctfile tables are refused."""
    try:
        trees = [t for t in sqlglot.parse(text, dialect=DIALECT) if t is not None]
    except ParseError:
        return None
    if len(trees) == 1:
        return trees[0]
    if any(_ctfile_tables(t, names) for t in trees):
        raise ctfile.InvalidArgumentError(f"sql runs one statement at a time, found {len(trees)}")
    return None


def _plan_tree(tree: exp.Expression, names: Names, text: str) -> Any:
    kind = next((word for cls, word in _WRITES.items() if isinstance(tree, cls)), None)
    if kind is not None:
        table = target_table(tree)
        ref = None if table is None else resolve_target(table, names, kind)
        if ref is not None:
            return _plan_write(tree, ref, names)
    elif any(_is_statement_on(table, ref) for table, ref in _ctfile_tables(tree, names)):
        raise ctfile.UnsupportedFeatureError(
            f"{tree.key.upper()} on {CTFILE_SCHEMA}.`<uri>` is not supported: sql runs SELECT, INSERT, UPDATE, "
            f"DELETE FROM, MERGE INTO and RESTORE on ctfile tables"
        )
    plan = plan_query(tree, names, text=text)
    return plan if plan.views else None


def _plan_write(tree: exp.Expression, ref: CtfileRef, names: Names) -> Any:
    if isinstance(tree, exp.Update):
        return plan_update(tree, ref)
    if isinstance(tree, exp.Delete):
        return plan_delete(tree, ref)
    if isinstance(tree, exp.Insert):
        return plan_insert(tree, ref, names)
    return plan_merge(tree, ref, names)


def _ctfile_tables(tree: exp.Expression, names: Names) -> list[tuple[exp.Table, CtfileRef]]:
    """The references of ``tree`` to ctfile tables."""
    found = ((t, names.resolve(t)) for t in tree.find_all(exp.Table))
    return [(t, ref) for t, ref in found if ref is not None]


def _is_statement_on(table: exp.Table, ref: CtfileRef) -> bool:
    """Whether a statement other than a write is on ``ctfile.`<uri>``` (not
    a read inside a query, as in ``CREATE TABLE ... AS SELECT``): Spark
    cannot run it there. A registered name is Spark's view: left to it."""
    return ref.name is None and table.find_ancestor(exp.Query) is None


def _tokens(text: str) -> list:
    """sqlglot's tokens of ``text`` (none: text sqlglot cannot tokenize)."""
    try:
        return Dialect.get_or_raise(DIALECT).tokenize(text)
    except TokenError:  # not text ctfile plans
        return []


def _restore(text: str, tokens: list, names: Names) -> Any:
    """The plan of a ``RESTORE`` statement (``tokens``: the text's); None:
    a RESTORE of a table ctfile does not own (left to Spark); False: not a
    RESTORE.

    Raises
    ------
    UnsupportedFeatureError, InvalidArgumentError
        A RESTORE of a ctfile table that is not ``TO VERSION AS OF n`` or
        ``TO TIMESTAMP AS OF expr``.
    """
    parts = _restore_parts(text, tokens)
    if parts is None:
        return False
    table_text, travel_text = parts
    table = _parse_table(table_text)
    ref = None if table is None else names.resolve(table)
    if ref is None:
        return None
    table = _parse_table(f"{table_text} {travel_text}")
    if table is None:
        raise ctfile.UnsupportedFeatureError(
            f"RESTORE {ref} {travel_text} is not supported: write RESTORE TABLE t TO VERSION AS OF n "
            f"| TIMESTAMP AS OF expr"
        )
    return plan_restore(table, ref)


def _restore_parts(text: str, tokens: list) -> tuple[str, str] | None:
    """A RESTORE's table and time travel (the text after ``TO``), or None:
    not a RESTORE of a table."""
    if not tokens or tokens[0].text.upper() != "RESTORE":
        return None
    rest = _after_restore_table(tokens)
    cut = next((i for i, t in enumerate(rest) if _is_travel_word(t)), len(rest))
    if cut == 0:
        return None
    travel = rest[cut + 1:] if _is_to(rest, cut) else rest[cut:]
    return text[rest[0].start:rest[cut - 1].end + 1], text[travel[0].start:] if travel else ""


def _parse_table(text: str) -> exp.Table | None:
    """The table reference ``text`` (with its time travel), or None: not
    one table reference alone."""
    try:
        query = sqlglot.parse_one(f"SELECT * FROM {text}", dialect=DIALECT)
    except ParseError:
        return None
    tables = list(query.find_all(exp.Table))
    alone = {k for k, v in query.args.items() if v} == {"expressions", "from_"} and len(tables) == 1
    return tables[0] if alone else None


def _after_restore_table(tokens: list) -> list:
    """The tokens after ``RESTORE`` and its optional ``TABLE``."""
    return tokens[2:] if len(tokens) > 1 and tokens[1].token_type is TokenType.TABLE else tokens[1:]


def _is_to(tokens: list, i: int) -> bool:
    """Whether token ``i`` of ``tokens`` is there and is ``TO``."""
    return i < len(tokens) and tokens[i].text.upper() == "TO"


def _is_travel_word(token: Any) -> bool:
    return token.token_type not in (TokenType.IDENTIFIER, TokenType.STRING) and token.text.upper() in _RESTORE_TRAVEL

