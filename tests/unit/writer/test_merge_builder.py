"""``Table.merge_builder`` (SPEC §Copy-on-write, MERGE): typed errors for
every bad input, leaving the table as it was; what a statement records;
the same builder in a transaction; schema evolution; a distributed
rewrite of mixed deletes and updates (``RewriteJob``). Random statements
against a model are in tests/property/test_merge_model.py; the five
pipeline patterns in tests/objectstore/test_merge_patterns.py.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile import InvalidArgumentError, SchemaMismatchError

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string()), ("n", pa.int64())])
S, T = pc.field("s.n"), pc.field("t.n")


@pytest.fixture
def table(tmp_path):
    """Version 1: ids 1..6 (v "a".."f", n = 10 id) in two partitions."""
    t = ctfile.create_table(tmp_path / "t", SCHEMA, partition_rows=3)
    t.insert(pa.table({"id": [1, 2, 3, 4, 5, 6], "v": list("abcdef"), "n": [10, 20, 30, 40, 50, 60]}, schema=SCHEMA))
    return t


def _source(ids, n=None, **extra) -> pa.Table:
    cols = {"id": pa.array(ids, pa.int64()), "n": pa.array(n if n is not None else [0] * len(ids), pa.int64())}
    cols.update({k: pa.array(v) for k, v in extra.items()})
    return pa.table(cols)


def _rows(t: ctfile.Table) -> dict[int, tuple]:
    return {r["id"]: (r["v"], r["n"]) for r in t.to_arrow().to_pylist()}


# ---------------------------------------------------------------- bad input


def _builder(t, source=None, **kw):
    return t.merge_builder(_source([1, 9]) if source is None else source, on="id", **kw)


BAD_STATEMENTS = [
    # wrong side: a NOT MATCHED clause sees the source only, NOT MATCHED BY SOURCE the table only
    (lambda b: b.when_not_matched_insert({"id": pc.field("s.id"), "n": T}), SchemaMismatchError,
     r"names 't.n', a column of the target, which it does not see \(it sees the source\)"),
    (lambda b: b.when_not_matched_by_source_delete(condition=S > 1), SchemaMismatchError,
     r"names 's.n', a column of the source, which it does not see \(it sees the target\)"),
    (lambda b: b.when_matched_update({"n": pc.field("n") + 1}), SchemaMismatchError,
     r"names 'n', which both sides have: write t.n or s.n"),
    # unknown columns
    (lambda b: b.when_matched_update({"nope": S}), SchemaMismatchError, r"sets unknown column 'nope'"),
    (lambda b: b.when_matched_delete(condition=pc.field("s.nope") > 1), SchemaMismatchError, "nope"),
    (lambda b: b.when_matched_update({"s.n": S}), SchemaMismatchError, r"sets unknown column 's.n'"),
    # a value that does not fit, a null for a non-nullable column, an insert leaving one out
    (lambda b: b.when_matched_update({"n": pc.field("s.id").cast(pa.string())}), SchemaMismatchError,
     "has type string, expected int64"),
    (lambda b: b.when_matched_update({"v": 3.5}), SchemaMismatchError, "does not fit column type string"),
    (lambda b: b.when_matched_update({"id": None}), SchemaMismatchError, "'id' is not nullable"),
    (lambda b: b.when_not_matched_insert({"v": "x"}), SchemaMismatchError, r"column 'id' \(long, not null\) is missing"),
    # a condition that is not boolean
    (lambda b: b.when_matched_delete(condition=pc.field("s.n") + 1), SchemaMismatchError, "does not fit"),
]


@pytest.mark.parametrize("build, err, match", BAD_STATEMENTS)
def test_a_bad_statement_is_refused_when_it_executes(table, file_tree, build, err, match):
    before = file_tree(table.storage.root)
    builder = build(_builder(table))
    with pytest.raises(err, match=match):
        builder.execute()
    assert file_tree(table.storage.root) == before


BAD_CLAUSES = [
    (lambda b: b.when_matched_delete(condition="s.n > 1"), "must be a pyarrow.compute.Expression"),
    (lambda b: b.when_matched_update({}), "non-empty mapping"),
    (lambda b: b.when_matched_update("n = 1"), "non-empty mapping"),
    (lambda b: b.when_not_matched_insert([("id", 1)]), "non-empty mapping"),
    (lambda b: b.when_matched_delete().when_matched_update({"n": S}), "can never apply: it follows WHEN MATCHED THEN DELETE"),
    (lambda b: b.when_not_matched_insert_all().when_not_matched_insert_all(condition=S > 0), "can never apply"),
    (lambda b: b.when_not_matched_by_source_delete().when_not_matched_by_source_delete(), "can never apply"),
]


@pytest.mark.parametrize("build, match", BAD_CLAUSES)
def test_a_bad_clause_is_refused_when_it_is_added(table, build, match):
    with pytest.raises(InvalidArgumentError, match=match):
        build(_builder(table))


@pytest.mark.parametrize("kwargs, match", [
    ({"on": []}, "key columns"),
    ({"on": 3}, "key columns"),
    ({"on": ["id", "id"]}, "names a table column twice"),
    ({"on": "id", "source_alias": "t"}, "must differ"),
    ({"on": "id", "target_alias": "a.b"}, "without '.'"),
    ({"on": "id", "on_condition": "t.n = s.n"}, "on_condition must be a pyarrow.compute.Expression"),
])
def test_bad_merge_builder_arguments(table, kwargs, match):
    with pytest.raises(InvalidArgumentError, match=match):
        table.merge_builder(_source([1]), **kwargs)


def test_actions_a_kind_does_not_take_are_refused():
    """The builder has no method for them; the statement objects refuse them."""
    with pytest.raises(InvalidArgumentError, match="WHEN NOT MATCHED BY SOURCE cannot INSERT"):
        ctfile.MergeClause(ctfile.MatchKind.NOT_MATCHED_BY_SOURCE, ctfile.MergeAction.INSERT_ALL)
    with pytest.raises(InvalidArgumentError, match="WHEN MATCHED cannot INSERT"):
        ctfile.MergeClause(ctfile.MatchKind.MATCHED, ctfile.MergeAction.INSERT, assignments=(("n", 1),))
    with pytest.raises(InvalidArgumentError, match="assigns \\['n'\\] more than once"):
        ctfile.MergeClause(ctfile.MatchKind.MATCHED, ctfile.MergeAction.UPDATE, assignments=(("n", 1), ("n", 2)))
    with pytest.raises(InvalidArgumentError, match="at least one WHEN clause"):
        ctfile.MergeStatement(keys=(("id", "id"),), clauses=())


@pytest.mark.parametrize("source, match", [
    (_source([1], id2=[1]).drop_columns(["id"]), "merge key 'id' is missing from the source"),
    (_source([1]).append_column(ctfile.ROW_ID_COLUMN, pa.array([1])), "hidden columns"),
])
def test_bad_sources(table, file_tree, source, match):
    before = file_tree(table.storage.root)
    with pytest.raises(SchemaMismatchError, match=match):
        table.merge_builder(source, on="id").when_matched_delete().execute()
    assert file_tree(table.storage.root) == before


def test_a_row_matched_twice_and_updated_is_refused_before_any_file_is_written(table, file_tree):
    """Two source rows of key 2: updating the row is an error naming the
    key, even though the first partition (ids 1..3) is rewritten for key 1
    before or after; deleting it is not."""
    before = file_tree(table.storage.root)
    source = _source([1, 2, 2], [7, 8, 9])
    with pytest.raises(InvalidArgumentError, match=r"2 source rows match the table row with key \{'id': 2\}"):
        table.merge_builder(source, on="id").when_matched_update({"n": S}).execute()
    assert file_tree(table.storage.root) == before
    # One pair falling to no clause does not make the other's update allowed ...
    with pytest.raises(InvalidArgumentError, match="WHEN MATCHED AND \\(s.n != 8\\) THEN UPDATE SET n = s.n applies"):
        table.merge_builder(source, on="id").when_matched_update({"n": S}, condition=S != 8).execute()
    # ... an ON condition that leaves one pair does.
    r = table.merge_builder(source, on="id", on_condition=S != 8).when_matched_update({"n": S}).execute()
    assert r.num_updated_rows == 2 and _rows(table)[2] == ("b", 9)
    # Every pair deletes, or falls to no clause: allowed, the row is deleted once.
    r = table.merge_builder(source, on="id").when_matched_delete(condition=S > 7).execute()
    assert r.num_deleted_rows == 1 and 2 not in _rows(table)


def test_execution_errors_leave_nothing_behind(table, file_tree):
    before = file_tree(table.storage.root)
    overflow = pc.multiply_checked(pc.field("t.n"), pc.scalar(2**62))
    with pytest.raises(InvalidArgumentError, match="overflow"):
        table.merge_builder(_source([1, 4]), on="id").when_matched_update({"n": overflow}).execute()
    assert file_tree(table.storage.root) == before


def test_an_insert_refused_after_the_rewrites_leaves_no_part_of_the_statement(table, file_tree):
    """The inserted rows are checked only once the matches are known, after
    the partitions were rewritten: a null for the non-nullable ``id`` then
    discards the rewrites too, in a statement of its own and in a
    transaction that goes on after the error."""
    source = pa.table({"id": [1, 7], "n": [0, 0], "new_id": pa.array([1, None], pa.int64())})

    def builder(b):
        return b.when_matched_delete().when_not_matched_insert({"id": pc.field("new_id")})

    before = file_tree(table.storage.root)
    with pytest.raises(SchemaMismatchError, match="merge insert: column 'id' is not nullable"):
        builder(table.merge_builder(source, on="id")).execute()
    assert file_tree(table.storage.root) == before
    with table.transaction() as tx:
        with pytest.raises(SchemaMismatchError, match="merge insert"):
            builder(tx.merge_builder(source, on="id")).execute()
        tx.delete(pc.field("id") == 6)
    assert (tx.result.num_deleted_rows, tx.result.num_inserted_rows) == (1, 0) and 1 in _rows(table)


# ---------------------------------------------------------------- semantics


def test_first_clause_whose_condition_holds_applies(table):
    source = _source([1, 2, 3, 7, 8], [1, 2, 3, 7, 8], op=["d", "u", "x", "i", "d"])
    r = (table.merge_builder(source, on="id")
         .when_matched_delete(condition=pc.field("op") == "d")
         .when_matched_update({"v": pc.field("s.op"), "n": T + S}, condition=pc.field("op") == "u")
         .when_matched_update({"v": "other"})
         .when_not_matched_insert({"id": pc.field("s.id"), "v": "new"}, condition=pc.field("op") != "d")
         .when_not_matched_by_source_update({"v": pc.binary_join_element_wise(pc.field("v"), "!", "")},
                                            condition=pc.field("n") > 50)
         .execute())
    assert (r.num_deleted_rows, r.num_updated_rows, r.num_inserted_rows) == (1, 3, 1)
    assert _rows(table) == {2: ("u", 22), 3: ("other", 30), 4: ("d", 40), 5: ("e", 50), 6: ("f!", 60),
                            7: ("new", None)}


def test_on_condition_narrows_the_matches(table):
    """A pair whose ON condition is false is no match: its source row is
    inserted, its table row is not matched by source."""
    source = _source([1, 2], [10, 99])
    r = (table.merge_builder(source, on="id", on_condition=S == T)
         .when_matched_update({"v": "same"})
         .when_not_matched_insert({"id": pc.field("s.id") + 100, "n": S})
         .when_not_matched_by_source_delete(condition=T < 25)
         .execute())
    assert (r.num_updated_rows, r.num_inserted_rows, r.num_deleted_rows) == (1, 1, 1)
    assert _rows(table)[1] == ("same", 10) and _rows(table)[102] == (None, 99) and 2 not in _rows(table)


def test_keys_of_other_names_and_other_aliases(table):
    source = pa.table({"key": [3, None], "amount": [5, 1]})
    r = (table.merge_builder(source, on={"id": "key"}, source_alias="src", target_alias="tgt")
         .when_matched_update({"tgt.n": pc.field("tgt.n") + pc.field("src.amount")})
         .when_not_matched_insert({"id": 100, "n": pc.field("amount")})
         .execute())
    assert (r.num_updated_rows, r.num_inserted_rows) == (1, 1)  # a null key matches nothing
    assert _rows(table)[3] == ("c", 35) and _rows(table)[100] == (None, 1)


def test_a_row_set_to_its_own_values_is_not_rewritten(table):
    r = table.merge_builder(_source([1, 2]), on="id").when_matched_update({"n": T, "v": pc.field("t.v")}).execute()
    assert not r.committed and table.version == 1


def test_operation_parameters_record_the_statement(table):
    (table.merge_builder(_source([1]), on="id", on_condition=S >= 0)
     .when_matched_delete(condition=S == 0)
     .when_not_matched_insert({"id": pc.field("s.id"), "v": "x"})
     .execute(app_id="job", app_version=1))
    entry = table.history(limit=1)[0]
    assert entry.operation == "MERGE" and table.app_version("job") == 1
    assert entry.operation_parameters == {
        "on": "id", "onCondition": "(s.n >= 0)",
        "clauses": [
            {"kind": "matched", "action": "delete", "condition": "(s.n == 0)"},
            {"kind": "notMatched", "action": "insert", "values": {"id": "s.id", "v": "x"}},
        ],
    }


def test_in_a_transaction_with_other_statements(table):
    with table.transaction() as tx:
        tx.insert(pa.table({"id": [7], "v": ["g"], "n": [70]}, schema=SCHEMA))
        counts = tx.merge_builder(_source([7, 1], [1, 1]), on="id").when_matched_update({"n": T + S}).execute()
        assert counts == {"inserted": 0, "updated": 2, "deleted": 0}
        with pytest.raises(InvalidArgumentError, match="give app_id and app_version to transaction"):
            tx.merge_builder(_source([1]), on="id").when_matched_delete().execute(app_id="x", app_version=1)
    assert table.version == 2 and _rows(table)[7] == ("g", 71) and _rows(table)[1] == ("a", 11)


# ---------------------------------------------------------------- schema evolution


def test_schema_evolution_adds_the_source_columns_in_the_same_version(table):
    source = _source([1, 9], [5, 9], channel=["web", "app"])
    with pytest.raises(SchemaMismatchError, match="sets unknown column 'score'"):
        table.merge_builder(source, on="id").when_matched_update({"score": S}).execute()
    plain = table.merge_builder(source, on="id").when_matched_update_all().execute()  # `channel` ignored
    assert plain.version == 2 and table.schema.names == ["id", "v", "n"]
    r = (table.merge_builder(source, on="id")
         .when_matched_update({"t.score": S * 2}).when_not_matched_insert_all()
         .with_schema_evolution().execute())
    assert r.version == 3 and (r.num_updated_rows, r.num_inserted_rows) == (1, 1)
    assert table.schema.names == ["id", "v", "n", "channel", "score"]
    assert str(table.schema.field("score").type) == "int64"
    rows = {x["id"]: x for x in table.to_arrow().to_pylist()}
    assert (rows[1]["score"], rows[1]["channel"], rows[2]["score"]) == (10, None, None)
    assert (rows[9]["score"], rows[9]["channel"], rows[9]["n"]) == (None, "app", 9)
    assert table.history(limit=1)[0].operation_parameters["schemaEvolution"] is True
    assert [c.version for c in table.schema_history()] == [3, 0]


def test_schema_evolution_of_a_merge_is_the_first_statement_of_its_transaction(table):
    source = _source([1], [5], channel=["web"])
    with pytest.raises(InvalidArgumentError, match="must come before the statements of its transaction"):
        with table.transaction() as tx:
            tx.delete(pc.field("id") == 6)
            tx.merge_builder(source, on="id").when_matched_update_all().with_schema_evolution().execute()
    assert table.version == 1


# ---------------------------------------------------------------- distributed rewrites


def test_rewrite_job_applies_a_partition_s_deletes_and_updates_at_once(table):
    """What a distributed engine hands a worker: per row its position and
    action; a delete's values are ignored, positions deleted twice are one
    delete, and an update twice is refused."""
    statement = ctfile.MergeStatement(keys=(("id", "id"),), clauses=(
        ctfile.MergeClause(ctfile.MatchKind.MATCHED, ctfile.MergeAction.DELETE, condition="s.n < 0"),
        ctfile.MergeClause(ctfile.MatchKind.MATCHED, ctfile.MergeAction.UPDATE, assignments=(("n", "s.n"),)),
    ))
    with table.transaction(operation="MERGE") as tx:
        job = ctfile.RewriteJob.for_merge_statement(tx, statement, pa.schema([("id", pa.int64()), ("n", pa.int64())]))
        assert job.set_columns == ("n",) and job.merge.rewrites_matched and not job.merge.inserts_unmatched
        first = min(job.candidates, key=lambda p: p.first_row_id)
        rows = pa.table({ctfile.POSITION_COLUMN: [2, 0, 0], ctfile.ACTION_COLUMN: ["update", "delete", "delete"],
                         "n": [33, None, None]})
        done = job.rewrite(first.path, rows)
        with pytest.raises(InvalidArgumentError, match="two rows of the source matched the same row"):
            job.rewrite(first.path, pa.table({ctfile.POSITION_COLUMN: [1, 1], ctfile.ACTION_COLUMN: ["update", "delete"],
                                              "n": [1, 1]}))
        with pytest.raises(InvalidArgumentError, match="must hold 'update' or 'delete'"):
            job.rewrite(first.path, pa.table({ctfile.POSITION_COLUMN: [1], ctfile.ACTION_COLUMN: ["upsert"], "n": [1]}))
        job.stage(tx, [done])
    assert (tx.result.num_deleted_rows, tx.result.num_updated_rows, tx.result.num_copied_rows) == (1, 1, 1)
    assert _rows(table) == {2: ("b", 20), 3: ("c", 33), 4: ("d", 40), 5: ("e", 50), 6: ("f", 60)}


def test_rewrite_job_for_the_shorthand_is_the_same_plan(table):
    with table.transaction(operation="MERGE") as tx:
        job = ctfile.RewriteJob.for_merge(tx, SCHEMA, "id", when_matched="update", when_not_matched="insert")
        assert isinstance(job.merge, ctfile.MergeSpec) and job.merge is not None
        assert job.merge.keys == ("id",) and job.set_columns == ("v", "n") and job.merge.inserts_unmatched
        with pytest.raises(SchemaMismatchError, match="not in the table"):
            ctfile.RewriteJob.for_merge(tx, SCHEMA.append(pa.field("zz", pa.int8())), "id",
                                        when_matched="update", when_not_matched=None)
