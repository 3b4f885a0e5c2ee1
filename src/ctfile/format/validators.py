"""Checks of integer arguments, shared by every entry point of the API.

An integer argument (a version, a row limit, a number of workers) is
checked the same way everywhere: an ``int`` that is not a ``bool`` (Python's
``True`` is an ``int``, and ``version=True`` is a mistake, not version 1),
within its bounds. A refused value raises
:class:`~ctfile.format.errors.InvalidArgumentError` naming the argument,
what was expected and what was found, before anything is read or written.

The functions differ only in how they word the expectation, which callers
and their tests rely on:

- :func:`require_int`: ``"version must be an int, found '3'"``;
- :func:`require_int_at_least`: the same for the type, then
  ``"start_version must be >= 0, found -1"``;
- :func:`require_positive_int`: ``"limit must be a positive int, found 0"``;
- :func:`require_int_in`: ``"workers must be an int in 1..1024, found 0"``
  (:func:`ctfile.format.log_values.require_long` is this over a ``long``).

Examples
--------
>>> require_int_at_least(3, "start_version", 0)
3
>>> require_int_at_least(True, "start_version", 0)
Traceback (most recent call last):
  ...
ctfile.format.errors.InvalidArgumentError: start_version must be an int, found True
>>> require_positive_int(0, "limit")
Traceback (most recent call last):
  ...
ctfile.format.errors.InvalidArgumentError: limit must be a positive int, found 0
"""

from __future__ import annotations

from typing import Any

from ctfile.format.errors import InvalidArgumentError


def is_int(value: Any) -> bool:
    """True for an ``int`` that is not a ``bool``.

    >>> is_int(3), is_int(True), is_int(3.0)
    (True, False, False)
    """
    return isinstance(value, int) and not isinstance(value, bool)


def require_int(value: Any, what: str) -> int:
    """``value`` if :func:`is_int`; else :class:`InvalidArgumentError`
    naming ``what`` and the value."""
    if not is_int(value):
        raise InvalidArgumentError(f"{what} must be an int, found {value!r}")
    return value


def require_int_at_least(value: Any, what: str, minimum: int) -> int:
    """``value`` if it is an int (not a bool) ``>= minimum``; else
    :class:`InvalidArgumentError`, worded for the type first, then for the
    bound."""
    require_int(value, what)
    if value < minimum:
        raise InvalidArgumentError(f"{what} must be >= {minimum}, found {value}")
    return value


def require_positive_int(value: Any, what: str) -> int:
    """``value`` if it is an int (not a bool) ``>= 1``; else
    :class:`InvalidArgumentError` naming ``what`` and the value."""
    if not is_int(value) or value < 1:
        raise InvalidArgumentError(f"{what} must be a positive int, found {value!r}")
    return value


def require_int_in(value: Any, what: str, minimum: int, maximum: int) -> int:
    """``value`` if it is an int (not a bool) in ``minimum..maximum``; else
    :class:`InvalidArgumentError` naming ``what``, the range and the value."""
    if not is_int(value) or not minimum <= value <= maximum:
        raise InvalidArgumentError(f"{what} must be an int in {minimum}..{maximum}, found {value!r}")
    return value

