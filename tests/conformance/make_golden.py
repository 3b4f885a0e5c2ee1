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

``--capture`` regenerates only ``people-capture`` (the two are regenerated
separately: regenerating ``people`` changes the SPEC examples copied from it).

Usage (from the repository root)::

    .venv/bin/python tests/conformance/make_golden.py            # regenerate people
    .venv/bin/python tests/conformance/make_golden.py --capture  # regenerate people-capture
    .venv/bin/python tests/conformance/make_golden.py --examples [--capture] # print log lines

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

# The expected contents, shared with test_golden.py.
ROWS_V2 = {1: "Jeff", 2: "Donny", 3: "Walter", 4: "Maud", 5: "Uli"}
ROWS_V5 = {1: "Jeffrey", 3: "Walter", 4: "Maude"}
ROWS_V6 = {3: "Walter", 4: "Maude"}  # people-capture only


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


def regenerate(*, capture: bool = False) -> None:
    target = PEOPLE_CAPTURE if capture else PEOPLE
    name = os.path.basename(target)
    os.makedirs(GOLDEN_DIR, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{name}-", dir=GOLDEN_DIR)
    try:
        build(os.path.join(tmp, name), capture=capture)
        if os.path.exists(target):
            shutil.rmtree(target)
        os.replace(os.path.join(tmp, name), target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for root, _dirs, files in sorted(os.walk(target)):
        for name in sorted(files):
            print(os.path.relpath(os.path.join(root, name), HERE))


def print_examples(*, capture: bool = False) -> None:
    """Every log line of the golden table and the checkpoint's key-value
    metadata lines, pretty-printed; then the checkpoint's rows (and, for
    ``people-capture``, the rows of each change file)."""
    import pyarrow.parquet as pq

    table_dir = PEOPLE_CAPTURE if capture else PEOPLE
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
    ap.add_argument("--capture", action="store_true", help="the people-capture table instead of people")
    args = ap.parse_args(argv)
    if args.examples:
        print_examples(capture=args.capture)
    else:
        regenerate(capture=args.capture)


if __name__ == "__main__":
    main(sys.argv[1:])
