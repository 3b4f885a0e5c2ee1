"""``ctfile derived show URI --plot FILE``: the lag behind each source over
time against the target lag, and the refresh durations coloured by action,
computed from a real derived table's log and its source's log
(:mod:`ctfile.tools.derived_pictures`), drawn and written as a PNG; checked
on the series and on the figure's artists, never by pixels."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from typer.testing import CliRunner

import ctfile
from ctfile.tools import _plot_render as render
from ctfile.tools.cli import app
from ctfile.tools.derived_pictures import gather_derived

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "table"))
from derived_support import SOURCE_SCHEMA, make_pair, query_rows, refresh_info  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def _refresh(derived: ctfile.Table, source: ctfile.Table, action: str, duration_ms: int | None) -> int:
    """A refresh recording ``action`` and ``duration_ms``: the query's rows
    MERGEd on the key; the version committed."""
    rows = query_rows(source, source.refresh().version)
    info = refresh_info(source, action, rows.num_rows, rows.num_rows, duration_ms=duration_ms,
                        data_timestamp=source.snapshot().timestamp_ms)
    with derived.transaction(refresh=info) as tx:
        (tx.merge_builder(rows, on="_ct_dt_key").when_matched_update_all(condition=pc.field("t.v") != pc.field("s.v"))
         .when_not_matched_insert_all().when_not_matched_by_source_delete().execute())
    return tx.result.version


def _insert(source: ctfile.Table, i: int) -> int:
    return source.insert(pa.table({"id": [i], "v": [f"x{i}"]}, schema=SOURCE_SCHEMA)).version


@pytest.fixture
def history(tmp_path):
    """A derived table refreshed three times (FULL, INCREMENTAL,
    REINITIALIZE) over a source that keeps inserting; one insert is left
    unseen at the end. Returns the tables and the source's commit times."""
    source, derived = make_pair(tmp_path)
    _refresh(derived, source, "FULL", 40)
    v2 = _insert(source, 10)
    source.set_properties({"owner": "x"})  # no data change: does not make the table stale
    v4 = _insert(source, 11)
    _refresh(derived, source, "INCREMENTAL", 25)
    _insert(source, 12)
    _refresh(derived, source, "REINITIALIZE", None)
    v7 = _insert(source, 13)
    ts = {name: source.log.commit_info(v).timestamp for name, v in (("first", v2), ("second", v4), ("last", v7))}
    return source, derived, ts


def test_series_follow_the_logs(history):
    source, derived, ts = history
    refreshes = [h for h in reversed(derived.history()) if h.refresh is not None]
    until = ts["last"] + 5_000
    s = gather_derived(derived, derived.uri, until_ms=until)
    assert [(r.action, r.duration_ms) for r in s.refreshes] == [("FULL", 40), ("INCREMENTAL", 25), ("REINITIALIZE", None)]
    assert [r.time_ms for r in s.refreshes] == [h.timestamp_ms for h in refreshes]
    assert s.target_lag == "5 minutes" and s.target_lag_s == 300.0
    (lag,) = s.sources
    assert lag.name == "src" and lag.problem is None
    points = dict(zip(zip(lag.times_ms, range(len(lag.times_ms))), lag.lags_s))
    by_time: dict[int, list[float]] = {}
    for (t, _), v in sorted(points.items(), key=lambda kv: kv[0][1]):
        by_time.setdefault(t, []).append(v)
    t_inc = refreshes[1].timestamp_ms
    # Just before the INCREMENTAL refresh the oldest unseen change is the first insert
    # (the property commit after it does not count); just after it, none.
    assert by_time[t_inc] == [(t_inc - ts["first"]) / 1000, 0.0]
    assert by_time[ts["first"]] == [0.0]  # the lag starts growing at the source's commit
    assert lag.times_ms[-1] == until and lag.lags_s[-1] == 5.0  # the last insert is unseen
    assert s.max_lag_s == max(lag.lags_s) >= 5.0
    assert list(lag.times_ms) == sorted(lag.times_ms)


def test_figure_and_png(history, tmp_path):
    _, derived, ts = history
    fig = render.derived_figure(gather_derived(derived, derived.uri, until_ms=ts["last"] + 5_000))
    labels = {a.get_label() for ax in fig.axes for a in (*ax.lines, *ax.collections)}
    assert {"lag behind src", "target lag (5 minutes)", "NO_DATA", "INCREMENTAL", "FULL", "REINITIALIZE"} <= labels
    full = next(c for ax in fig.axes for c in ax.collections if c.get_label() == "FULL")
    assert full.get_offsets()[:, 1].tolist() == [0.04]  # its duration, in seconds
    out = tmp_path / "lag.png"
    r = run("derived", "show", derived.uri, "--plot", out)
    assert r.exit_code == 0, (r.stdout, r.stderr)
    assert out.read_bytes().startswith(PNG_MAGIC) and out.stat().st_size > 10_000
    assert str(out) in r.stdout


def test_refused_and_missing_matplotlib(history, tmp_path, monkeypatch):
    source, derived, _ = history
    r = run("derived", "show", source.uri, "--plot", tmp_path / "x.png")
    assert r.exit_code == 1 and "is not a derived table" in r.stderr and not (tmp_path / "x.png").exists()
    r = run("derived", "show", source.uri, "--plot", tmp_path / "x.png", "--json")
    assert r.exit_code == 1 and '"DerivedTableError"' in r.stdout + r.stderr
    r = run("derived", "show", derived.uri, "--plot", tmp_path / "x.pdf")
    assert r.exit_code == 2 and "expected a file name ending in .png, .svg or .html" in r.stderr
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    r = run("derived", "show", derived.uri, "--plot", tmp_path / "x.png")
    assert r.exit_code == 2
    assert r.stderr == "ctfile: error: --plot needs matplotlib: pip install 'ctfile[plot]'\n"
    assert not (tmp_path / "x.png").exists()
