"""Whole commit entries (SPEC §Log entries): writing them self-checking,
reading them with every rule a reader checks on an entry alone.

An entry's ``commitInfo`` records ``numActions``, the number of its action
lines, and ``actionsChecksum``, the XXH3-128 of its other lines as written.
Both are computed over bytes, not decoded actions, so lines of action kinds a
reader does not know count and are hashed like the others, and checking
never re-encodes anything. :func:`encode_entry` is the only way ctfile writes
an entry; :func:`decode_entry` is how it reads one.

Examples
--------
>>> from ctfile.format.actions import AddPartition, CommitInfo, Partition
>>> adds = [AddPartition(Partition(f"data/{i}.parquet", 10, 2, 2 * i, 4, 0)) for i in range(2)]
>>> data = encode_entry([CommitInfo(7, "INSERT"), *adds])
>>> [type(a).__name__ for a in decode_entry(data, version=4, where="v4")]
['CommitInfo', 'AddPartition', 'AddPartition']
>>> torn = data[: data.rindex(b"\\n", 0, -1) + 1]  # the last line lost, at a line boundary
>>> decode_entry(torn, version=4, where="v4")
Traceback (most recent call last):
  ...
ctfile.format.errors.CorruptLogError: v4: entry holds 2 actions, its commitInfo records 3 (numActions): torn or edited
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import xxhash

from ctfile.format.actions import (
    Action,
    AddPartition,
    ChangeFile,
    CommitInfo,
    Metadata,
    Protocol,
    RemovePartition,
    SetTransaction,
)
from ctfile.format.codec import action_from_json, decode_lines, encode_line, parse_lines, writable_action_json
from ctfile.format.errors import CorruptLogError
from ctfile.format.paths import CHANGES_DIR, is_change_file_path


def encode_entry(actions: Iterable[Action]) -> bytes:
    """The bytes of a commit entry: the ``commitInfo`` line first, recording
    ``numActions`` and ``actionsChecksum`` of what follows, then the other
    actions in the order given.

    Raises
    ------
    ValueError
        ``actions`` do not hold exactly one :class:`CommitInfo`.
    InvalidArgumentError
        An action holds a value readers refuse
        (:func:`~ctfile.format.codec.writable_action_json`): no entry is
        encoded.
    """
    actions = list(actions)
    info = _the_commit_info([a for a in actions if isinstance(a, CommitInfo)])
    # One action at a time, like encode_actions: building every object first is slower on large entries.
    rest = _lines(writable_action_json(a) for a in actions if a is not info)
    return _sealed(writable_action_json(info)["commitInfo"], rest, len(actions))


def encode_entry_objects(objects: Iterable[dict]) -> bytes:
    """:func:`encode_entry` of action objects in their JSON form (one key
    each), for actions this module has no class for. Unchecked: what the
    objects hold is written as it is (tests write what readers must refuse
    with it).

    Examples
    --------
    >>> data = encode_entry_objects([{"future": {"x": 1}}, {"commitInfo": {"timestamp": 1, "operation": "X"}}])
    >>> print(data.decode(), end="")
    {"commitInfo":{"timestamp":1,"operation":"X","numActions":2,"actionsChecksum":"2e213a053cdb4833bbb656a0640af981"}}
    {"future":{"x":1}}
    >>> (info,) = decode_entry(data, version=3, where="v3")  # the unknown action is skipped
    >>> info.num_actions, info.actions_checksum == xxhash.xxh3_128_hexdigest(b'{"future":{"x":1}}\\n')
    (2, True)
    """
    objects = list(objects)
    info = _the_commit_info([o for o in objects if "commitInfo" in o])
    return _sealed(info["commitInfo"], _lines(o for o in objects if o is not info), len(objects))


def _the_commit_info(infos: list) -> Any:
    if len(infos) != 1:
        raise ValueError(f"an entry holds exactly one commitInfo, {len(infos)} given")
    return infos[0]


def _lines(objects: Iterable[dict]) -> bytes:
    return "".join(encode_line(o) + "\n" for o in objects).encode("utf-8")


def _sealed(info_body: dict, rest: bytes, num_actions: int) -> bytes:
    """The commitInfo line recording ``num_actions`` and the hash of ``rest``, then ``rest``."""
    body = dict(info_body, numActions=num_actions, actionsChecksum=xxhash.xxh3_128_hexdigest(rest))
    return (encode_line({"commitInfo": body}) + "\n").encode("utf-8") + rest


def decode_entry(data: bytes, *, version: int, where: str) -> list[Action]:
    """The actions of the entry of ``version``, read from its bytes and checked:
    each action, then (before any action is used) the self-check of the
    ``commitInfo`` if it has one, then :func:`validate_commit_entry`.

    Raises
    ------
    CorruptLogError
        Naming ``where``: invalid UTF-8 or JSON, a cut last line, a bad
        action, an entry that does not match its ``commitInfo``'s
        ``numActions`` / ``actionsChecksum``, or a broken entry rule.
    """
    lines = parse_lines(data, where=where)
    return _checked(data, lines, num_actions=len(lines), version=version, where=where)


PARTITION_LINE_PREFIXES = (b'{"add":', b'{"remove":')
"""How the ``add`` and ``remove`` lines ctfile writes begin (compact JSON,
SPEC §Log entries). A line that begins so can hold no other action kind."""


def decode_table_actions(data: bytes, *, version: int, where: str) -> list[Action]:
    """The actions of the entry of ``version`` other than its ``add`` and
    ``remove`` lines, which are counted and hashed but not decoded: what
    the table-level state (protocol, metadata, ``txn``, commit timestamp)
    needs, at the cost of a scan of the bytes rather than one JSON document
    and one :class:`~ctfile.format.actions.Partition` per partition.

    Checked before anything is returned, as by :func:`decode_entry`: the
    final newline, each decoded line, the ``commitInfo``'s self-check
    (``numActions`` over every line, ``actionsChecksum`` over the bytes),
    and rules 1, 2 and 7. Left to :func:`decode_entry`, which the partition
    state needs anyway: the JSON and fields of the lines that begin with
    :data:`PARTITION_LINE_PREFIXES` and the UTF-8 of those lines, rules 3-5.
    A line written otherwise (``{ "add": ...}``, say) is decoded here, like
    any line, so no ``protocol`` or ``metadata`` is missed.

    Examples
    --------
    >>> from ctfile.format.actions import AddPartition, CommitInfo, Partition
    >>> adds = [AddPartition(Partition(f"data/{i}.parquet", 10, 2, 2 * i, 4, 0)) for i in range(3)]
    >>> data = encode_entry([CommitInfo(7, "INSERT"), *adds])
    >>> [type(a).__name__ for a in decode_table_actions(data, version=4, where="v4")]
    ['CommitInfo']
    >>> decode_table_actions(data.replace(b'"data/1', b'"data/9'), version=4, where="v4")
    Traceback (most recent call last):
      ...
    ctfile.format.errors.CorruptLogError: v4: the XXH3-128 of its lines other than the commitInfo is ...
    """
    if data and not data.endswith(b"\n"):
        raise CorruptLogError(f"{where}: truncated entry (last line has no terminating newline)")
    starts, ends, is_partition = _partition_lines(data)
    lines: list[tuple[int, Any]] = []
    for i in np.flatnonzero(~is_partition).tolist():
        lines.extend(parse_lines(data[starts[i]:ends[i] + 1], where=where, first_lineno=i + 1))
    num_actions = int(np.count_nonzero(is_partition)) + len(lines)
    return _checked(data, lines, num_actions=num_actions, version=version, where=where)


def _partition_lines(data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The start and newline offsets of each line of ``data`` (which ends
    with ``"\\n"``), and whether it begins with one of
    :data:`PARTITION_LINE_PREFIXES`: vectorized, one pass over the bytes,
    then the first 16 bytes of each line compared as two 64-bit words."""
    buf = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(buf == 0x0A)
    starts = np.zeros_like(ends)
    starts[1:] = ends[:-1] + 1
    # Past the end of a short line the window reads the next lines (or the
    # last byte again): harmless, as a line must be long enough to match.
    heads = buf[np.minimum(starts[:, None] + np.arange(16), len(buf) - 1)].view("<u8")
    is_partition = np.zeros(len(ends), dtype=bool)
    for prefix in PARTITION_LINE_PREFIXES:
        value = np.frombuffer(prefix.ljust(16, b"\0"), dtype="<u8")
        mask = np.frombuffer(bytes([255] * len(prefix)).ljust(16, b"\0"), dtype="<u8")
        is_partition |= (
            ((heads[:, 0] & mask[0]) == value[0]) & ((heads[:, 1] & mask[1]) == value[1])
            & ((ends - starts) >= len(prefix))
        )
    return starts, ends, is_partition


