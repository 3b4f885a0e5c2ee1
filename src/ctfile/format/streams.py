"""Stream states: names, paths and the JSON codec (SPEC §Streams).

A stream's state is a sequence of files ``_ct_streams/<name>/<s>.json``, one
JSON object each with the single key ``stream``; the highest sequence number
is the current state. This module is pure: it names the files and encodes
and decodes a :class:`StreamState`, checking every field as SPEC §Streams
types it. Storage is :mod:`ctfile.log.streams`.

Examples
--------
>>> s = StreamState.created("to_silver", stream_id="ab" * 16, table_id="t", information="default",
...                         initial_rows=False, offset=4, now_ms=1000)
>>> state_path("to_silver", s.sequence)
'_ct_streams/to_silver/00000000000000000000.json'
>>> parse_state_name("00000000000000000003.json"), parse_state_name("x.json")
(3, None)
>>> decode_state(encode_state(s), where="test") == s
True
>>> s.advanced(7, now_ms=2000).offset, s.claimed(end=7, target_uri="/t", target_table_id="u", now_ms=3).sequence
(7, 1)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from ctfile.format.change_modes import ChangeMode
from ctfile.format.errors import CorruptLogError, InvalidArgumentError
from ctfile.format.paths import VERSION_DIGITS
from ctfile.format.codec import get_field
from ctfile.format.log_values import parse_json

STREAMS_DIR = "_ct_streams"
APP_ID_PREFIX = "ctfile-stream:"
FENCE_APP_ID_PREFIX = "ctfile-stream-fence:"

_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")
_STATE_RE = re.compile(r"^(\d{20})\.json$")
#: SPEC §Streams: states below the current sequence minus this may be deleted.
KEEP_PREVIOUS_STATES = 2
_ID_RE = re.compile(r"[0-9a-f]{32}")


def check_stream_name(name: Any) -> str:
    """``name`` if it is a valid stream name (SPEC §Streams), else
    :class:`InvalidArgumentError` naming the rule."""
    if not isinstance(name, str) or _NAME_RE.fullmatch(name) is None:
        raise InvalidArgumentError(
            f"a stream name is 1 to 128 characters of letters, digits, '_' and '-'; found {name!r}"
        )
    return name


def stream_dir(name: str) -> str:
    """The directory of stream ``name``'s states: one per stream, so that a
    stream's states are listed without the others'."""
    return f"{STREAMS_DIR}/{check_stream_name(name)}"


def state_path(name: str, sequence: int) -> str:
    """The path of state ``sequence`` of stream ``name``."""
    return f"{stream_dir(name)}/{sequence:0{VERSION_DIGITS}d}.json"


def is_stream_name(name: str) -> bool:
    return _NAME_RE.fullmatch(name) is not None


def parse_state_name(file_name: str) -> int | None:
    """The sequence number a state file name encodes, or None for any other
    name (SPEC §Streams: foreign names are ignored)."""
    m = _STATE_RE.match(file_name)
    return int(m.group(1)) if m else None


def app_id_of(stream_id: str) -> str:
    """The ``appId`` of the ``txn`` a consumption of the stream commits to its target."""
    return APP_ID_PREFIX + stream_id


@dataclass(frozen=True)
class StreamClaim:
    """A consumption in progress (SPEC §Streams, ``claim``): the consumer is
    committing ``offset + 1 .. end`` into the target table, with a ``txn``
    of ``app_id`` whose version is the claim's sequence number."""

    end: int
    target_uri: str
    target_table_id: str
    app_id: str
    claimed_time: int


