"""Reading and writing stream states on a table's storage (SPEC §Streams).

:class:`StreamStore` lists ``_ct_streams/`` (one listing for every stream),
reads a stream's current state (its highest sequence number) and writes the
next one with put-if-absent, the same conditional write as a commit, so that
of two writers changing one stream from the same state exactly one wins
(:class:`StreamRaceLost` for the other). What the states mean -- pending
changes, consumption, claims -- is :mod:`ctfile.table.streams`; what vacuum
keeps for them is :mod:`ctfile.log.vacuum`.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass

from ctfile.format.errors import CorruptLogError
from ctfile.format.streams import STREAMS_DIR, StreamState, decode_state, encode_state, parse_state_name, state_path
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

    def old_files(self, older_than_ms: int) -> list[str]:
        """The state files other than the current one whose modification
        time is before ``older_than_ms`` (SPEC §Streams, state files)."""
        current = self.current_sequence
        return [
            f.path for seq, f in sorted(self.files.items())
            if seq != current and f.mtime_ms is not None and f.mtime_ms < older_than_ms
        ]


class StreamStore:
    """The streams of the table at ``storage``."""

    def __init__(self, storage: Storage):
        self.storage = storage

    def listing(self) -> dict[str, StreamFiles]:
        """Every stream's state files, by stream name (foreign names ignored)."""
        found: dict[str, dict[int, FileInfo]] = defaultdict(dict)
        for info in self.storage.list_dir(STREAMS_DIR):
            parsed = parse_state_name(info.path.rsplit("/", 1)[-1])
            if parsed is not None:
                found[parsed[0]][parsed[1]] = info
        return {name: StreamFiles(name, files) for name, files in sorted(found.items())}

    def read(self, name: str, sequence: int) -> StreamState:
        path = state_path(name, sequence)
        state = decode_state(self.storage.read_bytes(path), where=f"{self.storage.uri}/{path}")
        if state.name != name or state.sequence != sequence:
            raise CorruptLogError(
                f"{self.storage.uri}/{path}: holds state {state.sequence} of stream {state.name!r}, "
                f"not state {sequence} of {name!r}"
            )
        return state

    def current(self, name: str) -> StreamState | None:
        """The current state of stream ``name``, or None if it never existed.

        Lists all streams (one request); the highest sequence number wins
        (SPEC §Streams, reader requirements)."""
        files = self.listing().get(name)
        return None if files is None else self.read(name, files.current_sequence)

    def all_current(self) -> list[StreamState]:
        """The current state of every stream, tombstones included, by name."""
        return [self.read(name, f.current_sequence) for name, f in self.listing().items()]

    def write_next(self, state: StreamState) -> StreamState:
        """Write ``state`` (whose sequence is one above the state it was made
        from) with put-if-absent; :class:`StreamRaceLost` if that sequence
        exists already."""
        path = state_path(state.name, state.sequence)
        for attempt in range(1, MAX_UNKNOWN_OUTCOMES + 2):
            try:
                self.storage.put_if_absent(path, encode_state(state))
                return state
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
        if self.read(state.name, state.sequence) == state:
            return state  # an earlier put with an unknown outcome landed
        raise StreamRaceLost(state.name, state.sequence)
