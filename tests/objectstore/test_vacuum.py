"""``Table.vacuum`` (SPEC §Vacuum) on local disk and on S3 (moto).

The retention cutoff is placed between two known commits by passing ``now_ms``
to :func:`ctfile.log.vacuum.vacuum` (derived from the commit timestamps), so
the tests do not depend on sleeping or on machine speed.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.actions import AddPartition, ChangeFile, RemovePartition
from ctfile.format.paths import CHANGES_DIR, LOG_DIR, checkpoint_path, commit_path
from ctfile.log.manifest import ManifestLog
from ctfile.log.vacuum import VacuumResult, vacuum

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])


@pytest.fixture(params=["local", "moto"])
def location(request, tmp_path):
    """(uri, storage_options) of a fresh table location."""
    if request.param == "local":
        return str(tmp_path / "t"), None
    ep = request.getfixturevalue("moto_s3")
    return ep.new_uri("vacuum"), ep.storage_options()


def _rows(snapshot) -> list[tuple]:
    t = snapshot.to_arrow()
    return sorted(zip(t.column("id").to_pylist(), t.column("v").to_pylist()))


def _files(table: ctfile.Table, directory: str) -> set[str]:
    return {i.path for i in table.storage.list_dir(directory)}


def _changes(table, start, end=None) -> list[tuple]:
    t = table.changes(start_version=start, end_version=end).to_arrow()
    return sorted(zip(t.column("id").to_pylist(), t.column("v").to_pylist(), t.column("METADATA$ACTION").to_pylist()))


def _history(location):
    """v1 insert 1-4 (2 partitions), v2 update id 1 (rewrites a partition), v3 delete id 3-4
    (drops a partition), v4 insert 5, v5 update id 5, v6 insert 6."""
    uri, opts = location
    t = ctfile.create_table(uri, SCHEMA, partition_rows=2, storage_options=opts)
    t.insert(pa.table({"id": [1, 2, 3, 4], "v": ["a", "b", "c", "d"]}, schema=SCHEMA))
    t.update(pc.field("id") == 1, {"v": "A"})
    t.delete(pc.field("id") >= 3)
    t.insert(pa.table({"id": [5], "v": ["e"]}, schema=SCHEMA))
    t.update(pc.field("id") == 5, {"v": "E"})
    t.insert(pa.table({"id": [6], "v": ["f"]}, schema=SCHEMA))
    assert t.version == 6
    return t


def _now_for_base(table, base: int, retain_s: float) -> int:
    """A 'now' that puts the retention cutoff just before version base+1's commit."""
    return table.log.commit_info(base + 1).timestamp - 1 + int(retain_s * 1000)


def _paths(table, versions, kind) -> set[str]:
    return {a.path for v in versions for a in table.log.read_entry(v) if isinstance(a, kind)}


def test_vacuum_expires_history_before_the_cutoff(location):
    t = _history(location)
    base = 3
    snaps = {v: _rows(t.snapshot(v)) for v in range(base, 7)}
    changes_from_base = _changes(t, base)
    changes_after = _changes(t, 4, 6)
    removed_before_base = _paths(t, range(1, base), RemovePartition)
    removed_at_or_after = _paths(t, range(base, 7), RemovePartition)
    all_files = _files(t, "data")
    assert removed_before_base and removed_at_or_after
    now = _now_for_base(t, base, retain_s=60)

    dry = vacuum(t.log, retain=60, grace_period=0, dry_run=True, now_ms=now)
    assert isinstance(dry, VacuumResult) and dry.dry_run
    assert _files(t, "data") == all_files and t.log.list().commits == list(range(7)), "dry run changed nothing"
    assert not t.storage.exists(checkpoint_path(base))

    r = vacuum(t.log, retain=dt.timedelta(seconds=60), grace_period=0, now_ms=now)
    assert (r.oldest_version, r.checkpoint_version, r.version) == (base, base, 6)
    assert r.deleted_log_files == tuple(commit_path(v) for v in range(base))
    # Exactly the files removed by the expired versions; a file removed at the
    # base itself stays, since a change scan starting at the base reads it.
    assert set(r.deleted_data_files) == removed_before_base
    assert r.bytes_freed > 0
    assert (dry.deleted_log_files, dry.deleted_data_files, dry.oldest_version) == (
        r.deleted_log_files, r.deleted_data_files, r.oldest_version)
    assert _files(t, "data") == all_files - removed_before_base

    # The retained versions read as before, from a fresh handle too.
    uri, opts = location
    for table in (t, ctfile.open_table(uri, storage_options=opts)):
        assert table.version == 6
        assert {v: _rows(table.snapshot(v)) for v in range(base, 7)} == snaps
        assert _changes(table, base) == changes_from_base
        assert _changes(table, 4, 6) == changes_after
        with pytest.raises(ctfile.VersionNotFoundError):
            table.snapshot(base - 1)
        for start in (0, 1, base - 1):
            with pytest.raises(ctfile.StaleIntervalError) as e:
                table.changes(start_version=start)
            assert e.value.oldest_available == base
        assert [h.version for h in table.history()] == list(range(6, base - 1, -1))
    assert t.log.oldest_version() == base
    assert t.log.read_hint() == base

    # A second vacuum with the same cutoff has nothing left to do.
    again = vacuum(t.log, retain=60, grace_period=0, now_ms=now)
    assert again.deleted_files == () and again.checkpoint_version is None

    # Writes go on.
    t.insert(pa.table({"id": [7], "v": ["g"]}, schema=SCHEMA))
    assert _rows(t.snapshot())[-1] == (7, "g")


