"""Child process of the RESTORE concurrency tests (not a test module); run
as ``test_restore_concurrency._Restorer(job)``, a fork of the pre-loaded
forkserver of :mod:`procs`.

The job is a JSON object with ``uri``, ``storage_options`` (or null),
``go`` and ``out`` as for :mod:`_writer`, ``version`` (the version to
restore), ``restores`` (how many times) and ``pause`` (seconds between
them). The result lists each RESTORE's outcome: ``committed`` (its
version), ``noop`` (the table already was that version) or ``conflict``
(the versions the CommitConflictError names).
"""

from __future__ import annotations

import json
import os
import time
import traceback

from _writer import _wait_for, _write_json


def restore_loop(job: dict) -> dict:
    import ctfile

    table = ctfile.open_table(job["uri"], storage_options=job["storage_options"])
    ready = table.version
    _write_json(job["out"] + ".ready", {"version": ready})
    _wait_for(job["go"])
    # A loaded machine may run every restore before any writer commits (all
    # noops, nothing concurrent tested): start once the writers have.
    deadline = time.monotonic() + 60
    while table.refresh().version == ready and time.monotonic() < deadline:
        time.sleep(0.01)
    results = []
    for _ in range(job["restores"]):
        try:
            r = table.restore(version=job["version"])
            results.append({"outcome": "committed" if r.committed else "noop", "version": r.version})
        except ctfile.CommitConflictError as e:
            results.append({"outcome": "conflict", "read_version": e.read_version,
                            "winning_version": e.winning_version, "kind": e.kind.value})
        time.sleep(job["pause"])
    return {"restores": results, "end": time.time()}


def run(job_json: str) -> None:
    """Entry point in a forked child: the result (or the error) goes to ``out``."""
    job = json.loads(job_json)
    code = 0
    try:
        result = restore_loop(job)
    except BaseException:
        result, code = {"error": traceback.format_exc()}, 1
    _write_json(job["out"], result)
    os._exit(code)
