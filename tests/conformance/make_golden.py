"""Regenerate the conformance tables ``tests/conformance/golden/people/``
and ``golden/people-capture/``.

The table is the worked example of ``format_spec/SPEC.md`` (Appendix B,
"Conformance tables"), written by ctfile itself. Each earlier generation of
the format is kept beside it, written by the ctfile of its time and never
regenerated: ``golden/people-r1/`` (revision 1, before self-checking entries
and the serializable-writes commitInfo fields). ``test_golden.py`` checks
every generation; newer code must keep reading them all.

====  ==========================================================
v0    CREATE TABLE people (id long NOT NULL, name string),
      property ``ctfile.checkpointInterval = 5``
v1    INSERT (1, 'Jeff'), (2, 'Donny')
v2    INSERT (3, 'Walter'), (4, 'Maud'), (5, 'Uli')
v3    UPDATE people SET name = 'Jeffrey' WHERE id = 1
v4    UPDATE people SET name = 'Maude' WHERE id = 4
v5    DELETE FROM people WHERE id IN (2, 5)   (and checkpoint 5)
====  ==========================================================

``golden/people-capture/`` (revision 3, SPEC §Change capture) runs the same
statements on a table created with ``ctfile.changeCapture = before_after``
as well, so that its UPDATEs and DELETE name change files, plus

====  ==========================================================
v6    DELETE FROM people WHERE id = 1   (the last row of its partition:
      a ``remove`` with ``deletesAllRows`` and no change file)
====  ==========================================================

``golden/people-evolved/`` (revision 4, SPEC §Schema evolution) runs the
statements of ``people`` (v1-v5), then changes the schema:

====  ==========================================================
v6    SCHEMA CHANGE add ``email`` string (comment), ``visits`` integer
v7    UPDATE people SET email = 'walter@example.com', visits = 2
      WHERE id = 3
v8    SCHEMA CHANGE rename ``name`` to ``full_name``, widen ``visits``
      to long, drop ``email`` (adds the ``schemaEvolution`` feature)
v9    SCHEMA CHANGE drop ``visits`` (id 4, the highest: ``lastFieldId``)
v10   SCHEMA CHANGE add ``email`` again (id 5: a new column, null in
      every old row)   (and checkpoint 10)
v11   INSERT (6, 'Bunny', 'bunny@example.com')
====  ==========================================================

``golden/people-streams/`` (revision 5, SPEC §Streams) is the STREAM example
of the Snowflake paper (its Listing 9), with its target table beside it in
``golden/people-changes/``:

====  ==========================================================
v0    CREATE TABLE people, v1 INSERT (1, 'Jeff'), (2, 'Donny')
v2    CREATE STREAM people_stream (initial rows; adds the ``streams``
      writer feature); consumed into people_changes (its v1), which is
      then truncated (v2)
v3    INSERT (3, 'Walter'), (4, 'Maud'), (5, 'Uli'); consumed (v3),
      truncated (v4)
v4    UPDATE id = 1 'Jeffrey';  v5 UPDATE id = 4 'Maude'
      -- a consuming transaction on people_changes begins (pins v5) --
v6    DELETE id IN (2, 5), concurrently; the transaction then commits
      the update pairs of v4-v5 (people_changes v5)
====  ==========================================================

The stream's claims name the target by the path it was built at,
``/tmp/ctfile-golden/people-changes``.

``golden/people-clustered/`` (revision 6, SPEC §Clustering) is created with
``ctfile.clusterBy = id`` and ``ctfile.partitionRows = 2``:

====  ==========================================================
v1    INSERT (5, 'Uli'), (3, 'Walter'), (1, 'Jeff'), (4, 'Maud'),
      (2, 'Donny'): sorted by id into [1, 2], [3, 4], [5]
v2    UPDATE id = 1 'Jeffrey';  v3 UPDATE id = 4 'Maude'
v4    DELETE id IN (2, 5)
v5    INSERT (6, 'Bunny'), (0, 'Smokey'): one partition [0, 6] that
      overlaps the others
v6    COMPACT: the recluster rewrites the overlapping partitions into
      [0, 1], [3, 4], [6] (``dataChange`` false)
====  ==========================================================

``golden/people-restored/`` (revision 7, SPEC §Restore) runs the statements
of ``people`` (v1-v5), then

====  ==========================================================
v6    RESTORE TABLE people TO VERSION AS OF 2: removes E1 and E2,
      re-adds A and B (adds the ``restoredPartitions`` feature)
v7    UPDATE people SET name = 'Donny K' WHERE id = 2 (rewrites the
      re-added A)   (and a checkpoint of version 7, which holds the
      ``restoredRowVersion`` column for B)
====  ==========================================================

``golden/people-derived/`` (revision 8, SPEC §Derived tables) is a derived
table over ``golden/people`` (bound by its table id; its URI is recorded as
:data:`DERIVED_SOURCE_URI`, the path it was built at), ``ctfile.partitionRows
= 2``, defined by :data:`DERIVED_QUERY`, with the derivation key
``_ct_dt_key`` (the source row's ``METADATA$ROW_ID``):

====  ==========================================================
v0    CREATE TABLE (id long, name string, _ct_dt_key string NOT NULL),
      ``derived`` with an empty frontier (reader and writer feature
      ``derivedTables``)
v1    REFRESH FULL at people version 2: ids 1, 2, 4, 5 (two partitions)
v2    REFRESH INCREMENTAL at people version 5: one MERGE on the key
      updates ids 1 and 4, deletes 2 and 5 (``durationMs`` recorded)
v3    COMPACT (``dataChange`` false)   (and a checkpoint of version 3)
v4    ALTER DERIVED: refresh mode ``auto``, target lag ``15 minutes``
      (a ``metadata`` action, no rows, no ``refresh`` object)
====  ==========================================================

``golden/people-append/`` (revision 9, SPEC §Append-only tables) is created
with ``ctfile.appendOnly = true`` and ``ctfile.partitionRows = 2``:

====  ==========================================================
v0    CREATE TABLE (writer feature ``appendOnly``)
v1    INSERT (1, 'Jeff'), (2, 'Donny'), (4, 'Maud')
v2    INSERT (5, 'Uli'), (3, 'Walter')
v3    MERGE ... WHEN NOT MATCHED THEN INSERT * of (3, 'W'), (6, 'Bunny'):
      inserts 6 only (an insert-only MERGE)
v4    COMPACT (``dataChange`` false)
v5    SET TBLPROPERTIES (ctfile.appendOnly = false); the feature stays
v6    DELETE WHERE id = 2   (and a checkpoint of version 6)
====  ==========================================================

``--capture`` / ``--evolve`` / ``--streams`` / ``--clustered`` / ``--restored`` / ``--derived`` / ``--append`` regenerate only ``people-capture`` /
``people-evolved`` (each is regenerated separately: regenerating one changes
the SPEC examples copied from it).

Usage (from the repository root)::

    .venv/bin/python tests/conformance/make_golden.py            # regenerate people
    .venv/bin/python tests/conformance/make_golden.py --capture  # regenerate people-capture
    .venv/bin/python tests/conformance/make_golden.py --evolve   # regenerate people-evolved
    .venv/bin/python tests/conformance/make_golden.py --restored # regenerate people-restored
    .venv/bin/python tests/conformance/make_golden.py --examples [--capture | --evolve | --restored] # print log lines

Regenerating replaces the whole ``golden/people`` directory: table id,
transaction ids, file names, timestamps and checksums all change. The JSON
examples in SPEC.md are copied from this table (``test_spec_examples.py``
checks that they still match it), so after regenerating, paste the new lines
printed by ``--examples`` into SPEC.md. There is normally no reason to
regenerate: the table is a fixed artefact that newer code must keep reading.
When a revision changes what writers write, first move ``golden/people`` to
``golden/people-r<N>`` (the generation it was), then regenerate.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN_DIR = os.path.join(HERE, "golden")
PEOPLE = os.path.join(GOLDEN_DIR, "people")
PEOPLE_CAPTURE = os.path.join(GOLDEN_DIR, "people-capture")
PEOPLE_EVOLVED = os.path.join(GOLDEN_DIR, "people-evolved")
PEOPLE_STREAMS = os.path.join(GOLDEN_DIR, "people-streams")
PEOPLE_CHANGES = os.path.join(GOLDEN_DIR, "people-changes")
PEOPLE_CLUSTERED = os.path.join(GOLDEN_DIR, "people-clustered")
PEOPLE_RESTORED = os.path.join(GOLDEN_DIR, "people-restored")
PEOPLE_DERIVED = os.path.join(GOLDEN_DIR, "people-derived")
PEOPLE_APPEND = os.path.join(GOLDEN_DIR, "people-append")
DERIVED_SOURCE_URI = "/tmp/ctfile-golden/people"
DERIVED_QUERY = "SELECT id, upper(name) AS name FROM people WHERE id <> 3"
# Where people-changes is built, so that the claims of people-streams name it.
STREAMS_BUILD_DIR = "/tmp/ctfile-golden"

# The expected contents, shared with test_golden.py.
ROWS_V2 = {1: "Jeff", 2: "Donny", 3: "Walter", 4: "Maud", 5: "Uli"}
ROWS_V5 = {1: "Jeffrey", 3: "Walter", 4: "Maude"}
ROWS_V6 = {3: "Walter", 4: "Maude"}  # people-capture only
# people-evolved, version 11: id -> (full_name, email).
ROWS_EVOLVED = {1: ("Jeffrey", None), 3: ("Walter", None), 4: ("Maude", None), 6: ("Bunny", "bunny@example.com")}
# people-clustered, version 6 (and 5).
ROWS_CLUSTERED = {0: "Smokey", 1: "Jeffrey", 3: "Walter", 4: "Maude", 6: "Bunny"}
# people-restored, version 7 (version 6 is ROWS_V2).
ROWS_RESTORED = {1: "Jeff", 2: "Donny K", 3: "Walter", 4: "Maud", 5: "Uli"}
# people-append, version 4 (every row ever inserted) and version 6.
ROWS_APPEND = {1: "Jeff", 2: "Donny", 3: "Walter", 4: "Maud", 5: "Uli", 6: "Bunny"}
ROWS_APPEND_V6 = {1: "Jeff", 3: "Walter", 4: "Maud", 5: "Uli", 6: "Bunny"}


def build(target: str, *, capture: bool = False) -> None:
    """Write the worked example table to ``target`` (which must not exist);
    ``capture``: the ``people-capture`` table."""
    import pyarrow as pa
    import pyarrow.compute as pc

    import ctfile

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
    properties = {"ctfile.checkpointInterval": "5"}
    if capture:
        properties["ctfile.changeCapture"] = "before_after"
    t = ctfile.create_table(target, schema, properties=properties)
    steps = [
        t.insert(pa.table({"id": [1, 2], "name": ["Jeff", "Donny"]}, schema=schema)),
        t.insert(pa.table({"id": [3, 4, 5], "name": ["Walter", "Maud", "Uli"]}, schema=schema)),
        t.update(pc.field("id") == 1, {"name": "Jeffrey"}),
        t.update(pc.field("id") == 4, {"name": "Maude"}),
        t.delete(pc.field("id").isin([2, 5])),
    ]
    if capture:
        steps.append(t.delete(pc.field("id") == 1))
    for expected_version, result in enumerate(steps, start=1):
        if not result.committed or result.version != expected_version:
            raise SystemExit(f"unexpected commit result {result}")
    got = dict(zip(*t.snapshot().to_arrow().sort_by("id").to_pydict().values()))
    if got != (ROWS_V6 if capture else ROWS_V5):
        raise SystemExit(f"unexpected final rows {got}")


def evolve(target: str) -> None:
    """``people`` v0-v5, then the schema changes of ``people-evolved``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    import ctfile

    build(target)
    t = ctfile.open_table(target)
    steps = []
    with t.update_schema() as u:
        u.add_column("email", pa.string(), doc="primary contact").add_column("visits", pa.int32())
    steps.append(u.result)
    steps.append(t.update(pc.field("id") == 3, {"email": "walter@example.com", "visits": 2}))
    with t.update_schema() as u:
        u.rename_column("name", "full_name").widen_column("visits", pa.int64()).drop_column("email")
    steps.append(u.result)
    with t.update_schema() as u:
        u.drop_column("visits")
    steps.append(u.result)
    with t.update_schema() as u:
        u.add_column("email", pa.string())
    steps.append(u.result)
    steps.append(t.insert(pa.table({"id": [6], "full_name": ["Bunny"], "email": ["bunny@example.com"]}, schema=t.schema)))
    for expected_version, result in enumerate(steps, start=6):
        if result is None or not result.committed or result.version != expected_version:
            raise SystemExit(f"unexpected commit result {result}")
    rows = t.snapshot().to_arrow().sort_by("id").to_pylist()
    got = {r["id"]: (r["full_name"], r["email"]) for r in rows}
    if got != ROWS_EVOLVED:
        raise SystemExit(f"unexpected final rows {got}")


