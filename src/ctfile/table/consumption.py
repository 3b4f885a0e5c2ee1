"""Consuming a stream exactly once: pins, claims and fences (SPEC §Streams).

A consumer *pins* a stream's state *s* and the table's latest version *L*
(:class:`StreamPin`); the pending changes are the change scan of
``offset + 1 .. L``. One :class:`Consumption` (made by
:meth:`ctfile.Stream.consumption`, or by a consuming write job) owns the
pin and the steps of committing it into a ctfile target: it begins the
target's :class:`ConsumingTransaction` (``target.transaction(consuming=s)``
delegates to it), is that transaction's commit hook, and finishes when the
transaction ends, committed or not:

1. the transaction's statements stage their files;
2. the claim state *s* + 1 is written (put-if-absent: a second consumer of
   the same state loses here and gets :class:`~ctfile.CommitConflictError`);
3. the target commits with ``txn(appId, s + 1)``: the record, in the
   target's log, of what was consumed;
4. the resolved state *s* + 2 moves the offset to *L*.

A claim found in a stream's current state is resolved by the target's log
(:class:`ClaimResolver`): rolled forward if the target holds its ``txn``
from the consumption's commit, abandoned if a fence wrote it (a fence also
writes a ``txn`` of the stream's fence id, which tells the two apart);
otherwise a consumer that wants to go on *fences* it first, committing that
``txn`` to the target itself, so the claimant's step 3 can no longer land
(it finds its batch replayed and reports a conflict). A process killed at
any step thus leaves a state the next consumer resolves without losing or
repeating an interval.
"""

from __future__ import annotations

import enum
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ctfile.format.errors import CommitConflictError, ConflictKind, CtfileError, InvalidArgumentError, TableNotFoundError
from ctfile.format.streams import StreamState
from ctfile.log.commit_options import CommitOptions
from ctfile.log.streams import StreamRaceLost, StreamStore
from ctfile.log.transaction import CommitResult, now_ms
from ctfile.writer.transaction import WriteTransaction

if TYPE_CHECKING:
    from ctfile.table.table import Table

log = logging.getLogger("ctfile")

#: The operation of a commit that fences a claim (SPEC §Streams).
FENCE_OPERATION = "STREAM FENCE"


#: How a claim's target named only by its URI is opened: ``open_table(uri,
#: storage_options=...)`` (:func:`ctfile.open_table`), handed down by the
#: module that defines it, so that resolving a claim imports no opener.
OpenTable = Callable[..., "Table"]

#: How a :class:`Consumption` begins its target's transaction:
#: ``begin(parameters, cls)``, a transaction of class ``cls`` (a
#: :class:`ConsumingTransaction`) on the target's latest version.
BeginTransaction = Callable[[Mapping[str, Any], type], WriteTransaction]

#: How often a consumer re-reads a stream whose state moved under it while
#: resolving a claim, before reporting a conflict.
MAX_RESOLVE_ROUNDS = 10


@dataclass(frozen=True)
class StreamPin:
    """What a consumer read: the stream's state and the table's latest
    version then. The pending changes are ``offset + 1 .. end``."""

    state: StreamState
    end: int

    @property
    def offset(self) -> int:
        return self.state.offset

    @property
    def has_pending(self) -> bool:
        """Whether consuming it changes anything: versions after the offset,
        or the initial rows still to hand out."""
        return self.end > self.state.offset or self.state.initial_rows

    @property
    def token(self) -> str:
        """The pin as a string, ``"<streamId>:<sequence>:<end>"``, for a
        process that did not pin it (a Spark job's options): the stream's
        state file of that sequence and the end version are all a pin is;
        :meth:`~ctfile.Stream.pin_from_token` rebuilds it.

        Examples
        --------
        >>> from ctfile.format.streams import StreamState
        >>> s = StreamState.created("s", stream_id="ab" * 16, table_id="t", information="default",
        ...                         initial_rows=False, offset=4, now_ms=0)
        >>> StreamPin(s, 9).token
        'abababababababababababababababab:0:9'
        >>> parse_pin_token(StreamPin(s, 9).token)
        ('abababababababababababababababab', 0, 9)
        """
        return f"{self.state.stream_id}:{self.state.sequence}:{self.end}"


