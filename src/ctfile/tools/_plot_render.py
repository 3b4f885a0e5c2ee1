"""Drawing the series of :mod:`~ctfile.tools.pictures` with matplotlib, the
optional extra ``ctfile[plot]``: imported here only, when a ``--plot`` asks
for it, so the core install and every other command go without it.

Figures are built as ``matplotlib.figure.Figure`` objects, never through
``pyplot``: no display, no global figure registry, and saving picks the
non-interactive Agg (PNG) or SVG backend by format. Each ``*_figure``
function returns the Figure, so tests read its artists (lines, bars,
markers, labels) rather than pixels; :func:`save` writes it as PNG, SVG, or
an HTML page with the SVG inline.
"""

from __future__ import annotations

import datetime as dt
import decimal
import html
import io
from pathlib import Path
from typing import Any, Sequence

from ctfile.tools.derived_pictures import ACTIONS, DerivedSeries
from ctfile.tools.pictures import CommitKind, HistorySeries, LayoutSeries, PlotFormat

MISSING_EXTRA = "--plot needs matplotlib: pip install 'ctfile[plot]'"
#: The colour map of the layout's versions (old: dark, new: bright).
LAYOUT_CMAP = "viridis"
# Marker and colour of each commit kind in the history's commit strip.
_KIND_STYLE = {
    CommitKind.CREATE: ("*", "tab:gray"),
    CommitKind.DATA: ("o", "tab:blue"),
    CommitKind.COMPACTION: ("s", "tab:orange"),
    CommitKind.METADATA: ("D", "tab:purple"),
}
SCHEMA_CHANGE_LABEL = "schema change"
# String bounds are drawn at their rank; at most this many are named on the axis.
_MAX_TICKS = 12


class PlotExtraMissing(Exception):
    """matplotlib is not installed (the ``ctfile[plot]`` extra)."""


def load_matplotlib() -> Any:
    """The ``matplotlib`` module, or :class:`PlotExtraMissing` with the one
    line telling how to install it."""
    try:
        import matplotlib
        import matplotlib.figure  # noqa: F401  (the part the figures need)
    except ImportError as e:
        raise PlotExtraMissing(MISSING_EXTRA) from e
    return matplotlib


# ---------------------------------------------------------------- history


def history_figure(s: HistorySeries) -> Any:
    """Four panels over the versions: live rows and bytes after each;
    partitions added (up) and removed (down); rows inserted, updated,
    deleted; the kind of each commit and the schema changes."""
    mpl = load_matplotlib()
    from matplotlib.ticker import MaxNLocator

    fig = mpl.figure.Figure(figsize=(10, 9), layout="constrained")
    ax_live, ax_parts, ax_rows, ax_kind = fig.subplots(4, 1, sharex=True, height_ratios=[3, 2, 2, 1.6])
    fig.suptitle(f"history of {s.uri}")
    x = list(s.versions)

    ax_live.plot(x, s.live_rows, marker="o", color="tab:blue", label="live rows")
    ax_live.set_ylabel("rows")
    ax_bytes = ax_live.twinx()
    ax_bytes.plot(x, s.live_bytes, marker="s", linestyle="--", color="tab:red", label="live bytes")
    ax_bytes.set_ylabel("bytes")
    ax_live.legend(handles=ax_live.lines + ax_bytes.lines, loc="upper left", fontsize="small")
    ax_live.set_title("after each version", fontsize="medium", loc="left")

    ax_parts.bar(x, s.partitions_added, color="tab:green", label="partitions added")
    ax_parts.bar(x, [-n for n in s.partitions_removed], color="tab:brown", label="partitions removed")
    ax_parts.axhline(0, color="black", linewidth=0.5)
    ax_parts.set_ylabel("partitions")
    ax_parts.legend(loc="upper left", fontsize="small")

    width = 0.27
    for offset, values, label, colour in (
        (-width, s.rows_inserted, "rows inserted", "tab:green"),
        (0.0, s.rows_updated, "rows updated", "tab:orange"),
        (width, s.rows_deleted, "rows deleted", "tab:red"),
    ):
        ax_rows.bar([v + offset for v in x], values, width=width, color=colour, label=label)
    ax_rows.set_ylabel("rows (metrics)")
    ax_rows.legend(loc="upper left", fontsize="small")

    _commit_strip(ax_kind, s)
    ax_kind.set_xlabel("version")
    for ax in (ax_live, ax_parts, ax_rows, ax_kind):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return fig