def _checked(data: bytes, lines: list[tuple[int, Any]], *, num_actions: int, version: int, where: str) -> list[Action]:
    """The actions of ``lines`` (parsed from ``data``, which holds
    ``num_actions`` action lines), after the self-check of the
    ``commitInfo`` if it has one, then :func:`validate_commit_entry`."""
    infos = [i for i, (_, o) in enumerate(lines) if type(o) is dict and len(o) == 1 and "commitInfo" in o]
    if len(infos) == 1:
        i = infos[0]
        lineno = lines[i][0]
        info = action_from_json(lines[i][1], f"{where} line {lineno}")
        problem = integrity_problem(data, info, info_lineno=lineno, num_actions=num_actions)
        if problem is not None:
            raise CorruptLogError(f"{where}: {problem}")
        actions = [*decode_lines(lines[:i], where=where), info, *decode_lines(lines[i + 1:], where=where)]
    else:
        actions = decode_lines(lines, where=where)  # validate_commit_entry reports rule 1
    validate_commit_entry(actions, version=version, where=where)
    return actions


def integrity_problem(data: bytes, info: CommitInfo, *, info_lineno: int, num_actions: int) -> str | None:
    """What is wrong with an entry by its ``commitInfo``'s self-check, or None
    (also when it records neither field, as in revision 1).

    ``info`` is the decoded :class:`CommitInfo`, found on line ``info_lineno``
    (1-based, lines split at ``"\\n"``) of ``data``; ``num_actions`` is the
    number of non-blank lines of ``data``, each an action whether or not the
    reader knows its kind.
    """
    n, expected = info.num_actions, info.actions_checksum
    if n is None and expected is None:
        return None
    if n is None or expected is None:
        has, lacks = ("numActions", "actionsChecksum") if expected is None else ("actionsChecksum", "numActions")
        return f"its commitInfo records {has} but not {lacks} (writers record both): edited or damaged"
    if num_actions != n:
        return f"entry holds {num_actions} actions, its commitInfo records {n} (numActions): torn or edited"
    found = checksum_without_line(data, info_lineno)
    if found != expected:
        return (
            f"the XXH3-128 of its lines other than the commitInfo is {found}, its commitInfo records "
            f"{expected} (actionsChecksum): damaged or edited"
        )
    return None


