"""The plots of ``benchmarks/RESULTS.md`` (``benchmarks/report/plots.py``), drawn
from the committed results in ``benchmarks/results/`` into ``tmp_path`` and
checked structurally: each group's bars are its figures' ratios, the goal
ticks its figures' goals, every other figure is listed as left out, and the
report embeds the SVG files written (never pixels)."""

from __future__ import annotations

import importlib.util
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


@pytest.fixture(scope="module")
def run():
    spec = importlib.util.spec_from_file_location("_bench_run", ROOT / "benchmarks" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def plots(run):
    from report import plots as _plots  # on the path run.py puts first

    return _plots


@pytest.fixture(scope="module")
def figs(run) -> list[dict]:
    res = {name: r for name, (_, f, _) in run.SCRIPTS.items() if (r := run._load_json(RESULTS / f)) is not None}
    out = run.figures(res)
    assert len({f["source"] for f in out}) >= 5, "the committed results should cover most scripts"
    return out


def _expected(figs: list[dict]) -> dict[str, list[tuple[str, float, float, bool | None]]]:
    """Per script, the figures whose goal reads "<= Nx" and whose value "Mx": (id, M, N, pass)."""
    out: dict[str, list] = {}
    for f in figs:
        goal, value = f["goal"], f["value"]
        if goal.startswith("<= ") and goal.endswith("x") and value.endswith("x") and value[0].isdigit():
            out.setdefault(f["source"], []).append((f["id"], float(value[:-1]), float(goal[3:-1]), f["pass"]))
    return out


def test_plot_series_accounts_for_every_figure(plots, figs):
    groups = plots.plot_series(figs)
    exp = _expected(figs)
    assert {g.source: [(b.id, b.ratio, b.goal, b.passed) for b in g.bars] for g in groups if g.bars} == exp
    drawn = {b.id for g in groups for b in g.bars}
    left = {fid for g in groups for fid, _ in g.left_out}
    assert drawn | left == {f["id"] for f in figs} and not drawn & left
    assert {"open_B1_appends", "hidden_bytes", "commit_s3"} <= left  # ms, %, informational


def test_drawn_bars_and_goal_ticks_equal_the_figures(plots, figs):
    from matplotlib.collections import LineCollection
    from matplotlib.container import BarContainer

    exp = _expected(figs)
    for g in plots.plot_series(figs):
        if not g.bars:
            assert g.source not in exp
            continue
        fig = plots.draw(g)
        (ax,) = fig.axes
        (bars,) = [c for c in ax.containers if isinstance(c, BarContainer) and c.get_label() == "ratio"]
        (goals,) = [c for c in ax.collections if isinstance(c, LineCollection) and c.get_label() == "goal"]
        # top to bottom in the figures' order
        rows = sorted(zip(bars.patches, goals.get_segments()), key=lambda pg: -pg[0].get_y())
        got = [(p.get_width(), seg[0][0], seg[1][0]) for p, seg in rows]
        assert got == [(ratio, goal, goal) for _, ratio, goal, _ in exp[g.source]], g.source
        for (p, seg) in rows:  # each goal tick spans its own bar
            lo, hi = sorted((seg[0][1], seg[1][1]))
            assert lo <= p.get_y() and p.get_y() + p.get_height() <= hi
        colours = [p.get_facecolor()[:3] for p, _ in rows]
        from matplotlib.colors import to_rgb

        assert colours == [pytest.approx(to_rgb(plots.COLOURS[ok])) for *_, ok in exp[g.source]]
        assert ax.get_xscale() == "log"
        fig.clf()


def test_report_embeds_the_written_plots(run, figs, tmp_path):
    plot_dir = tmp_path / "plots"
    text = run.render(RESULTS, plot_dir=plot_dir)
    exp = _expected(figs)
    written = sorted(p.name for p in plot_dir.iterdir())
    assert written == sorted(f"{s}.svg" for s in exp)
    for name in written:
        assert f"](plots/{name})" in text
        root = ET.parse(plot_dir / name).getroot()
        assert root.tag.endswith("svg")
        assert "<dc:date>" not in (plot_dir / name).read_text()  # no date: a re-render diffs only on change
    assert "Not plotted from objectstore: `commit_local`" in text
    # the committed report embeds the same plots
    committed = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    for name in written:
        assert f"](plots/{name})" in committed and (ROOT / "benchmarks" / "plots" / name).exists()


def test_report_without_matplotlib_says_what_to_install(tmp_path):
    """Without the bench extra the report is still written, and says why it has no plots."""
    import shutil
    import subprocess

    results = tmp_path / "results"
    results.mkdir()
    for name in ("core.json", "cold.json"):
        shutil.copyfile(RESULTS / name, results / name)
    code = ("import sys, runpy; sys.modules['matplotlib'] = None; "  # what `import matplotlib` meets when it is absent
            f"sys.argv = ['run.py', '--report-only', '--results-dir', {str(results)!r}]; "
            f"runpy.run_path({str(ROOT / 'benchmarks' / 'run.py')!r}, run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    text = (results / "RESULTS.md").read_text()
    assert "Not drawn: the benchmark plots need matplotlib: pip install 'ctfile[bench]'." in text
    assert not (results / "plots").exists() or not list((results / "plots").iterdir())