def _commit_strip(ax: Any, s: HistorySeries) -> None:
    """One row of markers per commit kind, one for the schema changes, and
    what the history says of vacuums in the title."""
    rows = [*CommitKind, None]  # None: the schema-change row
    for y, kind in enumerate(rows):
        xs, marker, colour, label = _strip_row(s, kind)
        ax.scatter(xs, [y] * len(xs), marker=marker, color=colour, label=label)
    ax.set_yticks(range(len(rows)), [k.value if k else SCHEMA_CHANGE_LABEL for k in rows], fontsize="small")
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_title(f"commit kind; {_vacuum_note(s)}", fontsize="small", loc="left")


def _strip_row(s: HistorySeries, kind: CommitKind | None) -> tuple[list[int], str, str, str]:
    """The versions, marker, colour and label of the row of commits of
    ``kind`` (None: of the commits that changed the schema)."""
    if kind is None:
        xs = [v for v, changed in zip(s.versions, s.schema_changed) if changed]
        return xs, "v", "tab:red", SCHEMA_CHANGE_LABEL
    xs = [v for v, k in zip(s.versions, s.kinds) if k is kind]
    marker, colour = _KIND_STYLE[kind]
    return xs, marker, colour, kind.value


def _vacuum_note(s: HistorySeries) -> str:
    """What the history says of vacuums (which write no log entry)."""
    if s.expired_before is not None:
        return f"vacuum writes no log entry; versions before {s.expired_before} were expired by one"
    return "vacuum writes no log entry; none expired this history"


# ---------------------------------------------------------------- layout


def _positions(values: Sequence[Any]) -> tuple[list[float], dict[float, str] | None, bool]:
    """Bounds as x positions: numbers as they are, dates and timestamps as
    matplotlib date numbers (third item True), anything else (strings) as
    its rank among the distinct values, with the names of the ranks."""
    if all(isinstance(v, (int, float, decimal.Decimal)) for v in values):
        return [float(v) for v in values], None, False
    if all(isinstance(v, (dt.date, dt.datetime)) for v in values):
        from matplotlib.dates import date2num

        return [float(date2num(v)) for v in values], None, True
    return (*_ranks(values), False)


