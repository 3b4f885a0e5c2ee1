"""Named streams through the Python API (SPEC §Streams): creation and its
errors, pending changes in every mode, advancing, and the claim protocol of
a consuming transaction -- claims rolled forward from the target's txn,
fenced claims, racing consumers. Crashes in child processes and random
histories are in tests/crash/test_crash_streams.py and
tests/property/test_streams_model.py."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.actions import FEATURE_STREAMS, SetTransaction
from ctfile.format.errors import CorruptLogError
from ctfile.format.streams import STREAMS_DIR, state_path
from ctfile.log.streams import StreamStore
from ctfile.table.consumption import Consumption

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
LOG_SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("action", pa.string())])


@pytest.fixture
def source(tmp_path) -> ctfile.Table:
    t = ctfile.create_table(str(tmp_path / "source"), SCHEMA)
    t.insert(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=SCHEMA))
    return t


@pytest.fixture
def target(tmp_path) -> ctfile.Table:
    return ctfile.create_table(str(tmp_path / "target"), LOG_SCHEMA)


def consume_into(target: ctfile.Table, stream: ctfile.Stream) -> ctfile.CommitResult:
    with target.transaction(consuming=stream) as tx:
        rows = stream.pending().to_arrow().select(["id", "v", "METADATA$ACTION"])
        tx.insert(rows.rename_columns(LOG_SCHEMA.names))
    return tx.result


def logged(target: ctfile.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in target.to_arrow().to_pylist())


# ---------------------------------------------------------------- creating and dropping


def test_create_adds_the_writer_feature_once(source):
    s = source.create_stream("a")
    assert source.version == 2 and source.history()[0].operation == "CREATE STREAM"
    assert FEATURE_STREAMS in source.snapshot().protocol.writer_features
    assert s.offset == 2  # the CREATE STREAM commit itself is not pending
    source.create_stream("b")
    assert source.version == 2  # the feature is there: nothing more to commit
    assert [i.name for i in source.streams()] == ["a", "b"]


@pytest.mark.parametrize("name", ["", "a/b", "a.b", "x" * 129, 3])
def test_bad_names_are_refused_before_writing(source, name):
    with pytest.raises(ctfile.InvalidArgumentError, match="stream name"):
        source.create_stream(name)
    assert source.version == 1 and not os.path.exists(os.path.join(source.uri, STREAMS_DIR))


def test_create_errors(source):
    with pytest.raises(ctfile.InvalidArgumentError, match="information"):
        source.create_stream("s", information="everything")
    with pytest.raises(ctfile.InvalidArgumentError, match="start_version"):
        source.create_stream("s", start_version=9)
    source.create_stream("s")
    with pytest.raises(ctfile.StreamExistsError, match="already exists"):
        source.create_stream("s")
    with pytest.raises(ctfile.StreamNotFoundError, match=r"no stream 'nope'.*\['s'\]"):
        source.stream("nope")


def test_drop_then_create_again_is_a_new_stream(source):
    s = source.create_stream("s", start_version=0)
    first_id = StreamStore(source.storage).current("s").stream_id
    source.drop_stream("s")
    with pytest.raises(ctfile.StreamNotFoundError):
        s.pending()
    with pytest.raises(ctfile.StreamNotFoundError):
        source.drop_stream("s")
    assert source.streams() == []
    s2 = source.create_stream("s")
    state = StreamStore(source.storage).current("s")
    assert state.sequence == 2 and state.stream_id != first_id and s2.offset == source.version


# ---------------------------------------------------------------- pending changes


def test_pending_in_each_mode(source):
    streams = {m: source.create_stream(m, information=m, start_version=0) for m in ("default", "append_only", "audit")}
    source.update(pc.field("id") == 1, {"v": "A"})
    latest = source.version
    for mode, s in streams.items():
        expected = source.changes(start_version=0, end_version=latest, information=mode).to_arrow()
        assert s.pending().to_arrow().equals(expected), mode
        assert s.information == mode


def test_initial_rows_then_changes(source, target):
    s = source.create_stream("s", initial_rows=True)
    rows = s.pending().to_arrow()
    assert sorted(rows.column("id").to_pylist()) == [1, 2] and set(rows.column("METADATA$ACTION").to_pylist()) == {"INSERT"}
    consume_into(target, s)
    assert s.pending().to_arrow().num_rows == 0
    assert StreamStore(source.storage).current("s").initial_rows is False
    source.delete(pc.field("id") == 2)
    assert s.pending().to_arrow().column("METADATA$ACTION").to_pylist() == ["DELETE"]


def test_caught_up_stream_has_nothing_pending_and_consuming_commits_nothing(source, target):
    s = source.create_stream("s")
    assert s.pending().to_arrow().num_rows == 0
    result = consume_into(target, s)
    assert not result.committed and target.version == 0
    assert StreamStore(source.storage).current("s").sequence == 0


def test_pending_is_pinned_inside_a_consuming_transaction(source, target):
    s = source.create_stream("s")
    source.insert(pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA))
    with target.transaction(consuming=s) as tx:
        source.insert(pa.table({"id": [4], "v": ["d"]}, schema=SCHEMA))  # after the pin
        assert s.pending().to_arrow().column("id").to_pylist() == [3]
        tx.insert(s.pending().to_arrow().select(["id", "v", "METADATA$ACTION"]).rename_columns(LOG_SCHEMA.names))
    assert logged(target) == [(3, "c", "INSERT")]
    assert s.pending().to_arrow().column("id").to_pylist() == [4]


def test_consuming_into_the_streams_own_table(source):
    s = source.create_stream("s")
    source.insert(pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA))
    with source.transaction(consuming=s) as tx:
        ids = s.pending().to_arrow().column("id")
        tx.insert(pa.table({"id": pc.add(ids, 100), "v": ["copy"] * len(ids)}, schema=SCHEMA))
    assert s.offset == source.version - 1  # the consuming commit itself is pending now
    assert s.pending().to_arrow().column("id").to_pylist() == [103]


# ---------------------------------------------------------------- advancing


def test_advance(source):
    s = source.create_stream("s", start_version=0)
    assert s.advance(1) == 1 and s.offset == 1
    assert s.advance(0) == 1  # never backwards
    with pytest.raises(ctfile.VersionNotFoundError, match="latest version"):
        s.advance(source.version + 1)
    with pytest.raises(ctfile.InvalidArgumentError):
        s.advance("2")


# ---------------------------------------------------------------- claims


def test_a_committed_claim_is_rolled_forward_by_the_next_reader(source, target, monkeypatch):
    """The consumer dies between its target commit and the resolved state:
    the next reader finds the target's txn and does not hand the interval out again."""
    s = source.create_stream("s")
    source.insert(pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA))
    monkeypatch.setattr(Consumption, "resolve", lambda self, claim: None)  # "dies" before step 4
    consume_into(target, s)
    monkeypatch.undo()
    store = StreamStore(source.storage)
    assert store.current("s").claim is not None
    assert s.pending().to_arrow().num_rows == 0  # rolled forward from the target's txn
    state = store.current("s")
    assert state.claim is None and state.offset == source.version and state.sequence == 2
    assert logged(target) == [(3, "c", "INSERT")]


