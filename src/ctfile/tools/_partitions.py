"""Partitions as ``ctfile show`` and ``ctfile diff`` report them: each
partition with its statistics (:class:`PartitionRow`, :class:`ColumnStats`)
and the summary of the hidden row-lineage columns (:class:`HiddenSummary`,
SPEC §Row lineage), gathered from the log alone, never from a data file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import ctfile
from ctfile.tools import _output as out


class _Absent:
    """Marks a value the log does not hold (its key is left out of the JSON)."""

    def __repr__(self) -> str:
        return "ABSENT"


#: A statistic the partition does not record, or statistics ``diff`` does not report.
ABSENT: Any = _Absent()


def _present(items: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in items.items() if v is not ABSENT}


@dataclass(frozen=True)
class ColumnStats:
    """One column's statistics in a partition; ABSENT where none is recorded."""

    field_id: int
    min: Any = ABSENT
    max: Any = ABSENT
    null_count: Any = ABSENT
    nan_count: Any = ABSENT

    @classmethod
    def of(cls, stats: Any, fid: int) -> "ColumnStats":
        """The statistics of field ``fid`` in ``stats`` (a partition's)."""
        return cls(
            fid, stats.min_values.get(fid, ABSENT), stats.max_values.get(fid, ABSENT),
            stats.null_count.get(fid, ABSENT), stats.nan_count.get(fid, ABSENT),
        )

    def as_json(self) -> dict:
        return _present(out.fields_dict(self))

    def text(self, column: str) -> str:
        """``id [1..9] nulls=2 nans=1``: the range, and the counts that are not zero."""
        s = column
        if self.min is not ABSENT:
            s += f" [{out.json_line(self.min)}..{out.json_line(self.max)}]"
        if self.null_count not in (ABSENT, 0):
            s += f" nulls={self.null_count}"
        if self.nan_count not in (ABSENT, 0):
            s += f" nans={self.nan_count}"
        return s


def _column_names(schema: Any) -> dict[int, str]:
    names = {f.id: f.name for f in schema.fields}
    names[ctfile.ROW_ID_FIELD_ID] = ctfile.ROW_ID_COLUMN
    names[ctfile.ROW_VERSION_FIELD_ID] = ctfile.ROW_VERSION_COLUMN
    return names


def _column_stats(p: Any, schema: Any) -> dict[str, ColumnStats] | None:
    """Partition ``p``'s statistics by column name, in field-id order; None without statistics."""
    s = p.stats
    if s is None:
        return None
    names = _column_names(schema)
    fids = sorted(set(s.min_values) | set(s.max_values) | set(s.null_count) | set(s.nan_count))
    return {names.get(fid, f"field {fid}"): ColumnStats.of(s, fid) for fid in fids}


def _is_hidden_column(column: str) -> bool:
    """The row-lineage columns (SPEC §Row lineage), which the text leaves out of a partition's statistics."""
    return column.startswith("_ct_")


@dataclass(frozen=True)
class PartitionRow:
    """One partition (a data file of the table) as the log describes it."""

    path: str
    num_records: int
    size_bytes: int
    first_row_id: int
    default_row_version: int
    modification_time: str | None
    checksum: Any
    #: Set on a partition re-added by a RESTORE (SPEC §Restore).
    restored_row_version: int | None
    #: By column name; None: the partition has none; ABSENT: not gathered (``diff``).
    stats: Mapping[str, ColumnStats] | None = ABSENT

    @classmethod
    def of(cls, p: Any, schema: Any = None) -> "PartitionRow":
        """Partition ``p`` (a ``ctfile.Partition``), with its statistics when ``schema`` is given."""
        return cls(
            p.path, p.num_records, p.size_bytes, p.first_row_id, p.default_row_version,
            out.fmt_ms(p.modification_time) or None, p.checksum, p.restored_row_version,
            ABSENT if schema is None else _column_stats(p, schema),
        )

    def as_json(self) -> dict:
        d = out.fields_dict(self)
        if self.restored_row_version is None:
            del d["restored_row_version"]
        if self.stats is not ABSENT:
            d["stats"] = None if self.stats is None else {c: s.as_json() for c, s in self.stats.items()}
        return _present(d)

    @property
    def fresh_rows(self) -> int | None:
        """Rows inserted by the partition's own commit (row ids stored null), if its statistics tell."""
        row_id = (self.stats or {}).get(ctfile.ROW_ID_COLUMN)
        return None if row_id is None or row_id.null_count is ABSENT else row_id.null_count

    def stats_text(self) -> str:
        if self.stats is None:
            return "(no stats)"
        return "; ".join(s.text(c) for c, s in self.stats.items() if not _is_hidden_column(c))


# ---------------------------------------------------------------- hidden columns


def _counts_hidden_nulls(p: Any) -> bool:
    """Its statistics count the nulls of both hidden columns (what the summary is computed from)."""
    rid, rv = ctfile.ROW_ID_FIELD_ID, ctfile.ROW_VERSION_FIELD_ID
    return p.stats is not None and rid in p.stats.null_count and rv in p.stats.null_count


def _stores_no_hidden_value(p: Any) -> bool:
    """Every row takes its id and version from the partition (nothing stored)."""
    counts = p.stats.null_count
    return counts[ctfile.ROW_ID_FIELD_ID] == p.num_records and counts[ctfile.ROW_VERSION_FIELD_ID] == p.num_records


def _row_versions(p: Any) -> list[int]:
    """The bounds of the row versions in ``p``: its own version when some
    rows inherit it, the stored range when some rows store one."""
    rv = ctfile.ROW_VERSION_FIELD_ID
    inheriting = p.stats.null_count[rv]
    versions = [p.inherited_row_version] if inheriting else []
    if inheriting < p.num_records and rv in p.stats.min_values:
        versions += [p.stats.min_values[rv], p.stats.max_values[rv]]
    return versions


def _rows(partitions: Sequence[Any]) -> int:
    return sum(p.num_records for p in partitions)


def _null_count(partitions: Sequence[Any], fid: int) -> int:
    """The nulls of field ``fid`` in ``partitions`` (each counts them)."""
    return sum(p.stats.null_count[fid] for p in partitions)


@dataclass(frozen=True)
class HiddenSummary(out.FieldsAsJson):
    """The hidden row-lineage columns of a version, from the partitions' statistics."""

    next_row_id: int
    rows: int
    partitions_without_stats: int
    partitions_all_inherited: int
    #: Stored (null, null): inserted by the partition's own commit.
    rows_fresh: int
    #: Stored (id, null): changed by the partition's commit.
    rows_updated: int
    #: Stored (id, version): copied unchanged.
    rows_copied: int
    min_row_version: int | None
    max_row_version: int | None

    @classmethod
    def of(cls, partitions: Sequence[Any], next_row_id: int) -> "HiddenSummary":
        known = [p for p in partitions if _counts_hidden_nulls(p)]
        fresh = _null_count(known, ctfile.ROW_ID_FIELD_ID)
        null_rv = _null_count(known, ctfile.ROW_VERSION_FIELD_ID)
        versions = [v for p in known for v in _row_versions(p)]
        return cls(
            next_row_id=next_row_id,
            rows=_rows(partitions),
            partitions_without_stats=len(partitions) - len(known),
            partitions_all_inherited=sum(map(_stores_no_hidden_value, known)),
            rows_fresh=fresh,
            rows_updated=null_rv - fresh,
            rows_copied=_rows(known) - null_rv,
            min_row_version=min(versions, default=None),
            max_row_version=max(versions, default=None),
        )
