"""Reading the manifest log: latest version, entries, checkpoints, time travel.

SPEC §Log replay and §Checkpoints. Correctness rests on the commit files
alone; ``_last_checkpoint`` is a hint that saves listing the log directory
(a handful of requests instead of one per version on an object store).
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from ctfile.format.actions import Action, CommitInfo
from ctfile.format.checkpoint import checkpoint_from_arrow, checkpoint_to_arrow
from ctfile.format.entries import decode_entry
from ctfile.format.errors import CorruptLogError, TableNotFoundError, VersionNotFoundError
from ctfile.format.paths import (
    LAST_CHECKPOINT,
    LOG_DIR,
    checkpoint_path,
    commit_path,
    parse_checkpoint_name,
    parse_commit_name,
)
from ctfile.log.replay import TableState, apply_entries, checkpoint_table_actions, state_from_checkpoint
from ctfile.log.storage import LocalStorage, Storage

_ENTRY_CACHE_SIZE = 4096


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
    entries are cached by version."""

    def __init__(self, storage: Storage):
        self.storage = storage
        self._entries: dict[int, list[Action]] = {}
        self._lock = threading.Lock()
        self._parallel = not isinstance(storage, LocalStorage)

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
        """The version ``_last_checkpoint`` names, or None if absent or unreadable."""
        try:
            obj = json.loads(self.storage.read_bytes(LAST_CHECKPOINT))
            v = obj["version"]
            return v if isinstance(v, int) and v >= 0 else None
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None  # advisory only: fall back to listing

    def latest_version(self, *, known: int | None = None) -> int:
        """The newest committed version.

        ``known``: a version known to be committed (the one a caller already
        holds); the search starts there, so an unchanged table costs two
        ``exists`` (that version and the next). Otherwise the search starts at the version the hint names,
        if its checkpoint exists. From a start: exponential then binary search
        over ``exists`` of version files, which is valid because versions are
        dense (SPEC §Commit protocol). Without one: list the log directory.
        """
        start = None
        if known is not None and self.storage.exists(commit_path(known)):
            start = known  # (a vacuum may have deleted it: then use the hint)
        if start is None:
            hint = self.read_hint()
            if hint is not None and self.storage.exists(checkpoint_path(hint)):
                start = hint
        if start is not None:
            lo, step = start, 1  # invariant: version lo exists (or is checkpointed)
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
        listing = self.list()
        if not listing.commits:
            raise TableNotFoundError(
                f"no ctfile table at {self.storage.uri}: {LOG_DIR}/ holds no version file"
            )
        return listing.commits[-1]

    # ------------------------------------------------------------ entries

    def read_entry(self, version: int) -> list[Action]:
        cached = self._entries.get(version)
        if cached is not None:
            return cached
        path = commit_path(version)
        where = f"{self.storage.uri}/{path}"
        try:
            data = self.storage.read_bytes(path)
        except FileNotFoundError as e:
            raise VersionNotFoundError(
                f"version {version} is not in the log of {self.storage.uri} ({path} is missing)"
            ) from e
        actions = decode_entry(data, version=version, where=where)  # SPEC §Log entries: self-checked
        with self._lock:
            if len(self._entries) >= _ENTRY_CACHE_SIZE:
                self._entries.clear()
            self._entries[version] = actions
        return actions

    def forget_entries_below(self, version: int) -> None:
        """Drop cached entries older than ``version`` (a vacuum deleted them:
        this process must not serve them either)."""
        with self._lock:
            for v in [v for v in self._entries if v < version]:
                del self._entries[v]

    def read_entries(self, start: int, end: int) -> list[list[Action]]:
        """Entries ``start..end`` inclusive, fetched concurrently on object stores."""
        versions = range(start, end + 1)
        if self._parallel and len(versions) > 1:
            with ThreadPoolExecutor(max_workers=min(16, len(versions))) as pool:
                return list(pool.map(self.read_entry, versions))
        return [self.read_entry(v) for v in versions]

    def commit_info(self, version: int) -> CommitInfo:
        for a in self.read_entry(version):
            if isinstance(a, CommitInfo):
                return a
        raise CorruptLogError(f"version {version} has no commitInfo")  # pragma: no cover

    # ------------------------------------------------------------ checkpoints

    def read_checkpoint(self, version: int, *, decode_stats: bool = False) -> TableState:
        """The state the checkpoint of ``version`` holds (SPEC §Checkpoints).

        Partition statistics stay JSON text until first read, unless
        ``decode_stats``: then every one is decoded now, so that a bad one
        raises here (for a caller about to rely on the checkpoint alone).

        Raises
        ------
        FileNotFoundError
            No checkpoint of ``version``.
        CorruptLogError
            The file is not a valid checkpoint of ``version``.
        UnsupportedFeatureError
            Its protocol needs a newer reader.
        """
        path = checkpoint_path(version)
        where = f"{self.storage.uri}/{path}"
        raw = self.storage.read_bytes(path)
        try:
            table = pq.read_table(pa.BufferReader(raw), use_threads=False, page_checksum_verification=True)
        except (pa.ArrowException, OSError, ValueError) as e:
            raise CorruptLogError(f"{where}: not a readable Parquet file ({e})") from e
        actions, partitions = checkpoint_from_arrow(table, where=where)
        state = state_from_checkpoint(actions, where=where, partitions=partitions)
        if state.version != version:
            raise CorruptLogError(f"{where}: checkpoint header says version {state.version}")
        if decode_stats:
            for p in partitions:
                p.stats  # noqa: B018 -- decodes and keeps, or raises CorruptLogError
        return state

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
        if latest is None:
            latest = self.latest_version()
        target = latest if version is None else version
        if target < 0 or target > latest:
            raise VersionNotFoundError(
                f"version {target} does not exist in {self.storage.uri}; "
                f"available versions end at {latest}"
            )
        start_state = self._best_checkpoint(target)
        first = 0 if start_state is None else start_state.version + 1
        if start_state is None and not self.storage.exists(commit_path(0)):
            oldest = self.oldest_version()
            raise VersionNotFoundError(
                f"version {target} of {self.storage.uri} can no longer be reconstructed: "
                f"the log was cleaned up to version {oldest} and no checkpoint precedes {target}"
            )
        state = apply_entries(
            start_state, first, self.read_entries(first, target),
            where=lambda v: f"{self.storage.uri}/{commit_path(v)}",
        )
        assert state is not None
        return state

    def _best_checkpoint(self, target: int) -> TableState | None:
        hint = self.read_hint()
        if hint is not None and hint <= target:
            try:
                return self.read_checkpoint(hint)
            except (FileNotFoundError, CorruptLogError):
                pass  # SPEC §Checkpoints: a bad checkpoint is skipped, not fatal
        for c in [c for c in reversed(self.list().checkpoints) if c <= target and c != hint]:
            try:
                return self.read_checkpoint(c)
            except (FileNotFoundError, CorruptLogError):
                continue
        return None

    def oldest_version(self) -> int:
        """The oldest version that can still be reconstructed."""
        listing = self.list()
        if not listing.commits and not listing.checkpoints:
            raise TableNotFoundError(f"no ctfile table at {self.storage.uri}")
        oldest_commit = listing.commits[0] if listing.commits else None
        if oldest_commit == 0:
            return 0
        # Without version 0, history starts at the oldest checkpoint.
        return listing.checkpoints[0] if listing.checkpoints else (oldest_commit or 0)

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
                f"timestamp {_fmt_ms(timestamp_ms)} is before the first available commit "
                f"(version {lo} at {_fmt_ms(first_ts)}) of {self.storage.uri}"
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
                    f"timestamp {_fmt_ms(timestamp_ms)} is after the latest version available in "
                    f"{self.storage.uri}: version {latest}, committed at {_fmt_ms(latest_ts)}; use a "
                    f"timestamp at or before {_fmt_ms(latest_ts)}: what a later one resolves to is "
                    f"not settled until the next commit"
                )
        return lo


def _fmt_ms(ms: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).isoformat(timespec="milliseconds")
