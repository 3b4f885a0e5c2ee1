"""Stream pins as tokens and write jobs that consume them (SPEC §Streams;
``ctfile.table.stream_jobs``): the public API the Spark data source uses.

Crashes are reproduced by the states a crashed consumer leaves on disk,
written with the real stream store: a claim with no target commit (died
between steps 2 and 3), a claim whose target commit landed (died between
steps 3 and 4)."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

import ctfile
from ctfile import CommitConflictError, InvalidArgumentError
from ctfile.log.streams import StreamStore
from ctfile.log.transaction import now_ms

SCHEMA = pa.schema([("id", pa.int64())])


@pytest.fixture
def pipeline(tmp_path):
    bronze = ctfile.create_table(str(tmp_path / "bronze"), SCHEMA)
    silver = ctfile.create_table(str(tmp_path / "silver"), SCHEMA)
    stream = bronze.create_stream("to_silver")
    bronze.insert(pa.table({"id": [1, 2]}))
    bronze.insert(pa.table({"id": [3]}))
    return bronze, silver, stream


def ids(table) -> list[int]:
    return sorted(table.refresh().to_arrow().column("id").to_pylist())


def consume(silver, stream, pin) -> ctfile.CommitResult:
    """A job writing the pinned rows, planned and committed as Spark does."""
    rows = stream.pending(pin=pin).to_arrow().select(["id"])
    job = silver.write_job(schema=rows.schema, consuming=stream, pin=pin)
    return job.commit(job.write(rows))


def test_token_round_trip_and_pinned_read(pipeline):
    bronze, _, stream = pipeline
    pin = stream.pin()
    bronze.insert(pa.table({"id": [4]}))  # after the pin: not part of it
    again = stream.pin_from_token(pin.token)
    assert again == pin and again.end == bronze.version - 1
    assert sorted(stream.pending(pin=again).to_arrow().column("id").to_pylist()) == [1, 2, 3]
    assert sorted(stream.pending().to_arrow().column("id").to_pylist()) == [1, 2, 3, 4]


def test_tokens_of_other_streams_are_refused(pipeline, tmp_path):
    bronze, _, stream = pipeline
    pin = stream.pin()
    sid, seq, end = pin.token.split(":")
    other = ctfile.create_table(str(tmp_path / "other"), SCHEMA).create_stream("to_silver")
    bad = {
        "garbage": "no colons here",
        "another table's stream of that name": other.pin().token,
        "a sequence beyond the stream's": f"{sid}:{int(seq) + 5}:{end}",
        "an end beyond the latest version": f"{sid}:{seq}:{bronze.version + 1}",
        "an end below the offset": f"{sid}:{seq}:{stream.offset - 1}",
    }
    for what, token in bad.items():
        with pytest.raises(InvalidArgumentError, match="stream pin|pin token") as ei:
            stream.pin_from_token(token)
        assert token in str(ei.value), what
    bronze.drop_stream("to_silver")
    again = bronze.create_stream("to_silver")
    with pytest.raises(InvalidArgumentError, match="belongs to stream id"):
        again.pin_from_token(pin.token)  # a pin of the dropped stream of that name


def test_job_consumes_its_pin_once_and_a_replay_commits_nothing(pipeline):
    bronze, silver, stream = pipeline
    pin = stream.pin()
    first = consume(silver, stream, pin)
    assert first.committed and stream.offset == pin.end and ids(silver) == [1, 2, 3]
    commit = silver.history(limit=1)[0]
    assert commit.operation == "WRITE" and commit.operation_parameters["stream"]["to"] == pin.end
    version = silver.version
    replay = consume(silver, stream, pin)
    assert (replay.committed, replay.app_transaction_replayed) == (False, True)
    assert silver.refresh().version == version and ids(silver) == [1, 2, 3]
    # The replay's files were deleted: every data file is referenced.
    live = {p.path for v in range(silver.version + 1) for p in silver.snapshot(v).partitions}
    assert {i.path for i in silver.storage.list_dir("data")} == live


def test_overwrite_job_consumes_too(pipeline):
    _, silver, stream = pipeline
    silver.insert(pa.table({"id": [7]}))
    pin = stream.pin()
    rows = stream.pending(pin=pin).to_arrow().select(["id"])
    job = silver.write_job(mode="overwrite", schema=rows.schema, consuming=stream, pin=pin)
    assert job.commit(job.write(rows)).committed
    assert ids(silver) == [1, 2, 3] and stream.offset == pin.end


def test_a_pin_consumed_otherwise_conflicts(pipeline, tmp_path):
    bronze, silver, stream = pipeline
    pin = stream.pin()
    gold = ctfile.create_table(str(tmp_path / "gold"), SCHEMA)
    assert consume(gold, stream, pin).committed
    with pytest.raises(CommitConflictError, match="was consumed otherwise"):
        consume(silver, stream, pin)  # consumed into another target
    assert ids(silver) == []
    bronze.insert(pa.table({"id": [5]}))
    pin = stream.pin()
    stream.advance(pin.end)
    with pytest.raises(CommitConflictError, match="was consumed otherwise"):
        consume(silver, stream, pin)
    assert ids(silver) == [] and silver.version == 0


def test_retry_after_a_crash_between_claim_and_commit(pipeline):
    _, silver, stream = pipeline
    pin = stream.pin()
    store = StreamStore(stream.table.storage)
    store.write_next(pin.state.claimed(end=pin.end, target_uri=silver.uri, target_table_id=silver.table_id,
                                       now_ms=now_ms()))
    result = consume(silver, stream, pin)  # fences the dead claim, then consumes the same interval
    assert result.committed and ids(silver) == [1, 2, 3] and stream.offset == pin.end
    assert [h.operation for h in silver.history()][:2] == ["WRITE", "STREAM FENCE"]


def test_retry_after_a_crash_between_commit_and_resolve(pipeline):
    _, silver, stream = pipeline
    pin = stream.pin()
    claim = StreamStore(stream.table.storage).write_next(
        pin.state.claimed(end=pin.end, target_uri=silver.uri, target_table_id=silver.table_id, now_ms=now_ms())
    )
    silver.insert(pa.table({"id": [1, 2, 3]}), app_id=claim.app_id, app_version=claim.sequence)  # step 3 landed
    replay = consume(silver, stream, pin)
    assert replay.app_transaction_replayed and not replay.committed
    assert ids(silver) == [1, 2, 3] and stream.offset == pin.end


def test_jobs_racing_with_one_pin_apply_it_once(pipeline):
    _, silver, stream = pipeline
    pin = stream.pin()
    rows = stream.pending(pin=pin).to_arrow().select(["id"])
    jobs = [silver.write_job(schema=rows.schema, consuming=stream, pin=pin) for _ in range(2)]
    files = [job.write(rows) for job in jobs]
    outcomes: list = [None, None]
    go = threading.Barrier(2)

    def run(i: int) -> None:
        go.wait()
        try:
            outcomes[i] = jobs[i].commit(files[i])
        except CommitConflictError as e:
            outcomes[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    committed = [o for o in outcomes if isinstance(o, ctfile.CommitResult) and o.committed]
    others = [o for o in outcomes if o not in committed]
    assert len(committed) == 1, outcomes
    # The loser conflicted (it raced the claim) or, arriving after, was a replay.
    assert isinstance(others[0], CommitConflictError) or others[0].app_transaction_replayed, outcomes
    assert ids(silver) == [1, 2, 3] and stream.offset == pin.end


def test_job_options_are_checked(pipeline, tmp_path):
    _, silver, stream = pipeline
    with pytest.raises(InvalidArgumentError, match="give consuming too"):
        silver.write_job(schema=SCHEMA, pin=stream.pin())
    with pytest.raises(InvalidArgumentError, match="consuming must be a ctfile Stream"):
        silver.write_job(schema=SCHEMA, consuming="to_silver")
    job = silver.write_job(schema=SCHEMA, consuming=stream)
    with pytest.raises(InvalidArgumentError, match="records the stream's own txn"):
        job.commit([], app_id="a", app_version=1)