# people-changes after each consumption: (name, action, isUpdate), as in the paper.
CONSUMED = [
    [("Jeff", "INSERT", False), ("Donny", "INSERT", False)],
    [("Walter", "INSERT", False), ("Maud", "INSERT", False), ("Uli", "INSERT", False)],
    [("Jeff", "DELETE", True), ("Jeffrey", "INSERT", True), ("Maud", "DELETE", True), ("Maude", "INSERT", True)],
]


def streams(build_dir: str) -> None:
    """``people-streams`` and ``people-changes`` in ``build_dir``: the
    paper's Listing 9 (see the module docstring)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    import ctfile

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
    changes_schema = pa.schema([("name", pa.string()), ("action", pa.string()), ("isUpdate", pa.bool_())])
    people = ctfile.create_table(os.path.join(build_dir, "people-streams"), schema,
                                 properties={"ctfile.checkpointInterval": "5"})
    changes = ctfile.create_table(os.path.join(build_dir, "people-changes"), changes_schema)
    people.insert(pa.table({"id": [1, 2], "name": ["Jeff", "Donny"]}, schema=schema))
    stream = people.create_stream("people_stream", initial_rows=True)

    def consume(tx) -> None:
        rows = stream.pending().to_arrow().select(["name", "METADATA$ACTION", "METADATA$ISUPDATE"])
        tx.insert(rows.rename_columns(changes_schema.names).cast(changes_schema))

    def check(expected) -> None:
        got = [tuple(r.values()) for r in changes.to_arrow().to_pylist()]
        if sorted(got, key=str) != sorted(expected, key=str):
            raise SystemExit(f"unexpected consumed rows {got}")

    with changes.transaction(consuming=stream) as tx:
        consume(tx)
    check(CONSUMED[0])
    changes.truncate()
    people.insert(pa.table({"id": [3, 4, 5], "name": ["Walter", "Maud", "Uli"]}, schema=schema))
    with changes.transaction(consuming=stream) as tx:
        consume(tx)
    check(CONSUMED[1])
    changes.truncate()
    people.update(pc.field("id") == 1, {"name": "Jeffrey"})
    people.update(pc.field("id") == 4, {"name": "Maude"})
    with changes.transaction(consuming=stream) as tx:  # BEGIN at "12:03"
        people.delete(pc.field("id").isin([2, 5]))  # "12:04", after the pin
        consume(tx)
    check(CONSUMED[2])
    if people.version != 6 or changes.version != 5 or stream.offset != 5:
        raise SystemExit(f"unexpected versions {people.version}, {changes.version}, offset {stream.offset}")


def clustered(target: str) -> None:
    """The ``people-clustered`` table (revision 6) at ``target``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    import ctfile

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
    t = ctfile.create_table(target, schema, properties={"ctfile.clusterBy": "id", "ctfile.partitionRows": "2"})
    steps = [
        t.insert(pa.table({"id": [5, 3, 1, 4, 2], "name": ["Uli", "Walter", "Jeff", "Maud", "Donny"]}, schema=schema)),
        t.update(pc.field("id") == 1, {"name": "Jeffrey"}),
        t.update(pc.field("id") == 4, {"name": "Maude"}),
        t.delete(pc.field("id").isin([2, 5])),
        t.insert(pa.table({"id": [6, 0], "name": ["Bunny", "Smokey"]}, schema=schema)),
        t.compact(),
    ]
    for expected_version, result in enumerate(steps, start=1):
        if not result.committed or result.version != expected_version:
            raise SystemExit(f"unexpected commit result {result}")
    got = dict(zip(*t.snapshot().to_arrow().sort_by("id").to_pydict().values()))
    if got != ROWS_CLUSTERED or t.clustering_info().average_depth != 1.0:
        raise SystemExit(f"unexpected final rows {got} or layout {t.clustering_info()}")


