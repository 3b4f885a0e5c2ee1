"""Child process for tests/spark/test_derived_crash.py (not a test module).

Usage: python _derived_child.py <derived uri> <point> <marker> [<go> <out>] [<storage options JSON>]

Refreshes the derived table with :class:`ctfile.log.storage.LocalStorage`
and :class:`ctfile.log.object_store.FsspecStorage` ``put_if_absent``
wrapped, in this process only, so that the refresh stops at ``point``: it
writes the marker file and sleeps until the parent kills it with SIGKILL,
or, given ``go``, until that file appears, then goes on and writes the
refresh result to ``out``.

Points (SPEC §Derived tables, a refresh's steps):
  before_commit  the MERGE's files are written; the derived table's log
                 entry (rows, frontier and refresh info) is about to be put
  after_commit   put_if_absent of that entry returned; the sources'
                 retention streams have not moved
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _stop(marker: str, point: str, go: str | None) -> None:
    with open(marker + ".tmp", "w") as f:
        json.dump({"pid": os.getpid(), "point": point}, f)
    os.replace(marker + ".tmp", marker)
    while go is None or not os.path.exists(go):
        time.sleep(0.005 if go else 3600)


def install(derived_uri: str, point: str, marker: str, go: str | None) -> None:
    from ctfile.format.paths import parse_commit_name
    from ctfile.log.object_store import FsspecStorage
    from ctfile.log.storage import LocalStorage

    root = derived_uri.split("://", 1)[-1].rstrip("/")

    def ours(storage, path: str) -> bool:
        is_commit = path.startswith("_ct_log/") and parse_commit_name(path.rsplit("/", 1)[-1]) is not None
        return is_commit and str(storage.root).rstrip("/").endswith(root.lstrip("/"))

    for cls in (LocalStorage, FsspecStorage):
        orig = cls.put_if_absent

        def put_if_absent(self, path, data, _orig=orig):
            if point == "before_commit" and ours(self, path):
                _stop(marker, point, go)
            _orig(self, path, data)
            if point == "after_commit" and ours(self, path):
                _stop(marker, point, go)

        cls.put_if_absent = put_if_absent


def main(argv: list[str]) -> int:
    uri, point, marker, *rest = argv
    go, out, options = (rest + [None, None, None])[:3]
    if point not in ("before_commit", "after_commit"):
        raise SystemExit(f"unknown point {point!r}")
    install(uri, point, marker, go)
    from spark_helpers import build_session

    from ctfile.spark import derived

    spark = build_session("ctfile-derived-child")
    t = derived.open(spark, uri, storage_options=json.loads(options) if options else None)
    r = t.refresh()
    if out is None:
        print(f"refresh finished without reaching {point}: {r}", file=sys.stderr)
        return 3
    with open(out + ".tmp", "w") as f:
        json.dump({"action": r.action.value, "version": r.version, "reason": r.reason}, f)
    os.replace(out + ".tmp", out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
