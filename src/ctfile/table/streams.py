"""Named streams on a table (SPEC §Streams): :class:`Stream`, :class:`StreamInfo`
and the helper behind the ``Table`` methods that make, find and drop them
(:class:`TableStreams`).

A stream is a cursor over the table's changes, Snowflake's STREAM: its
:attr:`~Stream.offset` is the last version consumed, :meth:`Stream.pending`
the change scan of everything after it, and the offset moves only when a
transaction that consumed the pending changes commits
(``target.transaction(consuming=stream)``: the stream's :meth:`~Stream.consumption`,
:mod:`ctfile.table.consumption`)
or when :meth:`Stream.advance` says so. The state lives beside the log in
``_ct_streams/`` (:mod:`ctfile.log.streams`); vacuum keeps the history a
live stream needs, up to ``ctfile.maxRetentionExtension``.

Examples
--------
>>> import ctfile, pyarrow as pa, pyarrow.compute as pc, tempfile
>>> people = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64()), ("name", pa.string())]))
>>> log = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("name", pa.string()), ("action", pa.string())]))
>>> s = people.create_stream("audit_feed")
>>> _ = people.insert(pa.table({"id": [1, 2], "name": ["Jeff", "Donny"]}))
>>> with log.transaction(consuming=s) as tx:
...     _ = tx.insert(s.pending().to_arrow().select(["name", "METADATA$ACTION"]).rename_columns(["name", "action"]))
>>> s.offset == people.version, s.pending().to_arrow().num_rows, log.to_arrow().num_rows
(True, 0, 2)
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

import pyarrow.compute as pc

from ctfile.format.actions import FEATURE_STREAMS
from ctfile.format.change_modes import ChangeMode
from ctfile.format.errors import (
    InvalidArgumentError,
    StaleIntervalError,
    StaleStreamError,
    StreamExistsError,
    StreamNotFoundError,
    VersionNotFoundError,
)
from ctfile.format.log_values import require_long, utc_datetime
from ctfile.format.properties import TableProperties
from ctfile.format.streams import StreamClaim, StreamState, check_stream_name
from ctfile.format.validators import require_int
from ctfile.log.streams import StreamRaceLost, StreamStore
from ctfile.log.transaction import now_ms
from ctfile.log.vacuum import DEFAULT_GRACE_S, DEFAULT_RETAIN_S, window_seconds
from ctfile.reader.change_scan import ChangeSet
from ctfile.table.consumption import (
    MAX_RESOLVE_ROUNDS, ClaimResolver, Consumption, OpenTable, StreamPin, parse_pin_token, stream_store,
)
from ctfile.table.history import HistoryEntry

if TYPE_CHECKING:
    from ctfile.table.table import Table

CREATE_OPERATION = "CREATE STREAM"


def _utc(ms: int | None) -> dt.datetime | None:
    return None if ms is None else utc_datetime(ms)


@dataclass(frozen=True)
class StreamInfo:
    """A stream as :meth:`Table.streams` reports it.

    ``lag_versions`` counts the versions after the offset, ``lag_rows`` the
    rows their commits inserted, updated or deleted (from their commit
    metrics), ``oldest_pending`` is when the first of them committed and
    ``stale_after`` when the stream goes stale if it is not consumed:
    ``oldest_pending`` plus max(retain, grace period) of a vacuum with the
    given windows plus ``ctfile.maxRetentionExtension`` (None with nothing
    pending: an up-to-date stream holds nothing back).
    """

    name: str
    information: ChangeMode
    initial_rows: bool
    offset: int
    latest_version: int
    lag_versions: int
    lag_rows: int | None
    oldest_pending: dt.datetime | None
    stale: bool
    stale_since: dt.datetime | None
    stale_after: dt.datetime | None
    created: dt.datetime
    claim: StreamClaim | None

    @property
    def age(self) -> dt.timedelta | None:
        """How long the oldest pending change has waited (None: nothing pending)."""
        return None if self.oldest_pending is None else dt.datetime.now(dt.timezone.utc) - self.oldest_pending


class Stream:
    """A handle on one stream of ``table`` (from :meth:`Table.create_stream`
    or :meth:`Table.stream`). Every property reads the current state.
    ``open_table`` (:func:`ctfile.open_table`) opens a claim's target named
    only by its URI (:class:`~ctfile.table.consumption.ClaimResolver`)."""

    def __init__(self, table: "Table", name: str, *, open_table: OpenTable):
        self.table = table
        self.name = name
        self._open_table = open_table
        #: The consumption by an open transaction, if any (:meth:`consumption`).
        self._consumption: Consumption | None = None

    def __repr__(self) -> str:
        return f"Stream({self.name!r} on {self.table.uri})"

    @property
    def _store(self) -> StreamStore:
        return stream_store(self.table)

    def _resolver(self, target: "Table | None" = None) -> ClaimResolver:
        return ClaimResolver(self.table, self._store, open_table=self._open_table, target=target)

    def state(self) -> StreamState:
        """The current state, a committed claim rolled forward (read only
        otherwise: an unresolved claim is left to its consumer)."""
        state = self._resolver().settle_if_committed(self._current_or_raise())
        if state.dropped:  # dropped while the claim was being settled
            raise StreamNotFoundError(f"no stream {self.name!r} on {self.table.uri}: it was dropped")
        return state

    @property
    def offset(self) -> int:
        """The last version consumed (-1: none, the stream starts at version 0)."""
        return self.state().offset

    @property
    def information(self) -> ChangeMode:
        """The mode of the stream's change scans (a ``str`` enum: ``"default"``,
        ``"append_only"`` or ``"audit"``)."""
        return self.state().information

    def _check_live(self, state: StreamState) -> None:
        if state.is_stale:
            raise StaleStreamError(
                f"stream {self.name} on {self.table.uri} is stale: a vacuum at {_utc(state.stale_since)} expired "
                f"history it needed (it had consumed up to version {state.offset}); the oldest version still "
                f"readable is {state.oldest_version}. Drop the stream and create it again",
                stream=self.name, stale_since=_utc(state.stale_since), oldest_available=state.oldest_version,
            )

    def pin(self, state: StreamState | None = None) -> StreamPin:
        """Pin the current state and the table's latest version (what
        :meth:`pending` reads outside a consuming transaction)."""
        if state is not None and not isinstance(state, StreamState):
            raise InvalidArgumentError(f"state must be a StreamState of stream {self.name} (or None), found {state!r:.80}")
        state = self.state() if state is None else state
        self._check_live(state)
        return StreamPin(state, self.table.refresh().version)

    def pin_from_token(self, token: str) -> StreamPin:
        """The pin whose :attr:`~ctfile.table.consumption.StreamPin.token`
        is ``token`` (made by another process, e.g. handed to a Spark job).

        Raises
        ------
        InvalidArgumentError
            A malformed token, or one that is not a pin of this stream: no
            state of that sequence, a state of another stream (of another
            table, or of a dropped stream of the same name), or an end version
            outside offset..latest.
        StaleStreamError
            The stream is stale.
        """
        stream_id, sequence, end = parse_pin_token(token)
        current = self._current_or_raise()
        self._check_live(current)
        where = f"stream pin {token!r} of stream {self.name} on {self.table.uri}"
        if sequence > current.sequence:
            raise InvalidArgumentError(f"{where}: the stream has no state {sequence} (its latest is {current.sequence})")
        try:
            state = self._store.read(self.name, sequence)
        except FileNotFoundError:
            raise InvalidArgumentError(
                f"{where}: state {sequence} no longer exists (only the current state and the two before it are "
                f"kept); pin the stream again"
            ) from None
        if state.dropped or state.stream_id != stream_id or current.stream_id != stream_id:
            raise InvalidArgumentError(
                f"{where}: the token belongs to stream id {stream_id}, but state {sequence} is of stream id "
                f"{state.stream_id}{' (dropped)' if state.dropped else ''} and the stream now is {current.stream_id}"
            )
        latest = self.table.refresh().version
        if not state.offset <= end <= latest:
            raise InvalidArgumentError(
                f"{where}: end version {end} is outside {state.offset}..{latest} (the state's offset..latest version)"
            )
        return StreamPin(state, end)

    def pending(
        self, *, changelog: str | None = None, filter: pc.Expression | None = None, pin: StreamPin | None = None,
    ) -> ChangeSet:
        """The changes after :attr:`offset`, up to the latest version when
        called, in the stream's mode (``information`` at creation), with the
        initial rows if the stream was created with them and has not been
        consumed yet. Inside ``target.transaction(consuming=stream)`` every
        call returns the changes pinned when the transaction began; with
        ``pin`` (from :meth:`pin` or :meth:`pin_from_token`), those of that
        pin, consumed since or not.

        ``changelog`` and ``filter`` are those of :meth:`Table.changes`.

        Raises
        ------
        StaleStreamError
            A vacuum expired history the pending changes need (the stream
            fell behind ``ctfile.maxRetentionExtension``).
        """
        if pin is not None and (not isinstance(pin, StreamPin) or pin.state.name != self.name):
            raise InvalidArgumentError(f"pin must be a StreamPin of stream {self.name} (Stream.pin()), found {pin!r}")
        pin = pin or self._consumed_pin() or self.pin()
        return self._changes(pin, changelog=changelog, filter=filter)

    def _changes(self, pin: StreamPin, **options: Any) -> ChangeSet:
        s = pin.state
        try:
            return self.table.changes(
                start_version=s.offset + 1, end_version=pin.end, information=s.information,
                initial_rows=s.initial_rows, **options,
            )
        except StaleIntervalError as e:
            # SPEC §Streams, reader requirements: missing history is
            # staleness, whoever expired it.
            raise StaleStreamError(
                f"stream {self.name} on {self.table.uri} is stale: the history after version {s.offset} it has "
                f"not consumed is gone ({e})",
                stream=self.name, stale_since=None, oldest_available=e.oldest_available,
            ) from e

    def advance(self, to_version: int) -> int:
        """Mark the changes up to ``to_version`` consumed, for a consumer that
        wrote them somewhere other than a ctfile table (at least once: if it
        dies after writing them and before advancing, they are handed out
        again). Advancing to a version at or below the offset does nothing.
        Returns the offset.

        Raises
        ------
        VersionNotFoundError
            ``to_version`` beyond the latest version.
        CommitConflictError
            Another consumer kept changing the stream.
        """
        require_int(to_version, "to_version")
        latest = self.table.refresh().version
        if to_version > latest:
            raise VersionNotFoundError(
                f"cannot advance stream {self.name} to version {to_version}: the latest version of "
                f"{self.table.uri} is {latest}"
            )
        for _ in range(MAX_RESOLVE_ROUNDS):
            state = self._resolver().take_over(self._current_or_raise())
            self._check_live(state)
            if not _consumes_something(state, to_version):
                return state.offset
            try:
                return self._store.write_next(state.advanced(to_version, now_ms=now_ms())).offset
            except StreamRaceLost:
                continue
        raise InvalidArgumentError(f"stream {self.name}: gave up advancing after {MAX_RESOLVE_ROUNDS} races")

    def _current_or_raise(self) -> StreamState:
        state = self._store.current(self.name)
        if not _live(state):
            raise StreamNotFoundError(f"no stream {self.name!r} on {self.table.uri}: it was dropped")
        return state

    def consumption(self, target: "Table") -> Consumption:
        """The consumption of this stream's pending changes by a transaction
        on ``target`` (``target.transaction(consuming=stream)`` begins it),
        pinned now: an unresolved claim of another consumer is fenced first
        (SPEC §Streams), so that this consumption can be the one that
        commits. Until it finishes, :meth:`pending` returns its pin.

        Raises
        ------
        InvalidArgumentError
            Another consumption of this handle has not finished.
        StaleStreamError
            The stream is stale.
        """
        if self._consumed_pin() is not None:
            raise InvalidArgumentError(f"stream {self.name} is already being consumed by an open transaction")
        state = self._resolver(target).take_over(self._current_or_raise())
        self._consumption = Consumption(self.pin(state), self._store, target)
        return self._consumption

    def _consumed_pin(self) -> StreamPin | None:
        """The pin of the consumption in progress (None: none)."""
        c = self._consumption
        return None if c is None or c.finished else c.pin

    def begin_consumption(self, target: "Table") -> StreamPin:
        """The pin of a new :meth:`consumption` by ``target`` (kept for
        callers of this earlier name)."""
        return self.consumption(target).pin

    def end_consumption(self) -> None:
        """Finish the consumption in progress, if any (kept for callers of
        this earlier name; the consuming transaction finishes it itself)."""
        if self._consumption is not None:
            self._consumption.finish()

    def info(self, *, retain: Any = None, grace_period: Any = None) -> StreamInfo:
        """This stream's :class:`StreamInfo`."""
        return stream_infos(self.table, [self.state()], retain=retain, grace_period=grace_period)[0]


