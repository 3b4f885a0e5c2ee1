"""Crash injection at each step of a commit (SPEC §Commit protocol).

A writer runs in a child process (``_crash_writer.py``) against a table this
test created. The child wraps ``LocalStorage`` methods in its own process so
that it stops at one point of the commit, writes a marker file and sleeps; the
test then kills it with SIGKILL and checks what a reader and the next writer
see:

* before the version file is linked into place, the crashed commit is
  invisible: the table opens at its last committed version with exactly the
  pre-crash content (hidden columns included), no version file exists for the
  crashed commit, the data files it wrote are orphans (in ``data/`` but named
  by no add action), and the next commit takes the next version (versions
  stay dense);
* once ``put_if_absent`` of the version file has returned, the commit is
  fully visible, although the writer never returned.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.actions import AddPartition, CommitInfo
from ctfile.format.codec import decode_actions
from ctfile.format.paths import DATA_DIR, LOG_DIR, commit_path

HELPER = Path(__file__).with_name("_crash_writer.py")
MARKER_DEADLINE_S = 30.0
SCHEMA = pa.schema(
    [pa.field("uid", pa.int64(), nullable=False), pa.field("k", pa.int64()), pa.field("v", pa.string())]
)
PARTITION_ROWS = 2
# Files the child's statement writes: insert of 8 rows / rewrite of the 3
# partitions of the 6 pre-crash rows, at 2 rows per partition.
FILES_WRITTEN = {"insert": 4, "update": 3}


def rows(table: ctfile.Table, version: int | None = None) -> list[tuple]:
    t = table.snapshot(version).to_arrow(include_hidden=True)
    cols = ["uid", "k", "v", ctfile.ROW_ID_COLUMN, ctfile.ROW_VERSION_COLUMN]
    return sorted(zip(*(t.column(c).to_pylist() for c in cols)))


def data_files(root: Path) -> set[str]:
    return {f"{DATA_DIR}/{n}" for n in os.listdir(root / DATA_DIR) if n.endswith(".parquet") and not n.startswith(".")}


def referenced_files(table: ctfile.Table) -> set[str]:
    """Every data file any version of the log adds."""
    out = set()
    for v in range(table.version + 1):
        out.update(a.path for a in table.log.read_entry(v) if isinstance(a, AddPartition))
    return out


def log_tmp_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / LOG_DIR).iterdir() if p.name.startswith(".tmp-"))


@pytest.fixture
def table(tmp_path) -> ctfile.Table:
    """6 rows in 3 partitions at version 1, one of them updated at version 2."""
    t = ctfile.create_table(tmp_path / "t", SCHEMA, partition_rows=PARTITION_ROWS)
    t.insert(pa.table({"uid": range(6), "k": [0, 1, 2, 0, 1, 2], "v": list("abcdef")}, schema=SCHEMA))
    t.update(pc.field("uid") == 4, {"v": "E"})
    assert t.version == 2 and len(t.snapshot().partitions) == 3
    return t


def run_child_until(root: Path, point: str, op: str, workdir: Path) -> dict:
    """Start the writer, wait for it to reach ``point``, SIGKILL it.

    Returns the marker's content. Never leaves the child running.
    """
    marker = workdir / f"marker-{point}-{op}.json"
    err_path = workdir / f"child-{point}-{op}.err"
    src = str(Path(ctfile.__file__).resolve().parents[1])  # the ctfile this test imports
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(HELPER), str(root), point, str(marker), op],
            stdout=subprocess.DEVNULL, stderr=err, env=env,
        )
    try:
        deadline = time.monotonic() + MARKER_DEADLINE_S
        while not marker.exists():
            if proc.poll() is not None:
                pytest.fail(
                    f"writer exited with {proc.returncode} before reaching {point}:\n"
                    + err_path.read_text(errors="replace")
                )
            if time.monotonic() > deadline:
                pytest.fail(f"writer did not reach {point} within {MARKER_DEADLINE_S}s:\n" + err_path.read_text(errors="replace"))
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=MARKER_DEADLINE_S)
        assert proc.returncode == -signal.SIGKILL
        return json.loads(marker.read_text())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=MARKER_DEADLINE_S)


def expected_after_commit(pre: list[tuple], op: str, version: int) -> list[tuple]:
    """Content of the child's commit as a model (row ids of new rows unknown: None)."""
    if op == "update":
        return sorted((u, k, "updated", rid, version) for u, k, _, rid, _ in pre)
    new = [(u, u % 3, f"new{u}", None, version) for u in range(100, 108)]
    return sorted(pre + new, key=lambda r: r[0])


