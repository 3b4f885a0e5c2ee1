"""Checkpoints as Arrow tables (SPEC §Checkpoints). Pure: no I/O.

A checkpoint is a Parquet file with one row per live partition, in flat typed
columns (:data:`COLUMNS`); a partition's statistics are one string column
holding the JSON text of its stats object, decoded only when read (see
:class:`~ctfile.format.actions.DeferredStats`). The table-level actions
(``checkpoint`` header, ``protocol``, ``metadata``, ``txn``) are NDJSON,
encoded like a log entry, in the file's key-value metadata under
:data:`METADATA_KEY`. :mod:`ctfile.log.manifest` turns the table into bytes
and back.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any, Callable, Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.actions import (
    Action,
    AddPartition,
    CheckpointHeader,
    CommitInfo,
    Metadata,
    Partition,
    Protocol,
    RemovePartition,
    SetTransaction,
    partitions_from_columns,
    pending_stats_text,
)
from ctfile.format.codec import decode_actions, encode_actions
from ctfile.format.partition_stats import stats_to_text
from ctfile.format.errors import CorruptLogError
from ctfile.format.paths import validate_relative_path

METADATA_KEY = "ctfile.checkpoint"
"""Key-value metadata key of the table-level actions (NDJSON)."""

COLUMNS: tuple[tuple[str, pa.DataType, bool], ...] = (
    # (column, Arrow type, nullable); the JSON field of an `add` of the same name
    ("path", pa.string(), False),
    ("sizeBytes", pa.int64(), False),
    ("numRecords", pa.int64(), False),
    ("firstRowId", pa.int64(), False),
    ("defaultRowVersion", pa.int64(), False),
    ("modificationTime", pa.int64(), False),
    ("checksum", pa.string(), True),
    ("stats", pa.string(), True),
    ("restoredRowVersion", pa.int64(), True),
)
#: Columns written only when a row holds a value (SPEC §Checkpoints): a
#: checkpoint without them is what earlier revisions wrote.
OPTIONAL_COLUMNS = frozenset({"restoredRowVersion"})
CHECKPOINT_SCHEMA = pa.schema([pa.field(name, typ, nullable=nullable) for name, typ, nullable in COLUMNS])
_NON_NEGATIVE = ("sizeBytes", "numRecords", "firstRowId", "defaultRowVersion")
_TABLE_ACTIONS = (CheckpointHeader, Protocol, Metadata, SetTransaction)
# What writers produce: one segment under data/ with no leading dot. Other
# paths are checked one by one with validate_relative_path. (RE2: `$` is the
# end of the text.)
_PLAIN_DATA_PATH = r"^data/[A-Za-z0-9_-][A-Za-z0-9_.-]*$"


def checkpoint_to_arrow(actions: Sequence[Action], partitions: Iterable[Partition]) -> pa.Table:
    """The checkpoint table of a state.

    ``actions`` are the table-level actions in file order: the header, the
    protocol, the metadata, then one ``txn`` per application id; their
    NDJSON goes into the key-value metadata. ``partitions`` become the rows.
    Statistics still undecoded (read from an earlier checkpoint) are copied as
    their text; the others are encoded as in an ``add`` line.

    Examples
    --------
    >>> from ctfile.format.actions import *
    >>> from ctfile.format.schema import Field, Schema
    >>> md = Metadata("t1", Schema((Field(1, "id", "long", False),)), 0)
    >>> p = Partition("data/a.parquet", 512, 2, 0, 1, 7, None, PartitionStats(2, {1: 1}, {1: 2}, {1: 0}))
    >>> t = checkpoint_to_arrow([CheckpointHeader(1, 7, 2, 1), Protocol(), md], [p])
    >>> t.column("stats").to_pylist()
    ['{"numRecords":2,"minValues":{"1":1},"maxValues":{"1":2},"nullCount":{"1":0}}']
    >>> checkpoint_from_arrow(t, where="cp")[1] == [p]
    True
    """
    actions = _table_actions(actions)
    parts = list(partitions)
    if actions[0].num_partitions != len(parts):
        raise ValueError(f"the header says {actions[0].num_partitions} partitions, {len(parts)} given")
    columns = _row_columns(parts)
    keep = [i for i, values in enumerate(columns) if _is_written(COLUMNS[i][0], values)]
    arrays = [pa.array(columns[i], type=COLUMNS[i][1]) for i in keep]
    schema = pa.schema([CHECKPOINT_SCHEMA.field(i) for i in keep]).with_metadata(
        {METADATA_KEY: encode_actions(actions)}
    )
    return pa.Table.from_arrays(arrays, schema=schema)


def _table_actions(actions: Sequence[Action]) -> list[Action]:
    """``actions`` as a list, if they are a header then table-level actions
    (protocol, metadata, txns); else ValueError (a caller's mistake)."""
    actions = list(actions)
    bad = [type(a).__name__ for a in actions if not isinstance(a, _TABLE_ACTIONS)]
    if bad or not actions or not isinstance(actions[0], CheckpointHeader):
        raise ValueError(f"checkpoint actions must be a header, protocol, metadata and txns; found {bad or actions}")
    return actions


def _row_columns(parts: list[Partition]) -> tuple[list, ...]:
    """The values of each of :data:`COLUMNS`, in its order, one per partition."""
    return tuple(list(map(value, parts)) for value in _ROW_VALUES)


def _stats_text(p: Partition) -> str | None:
    """The JSON text of ``p``'s statistics: still undecoded, copied as read."""
    text = pending_stats_text(p)
    if text is None:
        s = p.stats
        text = None if s is None else stats_to_text(s)
    return text


#: How a partition gives the value of each of :data:`COLUMNS`, in its order.
_ROW_VALUES: tuple[Callable[[Partition], Any], ...] = (
    attrgetter("path"),
    attrgetter("size_bytes"),
    attrgetter("num_records"),
    attrgetter("first_row_id"),
    attrgetter("default_row_version"),
    attrgetter("modification_time"),
    attrgetter("checksum"),
    _stats_text,
    attrgetter("restored_row_version"),
)


def _is_written(name: str, values: list) -> bool:
    """Whether the column ``name`` goes into the file: an optional column
    only when a row holds a value (SPEC §Checkpoints)."""
    return name not in OPTIONAL_COLUMNS or any(v is not None for v in values)


def checkpoint_table_actions_from_metadata(metadata: dict | None, *, where: str) -> tuple[CheckpointHeader, list[Action]]:
    """The header and the table-level actions a checkpoint's Parquet
    key-value ``metadata`` holds under :data:`METADATA_KEY`: all a reader
    needs of the checkpoint but its partitions, found in the file's footer
    without decoding a row.

    Raises
    ------
    CorruptLogError
        The key is missing, its value is not NDJSON of valid actions, or it
        holds an ``add``, ``remove`` or ``commitInfo``, or no header.
    """
    raw = (metadata or {}).get(METADATA_KEY.encode())
    if raw is None:
        raise CorruptLogError(f"{where}: no {METADATA_KEY!r} key-value metadata (not a ctfile checkpoint)")
    actions = decode_actions(raw, where=f"{where} {METADATA_KEY}")
    misplaced = [type(a).__name__ for a in actions if isinstance(a, (AddPartition, RemovePartition, CommitInfo))]
    if misplaced:
        raise CorruptLogError(f"{where}: {METADATA_KEY} may hold only checkpoint/protocol/metadata/txn, found {misplaced}")
    header = next((a for a in actions if isinstance(a, CheckpointHeader)), None)
    if header is None:
        raise CorruptLogError(f"{where}: {METADATA_KEY} lacks the checkpoint header")
    return header, actions


def check_row_count(header: CheckpointHeader, num_rows: int, *, where: str) -> None:
    """SPEC §Checkpoints: one row per live partition, as many as the header says."""
    if num_rows != header.num_partitions:
        raise CorruptLogError(f"{where}: the header says {header.num_partitions} partitions, the file holds {num_rows} rows")


def checkpoint_from_arrow(table: pa.Table, *, where: str) -> tuple[list[Action], list[Partition]]:
    """The table-level actions and the partitions of a checkpoint table.

    Checks everything but the statistics, which stay JSON text until first
    read (a bad one raises :class:`CorruptLogError` then). Unknown columns and
    unknown actions in the metadata are ignored.

    Raises
    ------
    CorruptLogError
        A missing key or column, a column of the wrong type, a null in a
        required column, a negative count, an unsafe path, a header whose
        ``numPartitions`` differs from the number of rows, or partitions the
        header's ``version`` / ``nextRowId`` cannot hold.
    """
    header, actions = checkpoint_table_actions_from_metadata(table.schema.metadata, where=where)

    cols = _checked_columns(table, where=where)
    check_row_count(header, table.num_rows, where=where)
    if table.num_rows:
        _check_row_ids_and_versions(cols, header, where=where)
    paths = cols["path"].to_pylist()
    _check_paths(cols["path"], paths, where=where)
    return actions, partitions_from_columns(
        paths, cols["sizeBytes"].to_pylist(), cols["numRecords"].to_pylist(),
        cols["firstRowId"].to_pylist(), cols["defaultRowVersion"].to_pylist(),
        cols["modificationTime"].to_pylist(), cols["checksum"].to_pylist(), cols["stats"].to_pylist(),
        where=where,
        restored_row_versions=cols["restoredRowVersion"].to_pylist() if "restoredRowVersion" in cols else None,
    )


def _checked_columns(table: pa.Table, *, where: str) -> dict[str, pa.ChunkedArray]:
    """The columns of :data:`COLUMNS` in ``table``, by name: each present
    once (an optional one may be absent), of its type (a string column in
    any of Arrow's layouts, cast to ``string``), without nulls where
    required."""
    names = table.schema.names
    cols: dict[str, pa.ChunkedArray] = {}
    for name, typ, nullable in COLUMNS:
        if name in OPTIONAL_COLUMNS and name not in names:
            continue
        if names.count(name) != 1:
            raise CorruptLogError(f"{where}: expected one column {name!r}, found {names.count(name)}")
        col = _of_type(table.column(name), name, typ, where=where)
        if not nullable and col.null_count:
            raise CorruptLogError(f"{where}: column {name!r} holds {col.null_count} nulls")
        cols[name] = col
    return cols


def _of_type(col: pa.ChunkedArray, name: str, typ: pa.DataType, *, where: str) -> pa.ChunkedArray:
    """``col`` as ``typ``: a large or view string column cast to ``string``,
    any other mismatch :class:`CorruptLogError`."""
    if col.type == typ:
        return col
    if typ == pa.string() and (pa.types.is_large_string(col.type) or pa.types.is_string_view(col.type)):
        return col.cast(pa.string())
    raise CorruptLogError(f"{where}: column {name!r} should be {typ}, found {col.type}")


def _check_row_ids_and_versions(cols: dict[str, pa.ChunkedArray], header: CheckpointHeader, *, where: str) -> None:
    """SPEC §Checkpoints: counts and ids ``>= 0``, row versions up to the
    checkpoint's version, row ids below its ``nextRowId``."""
    for name in _NON_NEGATIVE:
        low = pc.min(cols[name]).as_py()
        if low < 0:
            raise CorruptLogError(f"{where}: column {name!r} must be >= 0, found {low}")
    newest = pc.max(cols["defaultRowVersion"]).as_py()
    if newest > header.version:
        raise CorruptLogError(f"{where}: a partition has defaultRowVersion {newest} > the checkpoint's version {header.version}")
    try:
        top = pc.max(pc.add_checked(cols["firstRowId"], cols["numRecords"])).as_py()
    except pa.ArrowInvalid as e:
        raise CorruptLogError(f"{where}: firstRowId + numRecords overflows ({e})") from e
    if top > header.next_row_id:
        raise CorruptLogError(f"{where}: a partition holds row ids up to {top - 1}, beyond nextRowId {header.next_row_id}")
    _check_restored(cols, where=where)


def _check_paths(column: pa.ChunkedArray, paths: list[str], *, where: str) -> None:
    """Each path relative and safe: the plain ones writers produce at once,
    the others one by one with :func:`validate_relative_path`."""
    plain = pc.match_substring_regex(column, _PLAIN_DATA_PATH)
    if not pc.all(plain).as_py():
        for path, ok in zip(paths, plain.to_pylist()):
            if not ok:
                validate_relative_path(path, where=where)


def _check_restored(cols: dict[str, pa.ChunkedArray], *, where: str) -> None:
    """SPEC §Checkpoints: a ``restoredRowVersion`` is ``>= 0`` and below
    its row's ``defaultRowVersion`` (a re-add's is an earlier version's)."""
    restored = cols.get("restoredRowVersion")
    if restored is None or restored.null_count == len(restored):
        return
    if pc.min(restored).as_py() < 0:
        raise CorruptLogError(f"{where}: column 'restoredRowVersion' must be >= 0, found {pc.min(restored).as_py()}")
    if pc.any(pc.greater_equal(restored, cols["defaultRowVersion"])).as_py():
        raise CorruptLogError(f"{where}: a partition's restoredRowVersion is not below its defaultRowVersion")
