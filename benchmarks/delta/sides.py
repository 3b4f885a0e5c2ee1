"""The two engines of ``bench_delta.py`` behind one interface, and what each
log entry says about its change data.

:class:`Ctfile` and :class:`Delta` each create a table, apply one statement of
the history (``step``) and run a change scan (``scan``), so the history
builder and the timing loops treat them alike. A :class:`Ctfile` made with
``capture=True`` creates its table with ``ctfile.changeCapture =
before_after`` (SPEC §Change capture); everything else about it is the same.

:func:`capture_status` and :func:`delta_cdc` read a committed log entry to
tell how much change data the statement wrote: ctfile's change files (and
whether the commit is *captured*, so its change scan can skip the partitions
it rewrote) and delta-rs's ``_change_data`` files. Neither assumes that any
were written: a ctfile build without change capture writes none, and then
its commits are simply not captured.

:func:`consolidate_cdf` is what a delta-rs user must run on ``load_cdf``
output to get the net changes ctfile's default change scan returns.
"""

from __future__ import annotations

import json
import os
from decimal import Decimal
from pathlib import Path

KEYS = ["l_orderkey", "l_linenumber"]
CDF_CONFIG = {"delta.enableChangeDataFeed": "true"}
CAPTURE_PROPERTIES = {"ctfile.changeCapture": "before_after"}
#: The goals of the figures (ratio = ctfile / anchor unless named otherwise).
TARGETS = {
    "dml_ratio_max": 1.0,
    "e2e_ratio_max": 0.5,
    "append_vs_pyarrow_max": 1.3,
    "append_vs_delta_max": 1.0,
    "mindelta_vs_delta_max": 1.0,
    "hidden_fraction_max": 0.01,
    # issue 13, ctfile.changeCapture = before_after:
    "capture_scan_vs_delta_max": 1.0,      # each statement's change scan vs load_cdf(v, v)
    "capture_mindelta_vs_delta_max": 1.0,  # minimum delta vs load_cdf + consolidation
    "capture_dml_vs_off_max": 1.05,        # the statement vs the same with capture off
    "change_bytes_vs_delta_max": 1.0,      # change-file bytes vs delta-rs's _change_data bytes
    "capture_e2e_update_max": 0.5,         # UPDATE + its change scan vs delta-rs's
}


def _order_key_mod(k, m: int, r: int):
    """``k % m == r`` as a pyarrow expression (Arrow has no modulo kernel:
    integer division truncates, so k - (k / m) * m is the remainder)."""
    return (k - (k / m) * m) == r


def _writer_properties():
    from deltalake import WriterProperties

    return WriterProperties(compression="ZSTD")


def pa_table(reader):
    """A delta-rs (arro3) RecordBatchReader as a pyarrow Table (Arrow C stream, no copy)."""
    import pyarrow as pa

    return pa.table(reader) if not isinstance(reader, pa.Table) else reader


class Ctfile:
    """ctfile's side; ``capture=True``: the table captures changes (before_after)."""

    def __init__(self, w: dict, *, capture: bool = False):
        self.w = w
        self.capture = capture
        self.name = "ctfile (capture on)" if capture else "ctfile"

    def create(self, uri: Path, lineitem):
        import ctfile

        props = CAPTURE_PROPERTIES if self.capture else None
        t = ctfile.create_table(uri, lineitem.schema, compression="zstd", properties=props)
        r = t.insert(lineitem)
        return t, {"version": r.version, "rows": r.num_inserted_rows}

    def open(self, uri: Path):
        import ctfile

        return ctfile.open_table(uri)

    def step(self, t, op: str, i: int = -1) -> dict:
        import pyarrow as pa
        import pyarrow.compute as pc

        if op == "RF1":
            r = t.insert(self.w["rf1"][i])
        elif op in ("RF2", "DELETE"):
            r = t.delete(pc.field("l_orderkey").isin(pa.array(self.w["rf2"][i], pa.int64())))
        elif op == "UPDATE":
            dec = pa.decimal128(15, 2)
            r = t.update(_order_key_mod(pc.field("l_orderkey"), 100, 7),
                         {"l_discount": pc.field("l_discount") + pa.scalar(Decimal("0.01"), dec)})
        elif op == "MERGE":
            r = t.merge(self.w["merge"], KEYS, when_matched="update", when_not_matched="insert")
        elif op == "COMPACT":
            r = t.compact()
        else:
            raise ValueError(op)
        assert r.committed, (op, r)
        return {"version": r.version, "inserted": r.num_inserted_rows, "updated": r.num_updated_rows,
                "deleted": r.num_deleted_rows, "files_added": r.num_added_partitions,
                "files_removed": r.num_removed_partitions}

    def scan(self, t, v0: int, v1: int, information: str = "default"):
        return t.changes(start_version=v0, end_version=v1, information=information).to_arrow()


