"""A stream consumer and its exactly-once check, shared by the stream crash
tests (``tests/crash``, ``tests/objectstore``) and the stream property test
(not a test module; importable because ``tests/conftest.py`` puts this
directory on ``sys.path``).

The consumer applies a stream's pending changes to its target as a *log of
consumed changes*: every change row is appended with its action, its
``METADATA$ROW_ID`` and the interval ``lo..hi`` of the change scan it came
from. What the target holds then says exactly what was consumed, and
:func:`check_exactly_once` compares it with change scans of the source read
afterwards (SPEC §Streams, SPEC §Change scans).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc

import ctfile
from ctfile.format.actions import AddPartition, SetTransaction
from ctfile.format.paths import DATA_DIR
from ctfile.log.streams import StreamStore

ACTION, ISUPDATE, ROW_ID = "METADATA$ACTION", "METADATA$ISUPDATE", "METADATA$ROW_ID"

#: The consumed-changes log: the source's ``uid`` and ``v``, the change's
#: action, update flag and row id, and the change scan's interval.
TARGET_SCHEMA = pa.schema(
    [
        ("uid", pa.int64()), ("v", pa.string()), ("action", pa.string()), ("isupdate", pa.bool_()),
        ("rid", pa.string()), ("lo", pa.int64()), ("hi", pa.int64()),
    ]
)
CHANGE_COLUMNS = ["uid", "v", ACTION, ISUPDATE, ROW_ID]

SOURCE_SCHEMA = pa.schema([pa.field("uid", pa.int64(), nullable=False), pa.field("v", pa.string())])
STREAM = "feed"
#: The crash tests' stream offset when created (after the insert and its
#: CREATE STREAM commit), and the last version before the consumption.
OFFSET, LATEST = 2, 5


def make_source(uri: str, storage_options=None) -> ctfile.Table:
    """The crash tests' source: 6 rows at version 1, stream ``feed`` with
    initial rows (offset 2), then an update, a delete and an insert
    (versions 3-5)."""
    src = ctfile.create_table(uri, SOURCE_SCHEMA, partition_rows=2, storage_options=storage_options)
    src.insert(pa.table({"uid": range(6), "v": list("abcdef")}, schema=SOURCE_SCHEMA))
    src.create_stream(STREAM, initial_rows=True)
    assert src.stream(STREAM).offset == OFFSET
    src.update(pc.field("uid") == 4, {"v": "E"})
    src.delete(pc.field("uid") == 5)
    src.insert(pa.table({"uid": [100, 101], "v": ["x", "y"]}, schema=SOURCE_SCHEMA))
    assert src.version == LATEST
    return src


def change_rows(cs) -> pa.Table:
    """The rows of ChangeSet ``cs`` in :data:`TARGET_SCHEMA`."""
    t = cs.to_arrow().select(CHANGE_COLUMNS)
    n = t.num_rows
    return pa.table(
        list(t.columns) + [pa.array([cs.start_version] * n, pa.int64()), pa.array([cs.end_version] * n, pa.int64())],
        schema=TARGET_SCHEMA,
    )


def consume(stream: ctfile.Stream, target: ctfile.Table, *, before_commit: Callable | None = None):
    """Consume ``stream`` into ``target`` exactly once; the commit's result.
    ``before_commit(changes)`` runs once the files are staged."""
    with target.transaction(consuming=stream) as tx:
        cs = stream.pending()
        tx.insert(change_rows(cs))
        if before_commit is not None:
            before_commit(cs)
    return tx.result


def data_files(table: ctfile.Table) -> set[str]:
    return {i.path for i in table.storage.list_dir(DATA_DIR) if i.path.endswith(".parquet")}


def referenced(table: ctfile.Table) -> set[str]:
    """Every data file some version of ``table`` adds."""
    t = table.refresh()
    return {a.path for v in range(t.version + 1) for a in t.log.read_entry(v) if isinstance(a, AddPartition)}


def operations(table: ctfile.Table) -> list[str]:
    """The operation of every commit after version 0."""
    t = table.refresh()
    return [t.log.commit_info(v).operation for v in range(1, t.version + 1)]


def stream_txn(target: ctfile.Table, version: int, app_id: str) -> list[SetTransaction]:
    """The ``txn`` actions of ``app_id`` in ``target``'s entry ``version``."""
    return [a for a in target.log.read_entry(version) if isinstance(a, SetTransaction) and a.app_id == app_id]


