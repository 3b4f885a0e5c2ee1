"""``ctfile history --plot`` and ``ctfile show --plot``: the series come from
the public API and equal what the log and the snapshots say; the figures are
checked on their artists (lines, bars, markers, colours), never by pixels."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import ctfile
from ctfile.tools import _plot_render as render
from ctfile.tools import pictures
from ctfile.tools.cli import app

GOLDEN = Path(__file__).resolve().parents[2] / "conformance" / "golden"
runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def golden(name: str, tmp_path: Path) -> ctfile.Table:
    dst = tmp_path / name
    shutil.copytree(GOLDEN / name, dst)
    return ctfile.open_table(dst)


def log_actions(t: ctfile.Table, version: int) -> list[dict]:
    text = (Path(t.uri) / "_ct_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def artist(fig, label: str):
    """The one artist of ``fig`` (line, bar container, marker collection) labelled ``label``."""
    found = [
        a for ax in fig.axes for a in (*ax.lines, *ax.containers, *ax.collections) if a.get_label() == label
    ]
    assert len(found) == 1, (label, found)
    return found[0]


def live(snap: ctfile.Snapshot) -> tuple[int, int]:
    return snap.num_records, sum(p.size_bytes for p in snap.partitions)


# ---------------------------------------------------------------- the public API underneath


def test_history_entry_counts_its_add_and_remove_actions(tmp_path):
    t = golden("people-evolved", tmp_path)
    for h in t.history():
        actions = log_actions(t, h.version)
        adds = [a["add"] for a in actions if "add" in a]
        removes = [a["remove"] for a in actions if "remove" in a]
        assert (h.partitions_added, h.partitions_removed) == (len(adds), len(removes))
        assert (h.rows_added, h.rows_removed) == (sum(a["numRecords"] for a in adds), sum(r["numRecords"] for r in removes))
        assert (h.bytes_added, h.bytes_removed) == (sum(a["sizeBytes"] for a in adds), sum(r["sizeBytes"] for r in removes))


def test_snapshot_column_bounds_decode_each_partitions_statistics(tmp_path):
    t = golden("people-evolved", tmp_path)
    snap = t.snapshot()
    fid = snap.table_schema.field("id").id
    assert snap.column_bounds("id") == [(p.stats.min_values[fid], p.stats.max_values[fid]) for p in snap.partitions]
    with pytest.raises(ctfile.SchemaMismatchError, match="no column 'nope'.*'full_name'"):
        snap.column_bounds("nope")


# ---------------------------------------------------------------- history


@pytest.mark.parametrize("name", ["people", "people-capture", "people-evolved"])
def test_history_series_equal_the_snapshots_and_the_log(tmp_path, name):
    t = golden(name, tmp_path)
    s = pictures.gather_history(t, t.uri)
    latest = t.snapshot().version
    assert s.versions == tuple(range(latest + 1))
    for i, v in enumerate(s.versions):
        assert (s.live_rows[i], s.live_bytes[i]) == live(t.snapshot(v)), v
        actions = log_actions(t, v)
        assert s.partitions_added[i] == sum("add" in a for a in actions)
        assert s.partitions_removed[i] == sum("remove" in a for a in actions)
        metrics = next(a["commitInfo"] for a in actions if "commitInfo" in a).get("operationMetrics", {})
        assert s.rows_inserted[i] == metrics.get("numInsertedRows", 0)
        assert s.rows_deleted[i] == metrics.get("numDeletedRows", 0)
    assert s.expired_before is None


def test_history_figure_draws_the_series_and_marks_the_commits(tmp_path):
    t = golden("people-evolved", tmp_path)
    s = pictures.gather_history(t, t.uri)
    fig = render.history_figure(s)
    versions = [float(v) for v in s.versions]
    rows = artist(fig, "live rows")
    assert list(rows.get_xdata()) == versions
    assert list(rows.get_ydata()) == [t.snapshot(v).num_records for v in s.versions]
    assert list(artist(fig, "live bytes").get_ydata()) == [live(t.snapshot(v))[1] for v in s.versions]
    assert [b.get_height() for b in artist(fig, "partitions added")] == list(s.partitions_added)
    assert [-b.get_height() for b in artist(fig, "partitions removed")] == list(s.partitions_removed)
    assert [b.get_height() for b in artist(fig, "rows updated")] == list(s.rows_updated)

    def marked(label: str) -> list[int]:
        return [int(x) for x, _ in artist(fig, label).get_offsets()]

    assert marked(render.SCHEMA_CHANGE_LABEL) == [6, 8, 9, 10]
    assert marked(pictures.CommitKind.CREATE.value) == [0]
    assert marked(pictures.CommitKind.METADATA.value) == [6, 8, 9, 10]
    assert marked(pictures.CommitKind.DATA.value) == [1, 2, 3, 4, 5, 7, 11]
    assert marked(pictures.CommitKind.COMPACTION.value) == []


def test_history_marks_compaction_and_a_vacuumed_start(tmp_path, settle_clock):
    t = ctfile.create_table(tmp_path / "t", pa.schema([("id", pa.int64())]))
    for i in range(4):
        t.insert(pa.table({"id": [i, i + 10]}))
    t.compact()
    t.insert(pa.table({"id": [99]}))
    s = pictures.gather_history(t, t.uri)
    assert s.kinds[-3:] == (pictures.CommitKind.DATA, pictures.CommitKind.COMPACTION, pictures.CommitKind.DATA)
    assert s.partitions_removed[-2] == 4 and s.rows_inserted[-2] == 0 and s.live_rows[-3:] == (8, 8, 9)
    settle_clock(t)
    t.vacuum(retain=0, grace_period=0)
    s = pictures.gather_history(t, t.uri)
    oldest = s.versions[0]
    assert oldest > 0 and s.expired_before == oldest
    for v, rows, size in zip(s.versions, s.live_rows, s.live_bytes):
        assert (rows, size) == live(t.snapshot(v))
    fig = render.history_figure(s)
    assert any(f"versions before {oldest} were expired" in ax.get_title(loc="left") for ax in fig.axes)
    limited = pictures.gather_history(t, t.uri, limit=1)
    assert limited.versions == (s.versions[-1],) and limited.expired_before is None


@pytest.mark.parametrize(
    "suffix, check",
    [
        (".png", lambda b: b.startswith(PNG_MAGIC)),
        (".svg", lambda b: b.lstrip().startswith(b"<?xml") and b"<svg" in b),
        (".html", lambda b: b.startswith(b"<!DOCTYPE html>") and b"<svg" in b and b"<?xml" not in b and b.rstrip().endswith(b"</html>")),
    ],
)
@pytest.mark.parametrize("command", ["history", "show"])
def test_plot_files_by_extension(tmp_path, suffix, check, command):
    t = golden("people-evolved", tmp_path)
    out = tmp_path / f"figure{suffix}"
    r = run(command, t.uri, "--plot", out)
    assert r.exit_code == 0, (r.stdout, r.stderr)
    assert check(out.read_bytes())
    assert str(out) in r.stdout


def test_bad_plot_extension_fails_before_any_work(tmp_path):
    missing = tmp_path / "no-such-table"  # the table is never opened
    for command in ("history", "show"):
        r = run(command, missing, "--plot", tmp_path / "figure.pdf")
        assert r.exit_code == 2, (r.stdout, r.stderr)
        assert "expected a file name ending in .png, .svg or .html, found" in r.stderr
        assert "figure.pdf" in r.stderr and "\n" not in r.stderr.strip()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_missing_matplotlib_is_one_line_and_exit_2(tmp_path, monkeypatch):
    t = golden("people", tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(render.PlotExtraMissing, match=r"^--plot needs matplotlib: pip install 'ctfile\[plot\]'$"):
        render.load_matplotlib()
    out = tmp_path / "h.png"
    r = run("history", t.uri, "--plot", out)
    assert r.exit_code == 2
    assert r.stderr == "ctfile: error: --plot needs matplotlib: pip install 'ctfile[plot]'\n"
    assert not out.exists()


# ---------------------------------------------------------------- layout


def _overlapping(root: Path) -> ctfile.Table:
    """Versions 1..4: ids 0..9, 5..14, 20..29 and a partition whose names are all null."""
    t = ctfile.create_table(root, pa.schema([("id", pa.int64()), ("name", pa.string())]))
    t.insert(pa.table({"id": list(range(10)), "name": [f"n{i:02d}" for i in range(10)]}))
    t.insert(pa.table({"id": list(range(5, 15)), "name": [f"n{i:02d}" for i in range(5, 15)]}))
    t.insert(pa.table({"id": list(range(20, 30)), "name": [f"m{i:02d}" for i in range(20, 30)]}))
    t.insert(pa.table({"id": [40, 41], "name": pa.array([None, None], pa.string())}))
    return t


def test_layout_bars_are_the_partitions_bounds_coloured_by_version(tmp_path):
    t = _overlapping(tmp_path / "t")
    snap = t.snapshot()
    s = pictures.gather_layout(snap, t.uri)
    assert s.column == "id" and s.unbounded == ()
    fid = snap.table_schema.field("id").id
    expected = sorted(
        (p.stats.min_values[fid], p.stats.max_values[fid], p.default_row_version) for p in snap.partitions
    )
    assert [(b.low, b.high, b.version) for b in s.bars] == expected == [(0, 9, 1), (5, 14, 2), (20, 29, 3), (40, 41, 4)]
    # pieces 0,(0,5),5,(5,9),9,(9,14),14 | 20,(20,29),29 | 40,(40,41),41: depths 1,1,2,2,2,1,1 and 1 x 6
    assert s.depth == pytest.approx(16 / 13)

    fig = render.layout_figure(s)
    bars = list(artist(fig, "partitions"))
    assert [(b.get_x(), b.get_x() + b.get_width(), b.get_y() + b.get_height() / 2) for b in bars] == [
        (lo, hi, float(i)) for i, (lo, hi, _) in enumerate(expected)
    ]
    import matplotlib
    from matplotlib.colors import Normalize

    colour = matplotlib.colormaps[render.LAYOUT_CMAP]
    norm = Normalize(vmin=1, vmax=4)
    assert [b.get_facecolor() for b in bars] == [pytest.approx(colour(norm(v))) for _, _, v in expected]
    colorbar = fig.axes[1]
    assert colorbar.get_ylabel() == "version that wrote the partition" and colorbar.get_ylim() == (1.0, 4.0)
    assert "clustering depth 1.23" in fig.axes[0].get_title()


def test_layout_counts_partitions_without_bounds_and_draws_strings_by_rank(tmp_path):
    t = _overlapping(tmp_path / "t")
    s = pictures.gather_layout(t.snapshot(), t.uri, column="name")
    assert len(s.bars) == 3 and len(s.unbounded) == 1
    assert [(b.low, b.high) for b in s.bars] == [("m20", "m29"), ("n00", "n09"), ("n05", "n14")]
    fig = render.layout_figure(s)
    assert len(list(artist(fig, "partitions"))) == 3
    assert "1 partitions without bounds, not drawn" in fig.axes[0].get_title()
    assert [x.get_text() for x in fig.axes[0].get_xticklabels()] == ["m20", "m29", "n00", "n05", "n09", "n14"]


def test_show_plot_options(tmp_path):
    t = _overlapping(tmp_path / "t")
    r = run("show", t.uri, "--plot", tmp_path / "v2.svg", "--version", "2", "--column", "name")
    assert r.exit_code == 0, r.stderr
    assert "version 2: 2 partitions by name" in (tmp_path / "v2.svg").read_text()
    r = run("show", t.uri, "--plot", tmp_path / "x.svg", "--column", "nope")
    assert r.exit_code == 1 and "no column 'nope'" in r.stderr and not (tmp_path / "x.svg").exists()
    r = run("show", t.uri, "--column", "id")
    assert r.exit_code == 1 and "--column is for --plot" in r.stderr


def test_plots_of_an_s3_table(moto_s3, tmp_path):
    so = moto_s3.storage_options()
    uri = moto_s3.new_uri("plots")
    t = ctfile.create_table(uri, pa.schema([("id", pa.int64())]), storage_options=so)
    t.insert(pa.table({"id": [1, 2, 3]}))
    t.insert(pa.table({"id": [2, 5]}))
    opts = [
        "--storage-option", f"endpoint_url={so['endpoint_url']}", "--storage-option", f"key={so['key']}",
        "--storage-option", f"secret={so['secret']}", "--storage-option", "client_kwargs.region_name=us-east-1",
    ]
    r = run("history", uri, "--plot", tmp_path / "h.html", *opts)
    assert r.exit_code == 0, r.stderr
    assert (tmp_path / "h.html").read_text().startswith("<!DOCTYPE html>")
    r = run("show", uri, "--plot", tmp_path / "l.png", *opts)
    assert r.exit_code == 0, r.stderr
    assert (tmp_path / "l.png").read_bytes().startswith(PNG_MAGIC)
    s = pictures.gather_history(t, uri)
    assert s.live_rows == (0, 3, 5) and s.partitions_added == (0, 1, 1)
    layout = pictures.gather_layout(t.snapshot(), uri)
    assert [(b.low, b.high, b.version) for b in layout.bars] == [(1, 3, 1), (2, 5, 2)] and layout.depth == pytest.approx(10 / 7)
