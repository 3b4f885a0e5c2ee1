"""Regenerate the conformance table ``tests/conformance/golden/people/``.

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

Usage (from the repository root)::

    .venv/bin/python tests/conformance/make_golden.py            # regenerate
    .venv/bin/python tests/conformance/make_golden.py --examples # print log lines

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

# The expected contents, shared with test_golden.py.
ROWS_V2 = {1: "Jeff", 2: "Donny", 3: "Walter", 4: "Maud", 5: "Uli"}
ROWS_V5 = {1: "Jeffrey", 3: "Walter", 4: "Maude"}


def build(target: str) -> None:
    """Write the worked example table to ``target`` (which must not exist)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    import ctfile

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
    t = ctfile.create_table(target, schema, properties={"ctfile.checkpointInterval": "5"})
    steps = [
        t.insert(pa.table({"id": [1, 2], "name": ["Jeff", "Donny"]}, schema=schema)),
        t.insert(pa.table({"id": [3, 4, 5], "name": ["Walter", "Maud", "Uli"]}, schema=schema)),
        t.update(pc.field("id") == 1, {"name": "Jeffrey"}),
        t.update(pc.field("id") == 4, {"name": "Maude"}),
        t.delete(pc.field("id").isin([2, 5])),
    ]
    for expected_version, result in enumerate(steps, start=1):
        if not result.committed or result.version != expected_version:
            raise SystemExit(f"unexpected commit result {result}")
    got = dict(zip(*t.snapshot().to_arrow().sort_by("id").to_pydict().values()))
    if got != ROWS_V5:
        raise SystemExit(f"unexpected final rows {got}")


def regenerate() -> None:
    os.makedirs(GOLDEN_DIR, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".people-", dir=GOLDEN_DIR)
    try:
        build(os.path.join(tmp, "people"))
        if os.path.exists(PEOPLE):
            shutil.rmtree(PEOPLE)
        os.replace(os.path.join(tmp, "people"), PEOPLE)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for root, _dirs, files in sorted(os.walk(PEOPLE)):
        for name in sorted(files):
            print(os.path.relpath(os.path.join(root, name), HERE))


def print_examples() -> None:
    """Every log line of the golden table and the checkpoint's key-value
    metadata lines, pretty-printed; then the checkpoint's rows."""
    import pyarrow.parquet as pq

    log_dir = os.path.join(PEOPLE, "_ct_log")
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


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", action="store_true", help="print the golden log lines, pretty-printed")
    args = ap.parse_args(argv)
    if args.examples:
        print_examples()
    else:
        regenerate()


if __name__ == "__main__":
    main(sys.argv[1:])
