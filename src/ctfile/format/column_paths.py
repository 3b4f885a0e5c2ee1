"""Field paths as text (SPEC §Schema evolution, allowed changes): the one
parser and formatter of a path string, for every place that takes or shows
one (``Table.update_schema()``, :func:`~ctfile.format.schema_evolution.field_paths`,
schema changes in ``history``, ``ctfile schema``).

A path names a field by its names from the top level, joined by ``.``
(``address.zip``; ``element``, ``key`` and ``value`` for the parts of a list
and a map). A name that holds a ``.`` or a backtick is written between
backticks, a backtick inside it doubled, as Spark SQL quotes identifiers:
```a.b``` is the top-level column named ``a.b``, ``s.`x.y``` the field
``x.y`` of struct ``s``, ```it``s``` the column ``it`s``. Any name may be
quoted (```zip``` is ``zip``); an unquoted ``.`` separates names, as it
always did, so every path that named a field before quoting existed names
the same field.

Examples
--------
>>> parse_field_path("s.`x.y`.z"), format_field_path(("s", "x.y", "z"))
(('s', 'x.y', 'z'), 's.`x.y`.z')
>>> parse_field_path(format_field_path(("it`s", "a.b")))
('it`s', 'a.b')
"""

from __future__ import annotations

from typing import Sequence

from ctfile.format.errors import SchemaMismatchError

QUOTE = "`"


def quote_field_name(name: str) -> str:
    """``name`` as one part of a path: between backticks (a backtick
    doubled) when it holds a ``.`` or a backtick, else as it is.

    >>> quote_field_name("zip"), quote_field_name("a.b"), quote_field_name("it`s")
    ('zip', '`a.b`', '`it``s`')
    """
    if "." in name or QUOTE in name:
        return QUOTE + name.replace(QUOTE, QUOTE * 2) + QUOTE
    return name


def format_field_path(parts: Sequence[str]) -> str:
    """The path text of ``parts``, which :func:`parse_field_path` reads back as them.

    Raises
    ------
    SchemaMismatchError
        ``parts`` is not a non-empty sequence of non-empty strings.

    Examples
    --------
    >>> format_field_path(("address", "zip")), format_field_path(("a.b",)), format_field_path(("m", "value", "x.y"))
    ('address.zip', '`a.b`', 'm.value.`x.y`')
    """
    if not _is_names(parts):
        raise SchemaMismatchError(f"a column path is a non-empty sequence of non-empty names, found {parts!r}")
    return ".".join(quote_field_name(p) for p in parts)


def _is_names(parts: object) -> bool:
    """Whether ``parts`` is a non-empty list or tuple of non-empty strings."""
    return isinstance(parts, (list, tuple)) and bool(parts) and all(isinstance(p, str) and p for p in parts)


def parse_field_path(text: str) -> tuple[str, ...]:
    """The names of path ``text`` (see the module docstring).

    Raises
    ------
    SchemaMismatchError
        An empty path or name (``a..b``, ``.a``, ``a.``, ``````), a quote
        left open, a quoted name not followed by ``.`` or the end, or a
        backtick inside an unquoted name; the message says where.

    Examples
    --------
    >>> parse_field_path("address.zip"), parse_field_path("`a.b`"), parse_field_path("`it``s`.x")
    (('address', 'zip'), ('a.b',), ('it`s', 'x'))
    >>> parse_field_path("a.`b")
    Traceback (most recent call last):
    ...
    ctfile.format.errors.SchemaMismatchError: column path 'a.`b': the backtick at position 2 is never closed (a backtick inside a quoted name is written twice)
    """
    if not isinstance(text, str) or not text:
        raise SchemaMismatchError(f"a column path must be a non-empty string, found {text!r}")
    parts: list[str] = []
    i = 0
    while True:
        name, i = _quoted(text, i) if text.startswith(QUOTE, i) else _plain(text, i)
        parts.append(name)
        if i == len(text):
            return tuple(parts)
        i += 1  # the "." _quoted or _plain stopped at
        if i == len(text):
            raise _error(text, "it ends with '.' (a name must follow)")


def _plain(text: str, start: int) -> tuple[str, int]:
    """The unquoted name at ``start`` and where it ends (a "." or the end)."""
    end = text.find(".", start)
    end = len(text) if end < 0 else end
    name = text[start:end]
    if not name:
        raise _error(text, f"the name at position {start} is empty")
    if QUOTE in name:
        raise _error(text, f"the name {name!r} holds a backtick: quote the whole name (`{name.replace(QUOTE, QUOTE * 2)}`)")
    return name, end


def _quoted(text: str, start: int) -> tuple[str, int]:
    """The quoted name whose opening backtick is at ``start``, and where it
    ends (the "." after the closing backtick, or the end)."""
    out: list[str] = []
    i = start + 1
    while True:
        j = text.find(QUOTE, i)
        if j < 0:
            raise _error(text, f"the backtick at position {start} is never closed (a backtick inside a quoted "
                               "name is written twice)")
        out.append(text[i:j])
        if text.startswith(QUOTE, j + 1):  # a doubled backtick: one backtick of the name
            out.append(QUOTE)
            i = j + 2
            continue
        name, end = "".join(out), j + 1
        if not name:
            raise _error(text, f"the quoted name at position {start} is empty")
        if end < len(text) and text[end] != ".":
            raise _error(text, f"the quoted name {quote_field_name(name)} is followed by {text[end]!r}, not by '.' or the end")
        return name, end


def _error(text: str, what: str) -> SchemaMismatchError:
    return SchemaMismatchError(f"column path {text!r}: {what}")
