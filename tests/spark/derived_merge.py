"""A small MERGE interpreter for the compiler's differential tests: applies
a :class:`ctfile.derived.RefreshSql` to an in-memory derived table with
Spark evaluating the clause conditions and SET/VALUES expressions over the
two sides (``t``: the table, ``s``: the source), joined on ``_ct_dt_key``.
It follows the MERGE semantics the executor relies on (first matching
clause wins; matched rows without a clause are kept) and reports what it did
so the tests can check the invariants (one source row per key, no delete of
a missing key, no update that changes nothing)."""

from __future__ import annotations

from dataclasses import dataclass

from ctfile.derived import KEY_COLUMN, OP_COLUMN, ClauseKind, RefreshSql

#: The view of the table before the MERGE, registered before the source
#: query is analysed: a refresh's ``SourceViews(target=TABLE_VIEW)``.
TABLE_VIEW = "_merge_t"

_MATCHED = {ClauseKind.MATCHED_UPDATE: "m", ClauseKind.MATCHED_DELETE: "m",
            ClauseKind.NOT_MATCHED_INSERT: "n", ClauseKind.NOT_MATCHED_BY_SOURCE_DELETE: "b"}
_SIDE = {"m": "t.`{k}` IS NOT NULL AND s.`{k}` IS NOT NULL", "n": "t.`{k}` IS NULL", "b": "s.`{k}` IS NULL"}


@dataclass
class MergeStats:
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    noop_updates: int = 0
    source_rows: int = 0
    duplicate_keys: int = 0
    deletes_of_missing_keys: int = 0

    @property
    def changes(self) -> int:
        return self.inserted + self.updated + self.deleted


def _clause_index(refresh: RefreshSql) -> str:
    whens = []
    for i, clause in enumerate(refresh.clauses):
        side = _SIDE[_MATCHED[clause.kind]].format(k=KEY_COLUMN)
        cond = f" AND ({clause.condition})" if clause.condition else ""
        whens.append(f"WHEN {side}{cond} THEN {i}")
    return "CASE " + " ".join(whens) + " END"


def _column(refresh: RefreshSql, name: str, dtype: str, chosen: str) -> str:
    cases = []
    for i, clause in enumerate(refresh.clauses):
        values = dict(clause.assignments)
        if clause.kind is ClauseKind.MATCHED_UPDATE and name in values:
            cases.append(f"WHEN {i} THEN {values[name]}")
        elif clause.kind is ClauseKind.NOT_MATCHED_INSERT:
            cases.append(f"WHEN {i} THEN {values.get(name, 'NULL')}")
    body = f"CASE {chosen} {' '.join(cases)} ELSE t.`{name}` END" if cases else f"t.`{name}`"
    return f"CAST({body} AS {dtype}) AS `{name}`"


def apply_merge(spark, table_rows: list[dict], schema, refresh: RefreshSql) -> tuple[list[dict], MergeStats]:
    """``(rows after the MERGE, stats)``; ``schema`` is the derived table's
    (visible + derivation columns), ``table_rows`` its rows before."""
    stats = MergeStats()
    spark.createDataFrame([tuple(r[f.name] for f in schema.fields) for r in table_rows], schema) \
        .createOrReplaceTempView(TABLE_VIEW)
    source = spark.sql(refresh.source_sql)
    source.createOrReplaceTempView("_merge_s")
    op = f"s.`{OP_COLUMN}`" if OP_COLUMN in source.columns else "NULL"
    chosen = _clause_index(refresh)
    columns = ", ".join(_column(refresh, f.name, f.dataType.simpleString(), chosen) for f in schema.fields)
    # One job: the merged rows plus what the invariant checks need of the source.
    sql = (f"SELECT {chosen} AS `_cl`, t.`{KEY_COLUMN}` IS NOT NULL AS `_ht`, s.`{KEY_COLUMN}` IS NOT NULL AS `_hs`, "
           f"COUNT(s.`{KEY_COLUMN}`) OVER (PARTITION BY s.`{KEY_COLUMN}`) AS `_sn`, {op} AS `_op`, {columns} "
           f"FROM {TABLE_VIEW} t FULL OUTER JOIN _merge_s s ON t.`{KEY_COLUMN}` = s.`{KEY_COLUMN}`")
    before = {r[KEY_COLUMN]: r for r in table_rows}
    after = []
    for row in spark.sql(sql).collect():
        d = row.asDict()
        clause = refresh.clauses[d.pop("_cl")] if d["_cl"] is not None else None
        had, has_source, per_key, op = d.pop("_ht"), d.pop("_hs"), d.pop("_sn"), d.pop("_op")
        stats.source_rows += has_source
        stats.duplicate_keys += per_key > 1
        stats.deletes_of_missing_keys += op == "delete" and not had
        if clause is None:
            if had:
                after.append(before[d[KEY_COLUMN]])
            continue
        if clause.kind in (ClauseKind.MATCHED_DELETE, ClauseKind.NOT_MATCHED_BY_SOURCE_DELETE):
            stats.deleted += 1
        elif clause.kind is ClauseKind.NOT_MATCHED_INSERT:
            stats.inserted += 1
            after.append(d)
        else:
            stats.updated += 1
            stats.noop_updates += d == before[d[KEY_COLUMN]]
            after.append(d)
    return after, stats
