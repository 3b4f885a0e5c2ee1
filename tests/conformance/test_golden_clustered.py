"""The golden table ``golden/people-clustered`` (revision 6, SPEC
§Clustering; Appendix B): clustering keys change what writers lay out, not
what readers read. The byte-level rules of the log are checked for it with
the other generations in ``test_golden.py``."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import ctfile
from ctfile.format import actions as A
from ctfile.reader.clustering import key_ranges, overlaps

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_golden import ROWS_CLUSTERED, ROWS_V2, ROWS_V5  # noqa: E402

ROWS = {1: ROWS_V2, 4: ROWS_V5, 5: ROWS_CLUSTERED, 6: ROWS_CLUSTERED}


@pytest.fixture
def table(tmp_path) -> ctfile.Table:
    shutil.copytree(HERE / "golden" / "people-clustered", tmp_path / "t")
    return ctfile.open_table(str(tmp_path / "t"))


def _rows(t: ctfile.Table, v: int) -> dict:
    got = t.snapshot(v).to_arrow().sort_by("id").to_pydict()
    return dict(zip(got["id"], got["name"]))


def test_every_version_reads_as_the_statements_made_it(table):
    assert table.version == 6
    for v, rows in ROWS.items():
        assert _rows(table, v) == rows
    assert [h.operation for h in reversed(table.history())] == [
        "CREATE TABLE", "INSERT", "UPDATE", "UPDATE", "DELETE", "INSERT", "COMPACT",
    ]
    assert ctfile.verify_table(table.uri).healthy


def test_no_protocol_feature_and_the_properties_as_set(table):
    entry = table.log.read_entries(0, 0)[0]
    (protocol,) = [a for a in entry if isinstance(a, A.Protocol)]
    assert protocol == A.Protocol()  # readers need nothing new
    props = table.snapshot().metadata.properties
    assert props == {"ctfile.clusterBy": "id", "ctfile.partitionRows": "2"}
    assert table.snapshot().cluster_keys == ("id",)


def test_files_are_sorted_and_cut_and_the_compaction_reclustered(table):
    def stored_ids(v):
        return sorted(
            pq.read_table(f"{table.uri}/{p.path}", columns=["id"]).column("id").to_pylist()
            for p in table.snapshot(v).partitions
        )

    assert stored_ids(1) == [[1, 2], [3, 4], [5]]  # the insert, sorted and cut every 2 rows
    assert stored_ids(5) == [[0, 6], [1], [3, 4]]
    assert stored_ids(6) == [[0, 1], [3, 4], [6]]
    for v, depth in ((5, 2), (6, 1)):
        assert table.clustering_info(version=v).max_depth == depth
    snap = table.snapshot(6)
    ranges = key_ranges(snap.partitions, snap.table_schema, "id")[0]
    assert not any(overlaps(a, b) for a in ranges for b in ranges if a is not b)


def test_the_recluster_changes_no_row(table):
    info = table.log.commit_info(6)
    assert (info.operation, info.data_change) == ("COMPACT", False)
    assert table.changes(start_version=6, end_version=6).to_arrow().num_rows == 0
    before = table.snapshot(5).to_arrow(include_hidden=True).sort_by("id").to_pylist()
    after = table.snapshot(6).to_arrow(include_hidden=True).sort_by("id").to_pylist()
    assert before == after  # row ids and row versions kept
    audit = table.changes(start_version=5, end_version=6).to_arrow()
    assert sorted(audit.column("id").to_pylist()) == [0, 6]  # the insert of v5 only
