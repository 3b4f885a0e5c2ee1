"""Checks of the log: **log**, **path**, **dense**, **replay**, **checkpoint**
(and the **row_lineage** rule of ``firstRowId``, which needs the replayed state).

:class:`LogChecker` reads the checkpoint hint, checks that versions are dense
and have a starting point, then replays every retained entry leniently from
the oldest starting point: each entry is parsed line by line (a line that
breaks SPEC §Log entries is reported and the rest kept; a path that escapes
the table root is reported and never opened), each broken rule is reported
and replay goes on, and every readable checkpoint is compared with the state
replay yields for its version. What replay keeps (:class:`Replay`) drives the
data checks.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Iterator

from ctfile.format.actions import AddPartition, CommitInfo, Metadata, Partition, RemovePartition
from ctfile.format.codec import action_from_json
from ctfile.format.derived import ALTER_OPERATION, RefreshInfo, same_frontier
from ctfile.format.entries import integrity_problem
from ctfile.format.errors import CorruptLogError
from ctfile.format.log_values import nested_too_deeply
from ctfile.format.paths import LAST_CHECKPOINT, commit_path, validate_relative_path
from ctfile.format.schema import LONG_MAX, Schema
from ctfile.format.validators import is_int
from ctfile.log.manifest import ManifestLog
from ctfile.log.replay import Folded, ReplayMode, TableState, fold_entry
from ctfile.log.storage import LocalStorage, Storage
from ctfile.reader.verify.change_checks import ChangeCommit
from ctfile.reader.verify.report import ProgressFn, Recorder, VerifyProblem, VerifyReport


@dataclass
class Entry:
    version: int
    actions: list = field(default_factory=list)
    ok: bool = True  # parsed without a problem


@dataclass
class Replay:
    """What replay keeps: the last state, every partition some version held,
    and per version the paths added and removed (``reset``: the live set when
    replay (re)starts from a checkpoint)."""

    final: TableState | None = None
    oldest: int | None = None
    partitions: dict[str, Partition] = field(default_factory=dict)
    steps: list[tuple[int, set[str] | None, list[str], list[str]]] = field(default_factory=list)
    schemas: list[Schema] = field(default_factory=list)
    #: The commits with change files, or that had to be captured (SPEC §Change capture).
    change_commits: list[ChangeCommit] = field(default_factory=list)

    def start(self, state: TableState) -> None:
        self.partitions.update(state.partitions)
        self.steps.append((state.version, set(state.partitions), [], []))
        self._seen(state)

    def step(self, state: TableState, added: list[Partition], removed: list[str]) -> None:
        for p in added:
            self.partitions.setdefault(p.path, p)
        self.steps.append((state.version, None, [p.path for p in added], removed))
        self._seen(state)

    def _seen(self, state: TableState) -> None:
        if self.oldest is None:
            self.oldest = state.version
        if not self.schemas or self.schemas[-1] is not state.metadata.schema:
            self.schemas.append(state.metadata.schema)
        self.final = state


class LogChecker(Recorder):
    def __init__(
        self, storage: Storage, log: ManifestLog, report: VerifyReport, progress: ProgressFn, workers: int
    ):
        super().__init__(report)
        self.storage = storage
        self.log = log
        self.progress = progress
        self.workers = workers
        #: The runs of missing versions :meth:`check_dense` reported, by their first version.
        self._gaps: dict[int, VerifyProblem] = {}

    def report_replay_stop(self, end: int, latest: int) -> None:
        """Replay reached ``end``, not ``latest``: say so, in the problem of
        the gap that stopped it if one starts right after ``end`` (one
        problem per cause, however many versions the gap spans)."""
        consequence = f"the latest version {latest} cannot be reconstructed (replay stops at version {end})"
        gap = self._gaps.get(end + 1)
        if gap is None:
            self.problem("dense", consequence, version=latest)
            return
        problems = self.report.problems
        problems[problems.index(gap)] = replace(gap, message=f"{gap.message}: {consequence}")

    # ------------------------------------------------------------ log structure

    def check_hint(self, checkpoints: set[int]) -> None:
        try:
            raw = self.storage.read_bytes(LAST_CHECKPOINT)
        except FileNotFoundError:
            return
        try:
            v = json.loads(raw)["version"]
            if not is_int(v) or not 0 <= v <= LONG_MAX:
                raise ValueError(v)
        except (ValueError, KeyError, TypeError, RecursionError):
            self.warning("checkpoint", "the checkpoint hint is unreadable (readers fall back to listing)", path=LAST_CHECKPOINT)
            return
        if v not in checkpoints:
            self.warning(
                "checkpoint", f"the checkpoint hint names version {v}, which has no checkpoint "
                "(readers fall back to listing)", version=v, path=LAST_CHECKPOINT,
            )

    def check_dense(self, commits: list[int], checkpoints: list[int], latest: int) -> None:
        """SPEC §Log replay: versions are dense. Each run of versions listed
        neither as an entry nor as a checkpoint is one problem naming the
        run, and each checkpoint without its entry one more: the work is
        bounded by the listing, whatever the version numbers (a stray entry
        named with a huge version is one gap, not one problem per number)."""
        if not commits:
            return
        present = set(commits)
        first = commits[0]
        later_checkpoints = [c for c in checkpoints if first < c <= latest and c not in present]
        for lo, hi in missing_runs(sorted(present.union(later_checkpoints))):
            self.problem("dense", _missing_text(lo, hi), version=lo, path=commit_path(lo))
            self._gaps[lo] = self.report.problems[-1]
        for c in later_checkpoints:
            # A checkpoint without its entry: replay can restart there, but the entry itself is gone.
            self.problem("dense", f"version {c} has a checkpoint but no log entry", version=c, path=commit_path(c))
        if first > 0 and not _checkpoint_to_start_from(first, checkpoints, latest):
            self.problem(
                "dense",
                f"the log starts at version {first} and no checkpoint at version {first - 1} or later "
                f"lets replay start there",
                version=first,
            )

    def starting_state(self, present: set[int], checkpoints: list[int]) -> TableState | None:
        """None to replay from version 0; else the state of the oldest usable checkpoint."""
        if 0 in present:
            return None
        first = min(present) if present else None
        for c in checkpoints:
            if first is not None and c < first - 1:
                continue
            try:
                return self.log.read_checkpoint(c, decode_stats=True)
            except (FileNotFoundError, CorruptLogError) as e:
                self.problem("checkpoint", f"checkpoint {c} is needed to start replay but is unreadable: {e}", version=c)
        return None

    # ------------------------------------------------------------ entries

    def _read_entry(self, v: int) -> Entry:
        """Entry ``v`` parsed line by line, each broken rule reported and
        the usable actions kept (a missing file: an empty entry, not ok)."""
        path = commit_path(v)
        entry = Entry(v)
        try:
            data = self.storage.read_bytes(path)
        except FileNotFoundError:
            entry.ok = False
            return entry
        text = self._entry_text(entry, data)
        if text is None:
            return entry
        lines = 0  # action lines, understood or not: what numActions counts
        info_lineno = None
        for lineno, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            lines += 1
            act = self._line_action(entry, line, f"line {lineno}")
            if act is not None:
                entry.actions.append(act)
                if isinstance(act, CommitInfo):
                    info_lineno = lineno
        self._check_integrity(entry, data, info_lineno, lines)
        return entry

    def _entry_text(self, entry: Entry, data: bytes) -> str | None:
        """The entry's text; None (reported) if it is not UTF-8. A missing
        final newline is reported and the text kept."""
        path = commit_path(entry.version)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            self.problem("log", f"not valid UTF-8 ({e})", entry.version, path)
            entry.ok = False
            return None
        if text and not text.endswith("\n"):
            self.problem("log", "truncated entry: the last line has no terminating newline", entry.version, path)
            entry.ok = False
        return text

    def _line_action(self, entry: Entry, line: str, where: str):
        """The action of one line, or None; a problem is reported (and the
        entry marked not ok) for a line that is not JSON, nests too deeply,
        names a path out of the table root (never opened) or breaks a rule
        of its action (then what is usable of it is kept)."""
        v, path = entry.version, commit_path(entry.version)
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as e:
            message = f"{where}: invalid JSON ({e.msg})" if isinstance(e, json.JSONDecodeError) else str(nested_too_deeply(where))
            self.problem("log", message, v, path)
            entry.ok = False
            return None
        escaping = _escaping_path(obj)
        if escaping is not None:
            key, bad = escaping
            self.problem("path", f"{where}: {key} path {bad!r} escapes the table root (not opened)", v, bad)
            entry.ok = False
            return None
        try:
            return action_from_json(obj, where)
        except CorruptLogError as e:
            self.problem("log", str(e), v, _raw_path(obj) or path)
            entry.ok = False
            return _without_stats(obj, where)  # keep replaying with what is usable

    def _check_integrity(self, entry: Entry, data: bytes, info_lineno: int | None, lines: int) -> None:
        """SPEC §Log entries, rule 8: the entry against its commitInfo's
        numActions and actionsChecksum (with more than one commitInfo, rule 1
        is reported instead)."""
        infos = [a for a in entry.actions if isinstance(a, CommitInfo)]
        if len(infos) != 1 or info_lineno is None:
            return
        problem = integrity_problem(data, infos[0], info_lineno=info_lineno, num_actions=lines)
        if problem is not None:
            self.problem("log", problem, entry.version, commit_path(entry.version))
            entry.ok = False


    def _read_entries(self, versions: list[int]) -> Iterable[Entry]:
        """Entries in version order; fetched concurrently on object stores."""
        total = len(versions)
        if isinstance(self.storage, LocalStorage) or total < 2:
            for i, v in enumerate(versions):
                yield self._read_entry(v)
                self.progress("log", i + 1, total)
            return
        with ThreadPoolExecutor(max_workers=min(self.workers, total)) as pool:
            for i, e in enumerate(pool.map(self._read_entry, versions)):
                yield e
                self.progress("log", i + 1, total)

    def replay(
        self, base: TableState | None, present: set[int], checkpoints: list[int], latest: int
    ) -> Replay:
        """Replay the log, checking every entry; keeps only the current state
        and, per version, which paths were added and removed."""
        rep = Replay()
        if base is not None:
            rep.start(base)
            first = base.version + 1
        elif 0 in present:
            first = 0
        else:
            return rep
        state = base
        cps = set(checkpoints)
        previous = first - 1
        # The listed versions only: the loop is bounded by the listing, not by version numbers.
        for entry in self._read_entries(sorted(v for v in present if first <= v <= latest)):
            v = entry.version
            self.report.entries_checked += 1
            state = self._state_before(v, state if v == previous + 1 else None, cps, rep)
            previous = v
            if state is not None or v == 0:
                state = self._replay_entry(state, entry, cps, rep)
        return rep

    def _replay_entry(self, state: TableState | None, entry: Entry, cps: set[int], rep: Replay) -> TableState | None:
        """Fold ``entry`` into ``state`` (None before version 0), keeping what
        replay keeps and comparing the checkpoint of its version with the
        result; None when the entry could not be applied."""
        read_properties = state.metadata.properties if state is not None else {}
        before = state.metadata if state is not None else None
        applied = self._apply(state, entry)
        if applied is None:
            return None
        state = applied.state
        for message in derived_problems(before, entry.actions):
            self.problem("replay", message, entry.version, commit_path(entry.version))
        rep.step(state, applied.added, applied.removed)
        change_commit = ChangeCommit.of(entry.version, entry.actions, state.metadata.schema, read_properties)
        if change_commit is not None:
            rep.change_commits.append(change_commit)
        if entry.version in cps:
            self._compare_checkpoint(state)
        return state

    def _state_before(self, v: int, state: TableState | None, cps: set[int], rep: Replay) -> TableState | None:
        """The state entry ``v`` applies to: ``state`` (that of ``v - 1``),
        or when there is none (after a gap, or an entry that could not be
        applied) the checkpoint of ``v - 1``, from which replay restarts."""
        if state is not None or v == 0:
            return state
        state = self._restart(v - 1, cps)
        if state is not None:
            rep.start(state)
        return state

    def _restart(self, c: int, cps: set[int]) -> TableState | None:
        if c not in cps:
            return None
        try:
            return self.log.read_checkpoint(c, decode_stats=True)
        except (FileNotFoundError, CorruptLogError) as e:
            self.problem("checkpoint", f"checkpoint {c} is needed to resume replay after a gap but is unreadable: {e}", version=c)
            return None

    def _apply(self, state: TableState | None, entry: Entry) -> Folded | None:
        """Fold one entry collecting (:func:`~ctfile.log.replay.fold_entry`),
        reporting each broken rule; None when it could not be applied.
        Updates the maps of ``state`` in place (replay holds no older state)."""
        v = entry.version
        path = commit_path(v)
        folded = fold_entry(
            state, v, entry.actions, where=f"{self.storage.uri}/{path}", mode=ReplayMode.COLLECT, owned=True,
        )
        for found in folded.problems:
            record = self.warning if found.warning else self.problem
            record(found.check, found.message, v, found.path or path)
        return None if folded.state is None else folded

    # ------------------------------------------------------------ checkpoints

    def _compare_checkpoint(self, state: TableState) -> None:
        v = state.version
        try:
            # Compared whole below, a checkpoint of another table included.
            cp = self.log.read_checkpoint(v, decode_stats=True, check_identity=False)
        except (FileNotFoundError, CorruptLogError) as e:
            self.warning("checkpoint", f"checkpoint is unreadable and will be skipped by readers: {e}", v)
            return
        if cp.metadata.table_id != state.metadata.table_id:
            self.problem(
                "checkpoint", f"checkpoint is a state of table {cp.metadata.table_id}, not of this table "
                f"({state.metadata.table_id}): a copy from another table, which readers skip "
                f"(SPEC §Checkpoints, identity)", v,
            )
            return
        diffs = checkpoint_differences(cp, state)
        if diffs:
            self.problem("checkpoint", "checkpoint does not match the log: " + "; ".join(diffs), v)


def derived_problems(before: Metadata | None, actions: list) -> list[str]:
    """The rules of SPEC §Derived tables (writer requirements) an entry
    breaks, given the metadata of the version it was written over (None for
    version 0): ``derived`` only added at creation and never removed, rows
    of a derived table changed only by a refresh commit, whose metadata
    records the frontier of its ``commitInfo.refresh``, and ``derived``
    changed outside a refresh only by an alter commit, in its mode and lag."""
    info = next((a for a in actions if isinstance(a, CommitInfo)), None)
    md = next((a for a in actions if isinstance(a, Metadata)), None)
    was = before is not None and before.derived is not None
    if _flips_derived(before, md):
        return [f"metadata.derived {'removed from' if was else 'added to'} an existing table (SPEC §Derived tables)"]
    if not was or info is None:
        return []
    if info.refresh is None and _changes_rows(actions):
        return [f"{info.operation} changed the rows of a derived table outside a refresh commit "
                f"(SPEC §Derived tables)"]
    if info.refresh is None:
        return _alter_problems(before, md, info.operation)
    if not _records_refresh(md, info.refresh):
        found = None if md is None or md.derived is None else (md.derived.frontier, md.derived.data_timestamp)
        return [f"the refresh commit's metadata.derived does not record the frontier of its commitInfo.refresh "
                f"(SPEC §Derived tables): found {found}"]
    return []


def _alter_problems(before: Metadata, md: Metadata | None, operation: str) -> list[str]:
    """SPEC §Derived tables, changing a definition: a commit that is not a
    refresh changes ``derived`` only as an ``ALTER DERIVED`` commit, in
    ``refreshMode`` and ``targetLag`` alone."""
    if md is None or md.derived == before.derived:
        return []
    if operation == ALTER_OPERATION and before.derived.is_altered_by(md.derived):
        return []
    return [f"{operation} changed metadata.derived outside a refresh commit; expected the definition read, or an "
            f"{ALTER_OPERATION} commit changing only refreshMode and targetLag (SPEC §Derived tables)"]


def _flips_derived(before: Metadata | None, md: Metadata | None) -> bool:
    """Whether ``md`` adds ``derived`` to, or removes it from, an existing table."""
    return md is not None and before is not None and md.is_derived != before.is_derived


def _changes_rows(actions: list) -> bool:
    return any(isinstance(a, (AddPartition, RemovePartition)) and a.data_change for a in actions)


def _records_refresh(md: Metadata | None, refresh: RefreshInfo) -> bool:
    """Whether ``md`` records the frontier and data timestamp of ``refresh``."""
    d = None if md is None else md.derived
    return d is not None and same_frontier(d.frontier, refresh.frontier) and d.data_timestamp == refresh.data_timestamp


def checkpoint_differences(cp: TableState, state: TableState) -> list[str]:
    """How the state a checkpoint holds differs from the one replay yields
    for its version (the live partitions first, at most three named)."""
    diffs = _partition_differences(cp.partitions, state.partitions)
    if cp.next_row_id != state.next_row_id:
        diffs.append(f"nextRowId {cp.next_row_id} != {state.next_row_id}")
    if cp.timestamp != state.timestamp:
        diffs.append(f"timestamp {cp.timestamp} != {state.timestamp}")
    if cp.metadata != state.metadata:
        diffs.append("metadata differs")
    if cp.protocol != state.protocol:
        diffs.append("protocol differs")
    return diffs


def _partition_differences(in_checkpoint: dict[str, Partition], in_log: dict[str, Partition]) -> list[str]:
    """The live partitions only one side holds, else those whose descriptors differ."""
    if set(in_checkpoint) != set(in_log):
        extra = sorted(set(in_checkpoint) - set(in_log))
        missing = sorted(set(in_log) - set(in_checkpoint))
        return [f"live partitions differ (only in checkpoint: {extra[:3]}, only in log: {missing[:3]})"]
    changed = [k for k in in_log if in_checkpoint[k] != in_log[k]]
    return [f"descriptors of {len(changed)} partitions differ (e.g. {changed[0]})"] if changed else []


def _checkpoint_to_start_from(first: int, checkpoints: list[int], latest: int) -> bool:
    """Whether replay can start for a log whose oldest entry is ``first``:
    a checkpoint of ``first - 1`` or later (up to ``latest``) exists."""
    return any(first - 1 <= c <= latest for c in checkpoints)


def missing_runs(versions: list[int]) -> Iterator[tuple[int, int]]:
    """The runs ``(lo, hi)`` of numbers missing between consecutive items of
    the sorted list ``versions``: one per gap, whatever its length.

    >>> list(missing_runs([0, 1, 4, 5, 10**15]))
    [(2, 3), (6, 999999999999999)]
    """
    for before, after in zip(versions, versions[1:]):
        if after > before + 1:
            yield before + 1, after - 1


def _missing_text(lo: int, hi: int) -> str:
    if lo == hi:
        return f"version {lo} is missing from the log (versions must be dense)"
    return f"versions {lo}..{hi} ({hi - lo + 1} versions) are missing from the log (versions must be dense)"


def _without_stats(obj: Any, where: str):
    """An undecodable add/remove decoded again without its ``stats`` (so
    replay and the file checks go on), or None."""
    if not (isinstance(obj, dict) and len(obj) == 1):
        return None
    (key, body), = obj.items()
    if key not in ("add", "remove") or not isinstance(body, dict) or "stats" not in body:
        return None
    try:
        return action_from_json({key: {k: v for k, v in body.items() if k != "stats"}}, where)
    except CorruptLogError:
        return None


def _escaping_path(obj: Any) -> tuple[str, str] | None:
    """``(kind, path)`` of an add or remove line whose path leaves the
    table root (SPEC §Table layout), else None."""
    if not (isinstance(obj, dict) and len(obj) == 1):
        return None
    (key, body), = obj.items()
    if key not in ("add", "remove") or not isinstance(body, dict) or not isinstance(body.get("path"), str):
        return None
    try:
        validate_relative_path(body["path"], where="")
    except CorruptLogError:
        return key, body["path"]
    return None


def _raw_path(obj: Any) -> str | None:
    """The ``path`` of an undecodable add/remove line, for the report."""
    if isinstance(obj, dict) and len(obj) == 1:
        body = next(iter(obj.values()))
        if isinstance(body, dict) and isinstance(body.get("path"), str):
            return body["path"]
    return None