def restored(target: str) -> None:
    """The ``people-restored`` table (revision 7) at ``target``."""
    import pyarrow.compute as pc

    import ctfile

    build(target)
    t = ctfile.open_table(target)
    steps = [t.restore(version=2), t.update(pc.field("id") == 2, {"name": "Donny K"})]
    for expected_version, result in enumerate(steps, start=6):
        if not result.committed or result.version != expected_version:
            raise SystemExit(f"unexpected commit result {result}")
    t.checkpoint()
    got = dict(zip(*t.snapshot().to_arrow().sort_by("id").to_pydict().values()))
    if got != ROWS_RESTORED:
        raise SystemExit(f"unexpected final rows {got}")


def append_only(target: str) -> None:
    """The ``people-append`` table (revision 9) at ``target``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    import ctfile

    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    t = ctfile.create_table(target, schema, properties={"ctfile.appendOnly": "true", "ctfile.partitionRows": "2"})
    steps = [
        t.insert(pa.table({"id": [1, 2, 4], "name": ["Jeff", "Donny", "Maud"]}, schema=schema)),
        t.insert(pa.table({"id": [5, 3], "name": ["Uli", "Walter"]}, schema=schema)),
        t.merge_builder(pa.table({"id": [3, 6], "name": ["W", "Bunny"]}, schema=schema), on="id")
        .when_not_matched_insert_all().execute(),
        t.compact(target_rows=10),
        t.set_properties({"ctfile.appendOnly": "false"}),
        t.delete(pc.field("id") == 2),
    ]
    for expected_version, result in enumerate(steps, start=1):
        if not result.committed or result.version != expected_version:
            raise SystemExit(f"unexpected commit result {result}")
    t.checkpoint()
    got = dict(zip(*t.snapshot().to_arrow().sort_by("id").to_pydict().values()))
    if got != ROWS_APPEND_V6 or dict(zip(*t.snapshot(4).to_arrow().sort_by("id").to_pydict().values())) != ROWS_APPEND:
        raise SystemExit(f"unexpected final rows {got}")


def derived_rows(source, version: int):
    """:data:`DERIVED_QUERY` at ``version`` of the golden ``people`` table
    ``source``, with its derivation key (the source row's ``METADATA$ROW_ID``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = source.changes(start_version=0, end_version=version).to_arrow().filter(pc.field("id") != 3)
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), pa.field("_ct_dt_key", pa.string(), nullable=False)])
    return pa.table({"id": rows.column("id"), "name": pc.utf8_upper(rows.column("name")),
                     "_ct_dt_key": rows.column("METADATA$ROW_ID")}, schema=schema).sort_by("id")


