"""What a caller says about one commit besides its statements (delta-rs's
``CommitProperties``): :class:`CommitOptions`, taken as ``commit=`` by every
call that commits a version (``Table.insert``, ``delete``, ``update``,
``merge``, ``truncate``, ``overwrite``, ``run_statement``,
``transaction``, ``MergeBuilder.execute``, ``WriteJob.commit`` and their
``ctfile.spark`` counterparts).

Today a commit's options are its application transaction (SPEC §txn): with
``app_id`` and ``app_version`` (a job name and its batch number, a
streaming query id and batch id) the commit records ``txn(app_id,
app_version)``, and a batch the table already holds at that version or
later is a replay that commits nothing. A commit's ``operation`` and
``operationParameters`` are not options: each statement states its own.

The keywords ``app_id=``/``app_version=`` those calls also take are a
shorthand for ``commit=CommitOptions(app_id=, app_version=)``, turned into
the object at the public boundary by :func:`commit_options` alone; internal
signatures take only the object. Every check of the values is here, before
anything is read or written.

Examples
--------
>>> CommitOptions(app_id="nightly", app_version=20261123).records_app_transaction
True
>>> commit_options(app_id="nightly", app_version=7) == CommitOptions(app_id="nightly", app_version=7)
True
>>> CommitOptions(app_id="nightly")
Traceback (most recent call last):
  ...
ctfile.format.errors.InvalidArgumentError: give both app_id and app_version, or neither; found 'nightly', None
>>> CommitOptions(app_id="nightly", app_version=2**63)
Traceback (most recent call last):
  ...
ctfile.format.errors.InvalidArgumentError: app_version must be an int in 0..9223372036854775807, found 9223372036854775808
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctfile.format.errors import InvalidArgumentError
from ctfile.format.log_values import require_long


def require_app_id(value: Any) -> str:
    """``value`` if it can name an application in a ``txn`` action (SPEC
    §txn: a non-empty string), else :class:`InvalidArgumentError` naming
    what was found."""
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"app_id must be a non-empty string, found {value!r}")
    return value


def require_app_version(value: Any) -> int:
    """``value`` if it is a batch number the log can hold (SPEC §txn: a
    ``long``, at least 0), else :class:`InvalidArgumentError` naming the
    range and what was found."""
    return require_long(value, "app_version", minimum=0)


@dataclass(frozen=True)
class CommitOptions:
    """The options of one commit (see the module docstring): ``app_id`` and
    ``app_version``, both or neither, make the commit the batch
    ``app_version`` of application ``app_id``, committed exactly once.

    Raises
    ------
    InvalidArgumentError
        One of ``app_id``/``app_version`` without the other, an empty or
        non-str ``app_id``, an ``app_version`` that is not an int in
        ``0..2**63-1``; nothing is read or written.

    Examples
    --------
    >>> import ctfile, pyarrow as pa, tempfile
    >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
    >>> batch = ctfile.CommitOptions(app_id="loader", app_version=7)
    >>> t.insert(pa.table({"id": [1]}), commit=batch).committed
    True
    >>> t.insert(pa.table({"id": [1]}), commit=batch).app_transaction_replayed   # the same batch again
    True
    """

    app_id: str | None = None
    app_version: int | None = None

    def __post_init__(self) -> None:
        if (self.app_id is None) != (self.app_version is None):
            raise InvalidArgumentError(
                f"give both app_id and app_version, or neither; found {self.app_id!r}, {self.app_version!r}"
            )
        if self.records_app_transaction:
            require_app_id(self.app_id)
            require_app_version(self.app_version)

    @property
    def records_app_transaction(self) -> bool:
        """Whether the commit records an application batch (SPEC §txn)."""
        return self.app_id is not None

    @property
    def is_empty(self) -> bool:
        """Whether these options ask nothing of the commit (the default)."""
        return not self.records_app_transaction

    def apply_to(self, tx: Any) -> None:
        """Make the open :class:`~ctfile.log.transaction.Transaction` ``tx``
        commit with these options (before its statements run: a batch
        already committed makes it a replay whose statements do nothing)."""
        if self.records_app_transaction:
            tx.set_app_transaction(self.app_id, self.app_version)

    def require_empty(self, reason: str) -> None:
        """Refuse options given where the commit's are decided elsewhere
        (``reason`` says where), naming what was found."""
        if not self.is_empty:
            raise InvalidArgumentError(f"{reason}; found {self!r}")


def commit_options(commit: Any = None, *, app_id: Any = None, app_version: Any = None) -> CommitOptions:
    """The options of a public call that commits: ``commit`` (a
    :class:`CommitOptions`, None: the default), or the shorthand keywords
    ``app_id``/``app_version`` those calls also take. The one place the
    shorthand becomes the object.

    Raises
    ------
    InvalidArgumentError
        ``commit`` that is not a :class:`CommitOptions`, ``commit`` given
        together with the shorthand, or shorthand values
        :class:`CommitOptions` refuses.

    Examples
    --------
    >>> commit_options()
    CommitOptions(app_id=None, app_version=None)
    >>> commit_options(CommitOptions(app_id="a", app_version=1), app_id="b", app_version=2)
    Traceback (most recent call last):
      ...
    ctfile.format.errors.InvalidArgumentError: give commit=CommitOptions(...) or its shorthand app_id=/app_version=, not both; found commit=CommitOptions(app_id='a', app_version=1), app_id='b', app_version=2
    """
    shorthand = app_id is not None or app_version is not None
    if commit is None:
        return CommitOptions(app_id=app_id, app_version=app_version) if shorthand else NO_COMMIT_OPTIONS
    if not isinstance(commit, CommitOptions):
        raise InvalidArgumentError(f"commit must be a ctfile.CommitOptions or None, found {type(commit).__name__}")
    if shorthand:
        raise InvalidArgumentError(
            f"give commit=CommitOptions(...) or its shorthand app_id=/app_version=, not both; found commit={commit!r}, "
            f"app_id={app_id!r}, app_version={app_version!r}"
        )
    return commit


#: The default: a commit that records no application batch.
NO_COMMIT_OPTIONS = CommitOptions()