@dataclass(frozen=True)
class StreamState:
    """One state of a stream (SPEC §Streams); the transitions are methods
    returning the next state (sequence + 1)."""

    name: str
    stream_id: str
    table_id: str
    sequence: int
    information: ChangeMode  # the mode of its change scans, persisted as its value
    initial_rows: bool
    offset: int
    created_time: int
    updated_time: int
    claim: StreamClaim | None = None
    stale_since: int | None = None
    oldest_version: int | None = None
    dropped: bool = False

    @classmethod
    def created(
        cls, name: str, *, stream_id: str, table_id: str, information: ChangeMode | str, initial_rows: bool,
        offset: int, now_ms: int, sequence: int = 0,
    ) -> "StreamState":
        mode = ChangeMode.parse(information)
        return cls(check_stream_name(name), stream_id, table_id, sequence, mode, initial_rows, offset, now_ms, now_ms)

    @property
    def app_id(self) -> str:
        return app_id_of(self.stream_id)

    @property
    def fence_app_id(self) -> str:
        """The ``appId`` of the second ``txn`` a fence commits, which tells a
        fenced claim from a consumed one (SPEC §Streams, claims)."""
        return FENCE_APP_ID_PREFIX + self.stream_id

    @property
    def is_stale(self) -> bool:
        return self.stale_since is not None

    @property
    def is_live(self) -> bool:
        """Neither dropped nor stale: vacuum keeps what it needs."""
        return not self.dropped and not self.is_stale

    def needs_from(self) -> int:
        """The oldest version the pending changes read (SPEC §Streams,
        retention): ``offset + 1``, or ``offset`` while initial rows are
        pending (the snapshot at ``offset`` is read)."""
        return max(self.offset, 0) if self.initial_rows else self.offset + 1

    def _next(self, now_ms: int, **changes: Any) -> "StreamState":
        return replace(self, sequence=self.sequence + 1, updated_time=now_ms, **changes)

    def claimed(self, *, end: int, target_uri: str, target_table_id: str, now_ms: int) -> "StreamState":
        claim = StreamClaim(end, target_uri, target_table_id, self.app_id, now_ms)
        return self._next(now_ms, claim=claim)

    def advanced(self, offset: int, *, now_ms: int) -> "StreamState":
        """The state after consuming up to ``offset`` (a claim rolled forward,
        or an advance)."""
        return self._next(now_ms, offset=offset, initial_rows=False, claim=None)

    def abandoned(self, *, now_ms: int) -> "StreamState":
        """The state after a fenced claim: the offset unchanged."""
        return self._next(now_ms, claim=None)

    def marked_stale(self, *, now_ms: int, oldest_version: int) -> "StreamState":
        return self._next(now_ms, stale_since=now_ms, oldest_version=oldest_version)

    def tombstone(self, *, now_ms: int) -> "StreamState":
        return self._next(now_ms, dropped=True, claim=None)


# ---------------------------------------------------------------- codec


def state_to_json(s: StreamState) -> dict:
    body: dict[str, Any] = {
        "name": s.name,
        "streamId": s.stream_id,
        "tableId": s.table_id,
        "sequence": s.sequence,
        "information": s.information.value,
        "initialRows": s.initial_rows,
        "offset": s.offset,
        "createdTime": s.created_time,
        "updatedTime": s.updated_time,
    }
    if s.claim is not None:
        c = s.claim
        body["claim"] = {
            "end": c.end, "targetUri": c.target_uri, "targetTableId": c.target_table_id,
            "appId": c.app_id, "claimedTime": c.claimed_time,
        }
    if s.stale_since is not None:
        body["staleSince"] = s.stale_since
        body["oldestVersion"] = s.oldest_version
    if s.dropped:
        body["dropped"] = True
    return {"stream": body}


def encode_state(s: StreamState) -> bytes:
    """The bytes of a state file, if readers accept the state: it is checked
    as :func:`decode_state` checks it (SPEC §Conventions: a writer MUST NOT
    write what readers refuse).

    Raises
    ------
    InvalidArgumentError
        A field readers refuse (a ``long`` out of range, an offset below
        -1 ...), named with what was expected and what was found.
    """
    obj = state_to_json(s)
    try:
        state_from_json(obj, f"state {s.sequence} of stream {s.name!r} to write")
    except CorruptLogError as e:
        raise InvalidArgumentError(f"{e}; readers refuse it, so it is not written (SPEC §Conventions)") from None
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode()


