"""The derived-table scheduler (``ctfile.spark.derived.run``, ``ctfile
derived run``; SPEC §Derived tables, target lag) with a controllable clock:
lags respected, dependency order, downstream lag, quiet sources (no Spark
job), refreshes that fall behind, two schedulers on one table, a failed
refresh the next cycle repairs, a stop between refreshes on SIGINT, and
``--once`` from the command line."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import ctfile
from ctfile.spark import derived
from ctfile.spark.derived_schedule import Outcome, Scheduler
from ctfile.tools.cli import app
from derived_helpers import QUERIES, a_rows, equals_query, make_sources
from spark_helpers import spark_env

SILVER = "SELECT id, k, s FROM a WHERE k IS NOT NULL"
GOLD = "SELECT k, count(*) AS n FROM silver GROUP BY k"


class Clock:
    """Wall-clock seconds that move only when told (commit timestamps are
    real: the clock starts at the real time)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def change(a: ctfile.Table, first_id: int) -> None:
    a.insert(a_rows([first_id, first_id + 1, first_id + 2], 1))


def changed_table(spark, tmp_path, query: str, lag: str):
    """Sources, a derived table over ``a`` with ``lag``, then a change of
    ``a`` it misses; and the table's version before it is refreshed."""
    a, _ = make_sources(tmp_path)
    t = derived.create(spark, str(tmp_path / "d"), QUERIES[query], sources={"a": a.uri}, target_lag=lag)
    change(a, 100)
    return a, t, t.table.refresh().version


def pipeline(spark, tmp_path):
    a, _ = make_sources(tmp_path)
    silver = derived.create(spark, str(tmp_path / "silver"), SILVER, sources={"a": a.uri}, target_lag="downstream")
    gold = derived.create(spark, str(tmp_path / "gold"), GOLD, sources={"silver": silver.uri}, target_lag="10 minutes")
    return a, silver, gold


def test_a_table_is_refreshed_when_due_and_quiet_sources_start_no_job(spark, tmp_path):
    a, _ = make_sources(tmp_path)
    t = derived.create(spark, str(tmp_path / "d"), QUERIES["filter"], sources={"a": a.uri}, target_lag="10 minutes")
    clock = Clock()
    s = Scheduler([t], clock=clock)
    assert s.poll == 60.0  # a quarter of the lag, at most a minute
    c = s.cycle()
    (st,) = c.statuses
    assert c.refreshes == () and st.pending_since is None and st.lag_s == 0 and "current" in st.reason
    assert c.next_check == clock.now + 60

    change(a, 100)
    missed = a.history(limit=1)[0].timestamp_ms / 1000
    c = s.cycle()
    (st,) = c.statuses
    assert st.pending_since == missed and not st.due and c.refreshes == () and "due in" in st.reason
    assert st.start_by == pytest.approx(missed + 600 - st.estimate_s) and st.estimate_s > 0  # the FULL at creation
    assert c.next_check == pytest.approx(min(clock.now + 60, st.start_by - 60))
    clock.now = st.start_by - 61  # one more check would still be in time
    assert s.cycle().refreshes == ()
    clock.now = st.start_by - 60  # waiting one more check would not
    c = s.cycle()
    (r,) = c.refreshes
    assert (r.outcome, r.action, r.behind, r.uri) == (Outcome.REFRESHED, ctfile.RefreshAction.INCREMENTAL, False, t.uri)
    assert r.lag_s == pytest.approx(clock.now - missed) and r.target_s == 600 and "would pass the target" in r.why
    equals_query(spark, t, {"a": a})

    a.set_properties({"ctfile.checkpointInterval": "7"})  # a commit that changes no row
    clock.now += 86400
    sc = spark.sparkContext
    sc.setJobGroup("sched-quiet", "scheduler over quiet sources")
    try:
        c = s.cycle()
    finally:
        sc.setJobGroup("", "")
    assert c.refreshes == () and not c.statuses[0].due and c.statuses[0].pending_since is None
    assert list(sc.statusTracker().getJobIdsForGroup("sched-quiet")) == []


