"""Reading and writing stream states on a table's storage (SPEC §Streams).

:class:`StreamStore` lists a stream's directory ``_ct_streams/<name>/``,
reads its current state (the highest sequence number) and writes the next
one with put-if-absent, the same conditional write as a commit, so that of
two writers changing one stream from the same state exactly one wins
(:class:`StreamRaceLost` for the other). A writer then lists the directory
again and deletes the states no one needs (all but the current one and the
two before it): a stream consumed every few seconds keeps three files, so
its listing stays one request. What the states mean -- pending
changes, consumption, claims -- is :mod:`ctfile.table.streams`; what vacuum
keeps for them is :func:`plan_stream_retention`, below, which
:mod:`ctfile.log.vacuum` uses.

Retention
---------
What a vacuum keeps for streams, and which streams it makes stale
(SPEC §Streams, retention; SPEC §Vacuum, step 1).

A live stream (not dropped, not stale) *needs* the versions from
:meth:`~ctfile.format.streams.StreamState.needs_from` on: ``offset + 1``, or
``offset`` while its initial rows are pending. A stream whose current state
has an unresolved claim needs the same: the claim may still be abandoned,
and then the interval after the offset is handed out again. The stream
*holds* that history while its first pending commit, version ``offset + 1``,
committed no earlier than the vacuum's history cutoff minus the table's
``ctfile.maxRetentionExtension`` (of the latest metadata). The retained base
is the smaller of the vacuum's own base ``C`` and every holding stream's
need, never below the oldest reconstructable version; a live stream that
needs a version below that final base -- it does not hold, or its history is
already gone -- is made stale before any log entry is deleted
(:func:`ctfile.log.vacuum.run_vacuum`).

Only streams that need a version below ``C`` matter: a stream with nothing
pending needs ``latest + 1`` (or ``latest``, for initial rows at the latest
version), never below ``C``.

A listing of ``_ct_streams/`` and of each stream's directory gives every
stream's current state and the old state files vacuum deletes (those a
writer left behind, never the current one or the two before it, SPEC
§Streams, state files).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from ctfile.format.errors import CorruptLogError
from ctfile.format.properties import TableProperties
from ctfile.format.streams import (
    KEEP_PREVIOUS_STATES,
    STREAMS_DIR,
    StreamState,
    decode_state,
    encode_state,
    is_stream_name,
    parse_state_name,
    state_path,
    stream_dir,
)
from ctfile.log.manifest import ManifestLog
from ctfile.log.storage import FileInfo, Storage

log = logging.getLogger("ctfile")

#: Puts with an unknown outcome retried before giving up (as commits do).
MAX_UNKNOWN_OUTCOMES = 5


class StreamRaceLost(Exception):
    """Another writer wrote the state this one meant to write: re-read.

    Not a :class:`~ctfile.CtfileError`: callers turn it into the error
    that fits (a conflict for a consumer, a retry for a vacuum)."""

    def __init__(self, name: str, sequence: int):
        super().__init__(f"state {sequence} of stream {name} was written by another writer")
        self.name = name
        self.sequence = sequence


@dataclass(frozen=True)
class StreamFiles:
    """The state files of one stream, by sequence number, from one listing."""

    name: str
    files: dict[int, FileInfo]

    @property
    def current_sequence(self) -> int:
        return max(self.files)

    def old_files(self) -> list[str]:
        """The state files below the current sequence minus
        :data:`~ctfile.format.streams.KEEP_PREVIOUS_STATES`, which anyone may
        delete (SPEC §Streams, state files): the current state and the two
        before it (a claim and the state it was made over) stay."""
        keep_from = self.current_sequence - KEEP_PREVIOUS_STATES
        return [f.path for seq, f in sorted(self.files.items()) if seq < keep_from]


class StreamStore:
    """The streams of the table at ``storage``. With ``table_id`` (the
    table's ``tableId``), a state file naming another table is refused as
    it is read (SPEC §Streams, reader requirements: a copy from another
    table's streams); without, a checker compares it itself."""

    def __init__(self, storage: Storage, *, table_id: str | None = None):
        self.storage = storage
        self.table_id = table_id

    def files(self, name: str) -> StreamFiles | None:
        """Stream ``name``'s state files (one listing of its directory), or
        None if it never existed."""
        found = {}
        for info in self.storage.list_dir(stream_dir(name)):
            seq = parse_state_name(info.path.rsplit("/", 1)[-1])
            if seq is not None:
                found[seq] = info
        return StreamFiles(name, found) if found else None

    def listing(self) -> dict[str, StreamFiles]:
        """Every stream's state files, by stream name (foreign names ignored):
        one listing of ``_ct_streams/`` and one per stream."""
        out = {}
        for name in self.storage.list_subdirs(STREAMS_DIR):
            files = self.files(name) if is_stream_name(name) else None
            if files is not None:
                out[name] = files
        return out

    def read(self, name: str, sequence: int) -> StreamState:
        path = state_path(name, sequence)
        state = decode_state(self.storage.read_bytes(path), where=f"{self.storage.uri}/{path}")
        if state.name != name or state.sequence != sequence:
            raise CorruptLogError(
                f"{self.storage.uri}/{path}: holds state {state.sequence} of stream {state.name!r}, "
                f"not state {sequence} of {name!r}"
            )
        if self.table_id is not None and state.table_id != self.table_id:
            raise CorruptLogError(
                f"{self.storage.uri}/{path}: state {sequence} of stream {name} is of table {state.table_id}, not of "
                f"this table ({self.table_id}): a copy from another table's streams. Its older states are not "
                f"used in its place (they would hand out consumed changes again): drop the stream and create "
                f"it again (SPEC §Streams)"
            )
        return state

    def current(self, name: str) -> StreamState | None:
        """The current state of stream ``name``, or None if it never existed:
        the highest sequence number wins (SPEC §Streams, reader requirements)."""
        files = self.files(name)
        return None if files is None else self.read(name, files.current_sequence)

    def all_current(self) -> list[StreamState]:
        """The current state of every stream, tombstones included, by name."""
        return [self.read(name, f.current_sequence) for name, f in self.listing().items()]

    def write_next(self, state: StreamState) -> StreamState:
        """Write ``state`` (whose sequence is one above the state it was made
        from) with put-if-absent, then list the stream's states: a higher
        sequence means this write came after the state it continues had been
        superseded (and its successor deleted), so it is lost too (SPEC
        §Streams). Then delete the states no one needs any more.

        Raises
        ------
        StreamRaceLost
            The sequence exists, or a higher one does.
        """
        self._put(state)
        files = self.files(state.name)
        if files is not None and files.current_sequence > state.sequence:
            raise StreamRaceLost(state.name, state.sequence)
        if files is not None and files.old_files():
            try:
                self.storage.delete(files.old_files())
            except OSError as e:  # best effort: vacuum deletes them too
                log.warning("could not delete old states of stream %s: %s", state.name, e)
        return state

    def _put(self, state: StreamState) -> None:
        path = state_path(state.name, state.sequence)
        for attempt in range(1, MAX_UNKNOWN_OUTCOMES + 2):
            try:
                self.storage.put_if_absent(path, encode_state(state))
                return
            except FileExistsError:
                break
            except OSError as e:
                # Outcome unknown (SPEC §Commit protocol, step 7): the state
                # is ours if the file now holds exactly it.
                if attempt > MAX_UNKNOWN_OUTCOMES:
                    raise
                log.warning("put of %s failed (%s); checking whether it landed", path, e)
                time.sleep(min(2.0, 0.05 * 2**attempt))
                if self.storage.exists(path):
                    break
            # A StorageError that is not an OSError is a definite refusal:
            # nothing was written, and it propagates.
        if self.read(state.name, state.sequence) != state:
            raise StreamRaceLost(state.name, state.sequence)


# ---------------------------------------------------------------- retention (vacuum)


@dataclass(frozen=True)
class StreamHold:
    """A live stream whose pending changes need history older than the
    vacuum's own retained base.

    ``needs_version`` is the oldest version its pending changes read;
    ``oldest_pending_ms`` the commit time of its first pending commit
    (version ``offset + 1``; None if that entry is already gone);
    ``stale_after_ms`` when vacuums with the same windows stop holding its
    history back: ``oldest_pending_ms`` + max(retain, grace period) +
    ``ctfile.maxRetentionExtension`` (None if the entry is gone).
    """

    name: str
    offset: int
    needs_version: int
    oldest_pending_ms: int | None
    stale_after_ms: int | None


@dataclass(frozen=True)
class StreamRetention:
    """The streams' part of a vacuum plan.

    ``base`` is the retained base after the holding streams lowered it;
    ``holding`` the streams that kept history back (their need is at or
    above ``base``); ``stale`` the live streams that need a version below
    ``base``, with ``stale_states`` their current states (what the vacuum
    writes the stale state over); ``old_state_files`` the non-current
    state files below each stream's current sequence minus two.
    """

    base: int
    holding: tuple[StreamHold, ...] = ()
    stale: tuple[StreamHold, ...] = ()
    stale_states: tuple[StreamState, ...] = ()
    old_state_files: tuple[str, ...] = ()


def plan_stream_retention(
    manifest: ManifestLog, *, base: int, oldest: int, latest: int, now_ms: int, history_cutoff_ms: int,
) -> StreamRetention:
    """Lower the vacuum's base ``base`` (its ``C``) for the holding streams,
    and find the streams it makes stale (see the module docstring); reads
    only.

    ``oldest``: the oldest reconstructable version; ``latest``: the latest
    version the vacuum read (its metadata gives the extension); ``now_ms``
    and ``history_cutoff_ms``: the vacuum's clock and history cutoff.

    Raises
    ------
    CorruptLogError
        A stream's current state is malformed or of another table: the vacuum then deletes
        nothing rather than expire history an unreadable stream may need.
    """
    listing = StreamStore(manifest.storage).listing()
    old_files = tuple(p for files in listing.values() for p in files.old_files())
    behind, properties = _streams_behind(manifest, listing, base=base, latest=latest)
    if not behind:
        return StreamRetention(base=base, old_state_files=old_files)
    extension_ms = TableProperties.from_mapping(properties).max_retention_extension_s * 1000
    # A stream holds while its first pending commit is at or after this.
    hold_from_ms = history_cutoff_ms - extension_ms
    holds = [_hold(manifest, s, oldest=oldest, lasts_ms=now_ms - hold_from_ms) for s in behind]
    return _retention(holds, behind, base=base, oldest=oldest, hold_from_ms=hold_from_ms, old_files=old_files)


def _retention(
    holds: list[StreamHold], behind: list[StreamState], *, base: int, oldest: int, hold_from_ms: int,
    old_files: tuple[str, ...],
) -> StreamRetention:
    """The vacuum's base lowered to what the streams that still hold need
    (never below ``oldest``), and the streams (``holds`` of the states
    ``behind``) that need more than that: stale."""
    holding = [h for h in holds if _still_holds(h, hold_from_ms)]
    final = max(min([base] + [h.needs_version for h in holding]), oldest)
    stale_holds, stale_states = _stale(holds, behind, base=final)
    return StreamRetention(
        base=final,
        holding=tuple(h for h in holding if h.needs_version >= final),
        stale=stale_holds,
        stale_states=stale_states,
        old_state_files=old_files,
    )


def _stale(
    holds: list[StreamHold], behind: list[StreamState], *, base: int
) -> tuple[tuple[StreamHold, ...], tuple[StreamState, ...]]:
    """The holds, and their states, of the streams that need a version
    before the vacuum's final ``base``."""
    stale = [(h, s) for h, s in zip(holds, behind) if h.needs_version < base]
    return tuple(h for h, _ in stale), tuple(s for _, s in stale)


def _still_holds(hold: StreamHold, hold_from_ms: int) -> bool:
    """Whether the stream's first pending commit is recent enough (at or
    after ``hold_from_ms``) for it to hold history back; not if that entry
    is already gone."""
    return hold.oldest_pending_ms is not None and hold.oldest_pending_ms >= hold_from_ms


def _streams_behind(
    manifest: ManifestLog, listing: dict, *, base: int, latest: int
) -> tuple[list[StreamState], dict[str, str]]:
    """The current states of the live streams of ``listing`` that need a
    version before ``base``, and the table's properties at ``latest``
    (nothing is read when there is no stream)."""
    if not listing:
        return [], {}
    metadata = manifest.load_head(latest, latest=latest).metadata
    store = StreamStore(manifest.storage, table_id=metadata.table_id)
    states = [store.read(name, files.current_sequence) for name, files in listing.items()]
    return [s for s in states if s.is_live and s.needs_from() < base], metadata.properties


def _hold(manifest: ManifestLog, state: StreamState, *, oldest: int, lasts_ms: int) -> StreamHold:
    """``state``'s need and the commit time of its first pending commit
    (None if that entry is gone: the stream cannot hold). ``lasts_ms``:
    how long after that commit vacuums keep holding (window + extension)."""
    first = state.offset + 1
    pending_ms = manifest.commit_info(first).timestamp if first >= oldest else None
    return StreamHold(
        name=state.name, offset=state.offset, needs_version=state.needs_from(), oldest_pending_ms=pending_ms,
        stale_after_ms=None if pending_ms is None else pending_ms + lasts_ms,
    )