def derived(target: str, source_dir: str = PEOPLE) -> None:
    """The ``people-derived`` table (revision 8) at ``target``, over the golden ``people`` at ``source_dir``."""
    import pyarrow.compute as pc

    import ctfile

    source = ctfile.open_table(source_dir)
    d = ctfile.DerivedDefinition(DERIVED_QUERY, (ctfile.SourceBinding("people", source.table_id, DERIVED_SOURCE_URI),),
                                 "incremental", "1 hour", 1, ("_ct_dt_key",))
    t = ctfile.create_table(target, derived_rows(source, 2).schema, derived=d, partition_rows=2)

    def refresh(version: int, action: str, reason: str, rows_in: int, rows_out: int,
                duration_ms: int | None) -> ctfile.CommitResult:
        fr = (ctfile.SourceVersion("people", source.table_id, version, ctfile.schema_id(source.schema_at(version))),)
        data_timestamp = source.snapshot(version).timestamp_ms  # the rows are people as of its version
        info = ctfile.RefreshInfo(action, reason, fr, data_timestamp, rows_in, rows_out, duration_ms)
        with t.transaction(refresh=info) as tx:
            (tx.merge_builder(derived_rows(source, version), on="_ct_dt_key")
             .when_matched_update_all(condition=pc.field("t.name") != pc.field("s.name"))
             .when_not_matched_insert_all().when_not_matched_by_source_delete().execute())
        return tx.result

    changed = source.changes(start_version=3, end_version=5).to_arrow().num_rows
    steps = [
        refresh(2, "FULL", "first refresh", 5, 4, None),
        refresh(5, "INCREMENTAL", f"people: {changed} change rows in versions 3..5", changed, 4, 12),
        t.compact(target_rows=10),
    ]
    for expected_version, result in enumerate(steps, start=1):
        if not result.committed or result.version != expected_version:
            raise SystemExit(f"unexpected commit result {result}")
    t.checkpoint()
    got = t.to_arrow().sort_by("id").to_pylist()
    if got != derived_rows(source, 5).select(["id", "name"]).to_pylist() or len(t.snapshot().partitions) != 1:
        raise SystemExit(f"unexpected final rows {got}")
    alter_derived(t)


