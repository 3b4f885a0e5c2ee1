"""Child process of the derived-table concurrency tests (not a test module):
``test_derived_concurrency._Refresher(job)``, a fork of the pre-loaded
forkserver of :mod:`procs`.

The job is a JSON object with ``uri`` (the derived table of
``derived_support.make_pair``), ``source`` (its source's URI),
``storage_options`` (or null), ``out`` and ``go2``, ``key`` and
``data_timestamp``. The child opens a refresh transaction at the source's
latest version, inserts one row keyed ``key`` (writing its file), writes
``<out>.ready`` and waits for ``go2`` before committing. The result holds
the committed version or the CommitConflictError's read and winning
versions.
"""

from __future__ import annotations

import json
import os
import traceback

from _writer import _wait_for, _write_json


def refresh(job: dict) -> dict:
    import pyarrow as pa

    import ctfile

    opts = job["storage_options"]
    table = ctfile.open_table(job["uri"], storage_options=opts)
    source = ctfile.open_table(job["source"], storage_options=opts)
    v = source.version
    frontier = (ctfile.SourceVersion("src", source.table_id, v, ctfile.schema_id(source.schema_at(v))),)
    info = ctfile.RefreshInfo("FULL", "child", frontier, job["data_timestamp"], 1, 1)
    schema = table.schema_at().to_arrow(field_ids=False)
    try:
        with table.transaction(refresh=info) as tx:
            tx.insert(pa.table({"id": [0], "v": [job["key"]], "_ct_dt_key": [job["key"]], "_ct_dt_rows": [1]},
                               schema=schema))
            _write_json(job["out"] + ".ready", {"version": table.version})
            _wait_for(job["go2"])
    except ctfile.CommitConflictError as e:
        return {"outcome": "conflict", "read_version": e.read_version, "winning_version": e.winning_version}
    return {"outcome": "committed", "version": tx.result.version}


def run(job_json: str) -> None:
    """Entry point in a forked child: the result (or the error) goes to ``out``."""
    job = json.loads(job_json)
    code = 0
    try:
        result = refresh(job)
    except BaseException:
        result, code = {"error": traceback.format_exc()}, 1
    _write_json(job["out"], result)
    os._exit(code)