def strip_new_ids(got: list[tuple], pre_ids: set[int]) -> list[tuple]:
    """Replace row ids not seen before with None (compared separately)."""
    return sorted(((u, k, v, rid if rid in pre_ids else None, rv) for u, k, v, rid, rv in got), key=lambda r: r[0])


@pytest.mark.parametrize("op", ["insert", "update"])
@pytest.mark.parametrize("point", ["after_first_data_file", "before_log_put", "log_tmp_written"])
def test_crash_before_version_file_is_invisible(table, tmp_path, point, op):
    root = Path(table.uri)
    pre_version = table.version
    pre_rows = rows(table)
    pre_data = data_files(root)

    marker = run_child_until(root, point, op, tmp_path)

    # A reader opening the table afterwards sees the last committed version.
    t = ctfile.open_table(root)
    assert t.version == pre_version
    assert rows(t) == pre_rows
    assert not (root / commit_path(pre_version + 1)).exists()
    assert t.log.list().commits == list(range(pre_version + 1))

    # The files the crashed commit wrote are orphans: present, unreferenced,
    # all named by one transaction id.
    referenced = referenced_files(t)
    assert pre_data <= referenced
    orphans = data_files(root) - referenced
    n_expected = 1 if point == "after_first_data_file" else FILES_WRITTEN[op]
    assert len(orphans) == n_expected, (point, op, sorted(orphans))
    assert len({name.split("-")[1] for name in orphans}) == 1, orphans
    assert not [n for n in os.listdir(root / DATA_DIR) if n.startswith(".tmp-")]

    tmps = log_tmp_files(root)
    if point == "log_tmp_written":
        # The child died between writing the entry's temp file and linking
        # it: the complete entry is there, under a name no reader looks at.
        assert [str(p) for p in tmps] == [marker["path"]]
        entry = decode_actions(tmps[0].read_bytes(), where=str(tmps[0]))
        info = next(a for a in entry if isinstance(a, CommitInfo))
        assert info.read_version == pre_version
        assert {a.path for a in entry if isinstance(a, AddPartition)} == orphans
    else:
        assert tmps == []

    # The next commit succeeds at the next version; the orphans stay out.
    result = t.insert(pa.table({"uid": [900], "k": [9], "v": ["after"]}, schema=SCHEMA))
    assert result.committed and result.version == pre_version + 1
    fresh = ctfile.open_table(root)
    assert fresh.version == pre_version + 1
    assert fresh.log.list().commits == list(range(pre_version + 2))
    got = rows(fresh)
    assert [r for r in got if r[0] != 900] == pre_rows
    assert [r[:3] + r[4:] for r in got if r[0] == 900] == [(900, 9, "after", pre_version + 1)]
    assert len({r[3] for r in got}) == len(got)
    assert not (orphans & referenced_files(fresh))
    assert rows(fresh, pre_version) == pre_rows


@pytest.mark.parametrize("op", ["insert", "update"])
def test_crash_after_version_file_is_visible(table, tmp_path, op):
    root = Path(table.uri)
    pre_version = table.version
    pre_rows = rows(table)
    pre_ids = {r[3] for r in pre_rows}

    run_child_until(root, "after_log_put", op, tmp_path)

    t = ctfile.open_table(root)
    assert t.version == pre_version + 1
    assert t.log.list().commits == list(range(pre_version + 2))
    assert log_tmp_files(root) == []
    got = rows(t)
    assert strip_new_ids(got, pre_ids) == expected_after_commit(pre_rows, op, pre_version + 1)
    ids = [r[3] for r in got]
    assert len(set(ids)) == len(ids)
    if op == "update":
        assert set(ids) == pre_ids  # updates keep row ids
    assert rows(t, pre_version) == pre_rows
    # Nothing the child wrote is an orphan: its whole commit is referenced.
    assert data_files(root) == referenced_files(t)
    info = t.log.commit_info(pre_version + 1)
    assert info.operation == op.upper() and info.read_version == pre_version

    # And the table goes on: the next commit follows densely.
    result = t.insert(pa.table({"uid": [900], "k": [9], "v": ["after"]}, schema=SCHEMA))
    assert result.version == pre_version + 2
    assert ctfile.open_table(root).log.list().commits == list(range(pre_version + 3))