_TOKEN_RE = re.compile(r"([0-9a-f]{32}):(\d{1,20}):(\d{1,20})")


def parse_pin_token(token: object) -> tuple[str, int, int]:
    """``(streamId, sequence, end)`` of a :attr:`StreamPin.token`, or
    :class:`InvalidArgumentError` naming the expected form."""
    m = _TOKEN_RE.fullmatch(token) if isinstance(token, str) else None
    if m is None:
        raise InvalidArgumentError(
            f"a stream pin token is '<streamId>:<sequence>:<end version>' as StreamPin.token makes it, found {token!r}"
        )
    return m.group(1), int(m.group(2)), int(m.group(3))


def _conflict(stream: StreamState, message: str, *, read: int, won: int) -> CommitConflictError:
    return CommitConflictError(
        f"stream {stream.name}: {message}", read_version=read, winning_version=won, kind=ConflictKind.CONTENTION,
    )


class ClaimOutcome(enum.Enum):
    """What a target's log says of a claim (SPEC §Streams, claims)."""

    #: No txn of the claim yet: its consumer may still commit.
    UNDECIDED = "undecided"
    #: The consumption committed: the offset moves to the claim's end.
    CONSUMED = "consumed"
    #: A fence committed first: the consumption can never commit.
    FENCED = "fenced"


def stream_store(table: "Table") -> StreamStore:
    """The streams of ``table``, every state read checked to be of this
    table (SPEC §Streams, reader requirements: a state file copied from
    another table's streams is refused, never used)."""
    return StreamStore(table.storage, table_id=table.table_id)


