"""Two refreshes of one derived table in separate processes (SPEC §Derived
tables, isolation): both read the same version and stage their rows; the one
released first commits, the other fails with CommitConflictError naming the
winner (a refresh holds a ``metadata`` action, so it is never rebased), and
the table holds the winner's rows and frontier only. On local disk and on the
S3 server (moto); each commit is released only after the other finished, as
in ``test_restore_concurrency.py``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

import _refresher
import ctfile
import procs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "table"))
from derived_support import make_pair  # noqa: E402

DEADLINE_S = 300


class _Refresher(procs.Child):
    """``_refresher.py``'s job in a forked child of the pre-loaded forkserver."""

    def __init__(self, job: dict):
        # Not super().__init__: that starts a _writer child.
        self._p = procs.context().Process(target=_refresher.run, args=(json.dumps(job),), daemon=True)
        self._p.start()
        self.pid = self._p.pid


def _prepared_child(job: dict, out: Path) -> _Refresher:
    child = _Refresher(job)
    deadline = time.monotonic() + DEADLINE_S
    while not Path(f"{out}.ready").exists():
        assert child.poll() is None and time.monotonic() < deadline, out.read_text() if out.exists() else "no output"
        time.sleep(0.01)
    return child


def _refresh_info(source: ctfile.Table) -> ctfile.RefreshInfo:
    v = source.version
    fr = (ctfile.SourceVersion("src", source.table_id, v, ctfile.schema_id(source.schema_at(v))),)
    return ctfile.RefreshInfo("FULL", "parent", fr, 2000, 1, 1)


@pytest.mark.parametrize("where", ["local", "moto"])
@pytest.mark.parametrize("first", ["parent", "child"])
def test_two_concurrent_refreshes_one_commits_the_other_conflicts(request, tmp_path, where, first):
    if where == "local":
        root, opts = str(tmp_path), None
    else:
        ep = request.getfixturevalue("moto_s3")
        root, opts = ep.new_uri("derived"), ep.storage_options()
    source, derived = make_pair(root, storage_options=opts)
    out, go2 = tmp_path / "child.json", tmp_path / "child.go"
    job = {"uri": derived.uri, "source": source.uri, "storage_options": opts, "out": str(out), "go2": str(go2),
           "key": "child", "data_timestamp": 1000}
    tx = derived.transaction(refresh=_refresh_info(source))
    schema = derived.schema_at().to_arrow(field_ids=False)
    tx.insert(pa.table({"id": [0], "v": ["parent"], "_ct_dt_key": ["parent"], "_ct_dt_rows": [1]}, schema=schema))
    child = _prepared_child(job, out)
    try:
        if first == "parent":
            assert tx.commit().version == 1
            go2.touch()
            assert child.wait(timeout=DEADLINE_S) == 0, out.read_text()
            res = json.loads(out.read_text())
            assert (res["outcome"], res["read_version"], res["winning_version"]) == ("conflict", 0, 1), res
        else:
            go2.touch()
            assert child.wait(timeout=DEADLINE_S) == 0, out.read_text()
            assert json.loads(out.read_text()) == {"outcome": "committed", "version": 1}
            with pytest.raises(ctfile.CommitConflictError) as e:
                tx.commit()
            assert (e.value.read_version, e.value.winning_version) == (0, 1)
    finally:
        child.kill()
    fresh = ctfile.open_table(derived.uri, storage_options=opts)
    assert fresh.version == 1 and fresh.to_arrow().column("v").to_pylist() == [first]
    refresh = fresh.history()[0].refresh
    assert refresh.reason == first and fresh.derived.data_timestamp == (2000 if first == "parent" else 1000)
    assert ctfile.verify_table(derived.uri, storage_options=opts, all_versions=True).healthy


@pytest.mark.parametrize("where", ["local", "moto"])
@pytest.mark.parametrize("first", ["alter", "refresh"])
def test_an_alter_and_a_concurrent_refresh_one_commits_the_other_conflicts(request, tmp_path, where, first):
    """SPEC §Derived tables, changing a definition: an ``ALTER DERIVED``
    commit (parent) and a refresh (child process) of one derived table both
    hold a ``metadata`` action, so whichever commits second fails with
    CommitConflictError naming the winner, in either order, and the table
    holds the winner's change only."""
    if where == "local":
        root, opts = str(tmp_path), None
    else:
        ep = request.getfixturevalue("moto_s3")
        root, opts = ep.new_uri("derived-alter"), ep.storage_options()
    source, derived = make_pair(root, storage_options=opts)
    mode = derived.derived.refresh_mode
    altered = next(m for m in ctfile.RefreshMode if m is not mode)
    out, go2 = tmp_path / "child.json", tmp_path / "child.go"
    job = {"uri": derived.uri, "source": source.uri, "storage_options": opts, "out": str(out), "go2": str(go2),
           "key": "child", "data_timestamp": 1000}
    tx = derived.transaction()
    assert tx.alter_derived(refresh_mode=altered, target_lag=None)
    child = _prepared_child(job, out)
    try:
        if first == "alter":
            assert tx.commit().version == 1
            go2.touch()
            assert child.wait(timeout=DEADLINE_S) == 0, out.read_text()
            res = json.loads(out.read_text())
            assert (res["outcome"], res["read_version"], res["winning_version"]) == ("conflict", 0, 1), res
        else:
            go2.touch()
            assert child.wait(timeout=DEADLINE_S) == 0, out.read_text()
            assert json.loads(out.read_text()) == {"outcome": "committed", "version": 1}
            with pytest.raises(ctfile.CommitConflictError) as e:
                tx.commit()
            assert (e.value.read_version, e.value.winning_version) == (0, 1)
    finally:
        child.kill()
    fresh = ctfile.open_table(derived.uri, storage_options=opts)
    assert fresh.version == 1 and fresh.history()[0].operation == ("ALTER DERIVED" if first == "alter" else "REFRESH")
    assert fresh.derived.refresh_mode is (altered if first == "alter" else mode)
    assert fresh.to_arrow().column("v").to_pylist() == ([] if first == "alter" else ["child"])
    assert ctfile.verify_table(derived.uri, storage_options=opts, all_versions=True).healthy