def test_vacuum_everything_old_keeps_the_latest_version(location, settle_clock):
    t = _history(location)
    latest_rows = _rows(t.snapshot())
    settle_clock(t)
    r = t.vacuum(retain=0, grace_period=0)
    assert r.oldest_version == 6 and r.checkpoint_version == 6
    live = {p.path for p in t.snapshot().partitions}
    # Only live files and the files entry 6 names survive.
    assert _files(t, "data") == live | _paths(t, [6], RemovePartition)
    assert _rows(t.snapshot()) == latest_rows
    assert t.log.list().commits == [6]
    assert _changes(t, 6) == [(6, "f", "INSERT")]
    with pytest.raises(ctfile.StaleIntervalError):
        t.changes(start_version=5)
    with pytest.raises(ctfile.StaleIntervalError):
        t.changes()  # the whole history is no longer available


def test_retain_keeps_recent_history(location):
    t = _history(location)
    before = {i.path for i in t.storage.list_dir(LOG_DIR)}
    r = t.vacuum(retain=dt.timedelta(days=1), grace_period=0)
    assert r.oldest_version == 0 and r.deleted_log_files == () and r.deleted_data_files == ()
    assert {i.path for i in t.storage.list_dir(LOG_DIR)} == before
    assert _rows(t.snapshot(0)) == []


def test_grace_period_protects_uncommitted_files(location, settle_clock):
    """Files of a transaction that has not committed yet are unreferenced but not garbage."""
    t = _history(location)
    uri, opts = location
    writer = ctfile.open_table(uri, storage_options=opts)
    tx = writer.transaction()
    tx.insert(pa.table({"id": [100], "v": ["pending"]}, schema=SCHEMA))
    staged = set(tx.staged_paths())
    assert staged and staged <= _files(t, "data")

    r = t.vacuum(retain=0)  # default grace period (24 h)
    assert not (staged & set(r.deleted_data_files))
    # ... which also kept the history: the result says so.
    assert r.oldest_version == 0 and r.deleted_log_files == ()
    assert (r.retain_s, r.grace_period_s, r.effective_retain_s, r.retain_extended) == (0, 86400, 86400, True)
    assert r.history_cutoff_ms < t.log.commit_info(0).timestamp
    assert staged <= _files(t, "data")
    r2 = t.vacuum(retain=0, grace_period=dt.timedelta(hours=1))
    assert not (staged & set(r2.deleted_data_files))

    tx.commit()  # the in-flight transaction commits after both vacuums
    assert (100, "pending") in _rows(ctfile.open_table(uri, storage_options=opts).snapshot())

    # An aborted transaction's leftovers (never committed) go once past the grace period.
    tx2 = writer.transaction()
    tx2.insert(pa.table({"id": [200], "v": ["orphan"]}, schema=SCHEMA))
    orphans = set(tx2.staged_paths())
    # Simulate a crash: the transaction is never committed or aborted.
    kept = t.vacuum(retain=0, grace_period=3600)
    assert orphans <= _files(t, "data") and not (orphans & set(kept.deleted_data_files))
    settle_clock(t)
    gone = t.vacuum(retain=0, grace_period=0)
    assert orphans <= set(gone.deleted_data_files)
    assert not (orphans & _files(t, "data"))
    assert (100, "pending") in _rows(t.snapshot()) and (200, "orphan") not in _rows(t.snapshot())