class ClaimResolver:
    """Settles the claim of a stream's current state against its target
    (SPEC §Streams, claims). ``source`` is the stream's table; a target
    named only by URI is opened with ``open_table`` and the source's storage
    options; ``target`` is a table the caller already has open, used when
    it is the claim's target."""

    def __init__(
        self, source: "Table", store: StreamStore, *, open_table: OpenTable, target: "Table | None" = None,
    ):
        self.source = source
        self.store = store
        self.open_table = open_table
        self.hint = target

    def _target(self, state: StreamState) -> "Table":
        claim = state.claim
        assert claim is not None
        if self.hint is not None and self.hint.table_id == claim.target_table_id:
            return self.hint
        try:
            table = self.open_table(claim.target_uri, storage_options=self.source.storage.storage_options)
        except TableNotFoundError as e:
            raise TableNotFoundError(
                f"stream {state.name} on {self.source.uri} has an unresolved claim (state {state.sequence}) on "
                f"target {claim.target_uri}, which cannot be opened: {e}. If that table is gone for good, drop "
                f"the stream and create it again with start_version={state.offset + 1}"
            ) from e
        if table.table_id != claim.target_table_id:
            raise TableNotFoundError(
                f"stream {state.name} on {self.source.uri}: the claim of state {state.sequence} names target "
                f"table {claim.target_table_id} at {claim.target_uri}, which now holds table {table.table_id}"
            )
        return table

    def outcome(self, state: StreamState, target: "Table") -> ClaimOutcome:
        """What the target's log says of the claim of ``state`` (SPEC
        §Streams): its ``txn`` at the claim's sequence or later means the
        claim was decided, and the fence's own ``txn`` beside it that a
        fence decided it."""
        c = state.sequence
        if (target.app_version(state.app_id) or -1) < c:
            return ClaimOutcome.UNDECIDED
        if (target.app_version(state.fence_app_id) or -1) >= c:
            return ClaimOutcome.FENCED
        return ClaimOutcome.CONSUMED

    def _settle(self, state: StreamState, outcome: ClaimOutcome) -> StreamState:
        if outcome is ClaimOutcome.CONSUMED:
            return self.roll_forward(state)
        assert outcome is ClaimOutcome.FENCED
        return self._write(state.abandoned(now_ms=now_ms()))

    def roll_forward(self, state: StreamState) -> StreamState:
        assert state.claim is not None
        return self._write(state.advanced(state.claim.end, now_ms=now_ms()))

    def _write(self, new: StreamState) -> StreamState:
        """Write the next state; if another process resolved the claim
        first, its state stands (it can only have resolved it the same
        way, by the same target log) and is re-read."""
        try:
            return self.store.write_next(new)
        except StreamRaceLost:
            return self.store.current(new.name)  # type: ignore[return-value]

    def settle_if_committed(self, state: StreamState) -> StreamState:
        """For readers: roll a committed claim forward, else leave it (the
        claimant may be running; a fenced claim is not committed either)."""
        if state.claim is None:
            return state
        outcome = self.outcome(state, self._target(state))
        return state if outcome is ClaimOutcome.UNDECIDED else self._settle(state, outcome)

    def take_over(self, state: StreamState) -> StreamState:
        """For consumers: a state without a claim, fencing a claim that did
        not commit (SPEC §Streams: the fence makes its commit impossible).

        Resolving a claim can lose the write of the next state to another
        consumer, whose state may hold a claim of its own again: that one
        is resolved in turn (a state with a claim is never handed back, so
        no claim is written over a claim)."""
        for _ in range(MAX_RESOLVE_ROUNDS):
            if state.claim is None:
                return state
            state = self._resolve_once(state)
        raise _conflict(state, f"gave up resolving its claims after {MAX_RESOLVE_ROUNDS} rounds of other "
                        f"consumers claiming it; consume the stream again", read=state.offset, won=state.offset)

    def _resolve_once(self, state: StreamState) -> StreamState:
        """Roll the claim of ``state`` forward or abandon it (fencing it if
        needed); the state written, or the one that won the write."""
        target = self._target(state)
        outcome = self.outcome(state, target)
        if outcome is ClaimOutcome.UNDECIDED:
            fence = target.transaction(
                operation=FENCE_OPERATION,
                parameters={"stream": state.name, "streamTable": state.table_id, "sequence": state.sequence},
                commit=CommitOptions(app_id=state.app_id, app_version=state.sequence),
            )
            fence.add_app_marker(state.fence_app_id, state.sequence)
            # Replayed: the claimant committed, or another consumer fenced first.
            outcome = self.outcome(state, target) if fence.commit().app_transaction_replayed else ClaimOutcome.FENCED
        if outcome is ClaimOutcome.CONSUMED:
            return self.roll_forward(state)
        log.info("stream %s: fenced the claim of state %d on %s", state.name, state.sequence, target.uri)
        return self._write(state.abandoned(now_ms=now_ms()))


class ConsumingTransaction(WriteTransaction):
    """A transaction on a target table that consumes a stream's pinned
    pending changes when it commits: its commit and its abort are its
    :class:`Consumption`'s (steps 2-4 of the module docstring)."""

    consumption: "Consumption"

    def _commit_statements(self) -> CommitResult:
        # A transaction already committed or aborted claims nothing: its
        # commit only reports what the base transaction says of it.
        return self.consumption.commit(self, super()._commit_statements, claims=not self._done)

    def abort(self) -> None:
        super().abort()
        self.consumption.finish()


