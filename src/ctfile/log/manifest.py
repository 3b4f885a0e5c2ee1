"""Reading the manifest log: latest version, entries, checkpoints, time travel.

SPEC §Log replay and §Checkpoints. Correctness rests on the commit files
alone; ``_last_checkpoint`` is a hint that saves listing the log directory
(a handful of requests instead of one per version on an object store).
"""

from __future__ import annotations

import functools
import itertools
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from ctfile.format.actions import Action, AddPartition, CommitInfo, Metadata, RemovePartition
from ctfile.format.checkpoint import (
    check_row_count,
    checkpoint_from_arrow,
    checkpoint_table_actions_from_metadata,
    checkpoint_to_arrow,
)
from ctfile.format.entries import decode_entry, decode_table_actions
from ctfile.format.errors import CorruptLogError, TableNotFoundError, VersionNotFoundError
from ctfile.format.log_values import format_timestamp
from ctfile.format.paths import (
    LAST_CHECKPOINT,
    LOG_DIR,
    checkpoint_path,
    commit_path,
    parse_checkpoint_name,
    parse_commit_name,
)
from ctfile.format.schema import LONG_MAX
from ctfile.format.validators import is_int
from ctfile.log.checkpoint_state import (
    check_checkpoint_identity,
    checkpoint_table_actions,
    head_from_checkpoint,
    state_from_checkpoint,
)
from ctfile.log.replay import TableHead, TableState, roll_forward, roll_forward_head
from ctfile.log.storage import LocalStorage, Storage

_ENTRY_CACHE_SIZE = 4096
_FETCH_WORKERS = 16
_FETCH_BATCH = 4 * _FETCH_WORKERS  # versions asked for at a time (ManifestLog._each_version)
_Start = TypeVar("_Start", TableState, TableHead)
_UNREAD = object()  # the table id of version 0, not looked for yet


@dataclass(frozen=True)
class LogListing:
    commits: list[int]
    checkpoints: list[int]


@dataclass(frozen=True)
class CheckpointInfo:
    """A checkpoint just written: its version, path (relative to the table
    root), number of live partitions and size in bytes."""

    version: int
    path: str
    num_partitions: int
    size_bytes: int