def test_an_uncommitted_claim_is_fenced_by_the_next_consumer(source, target, monkeypatch):
    """The consumer dies between its claim and its target commit: readers
    still see the interval pending; the next consumer fences the claim and
    consumes it, exactly once."""
    s = source.create_stream("s")
    source.insert(pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA))

    class Died(BaseException):
        pass

    original_claim = Consumption.claim

    def claim_then_die(self, tx):
        original_claim(self, tx)
        raise Died

    monkeypatch.setattr(Consumption, "claim", claim_then_die)
    with pytest.raises(Died):
        consume_into(target, s)
    monkeypatch.undo()
    store = StreamStore(source.storage)
    claimed = store.current("s")
    assert claimed.claim is not None and target.version == 0
    assert s.pending().to_arrow().column("id").to_pylist() == [3]  # a reader writes nothing
    assert store.current("s") == claimed
    consume_into(target, ctfile.open_table(source.uri).stream("s"))
    assert logged(target) == [(3, "c", "INSERT")]
    ops = [h.operation for h in reversed(target.history())]
    assert ops == ["CREATE TABLE", "STREAM FENCE", "TRANSACTION"]
    fence = target.log.read_entries(1, 1)[0]
    assert [(a.app_id, a.version) for a in fence if isinstance(a, SetTransaction)] == [
        (claimed.app_id, claimed.sequence), (claimed.fence_app_id, claimed.sequence),
    ]
    assert store.current("s").offset == source.version


