"""Child process for tests/crash/test_crash_commit.py (not a test module).

Usage: python _crash_writer.py <table root> <point> <marker file> <op>

Opens the table, then runs ``op`` ("insert": 8 rows; "update": every row)
with methods of :class:`ctfile.log.storage.LocalStorage` wrapped, in this
process only, so that the writer stops at ``point`` of its commit: it writes
the marker file and sleeps until the parent kills it with SIGKILL.

Points:
  after_first_data_file  the first data file is stored; every other data
                         file put blocks before writing anything
  before_log_put         all data files are stored; the log put has not begun
  log_tmp_written        the log entry's temp file (_ct_log/.tmp-<uuid>) is
                         written and synced; the link to the version file has
                         not happened
  after_log_put          put_if_absent of the version file has returned
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

EXIT_POINT_NOT_REACHED = 3


def _hang(marker: str, point: str, path: str) -> None:
    tmp = marker + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"pid": os.getpid(), "point": point, "path": path}, f)
    os.replace(tmp, marker)  # the parent never sees a half-written marker
    while True:
        time.sleep(3600)


def _is_commit(path: str) -> bool:
    from ctfile.format.paths import parse_commit_name

    return path.startswith("_ct_log/") and parse_commit_name(path.rsplit("/", 1)[-1]) is not None


def install(point: str, marker: str) -> None:
    from ctfile.log.storage import LocalStorage

    orig_put = LocalStorage.put
    orig_put_if_absent = LocalStorage.put_if_absent
    orig_write_tmp = LocalStorage._write_tmp
    lock = threading.Lock()

    if point == "after_first_data_file":

        def put(self, path, data):
            if not path.startswith("data/"):
                return orig_put(self, path, data)
            # Writers run on thread pools: the lock is held while hanging, so
            # no other data file gets written after the first one.
            with lock:
                orig_put(self, path, data)
                _hang(marker, point, path)

        LocalStorage.put = put
    elif point == "before_log_put":

        def put_if_absent(self, path, data):
            if _is_commit(path):
                _hang(marker, point, path)
            return orig_put_if_absent(self, path, data)

        LocalStorage.put_if_absent = put_if_absent
    elif point == "log_tmp_written":

        def _write_tmp(self, path, data):
            tmp = orig_write_tmp(self, path, data)
            if _is_commit(path):
                _hang(marker, point, tmp)
            return tmp

        LocalStorage._write_tmp = _write_tmp
    elif point == "after_log_put":

        def put_if_absent(self, path, data):
            orig_put_if_absent(self, path, data)
            if _is_commit(path):
                _hang(marker, point, path)

        LocalStorage.put_if_absent = put_if_absent
    else:
        raise SystemExit(f"unknown point {point!r}")


def main(argv: list[str]) -> int:
    root, point, marker, op = argv
    install(point, marker)

    import pyarrow as pa
    import pyarrow.compute as pc

    import ctfile

    table = ctfile.open_table(root)
    if op == "insert":
        uids = list(range(100, 108))
        table.insert(
            pa.table(
                {"uid": uids, "k": [u % 3 for u in uids], "v": [f"new{u}" for u in uids]},
                schema=table.schema,
            )
        )
    elif op == "update":
        table.update(pc.field("uid") >= 0, {"v": "updated"})
    else:
        raise SystemExit(f"unknown op {op!r}")
    print(f"{op} finished without reaching {point}", file=sys.stderr)
    return EXIT_POINT_NOT_REACHED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