def check_consuming(consuming: object) -> Stream:
    """``consuming`` (a ``consuming=`` argument), refused unless it is a :class:`Stream`."""
    if not isinstance(consuming, Stream):
        raise InvalidArgumentError(f"consuming must be a ctfile Stream, found {type(consuming).__name__}")
    return consuming


def _live(state: StreamState | None) -> TypeGuard[StreamState]:
    """Whether ``state`` is of a stream that exists (written, not dropped)."""
    return state is not None and not state.dropped


def _consumes_something(state: StreamState, to_version: int) -> bool:
    """Whether advancing ``state`` to ``to_version`` consumes anything:
    versions after its offset, or its initial rows (advancing to the
    offset itself hands those out)."""
    return to_version > state.offset or (to_version == state.offset and state.initial_rows)


#: The commit metrics whose sum is a stream's ``lag_rows``.
_ROW_METRICS = ("numInsertedRows", "numUpdatedRows", "numDeletedRows")


def stream_infos(
    table: "Table", states: list[StreamState], *, retain: Any = None, grace_period: Any = None,
) -> list[StreamInfo]:
    """Lag and staleness of each of ``states``. The table is refreshed once
    and the log entries after the smallest offset read once, for all of
    them (``Table.streams()`` of many streams stays one history read)."""
    latest = table.refresh().version
    window_ms = _stale_window_ms(table, retain=retain, grace_period=grace_period)
    lowest = min((s.offset for s in states), default=latest)
    history = table.history(limit=latest - lowest) if lowest < latest else []
    return [_stream_info(s, latest, [h for h in history if h.version > s.offset], window_ms) for s in states]