def alter_derived(t) -> None:
    """Version 4 of ``people-derived``: an ``ALTER DERIVED`` commit."""
    with t.transaction() as tx:
        tx.alter_derived(refresh_mode="auto", target_lag="15 minutes")
    if tx.result is None or not tx.result.committed or tx.result.version != 4:
        raise SystemExit(f"unexpected commit result {tx.result}")


def regenerate_streams() -> None:
    """Build in :data:`STREAMS_BUILD_DIR`, then move both tables into ``golden/``."""
    shutil.rmtree(STREAMS_BUILD_DIR, ignore_errors=True)
    os.makedirs(STREAMS_BUILD_DIR)
    try:
        streams(STREAMS_BUILD_DIR)
        for target in (PEOPLE_STREAMS, PEOPLE_CHANGES):
            if os.path.exists(target):
                shutil.rmtree(target)
            shutil.move(os.path.join(STREAMS_BUILD_DIR, os.path.basename(target)), target)
    finally:
        shutil.rmtree(STREAMS_BUILD_DIR, ignore_errors=True)
    for target in (PEOPLE_STREAMS, PEOPLE_CHANGES):
        for root, _dirs, files in sorted(os.walk(target)):
            for name in sorted(files):
                print(os.path.relpath(os.path.join(root, name), HERE))