def state_sequences(source: ctfile.Table, name: str = STREAM) -> list[int]:
    """The sequence numbers of the state files of stream ``name``."""
    files = StreamStore(source.storage).listing().get(name)
    return [] if files is None else sorted(files.files)


def as_tuples(t: pa.Table) -> list[tuple]:
    names = [f.name for f in TARGET_SCHEMA]
    return [tuple(r[n] for n in names) for r in t.select(names).to_pylist()]


@dataclass(frozen=True)
class Consumed:
    """What the target says was consumed: its rows grouped by interval."""

    batches: dict[tuple[int, int], list[tuple]]

    @classmethod
    def read(cls, target: ctfile.Table) -> "Consumed":
        out: dict[tuple[int, int], list[tuple]] = {}
        for row in as_tuples(target.refresh().to_arrow()):
            out.setdefault((row[5], row[6]), []).append(row)
        return cls(dict(sorted(out.items())))

    @property
    def rows(self) -> list[tuple]:
        return [r for rows in self.batches.values() for r in rows]


def check_exactly_once(
    source: ctfile.Table, target: ctfile.Table, *, first: int, last: int, information: str = "default",
    initial_rows: bool = False, initial_pending: bool = False,
) -> Consumed:
    """The target holds the changes of ``first..last`` of ``source`` exactly once.

    Every interval in the target is disjoint from the others and holds
    exactly the change scan of that interval (with the initial rows for the
    one that starts at ``first``, if ``initial_rows``); the versions between
    them and after them up to ``last`` have no changes to hand out (a
    consumption whose interval had no rows leaves no row), nor initial rows
    unless the stream still has them pending (``initial_pending``). In ``default``
    mode, applying the consumed changes in order to the empty table (or to
    the snapshot before ``first``) gives the snapshot at ``last``.
    """
    consumed = Consumed.read(target)
    expected_from = first
    initial_open = initial_rows  # the initial rows are not consumed yet
    for (lo, hi), rows in consumed.batches.items():
        assert lo >= expected_from, (f"interval {lo}..{hi} overlaps what was consumed before", consumed.batches.keys())
        if lo > expected_from:
            _assert_no_changes(source, expected_from, lo - 1, information, initial_open)
        initial, initial_open = initial_open and lo == first, False
        want = change_rows(source.changes(start_version=lo, end_version=hi, information=information,
                                          initial_rows=initial))
        assert Counter(rows) == Counter(as_tuples(want)), ("interval", lo, hi, rows, as_tuples(want))
        expected_from = hi + 1
    assert expected_from <= last + 1, f"the target holds changes up to {expected_from - 1}, after the offset {last}"
    _assert_no_changes(source, expected_from, last, information, initial_open and not initial_pending)
    if information == "default":
        base = {} if initial_rows and not initial_pending else snapshot_by_rid(source, first - 1)
        assert apply_changes(base, consumed.rows) == snapshot_by_rid(source, last)
    return consumed


def _assert_no_changes(source, lo: int, hi: int, information: str, initial_rows: bool) -> None:
    if lo > hi and not initial_rows:
        return
    n = source.changes(start_version=lo, end_version=max(hi, lo - 1), information=information,
                       initial_rows=initial_rows).to_arrow().num_rows
    assert n == 0, f"versions {lo}..{hi} have {n} changes the target never received"


def apply_changes(rows_by_rid: dict[str, tuple], changes: list[tuple]) -> dict[str, tuple]:
    """Apply consumed change rows, interval by interval (a change scan holds
    at most one DELETE and one INSERT per row id: DELETEs first)."""
    out = dict(rows_by_rid)
    by_interval: dict[tuple[int, int], list[tuple]] = {}
    for r in changes:
        by_interval.setdefault((r[5], r[6]), []).append(r)
    for _, rows in sorted(by_interval.items()):
        for uid, v, action, _, rid, _, _ in sorted(rows, key=lambda r: r[2] != "DELETE"):
            if action == "DELETE":
                assert out.pop(rid) == (uid, v), ("a DELETE of a row not live with those values", rid, uid, v)
            else:
                assert rid not in out, ("an INSERT of a live row", rid)
                out[rid] = (uid, v)
    return out


def snapshot_by_rid(source: ctfile.Table, version: int) -> dict[str, tuple]:
    """The snapshot at ``version`` by ``METADATA$ROW_ID`` (empty before version 0)."""
    if version < 0:
        return {}
    cs = source.changes(start_version=version + 1, end_version=version, initial_rows=True)
    return {r[ROW_ID]: (r["uid"], r["v"]) for r in cs.to_arrow().select(["uid", "v", ROW_ID]).to_pylist()}