def _stale_window_ms(table: "Table", *, retain: Any, grace_period: Any) -> int:
    """How long after its first pending commit a stream goes stale: the
    longer of a vacuum's ``retain`` and ``grace_period`` (by default
    vacuum's) plus ``ctfile.maxRetentionExtension``."""
    window_s = max(window_seconds(retain, what="retain", default=DEFAULT_RETAIN_S),
                   window_seconds(grace_period, what="grace_period", default=DEFAULT_GRACE_S))
    ext_s = TableProperties.from_mapping(table.properties).max_retention_extension_s
    return int((window_s + ext_s) * 1000)


def _stream_info(state: StreamState, latest: int, pending: list[HistoryEntry], window_ms: int) -> StreamInfo:
    """The :class:`StreamInfo` of ``state``, whose pending commits are ``pending``."""
    oldest = min((h.timestamp_ms for h in pending), default=None)
    rows = sum(int(h.operation_metrics.get(k, 0) or 0) for h in pending for k in _ROW_METRICS)
    stale_after = None if oldest is None or state.is_stale else _utc(oldest + window_ms)
    return StreamInfo(
        name=state.name, information=state.information, initial_rows=state.initial_rows, offset=state.offset,
        latest_version=latest, lag_versions=max(latest - state.offset, 0), lag_rows=rows,
        oldest_pending=_utc(oldest), stale=state.is_stale, stale_since=_utc(state.stale_since),
        stale_after=stale_after, created=_utc(state.created_time), claim=state.claim,  # type: ignore[arg-type]
    )


