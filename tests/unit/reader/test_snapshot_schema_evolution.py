"""Snapshot reads of files written before a rename (SPEC §Schema evolution):
such a file does not match the read schema by name, so it is read through
its projection by field id, from the source it was opened and verified in."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.reader import integrity

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("n", pa.int32())])


@pytest.fixture
def renamed(tmp_path) -> ctfile.Table:
    """v1: 6 rows in 3 partitions; v2: name -> full_name, n widened to long."""
    t = ctfile.create_table(str(tmp_path / "t"), SCHEMA, partition_rows=2)
    t.insert(pa.table({"id": range(6), "name": list("abcdef"), "n": [1, None, 3, 4, 5, 6]}, schema=SCHEMA))
    with t.update_schema() as u:
        u.rename_column("name", "full_name").widen_column("n", pa.int64())
    return t


@pytest.fixture
def opened(monkeypatch) -> Counter:
    """Each data file a read opens, counted (the real DataFiles.fetch runs)."""
    counts: Counter = Counter()
    real = integrity.DataFiles.fetch

    def fetch(files, p):
        counts[p.path] += 1
        return real(files, p)

    monkeypatch.setattr(integrity.DataFiles, "fetch", fetch)
    return counts


def test_each_file_is_opened_once(renamed, opened):
    snap = renamed.snapshot()
    assert snap.to_arrow().sort_by("id").to_pylist() == [
        {"id": i, "full_name": c, "n": n} for i, c, n in zip(range(6), "abcdef", [1, None, 3, 4, 5, 6])]
    assert sorted(opened.values()) == [1, 1, 1]
    opened.clear()
    batches = list(snap.to_batches(batch_rows=1))
    assert [b.num_rows for b in batches] == [1] * 6 and all(b.schema == snap.schema for b in batches)
    assert sorted(opened.values()) == [1, 1, 1]


@pytest.mark.parametrize("read", ["to_arrow", "to_batches"])
def test_columns_and_filters_by_the_new_names(renamed, read):
    snap = renamed.snapshot()
    kw = {"columns": ["full_name"], "filter": (pc.field("n") > 2) & (pc.field("full_name") != "e")}
    t = snap.to_arrow(**kw) if read == "to_arrow" else pa.Table.from_batches(list(snap.to_batches(**kw)))
    assert t.schema == pa.schema([("full_name", pa.string())])
    assert sorted(t.column("full_name").to_pylist()) == ["c", "d", "f"]
    assert snap.schema.field("n").type == pa.int64()