def test_downstream_lag_dependency_order_and_falling_behind(spark, tmp_path, caplog):
    a, silver, gold = pipeline(spark, tmp_path)
    clock = Clock()
    s = Scheduler([gold, silver], clock=clock)
    change(a, 100)
    c = s.cycle()
    st = {x.uri: x for x in c.statuses}
    assert [x.uri for x in c.statuses] == [silver.uri, gold.uri]  # dependency order
    assert st[silver.uri].target_s == 600 and "downstream" in st[silver.uri].reason and not st[silver.uri].due
    assert st[gold.uri].pending_since == st[silver.uri].pending_since  # gold misses what silver misses
    assert st[gold.uri].estimate_s > st[silver.uri].estimate_s > 0  # gold waits for silver's refresh too
    assert c.refreshes == ()

    clock.now = st[gold.uri].start_by - s.poll
    c = s.cycle()
    assert [(r.uri, r.outcome) for r in c.refreshes] == [(silver.uri, Outcome.REFRESHED), (gold.uri, Outcome.REFRESHED)]
    assert f"read by {gold.uri}, which is due" in c.refreshes[0].why
    assert gold.table.refresh().derived.frontier[0].version == silver.table.refresh().version

    change(a, 200)  # then nobody runs the scheduler for two hours
    clock.now += 7200
    with caplog.at_level(logging.INFO, logger="ctfile.derived"):
        report = derived.run(spark, [silver, gold], once=True, clock=clock)
    assert report.cycles == 1 and report.outcomes == {"refreshed": 2} and report.behind == 2
    assert all(r.behind and r.lag_s > 7200 for r in report.refreshes())
    behind = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(gold.uri in m and "fell behind" in m for m in behind), behind
    assert any(r.getMessage().startswith(f"refreshing {silver.uri}: read by") for r in caplog.records)

    # SIGINT during silver's refresh: it finishes, gold's is not started.
    change(a, 300)
    gold_version = gold.table.refresh().version
    clock.now += 7200

    class SignalOnRefresh(logging.Handler):
        def emit(self, record):
            if record.getMessage().startswith(f"refreshing {silver.uri}"):
                os.kill(os.getpid(), signal.SIGINT)

    logger = logging.getLogger("ctfile.derived")
    handler, level = SignalOnRefresh(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    previous = signal.getsignal(signal.SIGINT)
    try:
        report = derived.run(spark, [silver, gold], clock=clock, sleep=clock.sleep)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert signal.getsignal(signal.SIGINT) is previous
    assert report.stopped and report.cycles == 1 and report.last[0].stopped
    assert [(r.uri, r.outcome) for r in report.refreshes()] == [(silver.uri, Outcome.REFRESHED)]
    assert gold.table.refresh().version == gold_version

    # A stop during the wait between cycles (as another thread's stop.set()).
    stop = threading.Event()
    waits: list[float] = []

    def sleep_then_stop(seconds: float) -> None:
        waits.append(seconds)
        clock.sleep(seconds)
        stop.set()

    report = derived.run(spark, [silver, gold], clock=clock, sleep=sleep_then_stop, stop=stop)
    assert report.stopped and report.cycles == 1 and len(waits) == 1 and 0 <= waits[0] <= s.poll
    assert [(r.uri, r.outcome) for r in report.refreshes()] == [(gold.uri, Outcome.REFRESHED)]
    equals_query(spark, silver, {"a": a})
    equals_query(spark, gold, {"silver": silver.table})


def test_a_downstream_table_nobody_reads_a_table_without_a_lag_and_a_source_gone(spark, tmp_path, caplog):
    a, _ = make_sources(tmp_path)
    t = derived.create(spark, str(tmp_path / "d"), QUERIES["filter"], sources={"a": a.uri}, target_lag="downstream")
    clock = Clock()
    s = Scheduler([t], clock=clock)
    change(a, 100)
    clock.now += 10 * 86400
    c = s.cycle()
    assert c.refreshes == () and c.statuses[0].target_s is None and "downstream" in c.statuses[0].reason
    t.alter(target_lag=derived.UNSET)
    with pytest.raises(ctfile.InvalidArgumentError, match="expected a target lag .* found none"):
        derived.run(spark, [t.uri], once=True)
    with pytest.raises(ctfile.InvalidArgumentError, match="targetLag: expected a duration"):
        t.alter(target_lag="every so often")
    with pytest.raises(ctfile.DerivedTableError, match="expected a derived table"):
        derived.run(spark, [a.uri], once=True)

    t.alter(target_lag="1 minute")
    shutil.rmtree(a.uri)  # a source gone: --once raises, a long run warns and tries again
    with pytest.raises(ctfile.CtfileError):
        derived.run(spark, [t], once=True, clock=clock)
    stop = threading.Event()
    with caplog.at_level(logging.WARNING, logger="ctfile.derived"):
        report = derived.run(spark, [t], clock=clock, sleep=lambda seconds: stop.set(), stop=stop)
    assert report.cycles == 0 and report.stopped and "cycle failed, next try in 15.0s" in caplog.text


def test_a_failed_refresh_is_reported_then_two_schedulers_repair_it_once(spark, tmp_path, monkeypatch, caplog):
    """A refresh that dies before its commit (its log entry cannot be
    written) leaves the table as it was and is reported; then two schedulers
    at once bring the table right with one refresh commit: the log lets one
    commit per frontier, and the other finds it done."""
    from ctfile.log.storage import LocalStorage

    a, t, before = changed_table(spark, tmp_path, "aggregate", "1 minute")
    real = LocalStorage.put_if_absent

    def broken(self, path, data):
        if path.startswith("_ct_log/") and str(self.root).rstrip("/").endswith("/d"):
            raise OSError("disk unplugged")
        return real(self, path, data)

    clock = Clock()
    clock.now += 3600
    schedulers = [Scheduler([derived.open(spark, t.uri)], clock=clock) for _ in range(2)]
    monkeypatch.setattr(LocalStorage, "put_if_absent", broken)
    with caplog.at_level(logging.WARNING, logger="ctfile.derived"):
        (r,) = schedulers[0].cycle().refreshes
    assert r.outcome is Outcome.FAILED and "disk unplugged" in r.reason and r.behind and r.version is None
    assert any("failed" in m.getMessage() for m in caplog.records)
    assert ctfile.open_table(t.uri).version == before
    monkeypatch.setattr(LocalStorage, "put_if_absent", real)

    go = threading.Barrier(2)
    cycles: list = [None, None]

    def one(i: int) -> None:
        go.wait()
        cycles[i] = schedulers[i].cycle()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    outcomes = sorted(r.outcome.value for c in cycles for r in c.refreshes)
    assert outcomes in (["refreshed"], ["current", "refreshed"]), outcomes  # never two commits, never a failure
    after = ctfile.open_table(t.uri)
    assert after.version == before + 1 and after.history(limit=1)[0].operation == "REFRESH"
    equals_query(spark, t, {"a": a})


def test_cli_once_refreshes_what_is_due(spark, tmp_path):
    a, t, _ = changed_table(spark, tmp_path, "filter", "1 second")
    runner = CliRunner()
    result = runner.invoke(app, ["derived", "run", t.uri, "--once", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["cycles"] == 1 and doc["outcomes"] == {"refreshed": 1} and not doc["stopped"]
    (r,) = doc["refreshes"]
    assert (r["uri"], r["outcome"], r["action"]) == (t.uri, "refreshed", "INCREMENTAL")
    assert doc["tables"][0]["due"] and doc["tables"][0]["target_lag"] == "1 second"
    assert ctfile.open_table(t.uri).derived.frontier[0].version == a.version

    result = runner.invoke(app, ["derived", "run", t.uri, "--once"])
    assert result.exit_code == 0, result.output
    assert "1 cycle(s): no refresh" in result.stdout and "current" in result.stdout

    t.alter(target_lag=derived.UNSET)
    result = runner.invoke(app, ["derived", "run", t.uri, "--once", "--json"])
    assert result.exit_code == 1 and "expected a target lag" in result.stderr
    result = runner.invoke(app, ["derived", "run", t.uri, "--once", "--poll", "soon"])
    assert result.exit_code == 2 and "--poll" in result.stderr


# ---------------------------------------------------------------- other processes (-m long: a JVM each)


def cli_process(*args: str, stdout=subprocess.PIPE) -> subprocess.Popen:
    """``ctfile derived run ARGS`` in a process of its own, with its own local Spark."""
    src = str(Path(ctfile.__file__).resolve().parents[1])
    env = dict(spark_env(), PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-m", "ctfile.tools", "derived", "run", *args, "--json",
           "--conf", "spark.master=local[1]", "--conf", "spark.ui.enabled=false"]
    return subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, env=env, text=True)


@pytest.mark.long
def test_a_refresh_killed_mid_way_then_the_scheduler_repairs_it(spark, tmp_path):
    from test_derived_crash import change_sources, kill_refresh_at

    a, _ = make_sources(tmp_path)
    t = derived.create(spark, str(tmp_path / "d"), QUERIES["aggregate"], sources={"a": a.uri}, target_lag="1 minute")
    change_sources(a)
    version = t.table.refresh().version
    kill_refresh_at(t.uri, "before_commit", tmp_path)
    assert ctfile.open_table(t.uri).version == version  # killed before its commit: nothing happened
    clock = Clock()
    clock.now += 3600
    report = derived.run(spark, [t.uri], once=True, clock=clock)
    assert [(r.outcome, r.action) for r in report.refreshes()] == [(Outcome.REFRESHED, ctfile.RefreshAction.INCREMENTAL)]
    equals_query(spark, t, {"a": a})


@pytest.mark.long
def test_two_scheduler_processes_refresh_a_table_once(spark, tmp_path):
    a, t, before = changed_table(spark, tmp_path, "aggregate", "1 second")
    procs = [cli_process(t.uri, "--once") for _ in range(2)]
    docs = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        docs.append(json.loads(out))
    outcomes = sorted(r["outcome"] for d in docs for r in d["refreshes"])
    assert outcomes in (["refreshed"], ["current", "refreshed"]), outcomes
    assert ctfile.open_table(t.uri).version == before + 1
    equals_query(spark, t, {"a": a})


@pytest.mark.long
def test_cli_stops_on_sigterm_after_the_refresh_under_way(spark, tmp_path):
    a, t, _ = changed_table(spark, tmp_path, "filter", "1 second")
    proc = cli_process(t.uri, "--poll", "1s")
    try:
        deadline = time.monotonic() + 600
        seen = ""
        while "INCREMENTAL in" not in seen:  # the refresh's INFO line on stderr
            line = proc.stderr.readline()
            assert line or proc.poll() is None, seen
            seen += line
            assert time.monotonic() < deadline, seen
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    doc = json.loads(out)
    assert doc["stopped"] and doc["outcomes"]["refreshed"] == 1 and "SIGTERM" in err
    equals_query(spark, t, {"a": a})
