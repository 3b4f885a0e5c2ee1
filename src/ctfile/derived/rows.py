"""Row-level rules (SPEC §Derived tables, "Incremental rules"): projection,
filter, inner joins and UNION ALL (a branch with outer, semi or anti joins
is :mod:`ctfile.derived.outer_joins`'s, its delta added to the others').

Each result row's derivation key ``_ct_dt_key`` is the ``:``-joined
``METADATA$ROW_ID`` of the source rows it came from, one per table
occurrence in FROM/JOIN order (a UNION ALL branch prefixes ``b<i>``). Row
ids are hex strings, so the separator makes the key unambiguous whatever
their width, and a key names one combination of source rows.

The delta of a block of occurrences X1..Xn is the telescoping sum
Σi X1'..X(i-1)' ⋈ ΔXi ⋈ X(i+1)..Xn (new states before i, old after).
Event ``_ct_ord = 2*i + (1 for an INSERT, 0 for a DELETE)`` orders each
key's events along the telescoping path X_old -> ... -> X_new, so the
key exists in the new result iff its last event is an INSERT (its image is
the new row), and existed in the old result iff its first event is a
DELETE. The source keeps one row per key: 'upsert' (last event INSERT) or
'delete' (first and last DELETE); keys that neither existed nor exist
(transient intermediate rows) are dropped, so a delete always names an
existing row.

Examples
--------
>>> from ctfile.derived import compile_query, SourceViews, ViewNames
>>> plan = compile_query("SELECT id, v FROM s WHERE v > 0", sources=("s",))
>>> sql = plan.full(SourceViews({"s": ViewNames("n", "o", "d")}), data_timestamp_ms=0).source_sql
>>> sql
"SELECT id AS `id`, v AS `v`, CONCAT_WS(':', `s`.`METADATA$ROW_ID`) AS `_ct_dt_key` FROM `n` AS s WHERE v > 0"
"""

from __future__ import annotations

from ctfile.derived import outer_joins
from ctfile.derived.model import KEY_COLUMN, OP_COLUMN, RefreshSql, SourceViews
from ctfile.derived.planning import Block
from ctfile.derived.render import (
    ACTION, ROW_ID, block_sql, column, quote, telescoped, union_all, upsert_clauses,
)

#: The hidden columns of a row-level plan.
HIDDEN = ((KEY_COLUMN, "string"),)


def _key(block: Block, branch: int | None) -> str:
    if block.join_keys is not None:
        return outer_joins.row_key(block, branch)
    parts = ([f"'b{branch}'"] if branch is not None else []) + [column(alias, ROW_ID) for _, alias in block.occurrences]
    return f"CONCAT_WS(':', {', '.join(parts)}) AS {quote(KEY_COLUMN)}"


def _items(block: Block) -> list[str]:
    return [item.sql(dialect="spark") for item in block.select.expressions]


def _branch(blocks: tuple[Block, ...], i: int) -> int | None:
    return i if len(blocks) > 1 else None


def full_sql(blocks: tuple[Block, ...], views: SourceViews, outputs: tuple[str, ...], *, ms: int) -> RefreshSql:
    """The whole result at the new state, keyed; merged with
    update-when-different, insert and NOT MATCHED BY SOURCE delete."""
    parts = []
    for i, block in enumerate(blocks):
        new = [views[source].new for source, _ in block.occurrences]
        parts.append(block_sql(block.select, new, _items(block) + [_key(block, _branch(blocks, i))], ms=ms))
    sql = parts[0] if len(parts) == 1 else union_all(parts)
    return RefreshSql(sql, upsert_clauses(outputs, by_source_delete=True))


def _terms(block: Block, views: SourceViews, branch: int | None, *, ms: int) -> list[str]:
    def view_of(source: str, state: str) -> str:
        return getattr(views[source], state)

    terms = []
    for i, (_, alias) in enumerate(block.occurrences):
        order = f"({2 * i} + CASE WHEN {column(alias, ACTION)} = 'INSERT' THEN 1 ELSE 0 END) AS `_ct_ord`"
        items = _items(block) + [_key(block, branch), order]
        terms.append(block_sql(block.select, telescoped(block.occurrences, view_of, i), items, ms=ms))
    return terms


def delta_sql(blocks: tuple[Block, ...], views: SourceViews, outputs: tuple[str, ...], *, ms: int) -> RefreshSql:
    """The consolidated delta: one row per changed key with ``_ct_dt_op``;
    a block with outer, semi or anti joins adds its keyed delta
    (:mod:`ctfile.derived.outer_joins`; keys differ by branch)."""
    plain = [t for i, b in enumerate(blocks) if b.join_keys is None for t in _terms(b, views, _branch(blocks, i), ms=ms)]
    keyed = [outer_joins.delta_select(b, views, outputs, _branch(blocks, i), ms=ms)
             for i, b in enumerate(blocks) if b.join_keys is not None]
    parts = [_consolidated(plain, outputs)] if plain else []
    parts += [f"SELECT * FROM ({sql}) AS `_ct_k{i}`" if parts or i else sql for i, sql in enumerate(keyed)]
    return RefreshSql("\nUNION ALL\n".join(parts), upsert_clauses(outputs, by_source_delete=False), (OP_COLUMN,))


def _consolidated(terms: list[str], outputs: tuple[str, ...]) -> str:
    key = quote(KEY_COLUMN)
    names = ", ".join(quote(o) for o in outputs)
    return (
        f"WITH `_ct_d` AS ({union_all(terms)}),\n"
        f"`_ct_r` AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY {key} ORDER BY `_ct_ord` DESC) AS `_ct_last`, "
        f"MIN(`_ct_ord`) OVER (PARTITION BY {key}) AS `_ct_first` FROM `_ct_d`)\n"
        f"SELECT {names}, {key}, CASE WHEN `_ct_ord` % 2 = 1 THEN 'upsert' ELSE 'delete' END AS {quote(OP_COLUMN)} "
        f"FROM `_ct_r` WHERE `_ct_last` = 1 AND (`_ct_ord` % 2 = 1 OR `_ct_first` % 2 = 0)"
    )