class Delta:
    name = "delta-rs"

    def __init__(self, w: dict):
        self.w = w
        self.wp = _writer_properties()

    def create(self, uri: Path, lineitem):
        from deltalake import DeltaTable, write_deltalake

        write_deltalake(str(uri), lineitem, configuration=CDF_CONFIG, writer_properties=self.wp)
        t = DeltaTable(str(uri))
        return t, {"version": t.version(), "rows": lineitem.num_rows}

    def open(self, uri: Path):
        from deltalake import DeltaTable

        return DeltaTable(str(uri))

    def step(self, t, op: str, i: int = -1) -> dict:
        from deltalake import write_deltalake

        m: dict
        if op == "RF1":
            write_deltalake(t, self.w["rf1"][i], mode="append", writer_properties=self.wp)
            m = {"inserted": self.w["rf1"][i].num_rows}
        elif op in ("RF2", "DELETE"):
            keys = ",".join(str(k) for k in self.w["rf2"][i])
            r = t.delete(f"l_orderkey IN ({keys})", writer_properties=self.wp)
            m = {"deleted": r["num_deleted_rows"]}
        elif op == "UPDATE":
            r = t.update(updates={"l_discount": "l_discount + 0.01"}, predicate="l_orderkey % 100 = 7",
                         writer_properties=self.wp)
            m = {"updated": r["num_updated_rows"]}
        elif op == "MERGE":
            r = (t.merge(self.w["merge"], "t.l_orderkey = s.l_orderkey AND t.l_linenumber = s.l_linenumber",
                         source_alias="s", target_alias="t", writer_properties=self.wp)
                 .when_matched_update_all().when_not_matched_insert_all().execute())
            m = {"inserted": r["num_target_rows_inserted"], "updated": r["num_target_rows_updated"]}
        elif op == "COMPACT":
            r = t.optimize.compact(writer_properties=self.wp)
            m = {"files_added": r["numFilesAdded"], "files_removed": r["numFilesRemoved"]}
        else:
            raise ValueError(op)
        return {"version": t.version(), "inserted": 0, "updated": 0, "deleted": 0, **m}

    def scan(self, t, v0: int, v1: int, information: str = "default"):
        return pa_table(t.load_cdf(starting_version=v0, ending_version=v1))


# ---------------------------------------------------------------- what a log entry holds


def entry_files(t, version: int, root=None, *, removed: bool = False) -> list[str]:
    """The data files the ctfile log entry of ``version`` added (or ``removed``),
    under ``root`` (default: the table's own directory)."""
    from ctfile.format.actions import AddPartition, RemovePartition

    kind = RemovePartition if removed else AddPartition
    return [os.path.join(str(root or t.uri), a.path) for a in t.log.read_entry(version) if isinstance(a, kind)]


def capture_status(t, version: int) -> dict:
    """The change files a ctfile commit names, and whether it is captured.

    A commit is captured (SPEC §Change capture) when it names a change file,
    or when every data-changing remove it makes has ``deletesAllRows`` (which
    includes a commit that removes nothing, such as an INSERT). A change scan
    of an interval of captured commits reads no partition they removed; any
    other commit falls back to the partitions. ``change_bytes`` is the sum of
    the ``sizeBytes`` of the entry's ``change`` actions (0 when it names none).
    """
    from ctfile.format.actions import ChangeFile, RemovePartition

    actions = t.log.read_entry(version)
    changes = [a for a in actions if isinstance(a, ChangeFile)]
    removes = [a for a in actions if isinstance(a, RemovePartition) and a.data_change]
    return {"version": version, "change_files": len(changes),
            "change_bytes": sum(c.size_bytes for c in changes),
            "change_rows": sum(c.num_records for c in changes),
            "removes": len(removes), "removes_whole": sum(bool(r.deletes_all_rows) for r in removes),
            "captured": bool(changes) or all(r.deletes_all_rows for r in removes)}