def _field(obj: dict, key: str, typ: type, where: str, *, optional: bool = False) -> Any:
    return get_field(obj, key, typ, where, default=None) if optional else get_field(obj, key, typ, where)


def _claim_from_json(obj: Any, where: str) -> StreamClaim | None:
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise CorruptLogError(f"{where}: field 'claim' should be an object, found {obj!r}")
    w = f"{where}.claim"
    return StreamClaim(
        end=_field(obj, "end", int, w),
        target_uri=_field(obj, "targetUri", str, w),
        target_table_id=_field(obj, "targetTableId", str, w),
        app_id=_field(obj, "appId", str, w),
        claimed_time=_field(obj, "claimedTime", int, w),
    )


def state_from_json(obj: Any, where: str) -> StreamState:
    """Decode and check a state object (unknown fields are ignored, SPEC
    §Streams reader requirements); :class:`CorruptLogError` naming ``where``
    and the field for anything malformed."""
    if not isinstance(obj, dict) or not isinstance(obj.get("stream"), dict):
        raise CorruptLogError(f"{where}: a stream state is an object with the single key 'stream'")
    b = obj["stream"]
    state = StreamState(
        name=_field(b, "name", str, where),
        stream_id=_field(b, "streamId", str, where),
        table_id=_field(b, "tableId", str, where),
        sequence=_field(b, "sequence", int, where),
        information=_mode(_field(b, "information", str, where), where),
        initial_rows=_field(b, "initialRows", bool, where),
        offset=_field(b, "offset", int, where),
        created_time=_field(b, "createdTime", int, where),
        updated_time=_field(b, "updatedTime", int, where),
        claim=_claim_from_json(b.get("claim"), where),
        stale_since=_field(b, "staleSince", int, where, optional=True),
        oldest_version=_field(b, "oldestVersion", int, where, optional=True),
        dropped=_field(b, "dropped", bool, where, optional=True) or False,
    )
    _check_state(state, where)
    return state


def _mode(value: str, where: str) -> ChangeMode:
    try:
        return ChangeMode.parse(value)
    except InvalidArgumentError as e:
        raise CorruptLogError(f"{where}: {e}") from None


def _check_state(s: StreamState, where: str) -> None:
    problems = []
    if _NAME_RE.fullmatch(s.name) is None:
        problems.append(f"name {s.name!r} is not a stream name")
    if _ID_RE.fullmatch(s.stream_id) is None:
        problems.append(f"streamId {s.stream_id!r} is not 32 lower-case hexadecimal digits")
    if s.sequence < 0:
        problems.append(f"sequence {s.sequence} is negative")
    if s.offset < -1:
        problems.append(f"offset {s.offset} is below -1")
    if s.claim is not None and not _claim_continues(s):
        problems.append(f"claim {s.claim} does not continue offset {s.offset} of stream {s.stream_id}")
    if (s.stale_since is None) != (s.oldest_version is None):
        problems.append("staleSince and oldestVersion go together")
    if problems:
        raise CorruptLogError(f"{where}: " + "; ".join(problems))


def _claim_continues(s: StreamState) -> bool:
    """Whether the claim of ``s`` continues its offset, by its application."""
    return s.claim.end >= s.offset and s.claim.app_id == s.app_id


def decode_state(data: bytes, *, where: str) -> StreamState:
    """The state a state file holds, checked (:func:`state_from_json`).

    Raises
    ------
    CorruptLogError
        Not UTF-8 JSON (or nested too deeply to decode), or a bad state.
    """
    try:
        obj = parse_json(data.decode("utf-8"), where=where)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptLogError(f"{where}: not a JSON stream state: {e}") from None
    return state_from_json(obj, where)