class Consumption:
    """One consumption of a stream's pinned pending changes (``pin``) by a
    transaction on ``target``; ``store`` holds the stream's states.

    It owns every step (module docstring): :meth:`transaction` begins the
    target's transaction, :meth:`commit` is that transaction's commit hook
    (:meth:`claim`, the target commit, :meth:`resolve`), and :meth:`finish`
    ends it, committed or not (:attr:`finished`: the stream's ``pending()``
    no longer returns the pinned changes)."""

    def __init__(self, pin: StreamPin, store: StreamStore, target: "Table"):
        self.pin = pin
        self.store = store
        self.target = target
        self.finished = False

    def operation_parameters(self) -> dict[str, Any]:
        """The ``stream`` operation parameter of the consuming commit: the
        stream, its table and the interval consumed."""
        s = self.pin.state
        return {"name": s.name, "table": s.table_id, "from": s.offset + 1, "to": self.pin.end}

    def transaction(self, begin: BeginTransaction, parameters: Mapping[str, Any]) -> ConsumingTransaction:
        """The target's transaction (``begin(parameters, cls)``, the
        operation ``parameters`` plus :meth:`operation_parameters`) whose
        commit consumes the pin; if it cannot begin, the consumption
        finishes."""
        try:
            tx = begin({**parameters, "stream": self.operation_parameters()}, ConsumingTransaction)
        except BaseException:
            self.finish()
            raise
        assert isinstance(tx, ConsumingTransaction)
        tx.consumption = self
        return tx

    def commit(self, tx: WriteTransaction, commit_statements: Callable[[], CommitResult], *,
               claims: bool) -> CommitResult:
        """``tx``'s commit hook: with ``claims`` and changes pending, claim
        them (step 2), commit ``tx`` with the claim's ``txn``
        (``commit_statements``, step 3) and resolve the claim (step 4);
        otherwise just ``commit_statements()``. The consumption finishes
        either way."""
        try:
            if not (claims and self.pin.has_pending):
                return commit_statements()
            claim = self._claim_or_abort(tx)
            result = self._commit_claimed(tx, claim, commit_statements)
            self.resolve(claim)
            return result
        finally:
            self.finish()

    def _claim_or_abort(self, tx: WriteTransaction) -> StreamState:
        """Step 2, and ``tx`` records the claim's ``txn``; a failed claim aborts ``tx``."""
        try:
            claim = self.claim(tx)
        except BaseException:
            tx.abort()
            raise
        tx.set_app_transaction(claim.app_id, claim.sequence)
        return claim

    def _commit_claimed(
        self, tx: WriteTransaction, claim: StreamState, commit_statements: Callable[[], CommitResult],
    ) -> CommitResult:
        """Step 3: the target commit; a commit that found the claim's
        ``txn`` already there was fenced (a conflict, nothing applied)."""
        try:
            result = commit_statements()
        except BaseException:
            self.release(tx, claim)
            raise
        if result.app_transaction_replayed:
            raise _conflict(
                claim, f"the consumption claimed at state {claim.sequence} was fenced by another consumer "
                f"before it committed; nothing was applied", read=tx.base.version, won=result.version,
            )
        return result

    def claim(self, tx: WriteTransaction) -> StreamState:
        """Step 2: write the claim over the pinned state, or raise the conflict."""
        s = self.pin.state
        claim = s.claimed(end=self.pin.end, target_uri=self.target.uri, target_table_id=self.target.table_id,
                          now_ms=now_ms())
        try:
            return self.store.write_next(claim)
        except StreamRaceLost:
            current = self.store.current(s.name)
            raise _conflict(
                s, f"another consumer changed the stream (state {current.sequence if current else '?'}) since this "
                f"transaction pinned state {s.sequence}; nothing was applied: consume the stream again",
                read=tx.base.version, won=tx.base.version,
            ) from None

    def resolve(self, claim: StreamState) -> None:
        """Step 4; if it fails the commit stands, and the next use of the
        stream rolls the claim forward from the target's log."""
        assert claim.claim is not None
        try:
            self.store.write_next(claim.advanced(claim.claim.end, now_ms=now_ms()))
        except StreamRaceLost:
            pass  # resolved by another process, from our txn: the same state
        except (OSError, CtfileError) as e:
            log.warning("stream %s: consumption committed, but advancing its offset failed (%s); the next "
                        "use of the stream rolls it forward", claim.name, e)

    def release(self, tx: WriteTransaction, claim: StreamState) -> None:
        """After ``tx``'s commit raised: if no put of its entry can have
        landed (a conflict, a refusal), nothing can commit the claim any
        more, so it is abandoned here rather than left for a fence. An
        unknown outcome leaves it to the next consumer, who resolves it by
        the target's log."""
        if tx.may_have_committed:
            return
        try:
            self.store.write_next(claim.abandoned(now_ms=now_ms()))
        except (StreamRaceLost, OSError, CtfileError) as e:
            log.warning("stream %s: could not release the claim of state %d (%s); the next consumer fences it",
                        claim.name, claim.sequence, e)

    def finish(self) -> None:
        """The transaction ended (committed or not): the pin is no longer the stream's pending changes."""
        self.finished = True
