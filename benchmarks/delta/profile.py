"""``bench_delta.py --profile TARGET``: ctfile's side of one figure under a
profiler instead of timed.

pyinstrument samples the main thread only; a change scan decodes partitions
on a thread pool, so ``--profile-tool py-spy`` (all threads, native frames)
shows where its CPU goes: the script runs itself again under ``py-spy
record`` with ``--profile-tool none``, and :func:`_py_spy_summary` condenses
the raw stacks. ``--profile-capture`` profiles the capture-on table instead
of the capture-off one. The report goes to ``<out dir>/profiles/``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from delta.dml import DML_OPS
from delta.history import clone_table, history_steps, timed_step_index, version_key
from delta.scans import SCAN_OPS
from delta.sides import Ctfile
from _timing import quiesce

PROFILE_TARGETS = DML_OPS + ["append", "mindelta"] + [f"scan-{op}" for op in SCAN_OPS]


class _NoProfiler:
    def start(self):
        pass

    def stop(self):
        pass


def _py_spy_summary(raw: Path, top: int = 60) -> str:
    """Inclusive share of samples per frame, over all threads, from py-spy's
    raw (collapsed stack) output."""
    import collections
    import re

    total = 0
    incl: collections.Counter = collections.Counter()
    leaf: collections.Counter = collections.Counter()

    def norm(frame: str) -> str:
        m = re.match(r"^(.*) \(([^()]*)\)$", frame)
        if not m:
            return frame[:100]
        name, loc = m.groups()
        return f"{name[:90]} [{re.sub(r':[0-9]+$', '', loc).split('/')[-1]}]"

    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = [norm(f) for f in stack.split(";")]
        # The main thread's start-up (imports, loading the workload) is not
        # what is profiled; other threads (the scan's pool) are.
        if "main [bench_delta.py]" in frames and "profile [delta/profile.py]" not in frames:
            continue
        total += int(n)
        for f in set(frames):
            incl[f] += int(n)
        leaf[frames[-1]] += int(n)
    lines = [f"py-spy --native, all threads (main thread from profile() on): {total} samples", "",
             "inclusive (share of all samples):"]
    lines += [f"{100 * n / total:5.1f}%  {f}" for f, n in incl.most_common(top)]
    lines += ["", "self (leaf frames):"]
    lines += [f"{100 * n / total:5.1f}%  {f}" for f, n in leaf.most_common(top // 2)]
    return "\n".join(lines) + "\n"


def _run_py_spy(out: Path) -> Path:
    import subprocess

    raw = out.with_suffix(".raw")
    spy = Path(sys.executable).with_name("py-spy")
    argv = [a for a in sys.argv[1:] if not a.startswith("--profile-tool")]
    if "--profile-tool" in sys.argv:  # the separate-value form
        i = sys.argv.index("--profile-tool")
        argv = sys.argv[1:i] + sys.argv[i + 2:]
    script = Path(__file__).resolve().parents[1] / "bench_delta.py"
    cmd = [str(spy if spy.exists() else "py-spy"), "record", "--native", "--format", "raw", "-r", "200",
           "-o", str(raw), "--", sys.executable, str(script), *argv, "--profile-tool", "none"]
    subprocess.run(cmd, check=True)
    out.write_text(_py_spy_summary(raw))
    return out


def _profile_dml(args, root: Path, w: dict, key: str, prof) -> None:
    target = args.profile
    side = Ctfile(w, capture=key == "cc")
    _, rnd = history_steps(args.rounds)[timed_step_index(args.rounds)[target]]
    for n in range(2):  # warm-up, then the profiled run
        d = root / "profile-scratch" / f"{target}-{n}"
        shutil.rmtree(d, ignore_errors=True)
        clone_table(root / "pre" / target / key, d)
        t = side.open(d)
        quiesce()
        if n:
            prof.start()
        res = side.step(t, target, rnd)
        if target != "COMPACT":
            side.scan(t, res["version"], res["version"])
        if n:
            prof.stop()
        shutil.rmtree(d, ignore_errors=True)


def _profile_scan(args, root: Path, info: dict, key: str, prof) -> None:
    target = args.profile
    side = Ctfile({})
    t = side.open(root / key)
    ver = info["versions"]
    if target.startswith("scan-"):
        v = ver[version_key(target[len("scan-"):], args.rounds)][key]
        fn = lambda: side.scan(t, v, v)  # noqa: E731
    elif target == "append":
        v = ver[f"RF1{args.rounds - 1}"][key]
        fn = lambda: side.scan(t, v, v, "append_only")  # noqa: E731
    else:
        fn = lambda: side.scan(t, ver["RF10"][key], ver["MERGE"][key])  # noqa: E731
    fn()
    prof.start()
    for _ in range(20 if target == "append" else 3):
        fn()
    prof.stop()


def profile(args, root: Path, info: dict, w: dict) -> Path:
    """Run ctfile's side of one figure under a profiler; write a text report."""
    key = "cc" if args.profile_capture else "ct"
    suffix = "-capture" if args.profile_capture else ""
    out = args.out.parent / "profiles" / f"delta-{args.profile}{suffix}-sf{args.sf:g}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.profile_tool == "py-spy":
        return _run_py_spy(out)
    if args.profile_tool == "pyinstrument":
        from pyinstrument import Profiler

        prof = Profiler(interval=0.001)
    else:
        prof = _NoProfiler()
    if args.profile in DML_OPS:
        _profile_dml(args, root, w, key, prof)
    else:
        _profile_scan(args, root, info, key, prof)
    if not isinstance(prof, _NoProfiler):
        out.write_text(prof.output_text(unicode=False, color=False, show_all=False))
    return out
