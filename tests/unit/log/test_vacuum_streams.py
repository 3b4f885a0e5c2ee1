"""Vacuum and streams (SPEC §Streams, retention; SPEC §Vacuum, step 1), on
real tables on local disk.

The vacuum's clock is passed as ``now_ms`` to :func:`ctfile.log.vacuum.vacuum`,
derived from the commit timestamps, so that the retention cutoff and the
extension's limit fall exactly where a test wants them without sleeping.
With ``retain`` R seconds and ``ctfile.maxRetentionExtension`` E, a stream
whose first pending commit has timestamp T holds history up to the vacuum at
``T + R + E`` (inclusive) and is made stale by a vacuum after it.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.streams import STREAMS_DIR, StreamState
from ctfile.log.streams import StreamStore
from ctfile.log.vacuum import plan_vacuum, run_vacuum, vacuum

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
RETAIN_S = 60
EXTENSION = "1d"
EXTENSION_MS = 86_400_000


def _rows(ids, v="x"):
    return pa.table({"id": ids, "v": [f"{v}{i}" for i in ids]}, schema=SCHEMA)


def _changes(cs) -> list[tuple]:
    t = cs.to_arrow()
    return sorted(zip(t.column("id").to_pylist(), t.column("v").to_pylist(), t.column("METADATA$ACTION").to_pylist()))


@pytest.fixture
def table(tmp_path) -> ctfile.Table:
    """v0 create, v1 insert 1-2, v2 the extension property, v3 CREATE STREAM
    (of the test's first stream), then the test's DML."""
    t = ctfile.create_table(tmp_path / "t", SCHEMA)
    t.insert(_rows([1, 2]))
    t.set_properties({"ctfile.maxRetentionExtension": EXTENSION})
    return t


def _dml(t: ctfile.Table) -> None:
    """Four versions that rewrite files, so that expired history frees some."""
    t.insert(_rows([3]))
    t.update(pc.field("id") == 1, {"v": "updated"})
    t.delete(pc.field("id") == 2)
    t.insert(_rows([4]))


def _ts(t: ctfile.Table, version: int) -> int:
    return t.log.commit_info(version).timestamp


def _limit(t: ctfile.Table, stream: ctfile.Stream) -> int:
    """The last vacuum clock at which ``stream`` still holds its history."""
    return _ts(t, stream.offset + 1) + RETAIN_S * 1000 + EXTENSION_MS


def _state_files(t: ctfile.Table) -> set[str]:
    return {f.path for files in StreamStore(t.storage).listing().values() for f in files.files.values()}


def test_a_lagging_stream_holds_history_until_the_extension_then_goes_stale(table):
    s = table.create_stream("lagging")
    _dml(table)
    expected = _changes(s.pending())
    limit = _limit(table, s)

    # Within retain + extension: the history from offset + 1 stays.
    r = vacuum(table.log, retain=RETAIN_S, grace_period=0, now_ms=limit)
    assert r.oldest_version == s.offset + 1 and r.stale_streams == ()
    [hold] = r.holding_streams
    assert (hold.name, hold.offset, hold.needs_version) == ("lagging", s.offset, s.offset + 1)
    assert hold.oldest_pending_ms == _ts(table, s.offset + 1) and hold.stale_after_ms == limit
    assert len(r.deleted_log_files) == s.offset + 1  # what the stream does not need went
    assert _changes(s.pending()) == expected
    assert _changes(ctfile.open_table(table.uri).stream("lagging").pending()) == expected
    # Table.streams predicts the same date (same windows).
    [info] = table.streams(retain=RETAIN_S, grace_period=0)
    assert info.stale_after is not None and int(info.stale_after.timestamp() * 1000) == limit and not info.stale

    # One millisecond later the stream no longer holds: it is made stale first.
    r = vacuum(table.log, retain=RETAIN_S, grace_period=0, now_ms=limit + 1)
    assert r.oldest_version == table.version and r.holding_streams == ()
    assert [h.name for h in r.stale_streams] == ["lagging"] and r.deleted_data_files
    state = StreamStore(table.storage).current("lagging")
    assert (state.stale_since, state.oldest_version) == (limit + 1, table.version)
    with pytest.raises(ctfile.StaleStreamError) as e:
        s.pending()
    assert e.value.oldest_available == table.version and e.value.stream == "lagging"
    assert int(e.value.stale_since.timestamp() * 1000) == limit + 1
    assert f"oldest version still readable is {table.version}" in str(e.value)
    [info] = table.streams()
    assert info.stale and info.stale_after is None
    # A stale stream holds nothing; the table goes on.
    assert vacuum(table.log, retain=RETAIN_S, grace_period=0, now_ms=limit + 2).holding_streams == ()
    table.insert(_rows([5]))
    assert sorted(table.to_arrow().column("id").to_pylist()) == [1, 3, 4, 5]


def test_consumed_dropped_and_up_to_date_streams_hold_nothing(table):
    consumed = table.create_stream("consumed")
    dropped = table.create_stream("dropped")
    _dml(table)
    fresh = table.create_stream("fresh")  # nothing pending
    with_rows = table.create_stream("snapshot", initial_rows=True, start_version=table.version + 1)
    now = _limit(table, dropped)  # both would hold history from here on
    consumed.advance(table.version)
    table.drop_stream("dropped")
    latest = table.version
    r = vacuum(table.log, retain=RETAIN_S, grace_period=0, now_ms=now)
    assert (r.oldest_version, r.holding_streams, r.stale_streams) == (latest, (), ())
    assert _changes(consumed.pending()) == [] and _changes(fresh.pending()) == []
    # The initial rows read the snapshot at the offset, the latest version: kept.
    assert sorted(i for i, _, _ in _changes(with_rows.pending())) == [1, 3, 4]
    with pytest.raises(ctfile.StreamNotFoundError):
        dropped.pending()


def test_initial_rows_hold_the_snapshot_at_the_offset(table):
    _dml(table)
    s = table.create_stream("backfill", initial_rows=True, start_version=3)  # reads snapshot 2 first
    expected = _changes(s.pending())
    r = vacuum(table.log, retain=RETAIN_S, grace_period=0, now_ms=_limit(table, s))
    assert r.oldest_version == 2 and [h.needs_version for h in r.holding_streams] == [2]
    assert _changes(s.pending()) == expected


def test_an_unresolved_claim_holds_from_its_offset(table, tmp_path):
    target = ctfile.create_table(tmp_path / "target", SCHEMA)
    s = table.create_stream("claimed")
    _dml(table)
    store = StreamStore(table.storage)
    # A consumer that died after writing its claim (step 2): the claim may
    # still be abandoned, and the interval handed out again.
    state = store.current("claimed")
    store.write_next(state.claimed(end=table.version, target_uri=target.uri, target_table_id=target.table_id,
                                   now_ms=_ts(table, table.version)))
    r = vacuum(table.log, retain=RETAIN_S, grace_period=0, now_ms=_limit(table, s))
    assert [(h.name, h.needs_version) for h in r.holding_streams] == [("claimed", state.offset + 1)]
    assert r.oldest_version == state.offset + 1
    with target.transaction(consuming=s) as tx:  # fences the claim, consumes the whole interval
        pending = s.pending().to_arrow()
        tx.insert(pending.filter(pc.field("METADATA$ACTION") == "INSERT").select(["id", "v"]))
    assert sorted(target.to_arrow().column("id").to_pylist()) == [1, 3, 4]


def test_a_consumer_advancing_during_the_vacuum_is_not_made_stale(table):
    s = table.create_stream("racing")
    _dml(table)
    now = _limit(table, s) + 1
    plan = plan_vacuum(table.log, retain=RETAIN_S, grace_period=0, now_ms=now)
    assert [h.name for h in plan.streams.stale] == ["racing"]
    # Between the plan and the marking, the consumer moves on by one version:
    # its first pending commit is now recent enough to hold.
    s.advance(s.offset + 1)
    r = run_vacuum(table.log, plan)
    assert r.stale_streams == () and [(h.name, h.needs_version) for h in r.holding_streams] == [
        ("racing", s.offset + 1)]
    assert r.oldest_version == s.offset + 1
    assert not StreamStore(table.storage).current("racing").is_stale
    assert _changes(s.pending()) == _changes(table.changes(start_version=s.offset + 1))


def test_a_consumer_catching_up_during_the_vacuum_needs_nothing(table):
    s = table.create_stream("racing")
    _dml(table)
    plan = plan_vacuum(table.log, retain=RETAIN_S, grace_period=0, now_ms=_limit(table, s) + 1)
    s.advance(table.version)
    r = run_vacuum(table.log, plan)
    assert (r.stale_streams, r.holding_streams, r.oldest_version) == ((), (), table.version)
    table.insert(_rows([9]))
    assert [i for i, _, _ in _changes(s.pending())] == [9]


def test_dry_run_reports_streams_and_writes_nothing(table):
    behind = table.create_stream("behind")
    _dml(table)
    late = table.create_stream("late", start_version=table.version)  # a later first pending commit
    table.insert(_rows([5]))
    files = _state_files(table)
    commits = table.log.list().commits
    r = vacuum(table.log, retain=RETAIN_S, grace_period=0, dry_run=True, now_ms=_limit(table, late))
    assert r.dry_run and [h.name for h in r.holding_streams] == ["late"]
    assert [h.name for h in r.stale_streams] == ["behind"] and r.oldest_version == late.offset + 1
    assert _state_files(table) == files and table.log.list().commits == commits
    assert _changes(behind.pending())  # still readable: nothing was deleted or marked


def test_writers_keep_three_states_and_vacuum_deletes_what_they_left(table, monkeypatch):
    """SPEC §Streams, state files: each write deletes the states below the
    current sequence minus two; states a writer could not delete (here: its
    delete failed) go with the next vacuum, at any age; the current one and
    the two before it never do."""
    s = table.create_stream("busy")
    for i in range(5):
        table.insert(_rows([10 + i]))
        s.advance(table.version)
    assert sorted(StreamStore(table.storage).files("busy").files) == [3, 4, 5]
    original = type(table.storage).delete

    def failing(self, paths):
        if any(p.startswith(STREAMS_DIR) for p in paths):
            raise OSError("delete refused")
        return original(self, paths)

    monkeypatch.setattr(type(table.storage), "delete", failing)
    for i in range(2):
        table.insert(_rows([20 + i]))
        s.advance(table.version)
    monkeypatch.undo()
    assert sorted(StreamStore(table.storage).files("busy").files) == [3, 4, 5, 6, 7]
    table.create_stream("gone")
    table.drop_stream("gone")
    r = vacuum(table.log, retain=3600, grace_period=3600, now_ms=_ts(table, table.version) + 1)
    assert set(r.deleted_stream_files) == {f"{STREAMS_DIR}/busy/{n:020d}.json" for n in (3, 4)}
    assert sorted(StreamStore(table.storage).files("busy").files) == [5, 6, 7]
    assert s.offset == table.version
    with pytest.raises(ctfile.StreamNotFoundError):
        table.stream("gone")
    table.create_stream("gone")  # the tombstone kept the sequence: the next one follows it
    assert StreamStore(table.storage).current("gone").sequence == 2


def test_the_extension_property_is_a_duration(table):
    version = table.version
    table.set_properties({"ctfile.maxRetentionExtension": "3d"})
    assert table.properties["ctfile.maxRetentionExtension"] == "3d"
    for bad in ("3 days", "3", "-1d", "1.5d", "3w"):
        with pytest.raises(ctfile.InvalidArgumentError) as e:
            table.set_properties({"ctfile.maxRetentionExtension": bad})
        assert "ctfile.maxRetentionExtension" in str(e.value) and repr(bad) in str(e.value)
    assert table.refresh().version == version + 1


def test_a_malformed_stream_state_stops_the_vacuum_before_it_deletes_anything(table):
    table.create_stream("ok")
    _dml(table)
    # The current state of a stream nobody can read: what it needs is unknown.
    table.storage.put_if_absent(f"{STREAMS_DIR}/broken/00000000000000000000.json", b'{"stream": {"name": 7}}\n')
    commits, files = table.log.list().commits, _state_files(table)
    with pytest.raises(ctfile.CorruptLogError, match="broken/00000000000000000000.json"):
        vacuum(table.log, retain=0, grace_period=0, now_ms=_ts(table, table.version) + 1)
    assert table.log.list().commits == commits and _state_files(table) == files


def test_a_stream_whose_history_is_already_gone_is_made_stale(table):
    table.create_stream("ok")  # v3: the streams feature
    _dml(table)
    table.stream("ok").advance(table.version)
    base = vacuum(table.log, retain=0, grace_period=0, now_ms=_ts(table, 5) + 1).oldest_version
    assert base == 5
    # A state written as a writer that ignored retention would: it needs
    # version 4, which is gone, however recent its pending commits are.
    store = StreamStore(table.storage)
    ok = store.current("ok")
    store.write_next(StreamState.created("late", stream_id="0" * 32, table_id=ok.table_id, information="default",
                                initial_rows=False, offset=3, now_ms=ok.created_time))
    # Initial rows from snapshot 4 (gone), though its first pending commit,
    # 5, is recent enough to hold: it is stale as well (SPEC §Streams).
    store.write_next(StreamState.created("rows", stream_id="1" * 32, table_id=ok.table_id, information="default",
                                         initial_rows=True, offset=4, now_ms=ok.created_time))
    r = vacuum(table.log, retain=0, grace_period=0, now_ms=_ts(table, 5) + 1)
    assert [(h.name, h.needs_version, h.oldest_pending_ms) for h in r.stale_streams] == [
        ("late", 4, None), ("rows", 4, _ts(table, 5))]
    assert r.oldest_version == 5 and r.deleted_log_files == ()
    with pytest.raises(ctfile.StaleStreamError) as e:
        table.stream("late").pending()
    assert e.value.oldest_available == 5
