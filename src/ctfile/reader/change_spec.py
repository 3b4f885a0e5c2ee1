"""What a change scan asks for: one immutable :class:`ChangeScan` (SPEC §Change scans).

A change scan is described once, by a frozen :class:`ChangeScan` holding its
resolved interval, its :class:`~ctfile.format.change_modes.ChangeMode`, its
:class:`~ctfile.format.change_modes.Changelog`
rendering, its row filter and whether initial rows come first. Planning
(:func:`ctfile.reader.change_plan.plan_changes`) turns a spec and the log
into a :class:`~ctfile.reader.change_plan.ChangePlan`; execution
(:class:`~ctfile.reader.change_scan.ChangeSet`) and parallel tasks
(:class:`~ctfile.reader.change_scan.ChangeTask`) carry the same spec
object, never its fields one by one.

The shape follows PyIceberg's ``TableScan``: the spec is immutable, every
``with_...()`` / :meth:`ChangeScan.filter` call returns a validated copy
(:func:`dataclasses.replace`), and planning is separate from reading.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc

from ctfile.format.change_modes import ChangeMode, Changelog
from ctfile.format.errors import InvalidArgumentError
from ctfile.format.validators import require_int_at_least


def _check_version(value: Any, name: str, minimum: int) -> None:
    require_int_at_least(value, name, minimum)


@dataclass(frozen=True)
class ChangeScan:
    """One change scan of versions ``start_version..end_version`` (both
    included; ``start_version == end_version + 1`` is the empty interval of a
    reader that has caught up).

    Build one with :meth:`ctfile.Table.changes` (which resolves timestamps
    and defaults into versions) and read it from
    :attr:`ChangeSet.scan <ctfile.reader.change_scan.ChangeSet.scan>`. Every
    field is validated at construction, strings are parsed into the enums,
    and the ``with_...`` methods and :meth:`filter` return validated copies.

    Attributes
    ----------
    start_version, end_version : int
        The resolved interval.
    mode : ChangeMode
        ``default``, ``append_only`` or ``audit``.
    changelog : Changelog or None
        None renders ``METADATA$ACTION`` / ``METADATA$ISUPDATE``; ``op`` an
        ``op`` column.
    row_filter : pyarrow.compute.Expression or None
        A predicate on data columns, applied to every output row.
    initial_rows : bool
        The rows of the snapshot :attr:`initial_version` come first, as INSERTs.

    Examples
    --------
    >>> import pyarrow.compute as pc
    >>> s = ChangeScan(2, 5, mode="audit")
    >>> s.mode, s.with_mode("default").mode, s.with_initial_rows().initial_version
    (<ChangeMode.AUDIT: 'audit'>, <ChangeMode.DEFAULT: 'default'>, 1)
    >>> str(s.filter(pc.field("id") > 1).filter(pc.field("id") < 9).row_filter)
    '((id > 1) and (id < 9))'
    >>> ChangeScan(6, 4)
    Traceback (most recent call last):
    ...
    ctfile.format.errors.InvalidArgumentError: reversed interval: start_version 6 is after end_version 4; an interval a..b includes both ends and needs a <= b (a == b + 1 for an empty interval)
    """

    start_version: int
    end_version: int
    mode: ChangeMode = ChangeMode.DEFAULT
    changelog: Changelog | None = None
    row_filter: pc.Expression | None = None
    initial_rows: bool = False

    def __post_init__(self) -> None:
        _check_version(self.start_version, "start_version", 0)
        _check_version(self.end_version, "end_version", 0)
        if self.start_version > self.end_version + 1:
            raise InvalidArgumentError(
                f"reversed interval: start_version {self.start_version} is after end_version {self.end_version}; "
                f"an interval a..b includes both ends and needs a <= b (a == b + 1 for an empty interval)"
            )
        # A frozen dataclass normalises its own fields through object.__setattr__.
        object.__setattr__(self, "mode", ChangeMode.parse(self.mode, what="mode"))
        object.__setattr__(self, "changelog", Changelog.parse(self.changelog))
        if self.row_filter is not None and not isinstance(self.row_filter, pc.Expression):
            raise InvalidArgumentError(
                f"row_filter must be a pyarrow.compute.Expression or None, found {type(self.row_filter).__name__}"
            )
        if not isinstance(self.initial_rows, bool):
            raise InvalidArgumentError(f"initial_rows must be a bool, found {self.initial_rows!r}")

    # ------------------------------------------------------------ copies

    def update(self, **overrides: Any) -> "ChangeScan":
        """A copy with ``overrides`` applied (and validated)."""
        return dataclasses.replace(self, **overrides)

    def with_interval(self, start_version: int, end_version: int) -> "ChangeScan":
        """A copy over versions ``start_version..end_version``."""
        return self.update(start_version=start_version, end_version=end_version)

    def with_mode(self, mode: ChangeMode | str) -> "ChangeScan":
        """A copy in ``mode``."""
        return self.update(mode=mode)

    def with_changelog(self, changelog: Changelog | str | None) -> "ChangeScan":
        """A copy rendered as ``changelog``."""
        return self.update(changelog=changelog)

    def with_initial_rows(self, initial_rows: bool = True) -> "ChangeScan":
        """A copy with (or without) initial rows."""
        return self.update(initial_rows=initial_rows)

    def filter(self, expr: pc.Expression) -> "ChangeScan":
        """A copy whose row filter is this one's AND ``expr``."""
        if not isinstance(expr, pc.Expression):
            raise InvalidArgumentError(f"filter must be a pyarrow.compute.Expression, found {type(expr).__name__}")
        return self.update(row_filter=expr if self.row_filter is None else self.row_filter & expr)

    # ------------------------------------------------------------ derived

    @property
    def initial_version(self) -> int | None:
        """The version of the snapshot whose rows come first, or None (no
        initial rows, or the empty snapshot before version 0).

        For ``default`` it is ``end_version``: the snapshot at the end as
        INSERTs is the whole minimum delta from the empty table. For the
        other modes it is ``start_version - 1``, followed by the interval's
        own changes.
        """
        if not self.initial_rows:
            return None
        if self.mode is ChangeMode.DEFAULT:
            return self.end_version
        return self.start_version - 1 if self.start_version > 0 else None

    @property
    def is_audit(self) -> bool:
        """Whether rows carry ``METADATA$COMMIT_VERSION`` / ``_TIMESTAMP``."""
        return self.mode is ChangeMode.AUDIT

