"""The owner of one stream consumption (:class:`ctfile.table.consumption.Consumption`,
SPEC §Streams): made by ``Stream.consumption(target)``, it holds the pin,
begins the target's transaction, is its commit hook and finishes; the claim
resolver opens a claim's target with the ``open_table`` it is given. The
protocol's behaviour (claims, fences, races) is tested in test_streams.py."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

import ctfile
from ctfile.format.actions import FEATURE_STREAMS
from ctfile.log.streams import StreamStore
from ctfile.table.consumption import ClaimResolver, ConsumingTransaction, Consumption, stream_store
from ctfile.table.streams import TableStreams

SCHEMA = pa.schema([("id", pa.int64())])


@pytest.fixture
def source(tmp_path) -> ctfile.Table:
    t = ctfile.create_table(str(tmp_path / "source"), SCHEMA)
    t.insert(pa.table({"id": [1]}))
    return t


@pytest.fixture
def target(tmp_path) -> ctfile.Table:
    return ctfile.create_table(str(tmp_path / "target"), SCHEMA)


def test_the_stream_makes_one_consumption_at_a_time(source, target):
    s = source.create_stream("s", start_version=0)
    c = s.consumption(target)
    assert isinstance(c, Consumption) and not c.finished
    assert (c.pin.offset, c.pin.end, c.target) == (-1, source.version, target)
    source.insert(pa.table({"id": [2]}))  # after the pin: not pending inside the consumption
    assert s.pending().to_arrow().column("id").to_pylist() == [1]
    with pytest.raises(ctfile.InvalidArgumentError, match="already being consumed"):
        s.consumption(target)
    c.finish()
    assert c.finished and s.pending().to_arrow().column("id").to_pylist() == [1, 2]
    assert not s.consumption(target).finished  # finished: the stream can be consumed again


def test_a_consuming_transaction_is_its_consumptions(source, target):
    s = source.create_stream("s", start_version=0)
    tx = target.transaction(consuming=s, parameters={"job": "copy"})
    c = tx.consumption
    assert isinstance(tx, ConsumingTransaction) and not c.finished
    tx.insert(s.pending().to_arrow().select(["id"]))
    result = tx.commit()
    assert c.finished and result.committed and s.offset == source.version
    params = target.history()[0].operation_parameters
    assert params == {"job": "copy", "stream": c.operation_parameters()}
    assert params["stream"] == {"name": "s", "table": source.table_id, "from": 0, "to": c.pin.end}


def test_an_aborted_consuming_transaction_finishes_and_consumes_nothing(source, target):
    s = source.create_stream("s", start_version=0)
    with pytest.raises(ZeroDivisionError):
        with target.transaction(consuming=s) as tx:
            tx.insert(s.pending().to_arrow().select(["id"]))
            1 / 0
    assert tx.consumption.finished and s.offset == -1 and target.version == 0
    assert StreamStore(source.storage).current("s").sequence == 0  # no claim was written


def test_a_transaction_that_cannot_begin_finishes_its_consumption(source, target):
    s = source.create_stream("s", start_version=0)
    c = s.consumption(target)

    def refuse(parameters, cls):
        raise ctfile.InvalidArgumentError("refused")

    with pytest.raises(ctfile.InvalidArgumentError, match="refused"):
        c.transaction(refuse, {})
    assert c.finished


def _claimed_and_left(source: ctfile.Table, target: ctfile.Table) -> None:
    """A consumer wrote its claim on ``target`` and stopped (its transaction aborted)."""
    s = source.stream("s")
    tx = target.transaction(consuming=s)
    tx.consumption.claim(tx)
    tx.abort()


def test_the_claim_resolver_opens_targets_with_the_opener_it_is_given(source, target):
    source.create_stream("s", start_version=0)
    _claimed_and_left(source, target)
    opened = []

    def opener(uri, *, storage_options=None):
        opened.append(uri)
        return ctfile.open_table(uri, storage_options=storage_options)

    state = StreamStore(source.storage).current("s")
    resolver = ClaimResolver(source, stream_store(source), open_table=opener)
    assert resolver.settle_if_committed(state) == state  # undecided: a reader leaves it
    assert opened == [target.uri]
    stream = TableStreams(source, open_table=opener).stream("s")
    assert stream.state() == state and opened == [target.uri] * 2


def test_a_target_the_opener_cannot_open_is_a_typed_error(source, target):
    source.create_stream("s", start_version=0)
    _claimed_and_left(source, target)

    def missing(uri, *, storage_options=None):
        raise ctfile.TableNotFoundError(f"no ctfile table at {uri}")

    stream = TableStreams(source, open_table=missing).stream("s")
    with pytest.raises(ctfile.TableNotFoundError, match="cannot be opened.*drop the stream"):
        stream.state()
    assert StreamStore(source.storage).current("s").claim is not None  # nothing changed


def test_a_consuming_write_job_pickles_with_its_opener(source, target):
    s = source.create_stream("s", start_version=0)
    job = target.write_job(schema=SCHEMA, consuming=s)
    again = pickle.loads(pickle.dumps(job))
    assert again == job and again.open_table is ctfile.open_table
    assert again.commit(again.write(pa.table({"id": [1]}))).committed and s.offset == source.version


def test_metadata_and_protocol_are_those_of_the_version_seen(source):
    assert source.metadata.schema == source.schema_at() and source.metadata.table_id == source.table_id
    assert FEATURE_STREAMS not in source.protocol.writer_features
    other = ctfile.open_table(source.uri)
    other.create_stream("s")
    assert FEATURE_STREAMS not in source.protocol.writer_features  # not refreshed yet
    assert FEATURE_STREAMS in source.refresh().protocol.writer_features
