"""The plots of ``RESULTS.md``: per script, each figure's ratio (ctfile / its
anchor) as a horizontal bar with the figure's goal marked, built from the
figure dicts of ``report/figures.py``.

:func:`plot_series` turns the figures into plain data (no matplotlib), one
:class:`GroupSeries` per script in the order the figures come; figures whose
goal is not a ratio (``<= +100 ms``, ``bounded, < 1 GB``, informational) or
whose value is not one (``n/a``) are kept aside with the reason, for the
report to list. :func:`draw` makes a matplotlib figure of one group and
:func:`write_plots` saves every group with bars as SVG (small, diffable,
rendered by GitHub). matplotlib is imported only there, with the Agg backend;
without it (the ``bench`` extra) :func:`write_plots` raises
:class:`PlotsUnavailable` with what to install.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

# A goal this plot can draw: "<= 1.05x". Others ("<= 1%", ">= 100 commits/s") are listed, not drawn.
_RATIO_GOAL = re.compile(r"^\s*<=\s*(\d+(?:\.\d*)?)\s*x\s*$")
_RATIO_VALUE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*x\s*$")

COLOURS = {True: "#2e7d32", False: "#c62828", None: "#9e9e9e"}  # pass, miss, informational
LABEL_WIDTH = 64  # characters of a figure's text on the y axis


@dataclass(frozen=True)
class Bar:
    """One figure drawn: its ratio and its goal ratio (both ``ctfile / anchor``)."""

    id: str
    label: str
    anchor: str
    ratio: float
    goal: float
    passed: bool | None


@dataclass
class GroupSeries:
    """The figures of one script: the bars drawn and the figures left out (id, reason)."""

    source: str
    bars: list[Bar] = field(default_factory=list)
    left_out: list[tuple[str, str]] = field(default_factory=list)


class PlotsUnavailable(RuntimeError):
    """matplotlib is not installed."""


def ratio_goal(goal: str) -> float | None:
    """The ratio of a goal such as ``"<= 1.05x"``; None when the goal is not a ratio.

    >>> ratio_goal("<= 1.05x"), ratio_goal("<= 2x"), ratio_goal("<= +100 ms"), ratio_goal("")
    (1.05, 2.0, None, None)
    """
    m = _RATIO_GOAL.match(goal or "")
    return float(m.group(1)) if m else None


def plot_series(figs: list[dict]) -> list[GroupSeries]:
    """The figures grouped by script (first appearance order), as bars or left out.

    >>> g, = plot_series([
    ...     {"id": "a", "figure": "A", "anchor": "x", "goal": "<= 1.05x", "value": "0.62x", "pass": True, "source": "core"},
    ...     {"id": "b", "figure": "B", "anchor": "x", "goal": "<= +100 ms", "value": "+3 ms", "pass": True, "source": "core"}])
    >>> [(b.id, b.ratio, b.goal) for b in g.bars], g.left_out
    ([('a', 0.62, 1.05)], [('b', "goal '<= +100 ms' is not a ratio")])
    """
    groups: dict[str, GroupSeries] = {}
    for f in figs:
        g = groups.setdefault(f["source"], GroupSeries(f["source"]))
        goal = ratio_goal(f["goal"])
        value = _RATIO_VALUE.match(f["value"] or "")
        if goal is None:
            g.left_out.append((f["id"], f"goal {f['goal']!r} is not a ratio" if f["goal"] else "informational, no goal"))
        elif value is None:
            g.left_out.append((f["id"], f"value {f['value']!r} is not a ratio"))
        else:
            g.bars.append(Bar(f["id"], f["figure"], f["anchor"], float(value.group(1)), goal, f["pass"]))
    return list(groups.values())


def _matplotlib():
    try:
        import matplotlib
    except ImportError as e:
        raise PlotsUnavailable("the benchmark plots need matplotlib: pip install 'ctfile[bench]'") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw(group: GroupSeries):
    """A matplotlib figure of one group: a bar per figure (the bar container
    labelled ``ratio``) on a log axis, top to bottom in the group's order, the
    goal of each as a vertical tick across its bar (the line collection
    labelled ``goal``), parity (1x) dotted."""
    plt = _matplotlib()
    bars = group.bars
    ys = list(range(len(bars)))[::-1]  # first figure on top
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.42 * len(bars)))
    ax.barh(ys, [b.ratio for b in bars], color=[COLOURS[b.passed] for b in bars], height=0.6, label="ratio")
    ax.vlines([b.goal for b in bars], [y - 0.4 for y in ys], [y + 0.4 for y in ys], colors="black", linewidth=2,
              label="goal")
    ax.axvline(1.0, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("log")
    for y, b in zip(ys, bars):
        # right of the bar or its goal tick, whichever ends further right, so the two never overlap
        ax.annotate(f"{b.ratio:g}x", (max(b.ratio, b.goal), y), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=8)
    ax.set_yticks(ys, [textwrap.shorten(b.label, LABEL_WIDTH, placeholder="...") for b in bars], fontsize=8)
    lo = min(min(b.ratio, b.goal) for b in bars)
    hi = max(max(b.ratio, b.goal) for b in bars)
    left, right = min(lo, 1.0) / 1.5, max(hi, 1.0) * 1.8
    ax.set_xlim(left, right)
    # powers of two read better as ratios than matplotlib's 6x10^-1 log labels
    ticks = [2.0 ** k for k in range(-10, 11) if left <= 2.0 ** k <= right]
    ax.set_xticks(ticks, [f"{t:g}x" for t in ticks])
    ax.xaxis.set_minor_formatter(plt.NullFormatter())
    ax.set_xlabel("ctfile / anchor (log scale); black tick: the goal; red: misses it")
    ax.set_title(f"{group.source}: ctfile vs its anchors")
    fig.tight_layout()
    return fig


def write_plots(figs: list[dict], out_dir: Path) -> list[tuple[GroupSeries, Path | None]]:
    """Each group with bars drawn to ``out_dir/<script>.svg`` (groups without
    bars get None, and lose a plot an earlier report drew); deterministic SVG (fixed hash salt, no date) so an
    unchanged result rewrites the same bytes."""
    plt = _matplotlib()
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[tuple[GroupSeries, Path | None]] = []
    with plt.rc_context({"svg.hashsalt": "ctfile-benchmarks", "svg.fonttype": "none"}):
        for g in plot_series(figs):
            if not g.bars:
                (out_dir / f"{g.source}.svg").unlink(missing_ok=True)
                written.append((g, None))
                continue
            fig = draw(g)
            path = out_dir / f"{g.source}.svg"
            fig.savefig(path, format="svg", metadata={"Date": None}, bbox_inches="tight")
            plt.close(fig)
            written.append((g, path))
    return written
