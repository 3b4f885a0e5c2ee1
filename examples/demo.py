"""ctfile end-to-end demo: ``./dev demo``.

Creates ``demo-table/`` next to this repository's README (replaced on each
run), then walks through the worked example of the spec: create, insert,
update, delete, time travel and the three change-scan modes.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

import ctfile


def show(title: str, table: pa.Table) -> None:
    print(f"\n== {title}")
    print(table.to_pandas().to_string(index=False))


def main(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
    people = ctfile.create_table(path, schema)
    print(f"created {people.uri} at version {people.version}")

    people.insert(pa.table({"id": [1, 2], "name": ["Jeff", "Donny"]}))
    people.insert(pa.table({"id": [3, 4, 5], "name": ["Walter", "Maud", "Uli"]}))
    people.update(pc.field("id") == 1, {"name": "Jeffrey"})
    people.update(pc.field("id") == 4, {"name": "Maude"})
    r = people.delete(pc.field("id").isin([2, 5]))
    print(f"delete committed version {r.version}: {r.num_deleted_rows} rows deleted, "
          f"{r.num_copied_rows} copied by copy-on-write")

    show("latest snapshot (version 5)", people.snapshot().to_arrow().sort_by("id"))
    show("time travel: version 2, with hidden row lineage",
         people.snapshot(2).to_arrow(include_hidden=True).sort_by("id"))
    v2_time = people.snapshot(2).timestamp
    print(f"\nsnapshot(timestamp={v2_time.isoformat()}) resolves to version "
          f"{people.snapshot(timestamp=v2_time).version}")

    for info in ("default", "append_only", "audit"):
        cs = people.changes(start_version=2, end_version=5, information=info)
        show(f"changes 2..5, information={info!r} (plan shape {cs.plan_shape})", cs.to_arrow())
    show("changes 2..5 as a two-event changelog (op: 0 append, 1 retract, 2/3 correct from/to)",
         people.changes(start_version=2, end_version=5, changelog="op").to_arrow())

    print("\n== history")
    for h in people.history():
        print(f"  v{h.version}  {h.timestamp:%H:%M:%S.%f}  {h.operation:<12} {h.operation_metrics}")
    print(f"\nthe table is in {path}/ : `ls -R {path}` to see the log and micro-partitions")


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "demo-table"
    main(target)
