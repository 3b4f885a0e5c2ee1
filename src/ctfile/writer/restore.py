"""RESTORE (SPEC §Restore): one commit that makes the table equal to an
earlier version.

Planning is apart from execution. :func:`plan_restore` compares the state a
transaction read, *C*, with the state of the restored version *V*, from the
log alone: the partitions to remove (live at *C*, not at *V*), those to
re-add (live at *V*, not at *C*, with the lineage they had) and the restored
metadata (:func:`restored_metadata`: *V*'s, with the schema by field id as
SPEC §Schema evolution says). :func:`check_files` makes sure every file to
re-add is still there. :func:`apply_restore` records the plan in the
transaction; the commit then writes the entry, and no data file is written.

A RESTORE reads the whole table: every live partition is in its read set,
and it replaces the whole table (SPEC §Conflict detection), so a concurrent
commit that changes rows or metadata makes it conflict.

Examples
--------
>>> import ctfile, pyarrow as pa, pyarrow.compute as pc, tempfile
>>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
>>> _ = t.insert(pa.table({"id": [1, 2]}))
>>> _ = t.delete(pc.field("id") == 1)
>>> plan = plan_restore(t.log.load_state(2), t.log.load_state(1))
>>> len(plan.removed), len(plan.re_added), plan.metadata is None, plan.is_noop
(1, 1, True, False)
"""

from __future__ import annotations

import posixpath
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

from ctfile.format.actions import FEATURE_RESTORED_PARTITIONS, FEATURE_SCHEMA_EVOLUTION, Metadata, Partition
from ctfile.format.errors import CorruptDataFileError, MissingDataFileError
from ctfile.format.schema_evolution import changes_need_feature, diff_schemas, restored_schema
from ctfile.log.replay import TableState
from ctfile.log.storage import Storage

if TYPE_CHECKING:
    from ctfile.writer.transaction import WriteTransaction

#: Missing files a refusal names at most (the count is given whole).
NAMED_FILES = 10


@dataclass(frozen=True)
class RestorePlan:
    """What a RESTORE of ``version`` commits over the state it read (SPEC
    §Restore): the partitions it ``removed`` and ``re_added``, the restored
    ``metadata`` (None: the current one is it already), and whether that
    metadata's schema change needs the ``schemaEvolution`` feature."""

    version: int
    removed: tuple[Partition, ...]
    re_added: tuple[Partition, ...]
    metadata: Metadata | None
    schema_feature: bool = False

    @property
    def is_noop(self) -> bool:
        """The state read is the restored one: nothing to commit (SPEC §Restore, no-op)."""
        return not (self.removed or self.re_added or self.metadata is not None)

    @property
    def row_metrics(self) -> dict[str, int]:
        """The rows of the partitions it re-adds and removes (its ``operationMetrics``)."""
        return {
            "numAddedRows": sum(p.num_records for p in self.re_added),
            "numRemovedRows": sum(p.num_records for p in self.removed),
        }


def restored_metadata(current: Metadata, target: Metadata) -> Metadata:
    """The metadata a RESTORE commits (SPEC §Restore, metadata): ``target``'s
    (the restored version's) properties, name, description and schema, the
    schema by field id with today's types and nullability
    (:func:`~ctfile.format.schema_evolution.restored_schema`, which refuses
    a field dropped since), and a ``lastFieldId`` that never decreases."""
    schema = restored_schema(current.schema, target.schema)
    last = max(current.assigned_field_ids, target.assigned_field_ids)
    return replace(target, table_id=current.table_id, schema=schema,
                   last_field_id=last if last > schema.max_field_id() else None)


def _same_metadata(a: Metadata, b: Metadata) -> bool:
    """Equal as a reader sees them (an absent ``lastFieldId`` is the schema's highest id)."""
    return replace(a, last_field_id=a.assigned_field_ids) == replace(b, last_field_id=b.assigned_field_ids)


