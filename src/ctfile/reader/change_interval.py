"""The versions a change scan covers (SPEC §Change scans): an interval
``a..b``, both ends included, resolved from versions or timestamps, and its
log entries read with retention in mind.

Examples
--------
>>> import ctfile, pyarrow as pa, tempfile
>>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
>>> _ = t.insert(pa.table({"id": [1]})), t.insert(pa.table({"id": [2]}))
>>> resolve_interval(t.log, t.version), resolve_interval(t.log, 2, start_version=3, end_version=2)
((0, 2), (3, 2))
>>> resolve_interval(t.log, 2, start_version=2, end_version=0)
Traceback (most recent call last):
...
ctfile.format.errors.InvalidArgumentError: reversed interval: start_version 2 is after end_version 0; an interval a..b includes both ends and needs a <= b
"""

from __future__ import annotations

from ctfile.format.errors import InvalidArgumentError, StaleIntervalError, VersionNotFoundError
from ctfile.format.validators import require_int_at_least
from ctfile.log.manifest import ManifestLog


def _check_version_arg(value, name: str) -> int | None:
    if value is None:
        return None
    return require_int_at_least(value, name, 0)


def resolve_interval(
    log: ManifestLog,
    latest: int,
    *,
    start_version=None,
    end_version=None,
    start_timestamp_ms: int | None = None,
    end_timestamp_ms: int | None = None,
) -> tuple[int, int]:
    """``(a, b)`` with ``a <= b + 1`` (``a == b + 1`` is an empty interval).

    Raises InvalidArgumentError for a reversed or doubly-specified interval,
    VersionNotFoundError for a version beyond the latest or a timestamp before
    the first commit.
    """
    start_version = _check_version_arg(start_version, "start_version")
    end_version = _check_version_arg(end_version, "end_version")
    if start_version is not None and start_timestamp_ms is not None:
        raise InvalidArgumentError("give start_version or start_timestamp, not both")
    if end_version is not None and end_timestamp_ms is not None:
        raise InvalidArgumentError("give end_version or end_timestamp, not both")
    b = _interval_end(log, latest, end_version, end_timestamp_ms)
    if start_version is not None:
        return _checked_start(log, latest, start_version, end_version, b), b
    if start_timestamp_ms is not None:
        if end_timestamp_ms is not None and start_timestamp_ms > end_timestamp_ms:
            raise InvalidArgumentError("reversed interval: start_timestamp is after end_timestamp")
        return _first_version_at_or_after(log, start_timestamp_ms, latest), b
    return 0, b


def _interval_end(log: ManifestLog, latest: int, end_version: int | None, end_timestamp_ms: int | None) -> int:
    """The last version of the interval: ``end_version``, the version at
    ``end_timestamp_ms``, or ``latest`` when neither is given."""
    if end_version is not None:
        if end_version > latest:
            raise VersionNotFoundError(
                f"end_version {end_version} is beyond the latest version {latest} of {log.storage.uri}"
            )
        return end_version
    if end_timestamp_ms is not None:
        return log.version_at_timestamp(end_timestamp_ms, latest=latest)
    return latest


def _checked_start(log: ManifestLog, latest: int, a: int, end_version: int | None, b: int) -> int:
    """``a``, the start version given, checked against ``latest`` and the
    interval's end ``b`` (``end_version`` when one was given)."""
    # latest + 1 .. latest, both ends named, is the empty interval of a
    # stream that has caught up (SPEC §Change scans, reader requirements).
    caught_up = a == latest + 1 and end_version == latest
    if a > latest and not caught_up:
        raise VersionNotFoundError(f"start_version {a} is beyond the latest version {latest} of {log.storage.uri}")
    # a == b + 1 is the empty interval (a stream that has caught up);
    # anything further apart is a mistake.
    if a > b + 1:
        raise InvalidArgumentError(
            f"reversed interval: start_version {a} is after end_version {b}; "
            f"an interval a..b includes both ends and needs a <= b"
        )
    return a


def _first_version_at_or_after(log: ManifestLog, ts_ms: int, latest: int) -> int:
    """The first version committed at or after ``ts_ms`` (``latest + 1`` if none)."""
    oldest = log.oldest_version()
    first_ts = log.commit_info(oldest).timestamp
    if ts_ms < first_ts:
        if oldest == 0:
            raise VersionNotFoundError(
                f"start_timestamp is before the table's first commit (version 0) of {log.storage.uri}"
            )
        raise StaleIntervalError(
            f"start_timestamp is before the oldest retained version {oldest} of {log.storage.uri}",
            oldest_available=oldest,
        )
    if ts_ms == first_ts:
        return oldest
    return log.version_at_timestamp(ts_ms - 1, latest=latest) + 1


def read_interval(log: ManifestLog, a: int, b: int) -> list[list]:
    """The entries ``a..b``; StaleIntervalError if retention removed some."""
    if a > b:
        return []
    try:
        return log.read_entries(a, b)
    except VersionNotFoundError as e:
        oldest = _oldest_available(log, b)
        raise StaleIntervalError(
            f"changes {a}..{b} of {log.storage.uri} are no longer available: the log "
            f"retains versions from {oldest} on (retention removed the rest); start at "
            f"version {oldest} or later, or read a snapshot instead",
            oldest_available=oldest,
        ) from e


def _oldest_available(log: ManifestLog, b: int) -> int:
    """The oldest version ``v`` from which the entries ``v..b`` are all present.

    ``log.oldest_version()`` alone is not enough: with version 0 kept but later
    entries gone it would name 0, from which the scan fails again.
    """
    present = set(log.list().commits)
    v = b + 1
    while v - 1 in present:
        v -= 1
    return max(v, log.oldest_version())
