"""Append-only tables (SPEC §Append-only tables): ``ctfile.appendOnly`` refuses
every statement that deletes, changes or brings back rows, before anything
is written, and lets inserts, insert-only MERGEs and compaction through;
change scans of an append-only interval read only the fresh rows."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctfile
from ctfile.format.append_only import FEATURE_APPEND_ONLY
from tests.unit.table.fuzz_support import changed_files, fingerprint

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
ON = {"ctfile.appendOnly": "true"}


def _rows(ids, tag="a") -> pa.Table:
    return pa.table({"id": list(ids), "v": [f"{tag}{i}" for i in ids]}, schema=SCHEMA)


@pytest.fixture
def table(tmp_path) -> ctfile.Table:
    """An append-only table of two inserts (four rows, two partitions)."""
    t = ctfile.create_table(str(tmp_path / "t"), SCHEMA, properties=ON)
    t.insert(_rows([1, 2]))
    t.insert(_rows([3, 4]))
    return t


def _refused(table: ctfile.Table, call) -> ctfile.AppendOnlyError:
    """Run ``call``; it must raise AppendOnlyError and leave every file as it was."""
    root = Path(table.uri)
    before, version = fingerprint(root), ctfile.open_table(table.uri).version
    with pytest.raises(ctfile.AppendOnlyError) as info:
        call()
    assert changed_files(before, fingerprint(root)) == []
    assert ctfile.open_table(table.uri).version == version
    assert "ctfile.appendOnly" in str(info.value)
    return info.value


REFUSED = {
    "delete": lambda t: t.delete(pc.field("id") == 1),
    "delete everything": lambda t: t.delete(pc.scalar(True)),
    "update": lambda t: t.update(pc.field("id") == 1, {"v": "x"}),
    "truncate": lambda t: t.truncate(),
    "overwrite": lambda t: t.overwrite(_rows([9])),
    "merge upsert": lambda t: t.merge(_rows([1, 9], "m"), on="id"),
    "merge matched delete": lambda t: t.merge(_rows([1]), on="id", when_matched="delete", when_not_matched=None),
    "merge builder matched": lambda t: (t.merge_builder(_rows([1, 9]), on="id").when_matched_update_all()
                                       .when_not_matched_insert_all().execute()),
    "merge builder by source": lambda t: (t.merge_builder(_rows([1]), on="id").when_not_matched_insert_all()
                                          .when_not_matched_by_source_delete().execute()),
    "restore": lambda t: t.restore(version=1),
    "write job overwrite": lambda t: t.write_job(mode="overwrite", schema=SCHEMA),
    "transaction delete": lambda t: _in_transaction(t, lambda tx: tx.delete(pc.field("id") == 2)),
    "insert then delete": lambda t: _in_transaction(t, lambda tx: (tx.insert(_rows([7])), tx.delete(pc.field("id") == 7))),
}


def _in_transaction(t: ctfile.Table, body) -> None:
    with t.transaction() as tx:
        body(tx)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_statements_that_remove_rows_are_refused_before_anything_is_written(table, name):
    e = _refused(table, lambda: REFUSED[name](table))
    assert table.uri in str(e)
    assert ctfile.open_table(table.uri).to_arrow().num_rows == 4


def test_the_commit_itself_is_checked(table):
    """A remove staged below the statements (as an engine could) is refused
    by the commit; the transaction's own files are deleted."""
    root = Path(table.uri)
    before = fingerprint(root)
    tx = table.transaction()
    tx.insert(_rows([8]))
    tx.remove(tx.base.partitions[next(iter(tx.base.partitions))])
    with pytest.raises(ctfile.AppendOnlyError, match="ctfile.appendOnly"):
        tx.commit()
    assert changed_files(before, fingerprint(root)) == []


def test_inserts_insert_only_merges_and_maintenance_are_allowed(table):
    assert table.merge(_rows([1, 5], "m"), on="id", when_matched=None).num_inserted_rows == 1
    counts = table.merge_builder(_rows([5, 6]), on="id").when_not_matched_insert_all().execute()
    assert (counts.num_inserted_rows, counts.num_updated_rows, counts.num_deleted_rows) == (1, 0, 0)
    assert table.compact().num_removed_partitions > 1
    table.vacuum(retain=0, grace_period=0)
    assert table.restore(version=table.version).committed is False  # a RESTORE that changes nothing
    assert sorted(table.to_arrow().column("id").to_pylist()) == [1, 2, 3, 4, 5, 6]
    assert table.snapshot().append_only