def test_invalid_arguments(location):
    t = _history(location)
    for bad in (-1, "1d", float("nan"), True):
        with pytest.raises(ctfile.InvalidArgumentError):
            t.vacuum(retain=bad)
        with pytest.raises(ctfile.InvalidArgumentError):
            t.vacuum(grace_period=bad)
    with pytest.raises(ctfile.InvalidArgumentError):
        t.vacuum(dry_run="yes")


def test_log_entries_go_before_data_files(moto_s3, fault_proxy):
    """If the data-file deletions fail, the expired entries are already gone:
    a change scan over the expired interval raises StaleIntervalError instead
    of reading some of the files; a later vacuum finishes the job."""
    uri = moto_s3.new_uri("vacuum-order")
    opts = fault_proxy.endpoint.storage_options()
    t = _history((uri, opts))
    base = 3
    expired_files = _paths(t, range(1, base), RemovePartition)
    now = _now_for_base(t, base, retain_s=0)

    fault_proxy.rules.append(
        lambda req: ("respond", 403, "AccessDenied", "injected") if req.method == "DELETE" and "/data/" in req.path
        else None
    )
    with pytest.raises(ctfile.StorageError, match=f"delete of {uri}/data/.*access denied") as e:
        vacuum(t.log, retain=0, grace_period=0, now_ms=now)
    assert isinstance(e.value.__cause__, PermissionError)
    fault_proxy.rules.clear()
    assert t.log.list().commits == list(range(base, 7)), "entries deleted first"
    assert expired_files <= _files(t, "data"), "data files not yet"
    fresh = ctfile.open_table(uri, storage_options=opts)
    with pytest.raises(ctfile.StaleIntervalError):
        fresh.changes(start_version=1)
    assert _rows(fresh.snapshot(base)) == _rows(t.snapshot(base))

    r = vacuum(t.log, retain=0, grace_period=0, now_ms=now)
    assert set(r.deleted_data_files) == expired_files and r.deleted_log_files == ()
    assert not (expired_files & _files(t, "data"))


def test_a_missing_retained_entry_stops_the_vacuum_before_it_deletes(location):
    """Entry 4 (which adds the file of id 5) is gone, as when a concurrent
    vacuum with a shorter retention expired it while this one planned. The
    vacuum must not treat the files it added as unreferenced: it raises and
    deletes nothing (it used to skip the gap and delete the live file)."""
    t = _history(location)
    (added,) = [a.path for a in t.log.read_entry(4) if isinstance(a, AddPartition)]
    live = {p.path for p in t.snapshot().partitions}
    before_data, before_log = _files(t, "data"), _files(t, LOG_DIR)
    t.storage.delete([commit_path(4)])
    with pytest.raises(ctfile.VersionNotFoundError, match="version 4"):
        vacuum(ManifestLog(t.storage), retain=dt.timedelta(days=1), grace_period=0)  # no cached entries
    assert _files(t, "data") == before_data and added in before_data and live <= before_data
    assert _files(t, LOG_DIR) == before_log - {commit_path(4)}


# ---------------------------------------------------------------- change files (SPEC §Change capture)


def _captured_history(location):
    """As :func:`_history`, on a table with change capture on: versions 2, 3
    (a partial rewrite here) and 5 name change files."""
    uri, opts = location
    t = ctfile.create_table(
        uri, SCHEMA, partition_rows=2, storage_options=opts, properties={"ctfile.changeCapture": "before_after"}
    )
    t.insert(pa.table({"id": [1, 2, 3, 4], "v": ["a", "b", "c", "d"]}, schema=SCHEMA))
    t.update(pc.field("id") == 1, {"v": "A"})
    t.delete(pc.field("id") == 3)
    t.insert(pa.table({"id": [5], "v": ["e"]}, schema=SCHEMA))
    t.update(pc.field("id") == 5, {"v": "E"})
    t.insert(pa.table({"id": [6], "v": ["f"]}, schema=SCHEMA))
    assert t.version == 6
    assert [v for v in range(7) if _paths(t, [v], ChangeFile)] == [2, 3, 5]
    return t


