"""Changing a derived table's definition, the storage side (SPEC §Derived
tables, changing a definition): the ``ALTER DERIVED`` commit of
``WriteTransaction.alter_derived`` (mode and lag only, no rows, the frontier
kept, not a refresh, in conflict with a concurrent refresh either way), a
replace as one ``REINITIALIZE`` refresh whose schema is replaced, and what
``verify`` accepts."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

import ctfile
from ctfile.format.paths import commit_path
sys.path.insert(0, str(Path(__file__).resolve().parent))
from derived_support import definition, frontier, full_refresh, make_pair, refresh_info  # noqa: E402


@pytest.fixture
def refreshed(tmp_path):
    source, derived = make_pair(tmp_path)
    full_refresh(derived, source)
    return source, derived


def _entry(t: ctfile.Table, version: int) -> list[dict]:
    return [json.loads(line) for line in t.log.storage.read_bytes(commit_path(version)).decode().splitlines()]


def _alter(t: ctfile.Table, **kw) -> ctfile.CommitResult:
    with t.transaction() as tx:
        tx.alter_derived(**kw)
    return tx.result


def test_an_alter_commit_holds_only_the_new_mode_and_lag(refreshed):
    source, derived = refreshed
    before, rows = derived.derived, derived.to_arrow(include_hidden=True)
    result = _alter(derived, refresh_mode="full", target_lag=None)
    assert result.committed and result.version == 2
    actions = _entry(derived, 2)
    assert sorted(k for a in actions for k in a) == ["commitInfo", "metadata"]
    (info,) = [a["commitInfo"] for a in actions if "commitInfo" in a]
    assert (info["operation"], info["dataChange"], info["operationParameters"]) == (
        "ALTER DERIVED", False, {"refreshMode": "full", "targetLag": None})
    assert "refresh" not in info and info["isBlindAppend"] is False
    d = derived.refresh().derived
    assert (d.refresh_mode, d.target_lag) == (ctfile.RefreshMode.FULL, None)
    assert d == before.altered(refresh_mode="full", target_lag=None) and d.frontier == before.frontier
    assert derived.to_arrow(include_hidden=True).equals(rows)
    assert derived.history(limit=1)[0].refresh is None
    assert ctfile.verify_table(derived.uri, all_versions=True).healthy


def test_an_alter_that_changes_nothing_commits_nothing(refreshed):
    source, derived = refreshed
    d = derived.derived
    result = _alter(derived, refresh_mode=d.refresh_mode, target_lag=d.target_lag)
    assert not result.committed and derived.refresh().version == 1


@pytest.mark.parametrize("kw, error, match", [
    ({"refresh_mode": "sometimes", "target_lag": None}, ctfile.InvalidArgumentError, "refreshMode"),
    ({"refresh_mode": "full", "target_lag": ""}, ctfile.InvalidArgumentError, "targetLag"),
    ({"refresh_mode": "full", "target_lag": 5}, ctfile.InvalidArgumentError, "targetLag"),
])
def test_alter_refuses_bad_values_and_writes_nothing(refreshed, kw, error, match):
    source, derived = refreshed
    with pytest.raises(error, match=match):
        _alter(derived, **kw)
    assert derived.refresh().version == 1


def test_alter_is_the_only_statement_of_its_transaction(refreshed):
    source, derived = refreshed
    with pytest.raises(ctfile.DerivedTableError, match="not derived"):
        _alter(source, refresh_mode="full", target_lag=None)
    with pytest.raises(ctfile.InvalidArgumentError, match="only statement"):
        with derived.transaction(refresh=refresh_info(source, "NO_DATA", 0, 0, data_timestamp=5)) as tx:
            tx.alter_derived(refresh_mode="full", target_lag=None)
    with derived.transaction() as tx:
        tx.alter_derived(refresh_mode="auto", target_lag="1 hour")
        with pytest.raises(ctfile.InvalidArgumentError):
            tx.insert(pa.table({"id": [9], "v": ["z"]}))
        with pytest.raises(ctfile.DerivedTableError):
            tx.evolve_schema(lambda e: e.add_column("q", pa.int8()))
    assert derived.refresh().version == 2 and derived.to_arrow().num_rows == 4


def test_alter_and_refresh_conflict_in_either_order(refreshed):
    source, derived = refreshed
    source.insert(pa.table({"id": [5], "v": ["e"]}))
    refresh = derived.transaction(refresh=refresh_info(source, "NO_DATA", 0, 0, data_timestamp=7))
    _alter(ctfile.open_table(derived.uri), refresh_mode="full", target_lag=None)
    with pytest.raises(ctfile.CommitConflictError):
        refresh.commit()
    alter = ctfile.open_table(derived.uri).transaction()
    alter.alter_derived(refresh_mode="auto", target_lag=None)
    with derived.transaction(refresh=refresh_info(source, "NO_DATA", 0, 0, data_timestamp=8)):
        pass
    with pytest.raises(ctfile.CommitConflictError):
        alter.commit()
    d = derived.refresh().derived
    assert d.refresh_mode is ctfile.RefreshMode.FULL and d.frontier == frontier(source) and d.data_timestamp == 8


def test_a_replace_refresh_replaces_the_schema_with_new_derivation_columns(refreshed):
    source, derived = refreshed
    key_id = derived.schema_at().field("_ct_dt_key").id
    new = ctfile.DerivedDefinition("SELECT v, count(*) AS n FROM src GROUP BY v", definition(source).sources,
                                   "auto", None, 1, ("_ct_dt_key", "_ct_dt_rows"))
    schema = pa.schema([("v", pa.string()), ("n", pa.int64()), pa.field("_ct_dt_key", pa.string(), nullable=False),
                        ("_ct_dt_rows", pa.int64())])
    rows = pa.table({"v": ["a", "b", "c", "d"], "n": [1, 1, 1, 1], "_ct_dt_key": ["a", "b", "c", "d"],
                     "_ct_dt_rows": [1, 1, 1, 1]}, schema=schema)
    with pytest.raises(ctfile.SchemaMismatchError, match="reserved"):  # outside a refresh: no _ct_dt_ columns
        with ctfile.create_table(str(Path(source.uri).parent / "plain"), pa.schema([("x", pa.int8())])).transaction() as tx:
            tx.replace_schema(schema)
    with derived.transaction(refresh=refresh_info(source, "REINITIALIZE", 4, 8), refresh_definition=new) as tx:
        tx.replace_schema(schema)
        tx.truncate()
        tx.insert(rows)
    assert derived.schema.names == ["v", "n"] and derived.schema_at().field("_ct_dt_key").id == key_id
    assert derived.derived.query == new.query and derived.to_arrow().sort_by("v").equals(rows.select(["v", "n"]))
    assert derived.snapshot(1).to_arrow().column_names == ["id", "v"]
    assert ctfile.verify_table(derived.uri, all_versions=True).healthy


def test_verify_reports_a_definition_changed_outside_a_refresh_or_an_alter(refreshed):
    source, derived = refreshed
    with derived.transaction(operation="ALTER DERIVED") as tx:  # the operation, but a query change
        tx.data_change = False
        tx.set_metadata(replace(tx.metadata, derived=replace(tx.metadata.derived, query="SELECT v FROM src")))
    problems = [p.message for p in ctfile.verify_table(derived.uri, all_versions=True).problems]
    assert problems == [
        "ALTER DERIVED changed metadata.derived outside a refresh commit; expected the definition read, or an "
        "ALTER DERIVED commit changing only refreshMode and targetLag (SPEC §Derived tables)"]