class ManifestLog:
    """Read access to one table's ``_ct_log``. Entries are immutable, so decoded
    entries (and the table-level actions of those decoded only in part) are
    cached by version. The bytes of the files read for the table-level state
    alone (:meth:`load_head`) are kept until the partition state decodes
    them (:meth:`load_state`), so that each is fetched once. Every
    checkpoint read is checked to be this table's (SPEC §Checkpoints,
    identity) against the table id of version 0, read once."""

    def __init__(self, storage: Storage):
        self.storage = storage
        self._entries: dict[int, list[Action]] = {}
        self._table_actions: dict[int, list[Action]] = {}
        self._undecoded: dict[str, bytes] = {}  # path -> bytes
        self._lock = threading.Lock()
        self._parallel = not isinstance(storage, LocalStorage)
        self._version_zero_id: object = _UNREAD  # str, or None: entry 0 gone or unreadable

    # ------------------------------------------------------------ discovery

    def list(self) -> LogListing:
        commits, checkpoints = [], []
        for info in self.storage.list_dir(LOG_DIR):
            name = info.path.rsplit("/", 1)[-1]
            v = parse_commit_name(name)
            if v is not None:
                commits.append(v)
                continue
            v = parse_checkpoint_name(name)
            if v is not None:
                checkpoints.append(v)
        return LogListing(sorted(commits), sorted(checkpoints))

    def read_hint(self) -> int | None:
        """The version ``_last_checkpoint`` names, or None if absent or
        unreadable (also when nested too deeply to decode, or naming no
        version: SPEC §Checkpoints, the hint is advisory)."""
        try:
            obj = json.loads(self.storage.read_bytes(LAST_CHECKPOINT))
            v = obj["version"]
            return v if is_int(v) and 0 <= v <= LONG_MAX else None
        except (FileNotFoundError, ValueError, KeyError, TypeError, RecursionError):
            return None  # advisory only: fall back to listing

    def latest_version(self, *, known: int | None = None) -> int:
        """The newest committed version.

        ``known``: a version known to be committed (the one a caller already
        holds); the search starts there, so an unchanged table costs two
        ``exists`` (that version and the next). Otherwise the search starts at the version the hint names,
        if its entry exists. From a start: exponential then binary search
        over ``exists`` of version files, which is valid because versions are
        dense (SPEC §Commit protocol). Without one: list the log directory.
        """
        start = self._committed(known)  # (a vacuum may have deleted it: then use the hint)
        if start is None:
            # SPEC §Log replay: the hint's version is a starting point only if
            # its entry exists (a hint and checkpoint copied from another
            # table may name a version this one never reached).
            start = self._committed(self.read_hint())
        if start is not None:
            return self._probe_latest(start)
        listing = self.list()
        if not listing.commits:
            raise TableNotFoundError(
                f"no ctfile table at {self.storage.uri}: {LOG_DIR}/ holds no version file"
            )
        return listing.commits[-1]

    def _committed(self, version: int | None) -> int | None:
        """``version`` if its entry exists, else None."""
        if version is not None and self.storage.exists(commit_path(version)):
            return version
        return None

    def _probe_latest(self, start: int) -> int:
        """The newest version, found from ``start`` (whose entry exists) by
        exponential then binary search over ``exists`` of version files."""
        lo, step = start, 1  # invariant: version lo exists
        while self.storage.exists(commit_path(lo + step)):
            lo, step = lo + step, step * 2
        hi = lo + step  # does not exist
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.storage.exists(commit_path(mid)):
                lo = mid
            else:
                hi = mid
        return lo

    # ------------------------------------------------------------ entries

    def read_entry(self, version: int) -> list[Action]:
        cached = self._entries.get(version)
        if cached is not None:
            return cached
        actions = decode_entry(self._entry_bytes(version, keep=False), version=version, where=self._where(version))
        self._remember(self._entries, version, actions)  # SPEC §Log entries: self-checked
        return actions

    def read_table_actions(self, version: int, *, keep: bool = True) -> list[Action]:
        """The actions of the entry of ``version`` but its ``add`` and
        ``remove`` lines, which are left undecoded
        (:func:`~ctfile.format.entries.decode_table_actions` says what is
        checked now and what when :meth:`read_entry` decodes them).
        ``keep``: keep the bytes read for :meth:`read_entry` (for a state
        about to be built from the same entries)."""
        cached = self._table_actions.get(version)
        if cached is None:
            whole = self._entries.get(version)
            if whole is not None:
                return [a for a in whole if not isinstance(a, (AddPartition, RemovePartition))]
            data = self._entry_bytes(version, keep=keep)
            cached = decode_table_actions(data, version=version, where=self._where(version))
            self._remember(self._table_actions, version, cached)
        return cached

    def _where(self, version: int) -> str:
        return f"{self.storage.uri}/{commit_path(version)}"

    def _entry_bytes(self, version: int, *, keep: bool) -> bytes:
        path = commit_path(version)
        try:
            return self._read(path, keep=keep)
        except FileNotFoundError as e:
            raise VersionNotFoundError(
                f"version {version} is not in the log of {self.storage.uri} ({path} is missing)"
            ) from e

    def _read(self, path: str, *, keep: bool) -> bytes:
        """The bytes of ``path``: those kept since an earlier read if any
        (and then no longer kept, unless ``keep``), else read now (and kept
        if ``keep``: for a full decode later)."""
        with self._lock:
            data = self._undecoded.pop(path, None)
        if data is None:
            data = self.storage.read_bytes(path)
        if keep:
            with self._lock:
                if len(self._undecoded) >= _ENTRY_CACHE_SIZE:
                    self._undecoded.clear()
                self._undecoded[path] = data
        return data

    def _remember(self, cache: dict[int, list[Action]], version: int, actions: list[Action]) -> None:
        with self._lock:
            if len(cache) >= _ENTRY_CACHE_SIZE:
                cache.clear()
            cache[version] = actions

    def forget_entries_below(self, version: int) -> None:
        """Drop cached entries older than ``version`` (a vacuum deleted them:
        this process must not serve them either)."""
        with self._lock:
            for cache in (self._entries, self._table_actions):
                for v in [v for v in cache if v < version]:
                    del cache[v]
            self._undecoded.clear()

    def read_entries(self, start: int, end: int) -> list[list[Action]]:
        """Entries ``start..end`` inclusive, fetched concurrently on object stores."""
        return self._each_version(self.read_entry, start, end)

    def read_table_actions_between(self, start: int, end: int, *, keep: bool = True) -> list[list[Action]]:
        """:meth:`read_table_actions` of entries ``start..end`` inclusive,
        fetched concurrently on object stores."""
        return self._each_version(functools.partial(self.read_table_actions, keep=keep), start, end)

    def _each_version(self, read, start: int, end: int) -> list[list[Action]]:
        """``read`` of each version ``start..end``, in order. On object stores
        they are fetched concurrently, a batch at a time: a missing version
        raises before more than a batch past it is asked for, so a range
        that ends at a stray version number (SPEC §Log replay: versions are
        dense) costs what the versions that exist cost."""
        versions = range(start, end + 1)
        if not (self._parallel and len(versions) > 1):
            return [read(v) for v in versions]
        out: list[list[Action]] = []
        with ThreadPoolExecutor(max_workers=min(_FETCH_WORKERS, len(versions))) as pool:
            for lo in range(0, len(versions), _FETCH_BATCH):
                out.extend(pool.map(read, versions[lo:lo + _FETCH_BATCH]))
        return out

    def commit_info(self, version: int) -> CommitInfo:
        for a in self.read_table_actions(version, keep=False):
            if isinstance(a, CommitInfo):
                return a
        raise CorruptLogError(f"version {version} has no commitInfo")  # pragma: no cover

    # ------------------------------------------------------------ checkpoints

    def read_checkpoint(self, version: int, *, decode_stats: bool = False, check_identity: bool = True) -> TableState:
        """The state the checkpoint of ``version`` holds (SPEC §Checkpoints).

        Partition statistics stay JSON text until first read, unless
        ``decode_stats``: then every one is decoded now, so that a bad one
        raises here (for a caller about to rely on the checkpoint alone).
        ``check_identity=False`` skips :meth:`check_identity` (for a checker
        that compares the whole state with the log's itself).

        Raises
        ------
        FileNotFoundError
            No checkpoint of ``version``.
        CorruptLogError
            The file is not a valid checkpoint of ``version``, or not one of
            this table (:meth:`check_identity`).
        UnsupportedFeatureError
            Its protocol needs a newer reader.
        """
        path = checkpoint_path(version)
        where = f"{self.storage.uri}/{path}"
        raw = self._read(path, keep=False)
        try:
            table = pq.read_table(pa.BufferReader(raw), use_threads=False, page_checksum_verification=True)
        except (pa.ArrowException, OSError, ValueError) as e:
            raise CorruptLogError(f"{where}: not a readable Parquet file ({e})") from e
        actions, partitions = checkpoint_from_arrow(table, where=where)
        state = state_from_checkpoint(actions, where=where, partitions=partitions)
        _check_checkpoint_version(state.version, version, where=where)
        if check_identity:
            self.check_identity(state.head, where=where)
        if decode_stats:
            for p in partitions:
                p.stats  # noqa: B018 -- decodes and keeps, or raises CorruptLogError
        return state

    def read_checkpoint_head(self, version: int) -> TableHead:
        """The table-level state the checkpoint of ``version`` holds, read
        from its Parquet footer alone: the header, protocol (checked),
        metadata and ``txn`` actions, and the number of rows. The rows, and
        the page checksums, are checked when :meth:`read_checkpoint` reads
        them; the errors are those of :meth:`read_checkpoint`."""
        path = checkpoint_path(version)
        where = f"{self.storage.uri}/{path}"
        raw = self._read(path, keep=True)
        try:
            footer = pq.read_metadata(pa.BufferReader(raw))
        except (pa.ArrowException, OSError, ValueError) as e:
            raise CorruptLogError(f"{where}: not a readable Parquet file ({e})") from e
        header, actions = checkpoint_table_actions_from_metadata(footer.metadata, where=where)
        check_row_count(header, footer.num_rows, where=where)
        head = head_from_checkpoint(actions, where=where)
        _check_checkpoint_version(head.version, version, where=where)
        self.check_identity(head, where=where)
        return head

    def check_identity(self, head: TableHead, *, where: str) -> None:
        """Raise :class:`CorruptLogError` if the checkpoint whose table-level
        state is ``head`` is not this table's (SPEC §Checkpoints, identity):
        checked against the table id of version 0 while that entry exists,
        else against the entry of the checkpoint's own version (a read of
        it, cached like any entry), else accepted if an entry follows it:
        the oldest state there is."""
        table_id = self._version_zero_table_id()
        entry = None
        if table_id is None:
            try:
                entry = self.read_table_actions(head.version, keep=False)
            except (VersionNotFoundError, CorruptLogError):
                entry = None  # rule 3: no entry left to vouch (a damaged one cannot)
            if entry is None and not self.storage.exists(commit_path(head.version + 1)):
                raise CorruptLogError(
                    f"{where}: neither the entry of version 0 nor that of version {head.version} is there to vouch "
                    f"for the checkpoint, and no entry follows it: a state connected to nothing in this table's "
                    f"log (SPEC §Checkpoints, identity, rule 3)"
                )
        check_checkpoint_identity(head, table_id=table_id, entry=entry, where=where)

    def _version_zero_table_id(self) -> str | None:
        """The ``tableId`` of version 0's metadata, or None when that entry
        is gone (vacuumed) or unreadable; read once, since a table's id
        never changes. The bytes are kept for a replay from version 0."""
        if self._version_zero_id is _UNREAD:
            try:
                actions = self.read_table_actions(0, keep=True)
                found = next((a.table_id for a in actions if isinstance(a, Metadata)), None)
            except (VersionNotFoundError, CorruptLogError):
                found = None  # a damaged entry 0 cannot vouch; rule 2 applies (its replay fails on its own)
            self._version_zero_id = found
        return self._version_zero_id  # type: ignore[return-value]

    def write_checkpoint(self, state: TableState) -> CheckpointInfo:
        """Write the checkpoint of ``state`` and point the hint at it.

        The checkpoint is written with a plain put: two writers checkpointing
        the same version write the same state, so either copy is correct.
        """
        table = checkpoint_to_arrow(checkpoint_table_actions(state), state.partitions.values())
        sink = pa.BufferOutputStream()
        pq.write_table(
            table, sink, compression="zstd", use_dictionary=False, write_statistics=False,
            write_page_checksum=True,
        )
        data = sink.getvalue().to_pybytes()
        path = checkpoint_path(state.version)
        self.storage.put(path, data)
        hint = self.read_hint()
        if hint is None or hint < state.version:
            body = json.dumps({"version": state.version, "numPartitions": len(state.partitions)})
            self.storage.put(LAST_CHECKPOINT, body.encode() + b"\n")
        return CheckpointInfo(state.version, path, len(state.partitions), len(data))

    # ------------------------------------------------------------ state

    def load_state(self, version: int | None = None, *, latest: int | None = None) -> TableState:
        """Replay to ``version`` (default: the latest) from the newest usable checkpoint."""
        target = self._target(version, latest)
        start, rejected = self._best_checkpoint(target, self.read_checkpoint)
        first = self._first_to_replay(start, target, rejected)
        entries = zip(itertools.count(first), self.read_entries(first, target))
        state = roll_forward(start, entries, where=self._where)
        assert state is not None
        return state

    def load_head(self, version: int | None = None, *, latest: int | None = None) -> TableHead:
        """The table-level state of ``version`` (default: the latest): what
        :meth:`load_state` returns but the partitions, found from the same
        checkpoint's footer and the table-level actions of the entries after
        it, without decoding a partition. The checks left undone here are
        done by :meth:`load_state` when the partitions are needed; the
        protocol is checked here, with the same errors."""
        target = self._target(version, latest)
        head, rejected = self._best_checkpoint(target, self.read_checkpoint_head)
        first = self._first_to_replay(head, target, rejected)
        entries = zip(itertools.count(first), self.read_table_actions_between(first, target))
        head = roll_forward_head(head, entries, where=self._where)
        assert head is not None
        return head

    def _target(self, version: int | None, latest: int | None) -> int:
        if latest is None:
            latest = self.latest_version()
        target = latest if version is None else version
        if target < 0 or target > latest:
            raise VersionNotFoundError(
                f"version {target} does not exist in {self.storage.uri}; "
                f"available versions end at {latest}"
            )
        return target

    def _first_to_replay(
        self, start: TableHead | TableState | None, target: int, rejected: CorruptLogError | None
    ) -> int:
        """The first entry to apply onto ``start``, the checkpoint replay
        starts from. Without one, version 0; without that entry either, the
        version is gone: :class:`VersionNotFoundError`, or
        :class:`CorruptLogError` when a checkpoint was ``rejected`` (SPEC
        §Checkpoints: a damaged log, never the rejected state)."""
        if start is not None:
            return start.version + 1
        if not self.storage.exists(commit_path(0)):
            oldest = self.oldest_version()
            if rejected is not None:
                raise CorruptLogError(
                    f"version {target} of {self.storage.uri} cannot be reconstructed: the log was cleaned up to "
                    f"version {oldest} and the checkpoint replay would start from was rejected ({rejected})"
                ) from rejected
            raise VersionNotFoundError(
                f"version {target} of {self.storage.uri} can no longer be reconstructed: "
                f"the log was cleaned up to version {oldest} and no checkpoint precedes {target}"
            )
        return 0

    def _best_checkpoint(
        self, target: int, read: Callable[[int], _Start]
    ) -> tuple[_Start | None, CorruptLogError | None]:
        """``read`` of the newest checkpoint at or before ``target`` that it
        accepts, trying first one whose bytes :meth:`load_head` kept (so the
        state is built from the files the head was), then the hint's, then
        the others, newest first; and the first rejection met (None if
        none)."""

        def candidates() -> Iterator[int | None]:
            with self._lock:
                kept = [parse_checkpoint_name(p.rsplit("/", 1)[-1]) for p in self._undecoded]
            yield from sorted((c for c in kept if c is not None), reverse=True)
            yield self.read_hint()
            yield from reversed(self.list().checkpoints)

        tried: set[int] = set()
        rejected: CorruptLogError | None = None
        for c in candidates():
            if c is None or c > target or c in tried:
                continue
            tried.add(c)
            try:
                return read(c), rejected
            except FileNotFoundError:
                continue
            except CorruptLogError as e:
                rejected = rejected or e  # SPEC §Checkpoints: a bad checkpoint is skipped, not fatal
        return None, rejected

    def oldest_version(self) -> int:
        """The oldest version that can still be reconstructed."""
        listing = self.list()
        if not listing.commits and not listing.checkpoints:
            raise TableNotFoundError(f"no ctfile table at {self.storage.uri}")
        oldest_commit = listing.commits[0] if listing.commits else None
        if oldest_commit == 0:
            return 0
        return _history_start(listing.checkpoints, oldest_commit)

    def version_at_timestamp(self, timestamp_ms: int, *, latest: int, past_latest: bool = True) -> int:
        """The last version committed at or before ``timestamp_ms``.

        Commit timestamps strictly increase (SPEC §Commit timestamps), so this
        is a binary search reading O(log n) entries.

        ``past_latest`` says what a timestamp after the commit of ``latest``
        resolves to: True, ``latest`` (the end of a change interval, the
        vacuum cutoff); False, :class:`VersionNotFoundError`, as reading the
        table *as of* a timestamp requires (SPEC §Log replay): a version
        committed later could still get a commit timestamp at or before it.
        """
        lo = self.oldest_version()
        first_ts = self.commit_info(lo).timestamp
        if timestamp_ms < first_ts:
            raise VersionNotFoundError(
                f"timestamp {format_timestamp(timestamp_ms)} is before the first available commit "
                f"(version {lo} at {format_timestamp(first_ts)}) of {self.storage.uri}"
            )
        hi = latest
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.commit_info(mid).timestamp <= timestamp_ms:
                lo = mid
            else:
                hi = mid - 1
        if lo == latest and not past_latest:
            latest_ts = self.commit_info(latest).timestamp  # read (cached) by the search
            if timestamp_ms > latest_ts:
                raise VersionNotFoundError(
                    f"timestamp {format_timestamp(timestamp_ms)} is after the latest version available in "
                    f"{self.storage.uri}: version {latest}, committed at {format_timestamp(latest_ts)}; use a "
                    f"timestamp at or before {format_timestamp(latest_ts)}: what a later one resolves to is "
                    f"not settled until the next commit"
                )
        return lo


def _check_checkpoint_version(found: int, version: int, *, where: str) -> None:
    if found != version:
        raise CorruptLogError(f"{where}: checkpoint header says version {found}")


def _history_start(checkpoints: list[int], oldest_commit: int | None) -> int:
    """Where history starts without version 0: at the oldest of the sorted
    ``checkpoints`` the entries (the oldest ``oldest_commit``, None without
    any) go on from; an older one is connected to nothing (SPEC
    §Checkpoints, identity, rule 3)."""
    connected = [c for c in checkpoints if oldest_commit is None or c >= oldest_commit - 1]
    return connected[0] if connected else (oldest_commit or 0)
