"""Child process for tests/crash/test_crash_streams.py (not a test module).

Usage: python _crash_consumer.py <source root> <target root> <stream> <point> <marker> [<go> <out>]

Opens the source and the target and consumes the stream into the target
(``stream_log.consume``: ``target.transaction(consuming=stream)``), with
:class:`ctfile.log.streams.StreamStore` / :class:`ctfile.log.storage.LocalStorage`
methods wrapped, in this process only, so that it stops at ``point`` of the
consumption (SPEC §Streams, steps 1-4): it writes the marker file and
sleeps until the parent kills it with SIGKILL, or, given ``go``, until that
file appears, then goes on and writes its outcome to ``out``
(``{"outcome": "committed" | "conflict", ...}``).

Points:
  staged     the target transaction's data files are written; the claim
             state is about to be written (nothing of the stream changed)
  claimed    put_if_absent of the claim state returned; the target's log
             entry is not written
  committed  put_if_absent of the target's log entry returned; the
             resolved state is not written
  resolved   put_if_absent of the resolved state returned
  fenced     (a consumer meeting another's dead claim) put_if_absent of its
             STREAM FENCE commit on the target returned; the state that
             abandons the fenced claim is not written
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

# Run as a script its own directory is on the path; imported by pytest's
# doctest collection (importlib mode) it is not.
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "objectstore"))

from _crash_writer import EXIT_POINT_NOT_REACHED, _hang, _is_commit  # noqa: E402


def _stop(marker: str, point: str, path: str, go: str | None) -> None:
    """Hang at ``point`` until killed, or until ``go`` appears."""
    if go is None:
        _hang(marker, point, path)
    with open(marker + ".tmp", "w") as f:
        json.dump({"pid": os.getpid(), "point": point, "path": path}, f)
    os.replace(marker + ".tmp", marker)
    while not os.path.exists(go):
        time.sleep(0.005)


def install(point: str, marker: str, go: str | None) -> None:
    from ctfile.log.storage import LocalStorage
    from ctfile.log.streams import StreamStore

    orig_write_next = StreamStore.write_next
    orig_put_if_absent = LocalStorage.put_if_absent
    claimed = []

    def write_next(self, state):
        if point == "staged" and state.claim is not None:
            _stop(marker, point, "", go)
        out = orig_write_next(self, state)
        if state.claim is not None:
            claimed.append(state.sequence)
            if point == "claimed":
                _stop(marker, point, "", go)
        elif point == "resolved" and claimed:
            _stop(marker, point, "", go)
        return out

    def put_if_absent(self, path, data):
        orig_put_if_absent(self, path, data)
        if _is_commit(path) and (point == "committed" and claimed or point == "fenced" and not claimed):
            _stop(marker, point, path, go)

    if point not in ("staged", "claimed", "committed", "resolved", "fenced"):
        raise SystemExit(f"unknown point {point!r}")
    StreamStore.write_next = write_next
    LocalStorage.put_if_absent = put_if_absent


def main(argv: list[str]) -> int:
    source_root, target_root, name, point, marker, *rest = argv
    go, out = rest if rest else (None, None)
    install(point, marker, go)

    import ctfile
    import stream_log

    source = ctfile.open_table(source_root)
    target = ctfile.open_table(target_root)
    try:
        r = stream_log.consume(source.stream(name), target)
        result = {"outcome": "committed", "version": r.version}
    except ctfile.CommitConflictError as e:
        result = {"outcome": "conflict", "message": str(e)}
    if out is None:
        print(f"consumption finished without reaching {point}", file=sys.stderr)
        return EXIT_POINT_NOT_REACHED
    with open(out + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(out + ".tmp", out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
