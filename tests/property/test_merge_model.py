"""Random MERGE statements through ``Table.merge_builder`` against a model
of SPEC §Copy-on-write, MERGE (``merge_statements.run_model``).

Random small targets (nulls, repeated keys) spread over several
partitions, random sources (repeated and null keys), and random ordered
clauses of every kind with overlapping conditions over both sides and SET
values such as ``t.a + s.c``. After the statement the table must hold the
model's rows: every surviving or updated row under its old row id, an
unchanged row with its old row version, a changed or inserted one with the
new version, inserted rows under fresh row ids; the counts and the commit
decision must be the model's; the change scans in every mode (default,
append_only, audit; with change capture on or off, captured rows checked
against the partitions) must be the model's difference; and where the
model says a table row is matched twice and updated, the statement must
raise ``InvalidArgumentError`` and leave the table as it was.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from change_checks import scan_rows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from merge_statements import SOURCE_ROWS, SOURCE_SCHEMA, TARGET_ROWS, TARGET_SCHEMA, MultipleMatch, run_model
from merge_statements import statements, table_of

import ctfile

USER = TARGET_SCHEMA.names
ACTION, ISUPDATE = "METADATA$ACTION", "METADATA$ISUPDATE"


def _files(root: str) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in Path(root).rglob("*") if p.is_file()}


def _setup(root: str, target: list[dict], capture: bool) -> tuple[ctfile.Table, list[int]]:
    props = {"ctfile.changeCapture": "before_after"} if capture else None
    t = ctfile.create_table(root, TARGET_SCHEMA, partition_rows=3, properties=props)
    ids: list[int] = []
    if target:
        t.insert(table_of(target, TARGET_SCHEMA))
        got = t.to_arrow(include_hidden=True).to_pylist()  # one insert, no clustering: in row order
        assert [{c: r[c] for c in USER} for r in got] == target
        ids = [r[ctfile.ROW_ID_COLUMN] for r in got]
    return t, ids


def _expected_changes(outcome, target: list[dict]) -> Counter:
    """The minimum delta of the statement: (action, isupdate, values)."""
    out = Counter()
    for old, new, changed in zip(target, outcome.rows, outcome.changed):
        if new is None:
            out[("DELETE", False, tuple(old[c] for c in USER))] += 1
        elif changed:
            out[("DELETE", True, tuple(old[c] for c in USER))] += 1
            out[("INSERT", True, tuple(new[c] for c in USER))] += 1
    for row in outcome.inserted:
        out[("INSERT", False, tuple(row[c] for c in USER))] += 1
    return out


def _changes(t: ctfile.Table, version: int, mode: str) -> Counter:
    rows = scan_rows(t, mode, start_version=version, end_version=version, information=mode)
    return Counter((r[ACTION], r[ISUPDATE], tuple(r[c] for c in USER)) for r in rows)


def _check_snapshot(t: ctfile.Table, outcome, target: list[dict], ids: list[int], version: int) -> None:
    got = {r[ctfile.ROW_ID_COLUMN]: r for r in t.to_arrow(include_hidden=True).to_pylist()}
    for rid, old, new, changed in zip(ids, target, outcome.rows, outcome.changed):
        if new is None:
            assert rid not in got, (rid, old)
            continue
        row = got.pop(rid)
        assert {c: row[c] for c in USER} == new, (rid, old, new)
        assert row[ctfile.ROW_VERSION_COLUMN] == (version if changed else 1), (rid, old, new)
    # What is left was inserted: fresh row ids, the new version.
    assert all(rid not in ids for rid in got)
    assert Counter(tuple(r[c] for c in USER) for r in got.values()) == \
        Counter(tuple(r[c] for c in USER) for r in outcome.inserted)
    assert {r[ctfile.ROW_VERSION_COLUMN] for r in got.values()} <= {version}


def check_statement(stmt, target: list[dict], source: list[dict], capture: bool) -> None:
    root = tempfile.mkdtemp(prefix="ctfile-merge-model-")
    try:
        t, ids = _setup(root, target, capture)
        before, version = _files(root), t.version
        builder = stmt.builder(t, table_of(source, SOURCE_SCHEMA))
        try:
            outcome = run_model(stmt, target, source)
        except MultipleMatch as e:
            with pytest.raises(ctfile.InvalidArgumentError, match=f"{e.count} source rows match the table row"):
                builder.execute()
            assert _files(root) == before
            return
        r = builder.execute()
        assert (r.num_inserted_rows, r.num_updated_rows, r.num_deleted_rows) == outcome.counts, stmt
        assert r.committed == any(outcome.changed) or bool(outcome.inserted)
        if not r.committed:
            assert t.version == version and _files(root) == before
            return
        _check_snapshot(t, outcome, target, ids, r.version)
        want = _expected_changes(outcome, target)
        assert _changes(t, r.version, "default") == want
        assert _changes(t, r.version, "audit") == want
        inserted = Counter(k for k in want.elements() if k[:2] == ("INSERT", False))
        assert _changes(t, r.version, "append_only") == inserted
    finally:
        shutil.rmtree(root, ignore_errors=True)


CASES = dict(stmt=statements(), target=TARGET_ROWS, source=SOURCE_ROWS, capture=st.booleans())
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(max_examples=30, **SETTINGS)
@given(**CASES)
def test_merge_builder_matches_the_model(stmt, target, source, capture):
    check_statement(stmt, target, source, capture)


@pytest.mark.long
@settings(max_examples=600, **SETTINGS)
@given(**CASES)
def test_merge_builder_matches_the_model_long(stmt, target, source, capture):
    check_statement(stmt, target, source, capture)


def test_a_statement_renders_as_spark_sql():
    """The generator's statements render as Spark SQL text too (for the
    Spark and SQL front ends' differential tests)."""
    from merge_statements import Add, Clause, Cmp, Col, IsNull, Lit, Logic, Not, Statement

    from ctfile import MatchKind, MergeAction

    stmt = Statement((
        Clause(MatchKind.MATCHED, MergeAction.DELETE, Cmp("==", Col("s", "op"), Lit("d"))),
        Clause(MatchKind.MATCHED, MergeAction.UPDATE, None, (("a", Add(Col("t", "a"), Col("s", "c", False))),)),
        Clause(MatchKind.NOT_MATCHED, MergeAction.INSERT, Not(IsNull(Col("s", "k"))), (("k", Col("s", "k")), ("b", Lit(None)))),
        Clause(MatchKind.NOT_MATCHED_BY_SOURCE, MergeAction.DELETE,
               Logic("OR", Cmp(">", Col("t", "a"), Lit(1)), Cmp("!=", Col("t", "b"), Lit("x")))),
    ), on_condition=Cmp(">=", Col("s", "a"), Col("t", "a")))
    assert stmt.to_sql("ctfile.`/t`", "src") == (
        "MERGE INTO ctfile.`/t` t USING src s ON t.k = s.k AND (s.a >= t.a) "
        "WHEN MATCHED AND (s.op = 'd') THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET a = (t.a + c) "
        "WHEN NOT MATCHED AND (NOT (s.k IS NULL)) THEN INSERT (k, b) VALUES (s.k, NULL) "
        "WHEN NOT MATCHED BY SOURCE AND ((t.a > 1) OR (t.b <> 'x')) THEN DELETE"
    )