def _ranks(values: Sequence[Any]) -> tuple[list[float], dict[float, str]]:
    """Each value's rank among the distinct values, and the names of at
    most about :data:`_MAX_TICKS` ranks, evenly spaced."""
    distinct = sorted(set(values))
    rank = {v: float(i) for i, v in enumerate(distinct)}
    step = max(1, len(distinct) // _MAX_TICKS)
    return [rank[v] for v in values], {rank[v]: str(v) for v in distinct[::step]}


def layout_figure(s: LayoutSeries) -> Any:
    """One horizontal bar per partition with bounds, from its minimum to its
    maximum of ``s.column``, sorted by minimum (y: the partition's place),
    coloured by the version that wrote it (the colour bar), the clustering
    depth in the title. A partition whose bounds are equal is a bar of no
    width, drawn as a line by its edge."""
    mpl = load_matplotlib()
    n = len(s.bars)
    fig = mpl.figure.Figure(figsize=(10, min(30, max(3.5, 2 + 0.22 * n))), layout="constrained")
    ax = fig.subplots()
    ax.set_title(_layout_title(s), fontsize="medium")
    ax.set_xlabel(s.column)
    ax.set_ylabel("partition (sorted by minimum)")
    if n:
        _draw_bars(fig, ax, s)
    return fig


def _layout_title(s: LayoutSeries) -> str:
    """The table, version, column, clustering depth and partitions not drawn."""
    depth = "no partition has bounds" if s.depth is None else f"clustering depth {s.depth:.2f}"
    unbounded = f"; {len(s.unbounded)} partitions without bounds, not drawn" if s.unbounded else ""
    return f"{s.uri} version {s.version}: {len(s.bars)} partitions by {s.column} ({depth}{unbounded})"


def _draw_bars(fig: Any, ax: Any, s: LayoutSeries) -> None:
    """The bars of :func:`layout_figure` (at least one), their axes and colour bar."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.ticker import MaxNLocator

    n = len(s.bars)
    xs, names, dates = _positions([b.low for b in s.bars] + [b.high for b in s.bars])
    lows, highs = xs[:n], xs[n:]
    versions = [b.version for b in s.bars]
    sm = ScalarMappable(norm=Normalize(vmin=min(versions), vmax=max(versions)), cmap=LAYOUT_CMAP)
    colours = [sm.to_rgba(v) for v in versions]
    ax.barh(
        range(n), [hi - lo for lo, hi in zip(lows, highs)], left=lows, height=0.8,
        color=colours, edgecolor=colours, linewidth=2, label="partitions",
    )
    ax.set_ylim(-0.6, n - 0.4)
    # Padded by hand: bars are sticky at their left edge, so margins would
    # hide a bar of no width at the low end of the range.
    pad = 0.05 * (max(highs) - min(lows)) or 0.5
    ax.set_xlim(min(lows) - pad, max(highs) + pad)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if dates:
        ax.xaxis_date()
    if names is not None:
        ax.set_xticks(list(names), list(names.values()), rotation=30, ha="right", fontsize="small")
    fig.colorbar(sm, ax=ax, label="version that wrote the partition")


# ---------------------------------------------------------------- derived tables

#: The colour of each refresh action (``ctfile derived show --plot``).
ACTION_COLOURS = {"NO_DATA": "tab:gray", "INCREMENTAL": "tab:green", "FULL": "tab:orange", "REINITIALIZE": "tab:red"}
TARGET_LAG_LABEL = "target lag"


def _when(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)


def derived_figure(s: DerivedSeries) -> Any:
    """Two panels over time (UTC): the lag behind each source against the
    target lag (a dashed line; none drawn for no lag or ``downstream``),
    and each refresh's duration as a stem coloured by its action."""
    mpl = load_matplotlib()
    fig = mpl.figure.Figure(figsize=(10, 7), layout="constrained")
    ax_lag, ax_took = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    fig.suptitle(f"derived table {s.uri}")
    for src in s.sources:
        if src.times_ms:
            ax_lag.plot([_when(t) for t in src.times_ms], src.lags_s, label=f"lag behind {src.name}")
    if s.target_lag_s is not None:
        ax_lag.axhline(s.target_lag_s, color="black", linestyle="--", label=f"{TARGET_LAG_LABEL} ({s.target_lag})")
    missing = [f"{x.name}: {x.problem}" for x in s.sources if x.problem]
    note = "" if s.target_lag_s is not None else f"; target lag: {s.target_lag or 'none'}"
    ax_lag.set_title("lag behind each source (s)" + note + (f"; not drawn: {'; '.join(missing)}" if missing else ""),
                     fontsize="small", loc="left")
    ax_lag.set_ylabel("seconds")
    ax_lag.legend(loc="best", fontsize="small")
    _refresh_stems(ax_took, s)
    return fig


def _refresh_stems(ax: Any, s: DerivedSeries) -> None:
    """Each refresh's duration, coloured by action (one legend entry per
    action, the four listed whether or not the log holds one)."""
    for action in ACTIONS:
        points = [r for r in s.refreshes if r.action == action and r.duration_ms is not None]
        xs, ys = [_when(r.time_ms) for r in points], [r.duration_ms / 1000 for r in points]
        colour = ACTION_COLOURS[action]
        ax.vlines(xs, 0, ys, color=colour)
        ax.scatter(xs, ys, color=colour, label=action)
    unknown = sum(1 for r in s.refreshes if r.duration_ms is None)
    tail = f"; {unknown} without a recorded duration" if unknown else ""
    ax.set_title(f"refresh durations (s), by action; NO_DATA refreshes commit nothing{tail}", fontsize="small",
                 loc="left")
    ax.set_ylabel("seconds")
    ax.set_xlabel("time (UTC)")
    ax.legend(loc="upper left", fontsize="small")


# ---------------------------------------------------------------- files


def save(fig: Any, path: str | Path, fmt: PlotFormat, *, title: str) -> None:
    """Write ``fig`` to ``path`` as ``fmt``; HTML is a page holding the SVG
    inline (no file beside it, no script)."""
    if fmt is not PlotFormat.HTML:
        fig.savefig(path, format=fmt.value.lstrip("."))
        return
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and doctype: not allowed inside HTML
    page = (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{html.escape(title)}</title>\n</head>\n<body>\n{svg}</body>\n</html>\n"
    )
    Path(path).write_text(page, encoding="utf-8")
