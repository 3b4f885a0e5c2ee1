"""What the read-time damage check costs: the same read with the check on
(every data file read whole, its length and XXH3-128 compared with its
``add`` action, once per file per read) and off
(:func:`ctfile.reader.integrity.unchecked_reads`, ranged reads as before
the check existed), timed in alternation by :func:`_timing.interleaved`.
Used by ``bench_core.py --only scan`` (snapshot scans) and
``bench_changes.py --only check`` (a change scan); the goal is at most 3%.

On a shared machine the runs of one read spread by tens of percent, more
than the effect measured, so the ratio of medians alone can land either
side of the goal by chance. The same rounds therefore also time the check
alone: reading and hashing the read's files on one thread
(``DataFiles.fetch`` of each, as the first open in a read does). That is
the work the check adds, or more (a checked read decodes its first open of
a file from those bytes instead of reading ranges again), and being short
and single-threaded its share of the unchecked read (``check_share``) is
the steadier estimate of the cost.
"""

from __future__ import annotations

from statistics import median

from _timing import interleaved

GOAL = 1.03


def checked_vs_unchecked(read, runs: int, *, storage, partitions, others: dict | None = None) -> dict:
    """Time ``read()`` checked and unchecked, the check alone of
    ``partitions`` (the files the read opens, on ``storage``), and
    ``others`` (informational callables), in the same rounds, ``runs`` times
    each after a warm-up.

    Returns the medians (ms, wall and CPU), their ratios to the unchecked
    read, ``check_share`` (check alone / unchecked) and ``pass`` (checked /
    unchecked <= :data:`GOAL`).
    """
    from ctfile.reader.integrity import DataFiles, unchecked_reads

    def unchecked():
        with unchecked_reads():
            read()

    def check_alone():
        files = DataFiles(storage)
        for p in partitions:
            files.fetch(p).close()

    fns = {"checked": read, "unchecked": unchecked, "check alone": check_alone, **(others or {})}
    wall, cpu = interleaved(fns, runs)
    med = {k: median(v) * 1e3 for k, v in wall.items()}
    cmed = {k: median(v) * 1e3 for k, v in cpu.items()}
    ratio = med["checked"] / med["unchecked"]
    return {
        "runs": runs,
        "ms": med,
        "cpu_ms": cmed,
        "ratio": ratio,
        "cpu_ratio": cmed["checked"] / cmed["unchecked"],
        "files": len(partitions),
        "file_bytes": sum(p.size_bytes for p in partitions),
        "check_share": med["check alone"] / med["unchecked"],
        "ratios_vs_unchecked": {k: v / med["unchecked"] for k, v in med.items()},
        "runs_ms": {k: [x * 1e3 for x in v] for k, v in wall.items()},
        "cpu_runs_ms": {k: [x * 1e3 for x in v] for k, v in cpu.items()},
        "pass": ratio <= GOAL,
    }


def markdown_rows(rows: dict[str, dict], *, goal: set[str]) -> list[str]:
    """A table of :func:`checked_vs_unchecked` results keyed by a label;
    the labels in ``goal`` are held to :data:`GOAL`, the others are
    informational."""
    out = [
        f"| read | files (MB) | checked ms | unchecked ms | ratio (goal <= {GOAL:.2f}) | CPU ratio | check alone ms (share) | other reads in the same rounds |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for label, r in rows.items():
        status = ("ok" if r["pass"] else "MISS") if label in goal else "informational"
        others = ", ".join(
            f"{k} {v:.1f} ms ({r['ratios_vs_unchecked'][k]:.2f}x)" for k, v in r["ms"].items()
            if k not in ("checked", "unchecked", "check alone")
        )
        out.append(
            f"| {label} | {r['files']} ({r['file_bytes'] / 1e6:.1f}) | {r['ms']['checked']:.1f} | {r['ms']['unchecked']:.1f} | "
            f"{r['ratio']:.3f} {status} | {r['cpu_ratio']:.3f} | {r['ms']['check alone']:.1f} ({100 * r['check_share']:.1f}%) | {others} |"
        )
    return out