def test_turning_the_property_off_takes_its_own_commit(table):
    # In one transaction: the commit that turns it off is still under it.
    md = table.metadata
    off = ctfile.open_table(table.uri)

    def body(tx):
        tx.set_metadata(dataclasses.replace(md, properties={**md.properties, "ctfile.appendOnly": "false"}))
        tx.delete(pc.field("id") == 1)

    _refused(off, lambda: _in_transaction(off, body))
    table.set_properties({"ctfile.appendOnly": "false"})
    assert table.delete(pc.field("id") == 1).num_deleted_rows == 1
    assert FEATURE_APPEND_ONLY in table.protocol.writer_features  # features are never removed


def test_the_property_adds_the_writer_feature_and_is_validated(tmp_path):
    plain = ctfile.create_table(str(tmp_path / "plain"), SCHEMA)
    plain.insert(_rows([1]))
    assert FEATURE_APPEND_ONLY not in plain.protocol.writer_features  # an existing table keeps working as it was
    assert plain.delete(pc.field("id") == 1).num_deleted_rows == 1
    with pytest.raises(ctfile.InvalidArgumentError, match="ctfile.appendOnly must be true or false, found 'yes'"):
        plain.set_properties({"ctfile.appendOnly": "yes"})
    plain.set_properties({"ctfile.appendOnly": "true"})
    assert FEATURE_APPEND_ONLY in plain.protocol.writer_features and plain.snapshot().append_only
    _refused(plain, lambda: plain.truncate())
    assert ctfile.create_table(str(tmp_path / "new"), SCHEMA, properties=ON).protocol.writer_features[-1] == "appendOnly"


def test_a_derived_table_cannot_be_append_only(tmp_path):
    source = ctfile.create_table(str(tmp_path / "s"), SCHEMA)
    d = ctfile.DerivedDefinition("SELECT id FROM s", (ctfile.SourceBinding("s", source.table_id, source.uri),),
                                 "full", None, 1, ("_ct_dt_key",))
    schema = pa.schema([("id", pa.int64()), ("_ct_dt_key", pa.string())])
    with pytest.raises(ctfile.InvalidArgumentError, match="not derived"):
        ctfile.create_table(str(tmp_path / "d"), schema, derived=d, properties=ON)
    assert not (tmp_path / "d" / "_ct_log").exists() or not any((tmp_path / "d" / "_ct_log").iterdir())
    t = ctfile.create_table(str(tmp_path / "d2"), schema, derived=d)
    with pytest.raises(ctfile.InvalidArgumentError, match="not derived"):
        t.set_properties(ON)
    assert ctfile.open_table(t.uri).version == 0


def test_a_concurrent_switch_on_makes_a_pending_delete_conflict(table):
    table.set_properties({"ctfile.appendOnly": "false"})
    tx = table.transaction()
    tx.delete(pc.field("id") == 1)
    ctfile.open_table(table.uri).set_properties(ON)
    with pytest.raises(ctfile.CommitConflictError):
        tx.commit()
    # Run as a statement, it re-runs at the latest version and is refused there.
    _refused(table, lambda: table.delete(pc.field("id") == 1))


# ------------------------------------------------------------ change scans


def test_a_default_scan_of_an_append_only_interval_reads_only_the_fresh_rows(table):
    table.insert(_rows([5, 6]))
    table.compact()  # merges the three partitions: a default scan from partitions would compare them
    table.insert(_rows([7]))
    cs = table.changes(start_version=2, end_version=table.version)
    assert cs.plan.reads_fresh_rows and cs.plan_shape is ctfile.PlanShape.ADDED_ONLY
    compacted = {p.path for p in table.snapshot(4).partitions}
    assert not compacted & {p.path for p in cs.plan.partitions_to_read()}
    got = cs.to_arrow()
    assert sorted(got.column("id").to_pylist()) == [3, 4, 5, 6, 7]
    assert set(got.column("METADATA$ACTION").to_pylist()) == {"INSERT"}
    assert not any(got.column("METADATA$ISUPDATE").to_pylist())
    append = table.changes(start_version=2, end_version=table.version, information="append_only").to_arrow()
    assert got.sort_by("id").equals(append.sort_by("id"))
    parts = cs.tasks(max_rows_per_task=1)
    assert sorted(i for task in parts for b in task.to_batches() for i in b.column("id").to_pylist()) == [3, 4, 5, 6, 7]