def test_a_fenced_claimant_reports_a_conflict_and_applies_nothing(source, target, monkeypatch):
    """Consumer 1 claims; consumer 2 fences it and consumes; consumer 1's
    commit then finds its batch replayed and must raise."""
    s1 = source.create_stream("s")
    source.insert(pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA))
    original_claim = Consumption.claim

    def claim_then_lose(self, tx):
        claimed = original_claim(self, tx)
        monkeypatch.setattr(Consumption, "claim", original_claim)
        consume_into(target, ctfile.open_table(source.uri).stream("s"))  # consumer 2 takes over
        return claimed

    monkeypatch.setattr(Consumption, "claim", claim_then_lose)
    with pytest.raises(ctfile.CommitConflictError, match="fenced"):
        consume_into(target, s1)
    assert logged(target) == [(3, "c", "INSERT")]
    assert [f for f in os.listdir(os.path.join(target.uri, "data"))] == [
        p.path.split("/")[-1] for p in target.snapshot().partitions
    ]  # consumer 1's staged file was deleted


def test_two_consumers_of_one_pin_one_commits(source, target):
    source.create_stream("s")
    source.insert(pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA))
    a = ctfile.open_table(source.uri).stream("s")
    b = ctfile.open_table(source.uri).stream("s")
    tx_a = target.transaction(consuming=a)
    tx_b = ctfile.open_table(target.uri).transaction(consuming=b)
    for tx, s in ((tx_a, a), (tx_b, b)):
        tx.insert(s.pending().to_arrow().select(["id", "v", "METADATA$ACTION"]).rename_columns(LOG_SCHEMA.names))
    tx_a.commit()
    with pytest.raises(ctfile.CommitConflictError, match="another consumer"):
        tx_b.commit()
    assert logged(target) == [(3, "c", "INSERT")] and target.version == 1


def test_transaction_consuming_options_are_checked(source, target):
    s = source.create_stream("s")
    with pytest.raises(ctfile.InvalidArgumentError, match="app_id"):
        target.transaction(consuming=s, app_id="x", app_version=1)
    with pytest.raises(ctfile.InvalidArgumentError, match="Stream"):
        target.transaction(consuming="s")
    tx = target.transaction(consuming=s)
    with pytest.raises(ctfile.InvalidArgumentError, match="already being consumed"):
        target.transaction(consuming=s)
    tx.abort()
    target.transaction(consuming=s).abort()  # the pin was released


# ---------------------------------------------------------------- damage


def test_a_damaged_state_is_reported_not_read(source):
    source.create_stream("s")
    path = os.path.join(source.uri, state_path("s", 0))
    with open(path, "w") as f:
        f.write('{"stream": {"name": "s", "offset": "x"}}\n')
    with pytest.raises(CorruptLogError, match=r"s/00000000000000000000\.json"):
        source.stream("s").pending()


def test_foreign_files_in_the_streams_directory_are_ignored(source):
    source.create_stream("s")
    open(os.path.join(source.uri, STREAMS_DIR, "notes.txt"), "w").close()
    assert [i.name for i in source.streams()] == ["s"]


# ---------------------------------------------------------------- verify