class TableStreams:
    """The streams of ``table`` (SPEC §Streams), behind the stream methods
    of :class:`ctfile.Table`: a helper over the table's public surface,
    whose :class:`Stream` handles open a claim's target with ``open_table``."""

    def __init__(self, table: "Table", *, open_table: OpenTable):
        self.table = table
        self.open_table = open_table

    def _handle(self, name: str) -> Stream:
        return Stream(self.table, name, open_table=self.open_table)

    def create_stream(
        self, name: str, *, information: str = "default", start_version: int | None = None,
        initial_rows: bool = False,
    ) -> Stream:
        """Create stream ``name`` on this table and return it.

        Parameters
        ----------
        information : {"default", "append_only", "audit"}
            The mode of its change scans (:meth:`Table.changes`).
        start_version : int, optional
            The first version whose changes it hands out (default: the ones
            committed after now). Must still be retained.
        initial_rows : bool
            The first consumption starts from the empty table: the rows of
            the snapshot at ``start_version - 1`` come first, as INSERTs
            (Snowflake's SHOW_INITIAL_ROWS).

        The table's first stream adds the writer feature ``streams`` in a
        ``CREATE STREAM`` commit, after every argument is checked: a refused
        call commits nothing.

        Raises
        ------
        StreamExistsError
            A stream of that name exists (drop it first).
        StaleIntervalError
            ``start_version`` is older than the history retained.
        """
        check_stream_name(name)
        mode = ChangeMode.parse(information)
        if not isinstance(initial_rows, bool):
            raise InvalidArgumentError(f"initial_rows must be a bool, found {initial_rows!r}")
        store = stream_store(self.table)
        current = store.current(name)
        if _live(current):
            raise StreamExistsError(f"stream {name!r} already exists on {self.table.uri}; drop it first")
        offset = self._start_offset(start_version, mode, initial_rows)
        if self._require_streams_feature(name) and start_version is None:
            offset = self.table.refresh().version  # the CREATE STREAM commit is not pending either
        state = StreamState.created(
            name, stream_id=uuid.uuid4().hex, table_id=self.table.table_id, information=mode,
            initial_rows=initial_rows, offset=offset, now_ms=now_ms(),
            sequence=0 if current is None else current.sequence + 1,
        )
        try:
            store.write_next(state)
        except StreamRaceLost:
            raise StreamExistsError(f"stream {name!r} was created on {self.table.uri} concurrently") from None
        return self._handle(name)

    def _start_offset(self, start_version: int | None, mode: ChangeMode, initial_rows: bool) -> int:
        """The offset of a stream starting at ``start_version`` (default:
        after the latest version), its history checked to be retained."""
        latest = self.table.refresh().version
        if start_version is not None:
            require_long(start_version, "start_version", minimum=0, maximum=latest + 1)
        offset = latest if start_version is None else start_version - 1
        # Fails now, with StaleIntervalError, if the history is already gone: before the CREATE STREAM commit.
        self.table.changes(start_version=offset + 1, end_version=latest, information=mode, initial_rows=initial_rows)
        return offset

    def _require_streams_feature(self, name: str) -> bool:
        """Commit ``CREATE STREAM`` adding the writer feature ``streams``
        unless the protocol lists it; True if a version was committed."""
        if FEATURE_STREAMS in self.table.refresh().protocol.writer_features:
            return False

        def fn(tx) -> None:
            tx.require_feature(FEATURE_STREAMS, reader=False)

        return self.table.run_statement(CREATE_OPERATION, fn, parameters={"name": name}).committed

    def stream(self, name: str) -> Stream:
        """The stream ``name``; :class:`StreamNotFoundError` naming the
        streams there are if it does not exist."""
        check_stream_name(name)
        store = stream_store(self.table)
        if not _live(store.current(name)):
            names = [s.name for s in store.all_current() if not s.dropped]
            raise StreamNotFoundError(f"no stream {name!r} on {self.table.uri}; its streams are {names or 'none'}")
        return self._handle(name)

    def streams(self, *, retain: Any = None, grace_period: Any = None) -> list[StreamInfo]:
        """Every stream of the table, by name, with its offset, lag and
        staleness (:class:`StreamInfo`; ``retain`` and ``grace_period``
        are the vacuum windows staleness is predicted with, by default
        vacuum's)."""
        states = [s for s in stream_store(self.table).all_current() if not s.dropped]
        return stream_infos(self.table, states, retain=retain, grace_period=grace_period)

    def drop_stream(self, name: str) -> None:
        """Drop stream ``name``: vacuum no longer holds history back for it,
        and the name can be created again (as a new stream). A consumption
        in progress still commits to its target, but no longer moves the
        dropped stream."""
        store = stream_store(self.table)
        for _ in range(MAX_RESOLVE_ROUNDS):
            state = self.stream(name)._current_or_raise()
            try:
                store.write_next(state.tombstone(now_ms=now_ms()))
                return
            except StreamRaceLost:
                continue
        raise InvalidArgumentError(f"stream {name}: gave up dropping after {MAX_RESOLVE_ROUNDS} races")
