"""Write jobs that consume a stream's pinned changes exactly once (SPEC §Streams).

A :class:`~ctfile.WriteJob` commits files that other processes wrote (the
Spark data source's executors). ``target.write_job(consuming=stream,
pin=pin)`` plans a :class:`ConsumingWriteJob`: its commit runs the
consumption protocol of ``target.transaction(consuming=stream)``
(:mod:`ctfile.table.consumption`: claim, target commit with the claim's
``txn``, resolve) over the job's files, so that the pinned interval and the
files land together, once. The pin travels as its token, so the job stays a
picklable value and a pin made in one process can be consumed in another.

A job whose pin was already consumed, when it commits:

- into this target, by a claim over the same interval (offset, initial rows
  and end version), is a *replay* (a ``foreachBatch`` re-run after a crash,
  a retried ``save``): it commits nothing, deletes its files and returns
  ``committed=False, app_transaction_replayed=True``, as a replayed
  application batch does (SPEC §txn);
- any other way (another target, another end version, ``Stream.advance``)
  raises :class:`~ctfile.CommitConflictError` and commits nothing.

Examples
--------
>>> import ctfile, pyarrow as pa, tempfile
>>> bronze = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
>>> silver = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
>>> s = bronze.create_stream("to_silver")
>>> _ = bronze.insert(pa.table({"id": [1, 2]}))
>>> pin = s.pin()
>>> rows = s.pending(pin=pin).to_arrow().select(["id"])
>>> job = silver.write_job(schema=rows.schema, consuming=s, pin=pin)
>>> job.commit(job.write(rows)).committed, s.offset == bronze.version
(True, True)
>>> job = silver.write_job(schema=rows.schema, consuming=s, pin=pin)     # the same pin again
>>> job.commit(job.write(rows)).app_transaction_replayed, silver.refresh().to_arrow().num_rows
(True, 2)
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ctfile.format.errors import CommitConflictError, ConflictKind, InvalidArgumentError
from ctfile.format.streams import StreamState
from ctfile.log.commit_options import CommitOptions, commit_options
from ctfile.log.location import TableLocation
from ctfile.log.streams import StreamStore
from ctfile.log.transaction import CommitResult, StagedFile
from ctfile.table.consumption import ClaimResolver, Consumption, OpenTable, StreamPin, stream_store
from ctfile.table.streams import check_consuming
from ctfile.writer.distributed import WriteJob
from ctfile.writer.transaction import WriteTransaction

if TYPE_CHECKING:
    from ctfile.table.table import Table


@dataclass(frozen=True, kw_only=True)
class ConsumingWriteJob(WriteJob):
    """A :class:`~ctfile.WriteJob` whose commit consumes the pin
    ``pin_token`` of stream ``stream_name`` on the table at ``stream_location``
    (see the module docstring). Made by :meth:`ctfile.Table.write_job`.
    ``open_table`` (:func:`ctfile.open_table`, a module-level function, so
    the job stays picklable) opens the stream's table and the target."""

    stream_location: TableLocation | None = None
    stream_name: str = ""
    pin_token: str = ""
    open_table: OpenTable

    def commit(
        self,
        files: Sequence[StagedFile],
        *,
        commit: CommitOptions | None = None,
        app_id: str | None = None,
        app_version: int | None = None,
        against_latest: bool = False,
    ) -> CommitResult:
        """Commit the files and consume the pinned interval, as one version.

        Raises
        ------
        CommitConflictError
            Another consumer consumed the pinned interval otherwise, or
            changed the stream between the claim and the commit (a fence);
            nothing is committed and the files are deleted.
        StaleStreamError
            The stream went stale.
        """
        options = commit_options(commit, app_id=app_id, app_version=app_version)
        options.require_empty("a job consuming a stream records the stream's own txn; drop app_id/app_version")
        try:
            source = self.open_table(self.stream_location.uri, storage_options=self.stream_location.storage_options)
            pin = source.stream(self.stream_name).pin_from_token(self.pin_token)
            target = self.open_table(self.location.uri, storage_options=self.location.storage_options)
            over = claimable_state(source, pin, target, open_table=self.open_table) if pin.has_pending else pin.state
        except BaseException:
            self.abort(files)
            raise
        if over is None:
            self.abort(files)
            return CommitResult(version=target.version, committed=False, operation="WRITE",
                                app_transaction_replayed=True)
        consumption = Consumption(StreamPin(over, pin.end), stream_store(source), target)

        def begin(parameters: Mapping[str, Any], cls: type) -> WriteTransaction:
            return self.transaction(files, against_latest=against_latest, parameters=parameters, cls=cls)

        return consumption.transaction(begin, {}).commit()


