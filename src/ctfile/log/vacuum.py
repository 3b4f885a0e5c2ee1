"""Vacuum: expire old history and delete files no version needs (SPEC §Vacuum).

Given a retention window ``retain`` and a grace period ``grace``, with
``cutoff = now - max(retain, grace)``:

1. The *retained base* ``C`` is the last version committed at or before
   ``cutoff`` (or the oldest reconstructable version, if that is later).
   Every version from ``C`` on stays reconstructable and every change scan
   starting at ``C`` or later keeps working; time travel to any timestamp
   after ``cutoff`` resolves to a version ``>= C``.
2. A checkpoint of ``C`` is written (unless a valid one exists), so that
   replay can start there.
3. Checkpoints and log entries older than ``C`` are deleted, oldest first.
4. Only then are data files deleted: every file under ``data/`` that neither
   the state of ``C`` nor any entry ``C..latest`` names, and that is older
   than ``grace`` (a file younger than that may belong to a transaction that
   has not committed yet). Deleting the entries first means that a change
   scan over an expired interval fails with ``StaleIntervalError`` before it
   could read a partially deleted set of files.

Temporary files (``.tmp-*``) older than ``grace`` are deleted too. With
``dry_run`` nothing is written or deleted; the result lists what would be.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from ctfile.format.actions import AddPartition, RemovePartition
from ctfile.format.errors import CorruptLogError, InvalidArgumentError, VersionNotFoundError
from ctfile.format.paths import DATA_DIR, LAST_CHECKPOINT, LOG_DIR, checkpoint_path, commit_path
from ctfile.log.manifest import ManifestLog
from ctfile.log.storage import TMP_PREFIX

log = logging.getLogger("ctfile")

DEFAULT_RETAIN_S = 7 * 24 * 3600
DEFAULT_GRACE_S = 24 * 3600


@dataclass(frozen=True)
class VacuumResult:
    """What :func:`vacuum` deleted, or with ``dry_run`` would delete.

    ``oldest_version`` is the oldest version that can be read (snapshot, time
    travel, start of a change scan) after the vacuum; ``checkpoint_version``
    the checkpoint written for it (None if one already existed).
    """

    dry_run: bool
    version: int
    oldest_version: int
    checkpoint_version: int | None
    deleted_log_files: tuple[str, ...]
    deleted_data_files: tuple[str, ...]
    deleted_temp_files: tuple[str, ...]
    bytes_freed: int

    @property
    def deleted_files(self) -> tuple[str, ...]:
        return self.deleted_log_files + self.deleted_data_files + self.deleted_temp_files


def _seconds(value: Any, *, what: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, dt.timedelta):
        s = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        s = float(value)
    else:
        raise InvalidArgumentError(f"{what} must be a timedelta or a number of seconds, found {value!r}")
    if not s >= 0:  # also rejects NaN
        raise InvalidArgumentError(f"{what} must be >= 0, found {value!r}")
    return s


def _now_ms() -> int:
    from ctfile.log.transaction import now_ms

    return now_ms()


def vacuum(
    manifest: ManifestLog,
    *,
    retain: Any = None,
    grace_period: Any = None,
    dry_run: bool = False,
    now_ms: int | None = None,
) -> VacuumResult:
    """Expire history older than ``retain`` and delete unreferenced files
    older than ``grace_period`` (see the module docstring).

    ``retain`` and ``grace_period`` are :class:`datetime.timedelta` or seconds;
    defaults 7 days and 24 hours.
    """
    if not isinstance(dry_run, bool):
        raise InvalidArgumentError(f"dry_run must be a bool, found {dry_run!r}")
    retain_s = _seconds(retain, what="retain", default=DEFAULT_RETAIN_S)
    grace_s = _seconds(grace_period, what="grace_period", default=DEFAULT_GRACE_S)
    storage = manifest.storage
    now = _now_ms() if now_ms is None else now_ms
    grace_cutoff_ms = now - int(grace_s * 1000)
    # A transaction younger than the grace period may still commit with a read
    # version this old, so history is only expired beyond both windows.
    history_cutoff_ms = now - int(max(retain_s, grace_s) * 1000)

    latest = manifest.latest_version()
    oldest = manifest.oldest_version()
    try:
        base = manifest.version_at_timestamp(history_cutoff_ms, latest=latest)
    except VersionNotFoundError:
        base = oldest  # the cutoff precedes every retained commit
    base = max(base, oldest)

    # 1-2. The state of the retained base, checkpointed.
    base_state = manifest.load_state(base, latest=latest)
    checkpoint_written = None
    if base > 0 and not _valid_checkpoint(manifest, base):
        checkpoint_written = base
        if not dry_run:
            manifest.write_checkpoint(base_state)
            manifest.read_checkpoint(base, decode_stats=True)  # read back before anything is deleted

    # 3. Expired log files, oldest first: checkpoints, then entries.
    listing = manifest.list()
    expired_log = [checkpoint_path(c) for c in listing.checkpoints if c < base]
    expired_log += [commit_path(v) for v in listing.commits if v < base]
    if not dry_run and expired_log:
        for path in expired_log:  # one by one, in order: the log stays a suffix
            storage.delete([path])
        # This process's cache must not serve the expired entries either.
        with manifest._lock:
            for v in [v for v in manifest._entries if v < base]:
                del manifest._entries[v]
        _repair_hint(manifest, base)

    # 4. Data files no retained version or entry names.
    keep = set(base_state.partitions)
    keep.update(_paths_in_entries(manifest, base, latest))
    if not dry_run:
        # Commits that landed during the vacuum name files too.
        now_latest = manifest.latest_version()
        if now_latest > latest:
            keep.update(_paths_in_entries(manifest, latest + 1, now_latest))
            latest = now_latest
    data_files, temp_files, freed = [], [], 0
    for info in storage.list_dir(DATA_DIR):
        name = info.path.rsplit("/", 1)[-1]
        old_enough = info.mtime_ms is not None and info.mtime_ms < grace_cutoff_ms
        if name.startswith(TMP_PREFIX):
            if old_enough:
                temp_files.append(info.path)
            continue
        if info.path in keep or not name.endswith(".parquet") or not old_enough:
            continue
        data_files.append(info.path)
        freed += info.size
    for info in storage.list_dir(LOG_DIR):
        name = info.path.rsplit("/", 1)[-1]
        if name.startswith(TMP_PREFIX) and info.mtime_ms is not None and info.mtime_ms < grace_cutoff_ms:
            temp_files.append(info.path)
    if not dry_run:
        storage.delete(sorted(data_files))
        storage.delete(sorted(temp_files))
    log.info(
        "vacuum of %s%s: oldest version %d, %d log files, %d data files (%d bytes), %d temp files",
        storage.uri, " (dry run)" if dry_run else "", base, len(expired_log), len(data_files), freed, len(temp_files),
    )
    return VacuumResult(
        dry_run=dry_run,
        version=latest,
        oldest_version=base,
        checkpoint_version=checkpoint_written,
        deleted_log_files=tuple(expired_log),
        deleted_data_files=tuple(sorted(data_files)),
        deleted_temp_files=tuple(sorted(temp_files)),
        bytes_freed=freed,
    )


def _valid_checkpoint(manifest: ManifestLog, version: int) -> bool:
    try:
        manifest.read_checkpoint(version, decode_stats=True)
        return True
    except (FileNotFoundError, CorruptLogError):
        return False


def _paths_in_entries(manifest: ManifestLog, start: int, end: int) -> set[str]:
    """Every path an add or remove of the entries ``start..end`` names."""
    out: set[str] = set()
    if start > end:
        return out
    try:
        entries = manifest.read_entries(start, end)
    except VersionNotFoundError:  # a gap (removed by hand): use what is there
        entries = []
        for v in range(start, end + 1):
            try:
                entries.append(manifest.read_entry(v))
            except VersionNotFoundError:
                continue
    for entry in entries:
        for a in entry:
            if isinstance(a, (AddPartition, RemovePartition)):
                out.add(a.path)
    return out


def _repair_hint(manifest: ManifestLog, base: int) -> None:
    """Point the advisory hint at a checkpoint that still exists."""
    hint = manifest.read_hint()
    if hint is not None and hint >= base:
        return
    checkpoints = manifest.list().checkpoints
    if not checkpoints:
        return
    import json

    newest = checkpoints[-1]
    state = manifest.read_checkpoint(newest)
    body = json.dumps({"version": newest, "numPartitions": len(state.partitions)})
    manifest.storage.put(LAST_CHECKPOINT, body.encode() + b"\n")
