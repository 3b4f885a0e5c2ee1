"""Timing helpers shared by the benchmark scripts.

The machines these run on are shared and noisy, so the scripts compare
ctfile with its anchor by alternating them within one process
(:func:`interleaved`) and report ratios of medians; :func:`quiesce` keeps
one run's dirty pages from being billed to the next.
"""

from __future__ import annotations

import gc
import os
import time
from typing import Callable


def interleaved(
    fns: dict, runs: int, *, before_round: Callable[[], None] | None = None,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Time each zero-argument callable ``runs`` times, in alternation.

    One untimed warm-up call of each first; then in run i the order is the
    list rotated by i, so no callable always runs first (or right after the
    same neighbour). ``before_round``, if given, is called (untimed) before
    the warm-up and before every round: the work each round's callables then
    consume, such as new commits for change consumers. Returns (wall seconds,
    CPU seconds) per callable; CPU time is ``time.process_time`` (all threads
    of this process), a cross-check that is less sensitive than wall time to
    other load on the machine.
    """
    names = list(fns)
    if before_round is not None:
        before_round()
    for n in names:
        fns[n]()
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    for i in range(runs):
        if before_round is not None:
            before_round()
        for n in names[i % len(names):] + names[: i % len(names)]:
            gc.collect()
            c0, t0 = time.process_time(), time.perf_counter()
            fns[n]()
            wall[n].append(time.perf_counter() - t0)
            cpu[n].append(time.process_time() - c0)
    return wall, cpu


def quiesce() -> None:
    """Flush dirty pages of earlier work so they are not billed to the next timed run."""
    if hasattr(os, "sync"):
        os.sync()
    gc.collect()


def save_and_print(out, result: dict, markdown, *, quiet: bool) -> int:
    """Write a script's ``result`` as JSON to ``out`` (a Path) and, unless
    ``quiet``, print ``markdown(result)``; the script's exit code."""
    import json

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    if not quiet:
        print(markdown(result))
    return 0