def delta_cdc(uri, version: int) -> dict:
    """The ``_change_data`` files (``cdc`` actions) a Delta commit names, and their bytes."""
    path = Path(uri) / "_delta_log" / f"{version:020d}.json"
    files = size = 0
    for line in path.read_text().splitlines():
        if line.strip():
            action = json.loads(line)
            if "cdc" in action:
                files += 1
                size += int(action["cdc"]["size"])
    return {"version": version, "cdc_files": files, "cdc_bytes": size}


# ---------------------------------------------------------------- net changes from a Delta change feed


def consolidate_cdf(cdf):
    """Net changes from a Delta change data feed spanning several commits.

    What a user of ``load_cdf`` must do to get what ctfile's default change
    scan returns (one DELETE per row that existed before and not after, one
    INSERT per row that exists after and not before, and an update as a
    DELETE + INSERT pair): per key (``l_orderkey, l_linenumber``), order the
    events by commit version (within a commit the pre-image / delete before
    the post-image / insert), keep the first and the last event (pyarrow
    ``group_by(..., use_threads=False)`` with ``first`` / ``last``). The first
    event's row is the before-image if it is a ``delete`` or
    ``update_preimage`` (otherwise the key did not exist before); the last
    event's row is the after-image if it is an ``insert`` or
    ``update_postimage``. A key with both images whose data columns are all
    equal is dropped (no net change). delta-rs returns ``string_view``
    columns, which pyarrow cannot ``take``; they are cast to ``string`` first
    (part of the cost). Output: the data columns plus
    ``_action`` (DELETE / INSERT) and ``_isupdate``, DELETEs first.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    data_cols = [c for c in cdf.column_names if c not in ("_change_type", "_commit_version", "_commit_timestamp")]
    # delta-rs returns string_view columns, which pyarrow cannot take() or
    # filter(); a pyarrow user has to cast them to string first.
    views = [c for c in data_cols if pa.types.is_string_view(cdf.schema.field(c).type)]
    if views:
        cdf = cdf.cast(pa.schema([pa.field(f.name, pa.string(), f.nullable) if f.name in views else f for f in cdf.schema]))
    ct = cdf.column("_change_type")
    post = pc.or_(pc.equal(ct, pa.scalar("insert", ct.type)), pc.equal(ct, pa.scalar("update_postimage", ct.type)))
    seq = pc.add(pc.multiply(pc.cast(cdf.column("_commit_version"), pa.int64()), 2), pc.cast(post, pa.int64()))
    n = cdf.num_rows
    ev = pa.table({**{k: cdf.column(k) for k in KEYS}, "_seq": seq, "_i": pa.array(np.arange(n, dtype=np.int64))})
    ev = ev.sort_by([(k, "ascending") for k in KEYS] + [("_seq", "ascending")])
    g = ev.group_by(KEYS, use_threads=False).aggregate([("_i", "first"), ("_i", "last")])
    first = g.column("_i_first").to_numpy()
    last = g.column("_i_last").to_numpy()
    post_np = post.to_numpy(zero_copy_only=False)
    has_before = ~post_np[first]
    has_after = post_np[last]
    both = has_before & has_after
    if both.any():  # drop keys whose before and after images are equal
        bi, ai = first[both], last[both]
        before = cdf.select(data_cols).take(pa.array(bi))
        after = cdf.select(data_cols).take(pa.array(ai))
        same = np.ones(len(bi), dtype=bool)
        for c in data_cols:
            same &= pc.fill_null(pc.equal(before.column(c), after.column(c)), False).to_numpy(zero_copy_only=False)
        keep = np.ones(len(first), dtype=bool)
        keep[np.flatnonzero(both)[same]] = False
        has_before &= keep
        has_after &= keep
        both &= keep
    dels = cdf.select(data_cols).take(pa.array(first[has_before]))
    ins = cdf.select(data_cols).take(pa.array(last[has_after]))
    dels = dels.append_column("_action", pa.array(["DELETE"] * dels.num_rows, pa.string()))
    dels = dels.append_column("_isupdate", pa.array(both[has_before]))
    ins = ins.append_column("_action", pa.array(["INSERT"] * ins.num_rows, pa.string()))
    ins = ins.append_column("_isupdate", pa.array(both[has_after]))
    return pa.concat_tables([dels, ins])