def test_verify_checks_stream_states(source, tmp_path):
    source.create_stream("s")
    assert ctfile.verify_table(source.uri).healthy
    path = os.path.join(source.uri, state_path("s", 0))
    good = open(path).read()
    with open(path, "w") as f:
        f.write(good.replace('"offset":', '"offset":"x","was":'))
    problems = ctfile.verify_table(source.uri).problems
    assert [(p.check, p.path) for p in problems] == [("stream", state_path("s", 0))]
    other = ctfile.create_table(str(tmp_path / "other"), SCHEMA)  # a state of another table, copied in
    os.makedirs(os.path.join(other.uri, STREAMS_DIR, "s"))
    with open(os.path.join(other.uri, state_path("s", 0)), "w") as f:
        f.write(good)
    messages = [p.message for p in ctfile.verify_table(other.uri).problems]
    assert any("not this table" in m for m in messages) and any("writer feature streams" in m for m in messages)


def test_verify_warns_about_a_stream_whose_history_went_unmarked(source):
    """History removed by something that ignores streams (an older vacuum):
    verify warns, and pending() refuses with StaleStreamError."""
    s = source.create_stream("s", start_version=1)
    source.insert(pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA))
    source.checkpoint()
    for v in range(source.version):
        os.remove(os.path.join(source.uri, "_ct_log", f"{v:020d}.json"))
    report = ctfile.verify_table(source.uri)
    assert report.healthy and [w.check for w in report.warnings] == ["stream"]
    with pytest.raises(ctfile.StaleStreamError, match="not consumed is gone") as e:
        ctfile.open_table(source.uri).stream(s.name).pending()  # a fresh reader: no entries cached
    assert e.value.stale_since is None and e.value.oldest_available == source.version


def test_a_consumption_that_conflicts_releases_its_claim(source, target):
    """The target commit loses to a concurrent DELETE: nothing commits, and
    the claim is abandoned at once (no fence needed), offset unchanged."""
    s = source.create_stream("s")
    source.insert(pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA))
    target.insert(pa.table({"id": [9], "v": ["z"], "action": ["INSERT"]}, schema=LOG_SCHEMA))
    tx = target.transaction(consuming=s)
    tx.delete(pc.field("id") == 9)
    ctfile.open_table(target.uri).delete(pc.field("id") == 9)  # the concurrent winner
    with pytest.raises(ctfile.CommitConflictError):
        tx.commit()
    state = StreamStore(source.storage).current("s")
    assert state.claim is None and state.sequence == 2 and state.offset == source.version - 1
    consume_into(target, ctfile.open_table(source.uri).stream("s"))
    assert "STREAM FENCE" not in [h.operation for h in target.history()]
    assert logged(target) == [(3, "c", "INSERT")]


def test_a_fencer_that_dies_before_abandoning_does_not_lose_the_interval(source, target):
    """The fence commits txn(appId, c) as the consumption would; if the
    fencer dies before writing the abandoned state, the next reader must
    see a fence (its own txn beside it), not a consumption, and hand the
    interval out again. (Found by the Spark helper: the interval was lost.)"""
    s = source.create_stream("s")
    source.insert(pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA))
    store = StreamStore(source.storage)
    pin = s.pin()
    claim = store.write_next(pin.state.claimed(end=pin.end, target_uri=target.uri, target_table_id=target.table_id,
                                               now_ms=1))
    fence = target.transaction(operation="STREAM FENCE", app_id=claim.app_id, app_version=claim.sequence)
    fence.add_app_marker(claim.fence_app_id, claim.sequence)
    assert fence.commit().committed  # ... and the fencer dies here
    reader = ctfile.open_table(source.uri).stream("s")
    assert reader.pending().to_arrow().column("id").to_pylist() == [3]
    state = store.current("s")
    assert state.claim is None and state.offset == pin.offset  # abandoned, not rolled forward
    consume_into(target, reader)
    assert logged(target) == [(3, "c", "INSERT")]


def test_advance_to_the_offset_consumes_pending_initial_rows(source):
    """An at-least-once consumer of initial rows alone (no newer version)
    must be able to mark them consumed (found by the property test helper)."""
    s = source.create_stream("s", initial_rows=True)
    assert s.pending().to_arrow().num_rows == 2
    assert s.advance(s.offset) == source.version
    assert s.pending().to_arrow().num_rows == 0
    assert StreamStore(source.storage).current("s").sequence == 1
    s.advance(s.offset)  # nothing left: writes nothing
    assert StreamStore(source.storage).current("s").sequence == 1
