"""The change vocabulary (SPEC §Change scans; SPEC §Streams persists it):
what a change scan reports (:class:`ChangeMode`, Snowflake's
``INFORMATION``) and how its rows are rendered (:class:`Changelog`).

They live in ``format`` because they are persisted (a stream's state holds
its mode, :mod:`ctfile.format.streams`) as well as read by every layer
above: one definition, parsed from and written as its string value.
"""

from __future__ import annotations

import enum
from typing import Any

from ctfile.format.errors import InvalidArgumentError


class ChangeMode(str, enum.Enum):
    """What a change scan reports (Snowflake's ``INFORMATION`` of ``CHANGES``).

    ``DEFAULT``: the minimum delta of the interval. ``APPEND_ONLY``: the rows
    inserted in the interval, with the values they were inserted with.
    ``AUDIT``: every commit's own minimum delta, in commit order.

    Examples
    --------
    >>> ChangeMode.parse("audit") is ChangeMode.AUDIT, ChangeMode.parse(ChangeMode.DEFAULT).value
    (True, 'default')
    >>> ChangeMode.parse("redo")
    Traceback (most recent call last):
    ...
    ctfile.format.errors.InvalidArgumentError: information must be one of default, append_only, audit, found 'redo'
    """

    DEFAULT = "default"
    APPEND_ONLY = "append_only"
    AUDIT = "audit"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: Any, *, what: str = "information") -> "ChangeMode":
        """``value`` (a member or its string) as a member; InvalidArgumentError
        naming the allowed values and ``value`` otherwise. ``what`` names the
        setting in the message (e.g. ``"option changes"`` for Spark)."""
        return _parse(cls, value, f"{what} must be one of {', '.join(m.value for m in cls)}")


class Changelog(str, enum.Enum):
    """How change rows are rendered, when not with ``METADATA$ACTION`` /
    ``METADATA$ISUPDATE`` (the default, written ``None``).

    ``OP``: a two-event changelog with a uint8 ``op`` column (0 append,
    1 retract, 2 correct-from, 3 correct-to; ODF RFC-015, Flink RowKind).

    Examples
    --------
    >>> Changelog.parse("op") is Changelog.OP, Changelog.parse(None)
    (True, None)
    >>> Changelog.parse("ops")
    Traceback (most recent call last):
    ...
    ctfile.format.errors.InvalidArgumentError: changelog must be None or 'op', found 'ops'
    """

    OP = "op"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: Any, *, what: str = "changelog", optional: bool = True) -> "Changelog | None":
        """``value`` as a member, or None for None when ``optional``;
        InvalidArgumentError naming the allowed values and ``value`` otherwise."""
        if value is None and optional:
            return None
        allowed = " or ".join(repr(m.value) for m in cls)
        return _parse(cls, value, f"{what} must be {'None or ' if optional else ''}{allowed}")


def _parse(cls: type[enum.Enum], value: Any, expected: str):
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        try:
            return cls(value)
        except ValueError:
            pass
    raise InvalidArgumentError(f"{expected}, found {value!r}")