def test_vacuum_deletes_change_files_with_their_history(location, settle_clock):
    t = _captured_history(location)
    base = 3
    named = {v: _paths(t, [v], ChangeFile) for v in range(7)}
    all_changes = _files(t, CHANGES_DIR)
    assert all_changes == set().union(*named.values())
    changes_from_base = _changes(t, base)
    now = _now_for_base(t, base, retain_s=60)

    dry = vacuum(t.log, retain=60, grace_period=0, dry_run=True, now_ms=now)
    assert set(dry.deleted_change_files) == named[2] and _files(t, CHANGES_DIR) == all_changes
    r = vacuum(t.log, retain=60, grace_period=0, now_ms=now)
    assert r.oldest_version == base
    # The change file of version 2 went with its entry; those of the
    # retained entries 3..6 (version 3 is the base itself) stay.
    assert set(r.deleted_change_files) == named[2] and r.deleted_change_files == dry.deleted_change_files
    assert r.change_bytes_freed > 0 and r.bytes_freed > r.change_bytes_freed
    assert set(r.deleted_change_files) <= set(r.deleted_files)
    assert _files(t, CHANGES_DIR) == named[3] | named[5]
    assert _changes(t, base) == changes_from_base
    # Nothing left to do with the same cutoff; everything old goes with retain 0.
    assert vacuum(t.log, retain=60, grace_period=0, now_ms=now).deleted_change_files == ()
    settle_clock(t)
    last = t.vacuum(retain=0, grace_period=0)
    assert set(last.deleted_change_files) == named[3] | named[5] and _files(t, CHANGES_DIR) == set()


def test_unreferenced_change_files_go_after_the_grace_period(location, settle_clock):
    """Change files of a transaction that never committed are kept while it
    may still commit, then deleted; verify lists them as unreferenced."""
    t = _captured_history(location)
    uri, opts = location
    tx = ctfile.open_table(uri, storage_options=opts).transaction()
    tx.update(pc.field("id") == 2, {"v": "pending"})
    (orphan,) = [f.path for f in tx.staged_changes()]
    assert orphan in _files(t, CHANGES_DIR)
    report = ctfile.verify_table(uri, storage_options=opts)
    assert report.healthy and orphan in report.unreferenced_files
    kept = t.vacuum(retain=0, grace_period=3600)
    assert orphan not in kept.deleted_change_files and orphan in _files(t, CHANGES_DIR)
    settle_clock(t)
    gone = t.vacuum(retain=0, grace_period=0)  # the transaction is abandoned: never committed
    assert orphan in gone.deleted_change_files and orphan not in _files(t, CHANGES_DIR)


def test_vacuum_keeps_what_a_lagging_stream_needs_then_makes_it_stale(location):
    """SPEC §Streams, retention, on each storage: the stream holds its
    history within retain + ctfile.maxRetentionExtension, is marked stale
    (a put-if-absent state) after it, and old state files go."""
    uri, opts = location
    t = ctfile.create_table(uri, SCHEMA, partition_rows=2, storage_options=opts,
                            properties={"ctfile.maxRetentionExtension": "2h"})
    t.insert(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=SCHEMA))
    s = t.create_stream("lagging")
    first = s.offset + 1
    t.update(pc.field("id") == 1, {"v": "A"})
    t.overwrite(pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA))
    expected = _changes(t, first)
    limit = t.log.commit_info(first).timestamp + 60_000 + 2 * 3_600_000

    r = vacuum(t.log, retain=60, grace_period=0, now_ms=limit)
    assert r.oldest_version == first and [h.name for h in r.holding_streams] == ["lagging"]
    reopened = ctfile.open_table(uri, storage_options=opts)
    assert _changes(reopened, first) == expected
    assert reopened.stream("lagging").pending().to_arrow().num_rows == len(expected)

    r = vacuum(t.log, retain=60, grace_period=0, now_ms=limit + 1)
    assert [h.name for h in r.stale_streams] == ["lagging"] and r.oldest_version == t.version
    with pytest.raises(ctfile.StaleStreamError) as e:
        reopened.stream("lagging").pending()
    assert e.value.oldest_available == t.version
    # The state the stale one replaced is one of the three kept (SPEC §Streams, state files).
    r = vacuum(t.log, retain=60, grace_period=0, now_ms=limit + 2)
    assert r.deleted_stream_files == ()
    assert _files(t, "_ct_streams/lagging") == {f"_ct_streams/lagging/{s:020d}.json" for s in (0, 1)}
