"""Durations on the command line: ``7d``, ``12h``, ``1w2d``, ``90m``, ``0s``.

>>> parse_duration("1d12h")
datetime.timedelta(days=1, seconds=43200)
>>> parse_duration("168h") == parse_duration("1w")
True
>>> format_duration(parse_duration("1d12h").total_seconds()), format_duration(0), format_duration(0.25)
('1d12h', '0s', '250ms')
"""

from __future__ import annotations

import datetime as dt
import re

_UNITS = {
    "w": dt.timedelta(weeks=1),
    "d": dt.timedelta(days=1),
    "h": dt.timedelta(hours=1),
    "m": dt.timedelta(minutes=1),
    "s": dt.timedelta(seconds=1),
    "ms": dt.timedelta(milliseconds=1),
}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|w|d|h|m|s)")


def parse_duration(text: str) -> dt.timedelta:
    """A sum of ``<number><unit>`` terms, units w, d, h, m, s, ms.

    Raises ValueError for anything else (a bare number is ambiguous and
    refused), and for a duration longer than a :class:`datetime.timedelta`
    holds (about 2.7 million years).

    >>> parse_duration("99999999999999d")
    Traceback (most recent call last):
      ...
    ValueError: duration '99999999999999d' is too long: at most 999999999d (about 2.7 million years)
    """
    s = text.strip().lower().replace(" ", "")
    if not s:
        raise ValueError("empty duration; expected e.g. 7d, 12h, 30m")
    pos, total = 0, dt.timedelta(0)
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        try:
            total += float(m.group(1)) * _UNITS[m.group(2)]
        except OverflowError:
            raise ValueError(
                f"duration {text!r:.60} is too long: at most {dt.timedelta.max.days}d (about 2.7 million years)"
            ) from None
        pos = m.end()
    if pos != len(s):
        raise ValueError(f"bad duration {text!r}; expected e.g. 7d, 12h, 30m, 1w2d (units w, d, h, m, s, ms)")
    return total


def format_duration(seconds: float) -> str:
    """``seconds`` in the units :func:`parse_duration` reads, largest first
    (whole milliseconds)."""
    rest = round(seconds * 1000)
    parts = []
    for unit, span in sorted(_UNITS.items(), key=lambda kv: -kv[1]):
        n, rest = divmod(rest, round(span.total_seconds() * 1000))
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts) or "0s"
