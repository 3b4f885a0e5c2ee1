"""Vacuum: expire old history and delete files no version needs (SPEC §Vacuum).

Given a retention window ``retain`` and a grace period ``grace``, with
``cutoff = now - max(retain, grace)``:

1. The *retained base* ``C`` is the last version committed at or before
   ``cutoff`` (or the oldest reconstructable version, if that is later),
   lowered to what the live streams holding history back need
   (:mod:`ctfile.log.streams`, SPEC §Streams, retention). Every
   version from ``C`` on stays reconstructable and every change scan
   starting at ``C`` or later keeps working; time travel to any timestamp
   after ``cutoff`` resolves to a version ``>= C``. A live stream that
   needs a version below ``C`` is marked stale first
   (:func:`mark_stale_streams`).
2. A checkpoint of ``C`` is written (unless a valid one exists), so that
   replay can start there.
3. Checkpoints and log entries older than ``C`` are deleted, oldest first.
4. Only then are data files and change files deleted: every file under
   ``data/`` and ``_ct_changes/`` that the retained history does not
   reference (:func:`retained_files`: the live partitions of ``C`` and every
   path an add, remove or change of an entry ``C..latest`` names) and that
   is older than ``grace`` (a file younger than that may belong to a
   transaction that has not committed yet). A change file thus goes with the
   entry that names it (SPEC §Change capture). Deleting the entries first
   means that a change scan over an expired interval fails with
   ``StaleIntervalError`` before it could read a partially deleted set of
   files.

:func:`retained_files` is also what ``verify`` lists unreferenced files
against, so the two never disagree about a file. ``data/``, ``_ct_changes/``
and ``_ct_log/`` are listed before anything is written or deleted, so a table whose storage
refuses a listing (``data/`` itself a symbolic link out of the table root,
SPEC §Table layout) is left untouched; a link out of the root inside them is
left out of the listing, so never deleted.

Temporary files (``.tmp-*``) older than ``grace`` are deleted too, and the
stream state files other than each stream's current one older than
``grace`` (SPEC §Streams, state files). With
``dry_run`` nothing is written or deleted; the result lists what would be.

Because ``cutoff`` uses ``max(retain, grace)``, a ``retain`` shorter than
``grace`` keeps ``grace`` worth of history; the result says so
(:attr:`VacuumResult.effective_retain_s`, :attr:`VacuumResult.history_cutoff_ms`).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from dataclasses import dataclass, field
from typing import Any

from ctfile.format.actions import AddPartition, ChangeFile, RemovePartition
from ctfile.format.errors import (
    CommitConflictError,
    ConflictKind,
    CorruptLogError,
    InvalidArgumentError,
    VersionNotFoundError,
)
from ctfile.format.paths import (
    CHANGES_DIR,
    DATA_DIR,
    LAST_CHECKPOINT,
    LOG_DIR,
    checkpoint_path,
    commit_path,
    is_change_file_path,
)
from ctfile.log.manifest import ManifestLog
from ctfile.log.replay import TableState
from ctfile.log.storage import TMP_PREFIX, FileInfo
from ctfile.log.streams import StreamHold, StreamRaceLost, StreamRetention, StreamStore, plan_stream_retention

log = logging.getLogger("ctfile")

DEFAULT_RETAIN_S = 7 * 24 * 3600
DEFAULT_GRACE_S = 24 * 3600
#: How often a vacuum plans again after a stream it was making stale
#: changed meanwhile (a consumer advanced it), before giving up.
MAX_STREAM_ROUNDS = 5


@dataclass(frozen=True)
class VacuumResult:
    """What :func:`vacuum` deleted, or with ``dry_run`` would delete.

    ``oldest_version`` is the oldest version that can be read (snapshot, time
    travel, start of a change scan) after the vacuum; ``checkpoint_version``
    the checkpoint written for it (None if one already existed).

    ``retain_s`` and ``grace_period_s`` are the windows the vacuum ran with
    (seconds, defaults applied); history was expired only beyond
    ``history_cutoff_ms`` (milliseconds since the epoch), which is
    :attr:`effective_retain_s` = max(retain, grace period) before the vacuum's
    clock: with ``retain_s < grace_period_s`` (:attr:`retain_extended`) the
    grace period decided.

    ``bytes_freed`` counts the data and change files deleted;
    ``deleted_change_files`` and ``change_bytes_freed`` are the change files
    (SPEC §Change capture) among them.

    ``holding_streams`` are the live streams whose pending changes kept
    history older than the cutoff (SPEC §Streams, retention), and
    ``stale_streams`` the ones the vacuum made stale (with ``dry_run``: would
    make stale), each a :class:`~ctfile.log.streams.StreamHold`;
    ``deleted_stream_files`` the old stream state files deleted.
    """

    dry_run: bool
    version: int
    oldest_version: int
    checkpoint_version: int | None
    deleted_log_files: tuple[str, ...]
    deleted_data_files: tuple[str, ...]
    deleted_temp_files: tuple[str, ...]
    bytes_freed: int
    retain_s: float
    grace_period_s: float
    history_cutoff_ms: int
    deleted_change_files: tuple[str, ...] = ()
    change_bytes_freed: int = 0
    holding_streams: tuple[StreamHold, ...] = ()
    stale_streams: tuple[StreamHold, ...] = ()
    deleted_stream_files: tuple[str, ...] = ()

    @property
    def deleted_files(self) -> tuple[str, ...]:
        return (self.deleted_log_files + self.deleted_data_files + self.deleted_change_files
                + self.deleted_temp_files + self.deleted_stream_files)

    @property
    def effective_retain_s(self) -> float:
        """How much history was kept: max(retain, grace period), in seconds."""
        return max(self.retain_s, self.grace_period_s)

    @property
    def retain_extended(self) -> bool:
        """True if the grace period, longer than ``retain``, kept more history than asked."""
        return self.retain_s < self.grace_period_s


#: The longest window a vacuum (or a stream's staleness forecast) takes:
#: the largest :class:`datetime.timedelta` (about 2.7 million years, so
#: ``retain=timedelta.max`` keeps everything). Its milliseconds before any
#: clock still fit a ``long`` (SPEC §Conventions).
MAX_WINDOW_S = dt.timedelta.max.total_seconds()


def window_seconds(value: Any, *, what: str, default: float) -> float:
    """A retention window or grace period in seconds: ``value`` a
    :class:`datetime.timedelta` or a number of seconds in
    ``0..MAX_WINDOW_S`` (None: ``default``).

    >>> window_seconds(dt.timedelta(hours=1), what="retain", default=0), window_seconds(None, what="retain", default=5)
    (3600.0, 5)
    >>> window_seconds(float("inf"), what="retain", default=0)
    Traceback (most recent call last):
      ...
    ctfile.format.errors.InvalidArgumentError: retain must be between 0 and 86400000000000 seconds (datetime.timedelta.max), found inf
    """
    if value is None:
        return default
    if isinstance(value, dt.timedelta):
        s = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            s = float(value)
        except OverflowError:  # an int beyond any float
            s = math.inf
    else:
        raise InvalidArgumentError(f"{what} must be a timedelta or a number of seconds, found {value!r}")
    if not 0 <= s <= MAX_WINDOW_S:  # also rejects NaN
        raise InvalidArgumentError(
            f"{what} must be between 0 and {MAX_WINDOW_S:.0f} seconds (datetime.timedelta.max), found {value!r}"
        )
    return s


def _now_ms() -> int:
    from ctfile.log.transaction import now_ms

    return now_ms()


@dataclass(frozen=True)
class VacuumPlan:
    """What a vacuum will do, decided from the log and two listings before
    anything is written or deleted (:func:`plan_vacuum`).

    ``keep`` is :func:`retained_files` of ``base..latest``; ``garbage`` the
    data, change and temporary files the listings hold that are neither kept
    nor younger than the grace period. ``streams`` is what the streams hold
    back and which become stale (``base`` is already lowered for them);
    ``now_ms`` the vacuum's clock.
    """

    retain_s: float
    grace_period_s: float
    history_cutoff_ms: int
    grace_cutoff_ms: int
    latest: int
    base: int
    base_state: TableState
    needs_checkpoint: bool
    expired_log: tuple[str, ...]
    data_listing: tuple[FileInfo, ...]
    log_listing: tuple[FileInfo, ...]
    keep: frozenset[str]
    changes_listing: tuple[FileInfo, ...] = ()
    now_ms: int = 0
    streams: StreamRetention = field(default_factory=lambda: StreamRetention(base=0))

    def garbage(self, keep: set[str] | frozenset[str] | None = None) -> "_Garbage":
        """The data, change and temporary files to delete, against ``keep``
        (default: the planned one)."""
        return _garbage(
            list(self.data_listing) + list(self.changes_listing), list(self.log_listing),
            self.keep if keep is None else keep, self.grace_cutoff_ms,
        )

    def result(
        self, *, dry_run: bool, latest: int, keep: set[str] | frozenset[str] | None = None,
        stale: tuple[StreamHold, ...] | None = None,
    ) -> VacuumResult:
        """What the plan deletes; ``stale``: the streams actually made stale
        (default: the planned ones)."""
        g = self.garbage(keep)
        return VacuumResult(
            dry_run=dry_run,
            version=latest,
            oldest_version=self.base,
            checkpoint_version=self.base if self.needs_checkpoint else None,
            deleted_log_files=self.expired_log,
            deleted_data_files=tuple(g.data_files),
            deleted_temp_files=tuple(g.temp_files),
            bytes_freed=g.data_bytes + g.change_bytes,
            retain_s=self.retain_s,
            grace_period_s=self.grace_period_s,
            history_cutoff_ms=self.history_cutoff_ms,
            deleted_change_files=tuple(g.change_files),
            change_bytes_freed=g.change_bytes,
            holding_streams=self.streams.holding,
            stale_streams=self.streams.stale if stale is None else stale,
            deleted_stream_files=self.streams.old_state_files,
        )


def plan_vacuum(manifest: ManifestLog, *, retain: Any = None, grace_period: Any = None, now_ms: int | None = None) -> VacuumPlan:
    """Decide what :func:`vacuum` deletes; reads only (see the module docstring).

    Raises
    ------
    InvalidArgumentError
        For a bad ``retain`` or ``grace_period``.
    StorageError
        If the storage refuses listing ``_ct_streams/``, ``data/`` or ``_ct_log/``.
    CorruptLogError
        A stream's current state is malformed (nothing is deleted for a
        stream whose needs cannot be read).
    """
    retain_s = window_seconds(retain, what="retain", default=DEFAULT_RETAIN_S)
    grace_s = window_seconds(grace_period, what="grace_period", default=DEFAULT_GRACE_S)
    storage = manifest.storage
    now = _now_ms() if now_ms is None else now_ms
    # A transaction younger than the grace period may still commit with a read
    # version this old, so history is only expired beyond both windows.
    history_cutoff_ms = now - int(max(retain_s, grace_s) * 1000)
    latest = manifest.latest_version()
    oldest = manifest.oldest_version()
    grace_cutoff_ms = now - int(grace_s * 1000)
    streams = plan_stream_retention(
        manifest, base=_retained_base(manifest, history_cutoff_ms, latest, oldest), oldest=oldest, latest=latest,
        now_ms=now, history_cutoff_ms=history_cutoff_ms,
    )
    base = streams.base
    # Listed first: a listing the storage refuses leaves the table untouched.
    data_listing = tuple(storage.list_dir(DATA_DIR))
    changes_listing = tuple(storage.list_dir(CHANGES_DIR))
    log_listing = tuple(storage.list_dir(LOG_DIR))
    base_state = manifest.load_state(base, latest=latest)
    listing = manifest.list()
    expired = [checkpoint_path(c) for c in listing.checkpoints if c < base]
    expired += [commit_path(v) for v in listing.commits if v < base]
    return VacuumPlan(
        retain_s=retain_s,
        grace_period_s=grace_s,
        history_cutoff_ms=history_cutoff_ms,
        grace_cutoff_ms=grace_cutoff_ms,
        latest=latest,
        base=base,
        base_state=base_state,
        needs_checkpoint=base > 0 and not _valid_checkpoint(manifest, base),
        expired_log=tuple(expired),
        data_listing=data_listing,
        log_listing=log_listing,
        keep=frozenset(retained_files(manifest, base, latest, base_state=base_state)),
        changes_listing=changes_listing,
        now_ms=now,
        streams=streams,
    )


def run_vacuum(manifest: ManifestLog, plan: VacuumPlan) -> VacuumResult:
    """Carry out ``plan`` in the order SPEC §Vacuum requires: the streams
    that become stale marked so (which may plan again,
    :func:`mark_stale_streams`), the checkpoint of the retained base (read
    back), then the expired log oldest first, then the data files no
    retained entry -- nor one committed meanwhile -- names, and the old
    stream state files."""
    plan, stale = mark_stale_streams(manifest, plan)
    if plan.needs_checkpoint:
        manifest.write_checkpoint(plan.base_state)
        manifest.read_checkpoint(plan.base, decode_stats=True)  # read back before anything is deleted
    _expire_log(manifest, plan.base, plan.expired_log)
    keep = set(plan.keep)
    latest = manifest.latest_version()
    if latest > plan.latest:  # commits that landed during the vacuum name files too
        keep.update(_paths_in_entries(manifest, plan.latest + 1, latest))
    result = plan.result(dry_run=False, latest=latest, keep=keep, stale=stale)
    manifest.storage.delete(result.deleted_data_files)
    manifest.storage.delete(result.deleted_change_files)
    manifest.storage.delete(result.deleted_temp_files)
    manifest.storage.delete(result.deleted_stream_files)
    return result


def mark_stale_streams(manifest: ManifestLog, plan: VacuumPlan) -> tuple[VacuumPlan, tuple[StreamHold, ...]]:
    """Write the stale state of every stream ``plan`` makes stale (SPEC
    §Streams, retention: before any log entry is deleted), each over the
    current state the plan read, with put-if-absent. Returns the plan to
    carry out and the streams marked.

    If a stream changed since the plan read it (a consumer advanced or
    claimed it, :class:`~ctfile.log.streams.StreamRaceLost`), the plan was
    made from a state that is no longer current: the vacuum plans again with
    the same clock, from the states as they are now -- the stream may no
    longer need the history, or may hold it now -- so that it never deletes
    history a live stream's current state needs. Streams already marked are
    stale and hold nothing in the new plan.

    Raises
    ------
    CommitConflictError
        The streams kept changing for :data:`MAX_STREAM_ROUNDS` plans;
        nothing was deleted (streams already marked stay stale).
    """
    store = StreamStore(manifest.storage)
    marked: list[StreamHold] = []
    for _ in range(MAX_STREAM_ROUNDS):
        try:
            for hold, state in zip(plan.streams.stale, plan.streams.stale_states):
                store.write_next(state.marked_stale(now_ms=plan.now_ms, oldest_version=plan.base))
                marked.append(hold)
            return plan, tuple(marked)
        except StreamRaceLost as e:
            log.info("vacuum of %s: %s while marking it stale; planning again", manifest.storage.uri, e)
            plan = plan_vacuum(manifest, retain=plan.retain_s, grace_period=plan.grace_period_s, now_ms=plan.now_ms)
    raise CommitConflictError(
        f"vacuum of {manifest.storage.uri}: the streams it had to mark stale changed {MAX_STREAM_ROUNDS} times "
        f"while it planned; nothing was deleted, run it again",
        read_version=plan.latest, winning_version=plan.latest, kind=ConflictKind.CONTENTION,
    )


def vacuum(
    manifest: ManifestLog,
    *,
    retain: Any = None,
    grace_period: Any = None,
    dry_run: bool = False,
    now_ms: int | None = None,
) -> VacuumResult:
    """Expire history older than ``max(retain, grace_period)`` and delete
    unreferenced files older than ``grace_period`` (see the module docstring):
    :func:`plan_vacuum`, then, unless ``dry_run``, :func:`run_vacuum`.

    ``retain`` and ``grace_period`` are :class:`datetime.timedelta` or seconds;
    defaults 7 days and 24 hours.

    Raises
    ------
    InvalidArgumentError
        For a bad ``retain``, ``grace_period`` or ``dry_run``.
    StorageError
        If the storage refuses an access (e.g. ``data/`` is a symbolic link
        out of the table root); nothing was written or deleted if the refusal
        came from listing ``data/`` or ``_ct_log/``.
    """
    if not isinstance(dry_run, bool):
        raise InvalidArgumentError(f"dry_run must be a bool, found {dry_run!r}")
    plan = plan_vacuum(manifest, retain=retain, grace_period=grace_period, now_ms=now_ms)
    result = plan.result(dry_run=True, latest=plan.latest) if dry_run else run_vacuum(manifest, plan)
    log.info(
        "vacuum of %s%s: oldest version %d, %d log files, %d data and %d change files (%d bytes), %d temp files; "
        "streams holding history: %s; made stale: %s",
        manifest.storage.uri, " (dry run)" if dry_run else "", result.oldest_version,
        len(result.deleted_log_files), len(result.deleted_data_files), len(result.deleted_change_files),
        result.bytes_freed, len(result.deleted_temp_files),
        [h.name for h in result.holding_streams] or "none", [h.name for h in result.stale_streams] or "none",
    )
    return result


def retained_files(
    manifest: ManifestLog, base: int, latest: int, *, base_state: TableState | None = None
) -> set[str]:
    """The files the retained history ``base..latest`` references (SPEC §Vacuum).

    The live partitions of version ``base`` plus every path that an add, a
    remove or a change of an entry ``base..latest`` names. The removes of entry ``base``
    itself count: a change scan starting at ``base`` reads them (the
    snapshot ``base - 1`` side). Vacuum deletes only files outside this set,
    and ``verify`` lists as unreferenced exactly the files outside it (with
    ``base`` the oldest reconstructable version), so the two agree.

    ``base_state``: the state of ``base``, if the caller already holds it.

    Raises
    ------
    CorruptLogError, VersionNotFoundError
        If an entry of the range or the state of ``base`` cannot be read, or
        an entry is missing (see :func:`_paths_in_entries`).
    """
    state = base_state if base_state is not None else manifest.load_state(base, latest=latest)
    return set(state.partitions) | _paths_in_entries(manifest, base, latest)


def _retained_base(manifest: ManifestLog, history_cutoff_ms: int, latest: int, oldest: int) -> int:
    """``C`` before streams: the last version committed at or before the
    cutoff, or the oldest if later."""
    try:
        base = manifest.version_at_timestamp(history_cutoff_ms, latest=latest)
    except VersionNotFoundError:
        base = oldest  # the cutoff precedes every retained commit
    return max(base, oldest)


def _expire_log(manifest: ManifestLog, base: int, expired: tuple[str, ...]) -> None:
    """Delete the ``expired`` checkpoints, then entries, below ``base``,
    oldest first, so that the log stays a suffix; then repair the hint."""
    if not expired:
        return
    for path in expired:  # one by one, in order
        manifest.storage.delete([path])
    manifest.forget_entries_below(base)
    _repair_hint(manifest, base)


@dataclass
class _Garbage:
    """Unreferenced files older than the grace cutoff, each list sorted."""

    data_files: list[str]
    change_files: list[str]
    temp_files: list[str]
    data_bytes: int = 0
    change_bytes: int = 0

    def add(self, info: FileInfo, keep: set[str]) -> None:
        """Count the old enough file ``info`` if it is garbage: a temporary
        file, or a data or change file (Parquet) that ``keep`` does not hold."""
        name = info.path.rsplit("/", 1)[-1]
        if name.startswith(TMP_PREFIX):
            self.temp_files.append(info.path)
        elif info.path in keep or not name.endswith(".parquet"):
            return
        elif info.path.startswith(DATA_DIR + "/"):
            self.data_files.append(info.path)
            self.data_bytes += info.size
        elif is_change_file_path(info.path):
            self.change_files.append(info.path)
            self.change_bytes += info.size


def _garbage(
    file_listing: list[FileInfo], log_listing: list[FileInfo], keep: set[str], grace_cutoff_ms: int
) -> _Garbage:
    """The data files (under ``data/``), change files (under ``_ct_changes/``)
    and temporary files of the listings that ``keep`` does not hold and that
    are older than the grace cutoff."""
    out = _Garbage([], [], [])
    for info in file_listing + log_listing:
        if _older_than(info, grace_cutoff_ms):
            out.add(info, keep)
    for files in (out.data_files, out.change_files, out.temp_files):
        files.sort()
    return out


def _older_than(info: FileInfo, cutoff_ms: int) -> bool:
    """Whether the file was last modified before ``cutoff_ms`` (a file whose
    time is unknown is never old enough)."""
    return info.mtime_ms is not None and info.mtime_ms < cutoff_ms


def _valid_checkpoint(manifest: ManifestLog, version: int) -> bool:
    try:
        manifest.read_checkpoint(version, decode_stats=True)
        return True
    except (FileNotFoundError, CorruptLogError):
        return False


def _paths_in_entries(manifest: ManifestLog, start: int, end: int) -> set[str]:
    """Every path an add, remove or change of the entries ``start..end`` names.

    Raises
    ------
    VersionNotFoundError
        An entry of the range is missing. Vacuum must then delete nothing: a
        concurrent vacuum with a shorter retention (or a hand) removed entries
        whose adds may name live files, and skipping them would delete those
        files as unreferenced.
    """
    out: set[str] = set()
    if start > end:
        return out
    for entry in manifest.read_entries(start, end):
        for a in entry:
            if isinstance(a, (AddPartition, RemovePartition, ChangeFile)):
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