def plan_restore(current: TableState, target: TableState) -> RestorePlan:
    """What restoring ``target`` (the state of the restored version) commits
    over ``current`` (the state read), from the log alone. A path live in
    both is one partition with one lineage: it stays.

    Raises
    ------
    SchemaMismatchError
        ``target``'s schema holds a field dropped since (SPEC §Restore).
    """
    removed = tuple(p for path, p in current.partitions.items() if path not in target.partitions)
    re_added = tuple(p for path, p in target.partitions.items() if path not in current.partitions)
    md = restored_metadata(current.metadata, target.metadata)
    if _same_metadata(md, current.metadata):
        return RestorePlan(target.version, removed, re_added, None)
    feature = changes_need_feature(diff_schemas(current.metadata.schema, md.schema))
    return RestorePlan(target.version, removed, re_added, md, feature)


def check_files(storage: Storage, partitions: Sequence[Partition], *, version: int) -> None:
    """Refuse, before anything is written, a RESTORE of ``version`` whose
    ``partitions`` to re-add are not all there with their ``sizeBytes``
    (SPEC §Restore, files): one listing per directory, not a request per file.

    Raises
    ------
    MissingDataFileError
        Naming the missing files (the first :data:`NAMED_FILES`) and how many.
    CorruptDataFileError
        A file is there with another size.
    """
    missing, resized = _listed_problems(storage, partitions)
    if missing:
        names = ", ".join(p.path for p in missing[:NAMED_FILES]) + (" ..." if len(missing) > NAMED_FILES else "")
        raise MissingDataFileError(
            f"cannot restore {storage.uri} to version {version}: {len(missing)} of the {len(partitions)} files it "
            f"would re-add are gone (vacuumed or deleted): {names}; nothing was written",
            uri=storage.uri, path=missing[0].path, version=version,
        )
    if resized:
        p, size = resized[0]
        raise CorruptDataFileError(
            f"cannot restore {storage.uri} to version {version}: {p.path} holds {size} bytes, its add records "
            f"sizeBytes {p.size_bytes} ({len(resized)} such files); nothing was written",
            uri=storage.uri, path=p.path, version=version,
        )


def _listed_problems(
    storage: Storage, partitions: Sequence[Partition],
) -> tuple[list[Partition], list[tuple[Partition, int]]]:
    """The ``partitions`` whose file is missing, and those whose file has
    another size (with its size), by one listing per directory."""
    by_dir: dict[str, list[Partition]] = defaultdict(list)
    for p in partitions:
        by_dir[posixpath.dirname(p.path)].append(p)
    missing: list[Partition] = []
    resized: list[tuple[Partition, int]] = []
    for directory, parts in by_dir.items():
        sizes = {f.path: f.size for f in storage.list_dir(directory)}
        for p in parts:
            size = sizes.get(p.path)
            if size is None:
                missing.append(p)
            elif size != p.size_bytes:
                resized.append((p, size))
    return missing, resized


def apply_restore(tx: "WriteTransaction", plan: RestorePlan) -> None:
    """Record ``plan`` in ``tx`` (SPEC §Restore, actions): a read of the whole
    table, the removes, the re-adds and the restored metadata with the
    features they need. A RESTORE that re-adds nothing deletes every row of
    the partitions it removes (they hold no row of the restored version),
    which change capture marks; one that re-adds a partition is never
    captured (SPEC §Change capture)."""
    tx.mark_reads_whole_table()
    for p in tx.base.partitions.values():
        tx.mark_read(p)
    for p in plan.removed:
        tx.remove(p, deletes_all_rows=not plan.re_added)
    for p in plan.re_added:
        tx.re_add(p)
    if plan.metadata is not None:
        tx.set_metadata(plan.metadata)
    if plan.re_added:
        tx.require_feature(FEATURE_RESTORED_PARTITIONS, reader=True)
    if plan.schema_feature:
        tx.require_feature(FEATURE_SCHEMA_EVOLUTION, reader=True)
    tx.data_change = bool(plan.removed or plan.re_added)
    tx.row_metrics = plan.row_metrics
