"""What a Python worker of a Spark read imports (issue 15, first-query
latency). Every process that serves a ``spark.read.format("ctfile")`` query
(PySpark's data source lookup, planning, each executor's workers) imports
ctfile cold, so its import cost is paid several times per first query:

- PySpark's lookup imports ``pyspark_ctfile`` for every session that uses a
  non-built-in format: that module must not import ctfile at all;
- a worker reading a snapshot scan task must not import pandas (pyarrow's
  ``pyarrow.dataset`` and its Python-object conversions import it; ctfile's
  import and its scan path use neither).

Each check runs in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pytest

import ctfile

pytest.importorskip("pandas")  # the check means something only where pandas is installed
pytest.importorskip("pyspark")


def _run(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip()


def test_lookup_module_does_not_import_ctfile():
    out = _run("import sys, pyspark_ctfile; "
               "print(pyspark_ctfile.DefaultSource.name(), sorted(m for m in sys.modules if m.split('.')[0] in ('ctfile', 'pandas')))")
    assert out == "ctfile []"


def test_snapshot_scan_task_reads_without_pandas(tmp_path):
    t = ctfile.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("s", pa.string())]))
    t.insert(pa.table({"id": [1, 2, 3], "s": ["a", None, "c"]}))
    out = _run(
        "import sys, ctfile, ctfile.spark_datasource.batch\n"
        f"task = ctfile.open_table({str(tmp_path / 't')!r}).snapshot().scan_tasks()[0]\n"
        "rows = sum(b.num_rows for b in task.to_batches(use_threads=False))\n"
        "print(rows, 'pandas' in sys.modules)\n"
    )
    assert out == "3 False"