def checksum_without_line(data: bytes, lineno: int) -> str:
    """XXH3-128 (32 hex digits) of ``data`` without its line ``lineno``
    (1-based) and that line's ``"\\n"``.

    Examples
    --------
    >>> checksum_without_line(b"c\\na\\nb\\n", 1) == xxhash.xxh3_128_hexdigest(b"a\\nb\\n")
    True
    >>> checksum_without_line(b"a\\nc\\nb\\n", 2) == xxhash.xxh3_128_hexdigest(b"a\\nb\\n")
    True
    """
    start = 0
    for _ in range(lineno - 1):
        start = data.index(b"\n", start) + 1
    end = data.find(b"\n", start)
    end = len(data) if end < 0 else end + 1
    view = memoryview(data)
    if start == 0:  # the commitInfo first, as writers put it: one run of bytes
        return xxhash.xxh3_128_hexdigest(view[end:])
    h = xxhash.xxh3_128(view[:start])
    h.update(view[end:])
    return h.hexdigest()


def duplicate_paths(actions: Iterable[Any]) -> list[str]:
    """The paths named by more than one ``add`` / ``remove`` / ``change`` of
    an entry, whatever their order (SPEC §Log entries, rule 4).

    Examples
    --------
    >>> from ctfile.format.actions import Partition
    >>> p = Partition("data/a.parquet", 10, 2, 0, 4, 0)
    >>> duplicate_paths([RemovePartition(p, 1), AddPartition(p)]), duplicate_paths([AddPartition(p)])
    (['data/a.parquet'], [])
    """
    seen: set[str] = set()
    dups: list[str] = []
    for a in actions:
        if isinstance(a, (AddPartition, RemovePartition, ChangeFile)):
            if a.path in seen:
                dups.append(a.path)
            seen.add(a.path)
    return dups