def consuming_job(
    job: WriteJob, consuming: object, pin: StreamPin | None, *, open_table: OpenTable,
) -> ConsumingWriteJob:
    """``job`` (planned on an existing table) made to consume ``pin`` of
    stream ``consuming`` (default: the stream pinned now); the job opens
    tables with ``open_table``."""
    stream = check_consuming(consuming)
    if pin is None:
        pin = stream.pin()
    elif not isinstance(pin, StreamPin) or pin.state.name != stream.name:
        raise InvalidArgumentError(f"pin must be a StreamPin of stream {stream.name} (Stream.pin()), found {pin!r}")
    base = {f.name: getattr(job, f.name) for f in fields(WriteJob)}
    return ConsumingWriteJob(
        **base, stream_location=TableLocation.of(stream.table.storage),
        stream_name=stream.name, pin_token=pin.token, open_table=open_table,
    )


def _conflict(pin: StreamPin, target: "Table", why: str) -> CommitConflictError:
    v = target.version
    return CommitConflictError(
        f"stream {pin.state.name}: the pinned interval {pin.offset + 1}..{pin.end} (pin {pin.token}) {why}; nothing "
        f"was committed to {target.uri}: pin the stream again",
        read_version=v, winning_version=v, kind=ConflictKind.CONTENTION,
    )


def claimable_state(
    source: "Table", pin: StreamPin, target: "Table", *, open_table: OpenTable,
) -> StreamState | None:
    """The state to write the claim of ``pin`` over, or None if the pinned
    interval was already consumed into ``target`` (a replay).

    The current state's claim, if any, is resolved first as a consumer does
    (SPEC §Streams: rolled forward, or fenced). The pin is claimable while
    the stream still has its offset and initial rows: the states written
    since (claims fenced, abandoned) left the pinned interval pending, so a
    claim over the current one consumes exactly it.

    Raises
    ------
    CommitConflictError
        The interval was consumed otherwise (see the module docstring).
    """
    store = stream_store(source)
    name = pin.state.name
    current = store.current(name)
    if current is None or current.dropped or current.stream_id != pin.state.stream_id:
        raise _conflict(pin, target, "belongs to a stream that was dropped")
    state = ClaimResolver(source, store, open_table=open_table, target=target).take_over(current)
    if _same_interval_start(state, pin.state):
        return state
    if _consumed_into(store, pin, target, upto=state.sequence):
        return None
    raise _conflict(pin, target, f"was consumed otherwise: the stream's offset is now {state.offset}")


def _same_interval_start(a: StreamState, b: StreamState) -> bool:
    return (a.offset, a.initial_rows) == (b.offset, b.initial_rows)


def _consumed_into(store: StreamStore, pin: StreamPin, target: "Table", *, upto: int) -> bool:
    """Whether the first state after the pin that moved the offset rolled
    forward a claim of exactly the pinned interval into ``target``.

    Reads the states from the pinned one on until the offset moves (a
    claim, and a fence and its abandoned state per consumer that raced
    for the interval). A state a vacuum already deleted means the answer
    is unknown: a conflict, never a replay reported as success."""
    prev = pin.state
    for seq in range(pin.state.sequence + 1, upto + 1):
        try:
            state = store.read(prev.name, seq)
        except FileNotFoundError:
            raise _conflict(pin, target, f"was consumed, but state {seq} of the stream is gone, so by whom is "
                            f"unknown") from None
        if not _same_interval_start(state, pin.state):
            c = prev.claim
            return (c is not None and state.claim is None and state.offset == c.end == pin.end
                    and c.target_table_id == target.table_id)
        prev = state
    return False