def test_an_interval_with_a_delete_keeps_the_minimum_delta(tmp_path):
    """The plan is decided from the commits: before the property was set, a
    delete makes the interval an ordinary one; after it, every interval is
    append-only."""
    t = ctfile.create_table(str(tmp_path / "t"), SCHEMA)
    t.insert(_rows([1, 2, 3]))
    t.delete(pc.field("id") == 2)  # version 2
    t.set_properties(ON)  # version 3
    t.insert(_rows([4]))  # version 4
    across = t.changes(start_version=1, end_version=4)
    assert not across.plan.reads_fresh_rows
    assert sorted(across.to_arrow().column("id").to_pylist()) == [1, 3, 4]
    after = t.changes(start_version=3, end_version=4)
    assert after.plan.reads_fresh_rows and after.to_arrow().column("id").to_pylist() == [4]
    plain = ctfile.create_table(str(tmp_path / "plain"), SCHEMA)
    plain.insert(_rows([1]))
    assert plain.changes(start_version=1, end_version=1).plan.reads_fresh_rows  # from the commits alone


def test_ctfile_show_says_the_table_is_append_only(table):
    from typer.testing import CliRunner

    from ctfile.tools.cli import app

    text = CliRunner().invoke(app, ["show", table.uri]).stdout
    assert "ctfile.appendOnly=true" in text and "append-only: on" in text and "'appendOnly'" in text
    table.set_properties({"ctfile.appendOnly": "false"})
    assert "append-only: on" not in CliRunner().invoke(app, ["show", table.uri]).stdout


def test_an_overwrite_job_planned_before_the_property_is_refused_at_commit(tmp_path):
    t = ctfile.create_table(str(tmp_path / "t"), SCHEMA)
    t.insert(_rows([1, 2]))
    job = t.write_job(mode="overwrite", schema=SCHEMA)
    files = job.write(_rows([9]))
    t.set_properties(ON)
    before = fingerprint(Path(t.uri))
    with pytest.raises(ctfile.CommitConflictError):  # against the version it planned at: the property conflicts
        job.commit(files)
    files = job.write(_rows([9]))
    before = fingerprint(Path(t.uri))
    with pytest.raises(ctfile.AppendOnlyError, match="OVERWRITE"):
        job.commit(files, against_latest=True)
    assert [f for f in changed_files(before, fingerprint(Path(t.uri))) if not f.startswith("_ct_log")] == [
        f"data/{Path(f.path).name}" for f in files]  # the job's own files, deleted
    assert not any((Path(t.uri) / f.path).exists() for f in files)
    assert sorted(ctfile.open_table(t.uri).to_arrow().column("id").to_pylist()) == [1, 2]


# ------------------------------------------------------------ random histories

OPS = st.lists(st.tuples(st.sampled_from(["insert", "merge insert", "compact", "delete", "update", "upsert"]),
                         st.integers(0, 30)), min_size=1, max_size=6)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_random_histories_only_append_and_scan_as_appends(tmp_path_factory, ops):
    """Every statement either inserts (or compacts) or is refused leaving
    every file as it was; every interval's default scan is read as the
    append-only plan and is exactly the rows inserted in it."""
    t = ctfile.create_table(str(tmp_path_factory.mktemp("h") / "t"), SCHEMA, properties={**ON, "ctfile.partitionRows": "3"})
    inserted: dict[int, list[int]] = {}  # version -> ids it inserted
    for kind, x in ops:
        ids = [x, x + 100]
        if kind == "insert":
            inserted[t.insert(_rows(ids)).version] = ids
        elif kind == "merge insert":
            present = set(t.to_arrow().column("id").to_pylist())
            r = t.merge(_rows(ids), on="id", when_matched=None)
            if r.committed:
                inserted[r.version] = [i for i in ids if i not in present]
        elif kind == "compact":
            t.compact(target_rows=10)
        else:
            call = {"delete": lambda: t.delete(pc.field("id") == x),
                    "update": lambda: t.update(pc.field("id") == x, {"v": "u"}),
                    "upsert": lambda: t.merge(_rows(ids, "m"), on="id")}[kind]
            _refused(t, call)
    for a in range(1, t.version + 1):
        cs = t.changes(start_version=a, end_version=t.version)
        want = sorted(i for v, vs in inserted.items() if v >= a for i in vs)
        assert sorted(cs.to_arrow().column("id").to_pylist()) == want
        assert cs.plan.reads_fresh_rows or not cs.plan.commits