def repeated_actions(actions: Iterable[Any]) -> list[str]:
    """The actions an entry holds more than once although it may hold one
    (SPEC §Log entries, rule 7): ``protocol``, ``metadata``, a ``txn`` per
    ``appId``. Replay would keep whichever comes last.

    Examples
    --------
    >>> repeated_actions([SetTransaction("a", 1, 5), Protocol(), SetTransaction("a", 2, 5)])
    ["txn of appId 'a'"]
    """
    seen: set[Any] = set()
    out: list[str] = []
    for a in actions:
        if isinstance(a, (Protocol, Metadata, SetTransaction)):
            key = (SetTransaction, a.app_id) if isinstance(a, SetTransaction) else type(a)
            if key in seen:
                out.append(f"txn of appId {a.app_id!r}" if isinstance(a, SetTransaction) else type(a).__name__.lower())
            seen.add(key)
    return out


def validate_commit_entry(actions: list[Action], *, version: int, where: str) -> CommitInfo:
    """SPEC §Log entries: the rules a reader checks on an entry alone (1, 2,
    3's ``defaultRowVersion``, 4's "no path twice", 7), so that the state
    it yields depends on none of its actions' order. Returns its CommitInfo.

    Raises
    ------
    CorruptLogError
        Naming ``where`` and the rule broken.
    """
    infos = [a for a in actions if isinstance(a, CommitInfo)]
    if len(infos) != 1:
        raise CorruptLogError(f"{where}: expected exactly one commitInfo, found {len(infos)}")
    if version == 0:
        _check_first_entry(actions, where)
    _check_adds(actions, version, where)
    _check_nothing_twice(actions, where)
    return infos[0]


def _check_first_entry(actions: list[Action], where: str) -> None:
    """Rule 2: version 0 holds the protocol and the metadata."""
    kinds = {type(a) for a in actions}
    if Protocol not in kinds or Metadata not in kinds:
        raise CorruptLogError(f"{where}: version 0 must contain protocol and metadata actions")


def _check_adds(actions: list[Action], version: int, where: str) -> None:
    """Rules 3 and 4 for each ``add``: its partition is of the entry's
    version and not a change file."""
    for a in actions:
        if not isinstance(a, AddPartition):
            continue
        if a.partition.default_row_version != version:
            raise CorruptLogError(
                f"{where}: add {a.path} has defaultRowVersion {a.partition.default_row_version}, "
                f"expected the entry's version {version}"
            )
        if is_change_file_path(a.path):
            raise CorruptLogError(
                f"{where}: add {a.path} names a change file; partitions are never under {CHANGES_DIR}/ "
                "(SPEC §Log entries, rule 4)"
            )


def _check_nothing_twice(actions: list[Action], where: str) -> None:
    """Rules 4 and 7: no path named twice, no action repeated."""
    dups = duplicate_paths(actions)
    if dups:
        raise CorruptLogError(
            f"{where}: {dups[0]} is named by more than one add/remove/change of the entry, which the "
            f"entry's actions must not do in any order (SPEC §Log entries, rule 4)"
        )
    repeated = repeated_actions(actions)
    if repeated:
        raise CorruptLogError(f"{where}: the entry holds more than one {repeated[0]} (SPEC §Log entries, rule 7)")