def regenerate(*, capture: bool = False, evolved: bool = False, clustered_: bool = False, restored_: bool = False,
               derived_: bool = False, append_: bool = False) -> None:
    target = (
        PEOPLE_APPEND if append_ else PEOPLE_DERIVED if derived_ else PEOPLE_RESTORED if restored_ else PEOPLE_CLUSTERED if clustered_ else PEOPLE_EVOLVED if evolved
        else PEOPLE_CAPTURE if capture else PEOPLE
    )
    name = os.path.basename(target)
    os.makedirs(GOLDEN_DIR, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{name}-", dir=GOLDEN_DIR)
    try:
        if evolved:
            evolve(os.path.join(tmp, name))
        elif clustered_:
            clustered(os.path.join(tmp, name))
        elif restored_:
            restored(os.path.join(tmp, name))
        elif derived_:
            derived(os.path.join(tmp, name))
        elif append_:
            append_only(os.path.join(tmp, name))
        else:
            build(os.path.join(tmp, name), capture=capture)
        if os.path.exists(target):
            shutil.rmtree(target)
        os.replace(os.path.join(tmp, name), target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for root, _dirs, files in sorted(os.walk(target)):
        for name in sorted(files):
            print(os.path.relpath(os.path.join(root, name), HERE))


def print_examples(*, capture: bool = False, evolved: bool = False, restored_: bool = False,
                   derived_: bool = False) -> None:
    """Every log line of the golden table and the checkpoint's key-value
    metadata lines, pretty-printed; then the checkpoint's rows (and, for
    ``people-capture``, the rows of each change file)."""
    import pyarrow.parquet as pq

    table_dir = PEOPLE_DERIVED if derived_ else PEOPLE_RESTORED if restored_ else PEOPLE_EVOLVED if evolved else PEOPLE_CAPTURE if capture else PEOPLE
    log_dir = os.path.join(table_dir, "_ct_log")
    for name in sorted(os.listdir(log_dir)):
        path = os.path.join(log_dir, name)
        if name.endswith(".parquet"):
            data = pq.ParquetFile(path).metadata.metadata[b"ctfile.checkpoint"]
            rows = pq.read_table(path).to_pylist()
        else:
            with open(path, "rb") as f:
                data = f.read()
            rows = []
        print(f"=== _ct_log/{name}")
        for line in data.decode("utf-8").split("\n"):
            if line.strip():
                print(json.dumps(json.loads(line), indent=2, ensure_ascii=False))
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
    changes_dir = os.path.join(table_dir, "_ct_changes")
    for name in sorted(os.listdir(changes_dir)) if os.path.isdir(changes_dir) else []:
        print(f"=== _ct_changes/{name}")
        for row in pq.read_table(os.path.join(changes_dir, name)).to_pylist():
            print(json.dumps(row, ensure_ascii=False))


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", action="store_true", help="print the golden log lines, pretty-printed")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--capture", action="store_true", help="the people-capture table instead of people")
    which.add_argument("--evolve", action="store_true", help="the people-evolved table instead of people")
    which.add_argument("--streams", action="store_true", help="people-streams and people-changes instead of people")
    which.add_argument("--clustered", action="store_true", help="the people-clustered table instead of people")
    which.add_argument("--restored", action="store_true", help="the people-restored table instead of people")
    which.add_argument("--derived", action="store_true", help="the people-derived table instead of people")
    which.add_argument("--append", action="store_true", help="the people-append table instead of people")
    args = ap.parse_args(argv)
    if args.streams:
        if args.examples:
            streams_dir = os.path.join(PEOPLE_STREAMS, "_ct_streams")
            for stream in sorted(os.listdir(streams_dir)):
                for name in sorted(os.listdir(os.path.join(streams_dir, stream))):
                    with open(os.path.join(streams_dir, stream, name)) as f:
                        print(f"=== _ct_streams/{stream}/{name}\n{f.read().strip()}")
        else:
            regenerate_streams()
    elif args.examples:
        print_examples(capture=args.capture, evolved=args.evolve, restored_=args.restored, derived_=args.derived)
    else:
        regenerate(capture=args.capture, evolved=args.evolve, clustered_=args.clustered, restored_=args.restored,
                   derived_=args.derived, append_=args.append)


if __name__ == "__main__":
    main(sys.argv[1:])
