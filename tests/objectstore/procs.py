"""Writer processes for the object-store tests, forked from a pre-loaded forkserver.

Starting a fresh interpreter that imports pyarrow, ctfile and s3fs takes
seconds on a loaded 2-core machine (8 at once: ~20 s). A ``forkserver``
imports them once; every child is then a cheap fork of it, with no thread of
the pytest process (moto's server, fsspec's event loop, Spark's gateway)
inherited. Children are real, separate processes: they can be SIGKILLed, and
they share nothing with the test but the storage.

:class:`Child` mirrors the parts of ``subprocess.Popen`` the tests use.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal

import _writer

PRELOAD = ["_writer", "ctfile", "pyarrow.dataset", "pyarrow.parquet", "s3fs", "botocore.session"]
_ctx = None


def context():
    global _ctx
    if _ctx is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        _ctx = ctx
    return _ctx


class Child:
    """``_writer.py``'s job run in a forked child (see :mod:`_writer`)."""

    def __init__(self, job: dict):
        # Daemonic: never outlives the test session, even if a test fails
        # while a child still waits for its start signal.
        self._p = context().Process(target=_writer.run, args=(json.dumps(job),), daemon=True)
        self._p.start()
        self.pid = self._p.pid

    @property
    def returncode(self) -> int | None:
        return self._p.exitcode

    def poll(self) -> int | None:
        return self._p.exitcode

    def wait(self, timeout: float | None = None) -> int | None:
        self._p.join(timeout)
        if self._p.exitcode is None:
            raise TimeoutError(f"child {self.pid} still running after {timeout}s")
        return self._p.exitcode

    def kill(self) -> None:
        if self._p.exitcode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._p.join(30)
