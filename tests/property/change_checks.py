"""Checks shared by the property tests of change scans (SPEC §Change scans).

``test_changes_model.py`` and ``test_schema_model.py`` read change scans the
same way: every scan whose plan reads change files (shapes CAPTURED and
MIXED) is also planned from partitions alone on the same table, and the two
must return the same rows; update pairs must be adjacent, DELETE then
INSERT; a filter keeps the rows that pass it, a pair losing one image
becoming that image alone.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

import xxhash

import ctfile
from ctfile.reader.change_plan import PlanShape, plan_changes
from ctfile.reader.change_scan import ChangeSet

ACTION, ISUPDATE, ROW_ID = "METADATA$ACTION", "METADATA$ISUPDATE", "METADATA$ROW_ID"
CVERSION, CTS = "METADATA$COMMIT_VERSION", "METADATA$COMMIT_TIMESTAMP"
# changelog="op": (ACTION, ISUPDATE) -> op code.
OP_CODES = {("INSERT", False): 0, ("DELETE", False): 1, ("DELETE", True): 2, ("INSERT", True): 3}


def srt(xs) -> list:
    """Sort values that may hold None."""
    return sorted(xs, key=repr)


def row_id_string(table_id: str, row_id: int) -> str:
    """``METADATA$ROW_ID`` of a row id, computed from SPEC §Change scans alone:
    XXH3-64 of the 8-byte little-endian row id, seeded with the XXH3-64 of
    the UTF-8 ``tableId``, as 16 lower-case hex digits."""
    seed = xxhash.xxh3_64_intdigest(table_id.encode("utf-8"))
    return xxhash.xxh3_64_hexdigest(row_id.to_bytes(8, "little", signed=True), seed=seed)


def by_partitions(t: ctfile.Table, cs: ChangeSet) -> ChangeSet:
    """``cs`` planned from partitions alone (no change file read), in the
    schema of the end of its interval (SPEC §Change scans, schema changes)."""
    plan = plan_changes(t.log, cs.scan, latest=t.version, use_change_files=False)
    end = t.snapshot(max(cs.end_version, 0))
    return ChangeSet(t.storage, end.table_schema, end.metadata.table_id, cs.scan, plan)


def check_pairs_adjacent(rows: list[dict], ctx) -> None:
    """Every update pair is DELETE-then-INSERT (op 2 then 3), adjacent."""

    def kind(r) -> tuple[str, bool]:
        if "op" in r:
            return ("INSERT" if r["op"] in (0, 3) else "DELETE", r["op"] >= 2)
        return (r[ACTION], r[ISUPDATE])

    for i, r in enumerate(rows):
        if kind(r) == ("DELETE", True):
            assert i + 1 < len(rows), (ctx, "pair cut short", r)
            nxt = rows[i + 1]
            assert kind(nxt) == ("INSERT", True) and nxt[ROW_ID] == r[ROW_ID], (ctx, r, nxt)


def _canon(row: dict) -> tuple:
    """A row as compared: NaN equal to NaN (``nan == nan`` is false)."""
    return tuple((k, "NaN" if isinstance(v, float) and v != v else v) for k, v in row.items())


def scan_rows(t: ctfile.Table, ctx, **kw) -> list[dict]:
    """The rows of ``t.changes(**kw)``, checked equal (as a multiset) to the
    same scan planned from partitions alone when its plan reads change files."""
    cs = t.changes(**kw)
    rows = cs.to_arrow().to_pylist()
    if cs.plan_shape in (PlanShape.CAPTURED, PlanShape.MIXED):
        ref = by_partitions(t, cs)
        assert ref.plan_shape not in (PlanShape.CAPTURED, PlanShape.MIXED)
        want = ref.to_arrow().to_pylist()
        assert srt(map(_canon, rows)) == srt(map(_canon, want)), (ctx, kw, "captured vs partitions")
        check_pairs_adjacent(rows, (ctx, kw))
    return rows


def filtered(rows: list[dict], keep: Callable[[dict], bool]) -> list[dict]:
    """``rows`` (an unfiltered scan's output) as a scan with a filter must
    return them: the rows ``keep`` accepts, an update pair of which one image
    is dropped becoming the other image alone with ``METADATA$ISUPDATE``
    false (SPEC §Change scans, filters). A pair is one row id within one
    commit (``audit`` lists a row once per commit)."""
    kept = [r for r in rows if keep(r)]
    n_upd = Counter((r[ROW_ID], r.get(CVERSION)) for r in kept if r[ISUPDATE])
    return [{**r, ISUPDATE: bool(r[ISUPDATE] and n_upd[r[ROW_ID], r.get(CVERSION)] == 2)} for r in kept]
