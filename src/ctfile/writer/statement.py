"""Running one DML statement as its own transaction, re-run after a conflict.

SPEC §Conflict detection makes a transaction abort when a concurrent commit
changed or added rows it read. A single statement (``Table.merge``,
``update``, ``delete`` ...) has an obvious serial meaning -- apply it to the
table as it is now -- so instead of handing the conflict to the caller it
is re-run on a fresh transaction at the latest version, which re-reads and
re-applies it, as a Snowflake statement waits for the lock it conflicts on.
Its application transaction, if any, goes with it: if the winner already
committed that batch, the re-run is a replay and commits nothing.

A statement of an explicit transaction (``with table.transaction() as tx``)
cannot be re-run here: the caller's block would have to run again, so the
:class:`~ctfile.format.errors.CommitConflictError` reaches the caller.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable

from ctfile.format.errors import CommitConflictError, ConflictKind, InvalidArgumentError
from ctfile.format.validators import require_positive_int
from ctfile.log.transaction import CommitResult, retry_delay
from ctfile.writer.transaction import WriteTransaction

log = logging.getLogger("ctfile")

#: Runs of one statement before its last conflict is raised (the number SPEC
#: §Conflict detection states). Each lost run means another writer
#: committed, so 20 covers a busy table; a conflict that persists past it is
#: worth surfacing.
MAX_STATEMENT_RUNS = 20


def run_statement(
    begin: Callable[[], WriteTransaction],
    body: Callable[[WriteTransaction], Any],
    *,
    max_runs: int | None = None,
) -> CommitResult:
    """Run ``body`` in a transaction from ``begin()`` and commit it; on a
    conflict, re-run both (a fresh transaction reads the latest version), at
    most ``max_runs`` times (default :data:`MAX_STATEMENT_RUNS`; 1 for a
    statement whose input is a stream that cannot be read again).

    ``CommitResult.attempts`` counts the commit attempts of the last run
    plus one per earlier run. Giving up under contention
    (:attr:`ConflictKind.CONTENTION`: the commit already retried 200 times)
    is not re-run.

    Raises
    ------
    CommitConflictError
        The statement conflicted on its last allowed run.
    """
    _check_arguments(body, max_runs)
    limit = MAX_STATEMENT_RUNS if max_runs is None else max_runs
    attempts = 0
    for run in range(1, limit + 1):
        tx = begin()
        try:
            with tx:
                body(tx)
        except CommitConflictError as e:
            attempts += 1
            if _is_final(run, limit, e):
                raise
            log.info("%s on %s conflicted (%s); re-running it at the latest version", tx.operation, tx.storage.uri, e)
            time.sleep(retry_delay(run))
            continue
        assert tx.result is not None
        return dataclasses.replace(tx.result, attempts=attempts + tx.result.attempts)
    raise AssertionError("unreachable")  # pragma: no cover


def _check_arguments(body: Any, max_runs: Any) -> None:
    """Refuse a ``body`` that is not callable, a ``max_runs`` that is not
    None or a positive int."""
    if max_runs is not None:
        require_positive_int(max_runs, "max_runs")
    if not callable(body):
        raise InvalidArgumentError(f"body must be a callable taking the transaction, found {body!r:.80}")


def _is_final(run: int, limit: int, conflict: CommitConflictError) -> bool:
    """Whether ``conflict`` on run ``run`` of ``limit`` reaches the caller:
    the last run, or a commit that already gave up under contention."""
    return run == limit or conflict.kind is ConflictKind.CONTENTION
