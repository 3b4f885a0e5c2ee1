"""The driver of ``ctfile verify``: :func:`verify_table` first looks for
symbolic links out of the table root (**symlink**; none is followed), runs
the log checks (:mod:`~ctfile.reader.verify.log_checks`), then checks the
data files of the checked snapshots on a thread pool
(:mod:`~ctfile.reader.verify.file_checks`) and row-id uniqueness per
snapshot (**duplicate_row_id**), checks the change files every retained
entry names (:mod:`~ctfile.reader.verify.change_checks`), and lists the
files under ``data/`` and ``_ct_changes/`` that the retained history does
not reference (:func:`ctfile.log.vacuum.retained_files`, the set vacuum
keeps). Stream states are checked last (:class:`StreamChecker`, check kind
**stream**): every state file under ``_ct_streams/`` must decode and name
the stream and sequence of its path and the table's ``tableId``, and a table
with streams must list the writer feature ``streams``; a live stream whose
pending changes need history the table no longer has, and that no vacuum
marked stale, is a warning (its next read raises ``StaleStreamError``).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping

import numpy as np

from ctfile.format.actions import FEATURE_STREAMS, Partition
from ctfile.format.errors import CtfileError, InvalidArgumentError, TableNotFoundError
from ctfile.format.paths import CHANGES_DIR, DATA_DIR, LOG_DIR
from ctfile.format.streams import StreamState, state_path
from ctfile.format.validators import is_int
from ctfile.log.manifest import ManifestLog
from ctfile.log.replay import TableState
from ctfile.log.storage import TMP_PREFIX, EscapingLink, LocalStorage, Storage, open_storage
from ctfile.log.storage_errors import missing_table_reason
from ctfile.log.streams import StreamFiles, StreamStore
from ctfile.log.vacuum import retained_files
from ctfile.reader.verify.change_checks import ChangeResult, check_change_commit
from ctfile.reader.verify.file_checks import FileResult, check_file, types_by_field_id
from ctfile.reader.verify.log_checks import LogChecker, Replay
from ctfile.reader.verify.report import ProgressFn, Recorder, VerifyProblem, VerifyReport

_MAX_DUPLICATE_EXAMPLES = 5


def verify_table(
    uri: str | os.PathLike,
    *,
    storage_options: Mapping[str, Any] | None = None,
    all_versions: bool = False,
    progress: ProgressFn | None = None,
    workers: int | None = None,
) -> VerifyReport:
    """Check the table at ``uri`` (see :mod:`ctfile.reader.verify` for the checks).

    Parameters
    ----------
    all_versions : bool
        Check the data and row-id uniqueness of every reconstructible version,
        not only the latest.
    progress : callable, optional
        ``progress(phase, done, total)`` is called as entries (phase ``"log"``)
        and data files (phase ``"files"``) are checked.
    workers : int, optional
        Threads checking data files (default 4 on local disk, 16 on object
        stores; at most 1024).

    Returns
    -------
    VerifyReport
        ``report.healthy`` is False when a problem was found.

    Raises
    ------
    TableNotFoundError
        If ``uri`` holds no ctfile table.
    InvalidArgumentError
        For a bad ``uri`` or ``storage_options``.
    UnsupportedFeatureError
        If the table needs a reader this ctfile is not.
    """
    _check_location(uri, storage_options)
    _check_options(all_versions=all_versions, progress=progress, workers=workers)
    storage = open_storage(os.fspath(uri), dict(storage_options) if storage_options else None)
    return _Verifier(storage, all_versions, progress, workers).run()


def _check_location(uri: object, storage_options: object) -> None:
    """:func:`verify_table`'s ``uri`` and ``storage_options``, or InvalidArgumentError."""
    if not isinstance(uri, (str, os.PathLike)) or not os.fspath(uri):
        raise InvalidArgumentError(f"uri must be a non-empty path or URL string, found {uri!r}")
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise InvalidArgumentError(f"storage_options must be a mapping, found {type(storage_options).__name__}")


def _check_options(*, all_versions: object, progress: object, workers: object) -> None:
    """:func:`verify_table`'s options, or InvalidArgumentError."""
    if not isinstance(all_versions, bool):
        raise InvalidArgumentError(f"all_versions must be a bool, found {all_versions!r}")
    if progress is not None and not callable(progress):
        raise InvalidArgumentError(f"progress must be a callable progress(phase, done, total), found {progress!r:.80}")
    if workers is not None and not _is_worker_count(workers):
        raise InvalidArgumentError(f"workers must be an int in 1..1024, found {workers!r:.80}")


def _is_worker_count(workers: object) -> bool:
    return is_int(workers) and 1 <= workers <= 1024


class _Verifier(Recorder):
    def __init__(self, storage: Storage, all_versions: bool, progress: ProgressFn | None, workers: int | None):
        super().__init__(VerifyReport(uri=storage.uri, all_versions=all_versions))
        self.storage = storage
        self.log = ManifestLog(storage)
        self.all_versions = all_versions
        self.progress = progress or (lambda phase, done, total: None)
        self.workers = workers or (4 if isinstance(storage, LocalStorage) else 16)
        self.logs = LogChecker(storage, self.log, self.report, self.progress, self.workers)
        self._links: set[str] = set()  # escaping links reported (their paths)

    # ------------------------------------------------------------ driver

    def run(self) -> VerifyReport:
        if self._check_links():
            return self._sorted()  # the log lies behind a link out of the root: not read
        listing = self.log.list()
        commits, checkpoints = listing.commits, listing.checkpoints
        if not commits and not checkpoints:
            raise TableNotFoundError(f"no ctfile table at {self.storage.uri}: {missing_table_reason(self.storage)}")
        present = set(commits)
        latest = max(commits + checkpoints)
        self.report.latest_version = latest
        self.logs.check_hint(set(checkpoints))
        self.logs.check_dense(commits, checkpoints, latest)

        # Replay every entry from the oldest starting point, checking as we go.
        base = self.logs.starting_state(present, checkpoints)
        replay = self.logs.replay(base, present, checkpoints, latest)
        if replay.final is None:
            self.problem("dense", "no version of the table can be reconstructed from its log")
            return self._sorted()
        self.report.oldest_version = replay.oldest
        end = replay.final.version
        if end != latest:
            self.logs.report_replay_stop(end, latest)
        self._check_data(replay)
        self._check_changes(replay)
        StreamChecker(StreamStore(self.storage), self.report).check(replay.final, replay.oldest)
        self._list_unreferenced(replay.oldest, end)
        return self._sorted()

    def _sorted(self) -> VerifyReport:
        def key(p: VerifyProblem):
            return -1 if p.version is None else p.version

        self.report.problems.sort(key=key)  # stable: keeps the order within a version
        self.report.warnings.sort(key=key)
        return self.report

    # ------------------------------------------------------------ links

    def _check_links(self) -> bool:
        """Report every symbolic link under ``_ct_log/`` and ``data/`` that
        leaves the table root, without following it. True if the log itself
        lies behind one (then it cannot be read without following it)."""
        links = self.storage.escaping_links([LOG_DIR, DATA_DIR, CHANGES_DIR])
        for link in links:
            self._link_problem(link)
        return any(link.path == LOG_DIR or link.path.startswith(LOG_DIR + "/") for link in links)

    def _link_problem(self, link: EscapingLink) -> None:
        if link.path in self._links:
            return
        self._links.add(link.path)
        self.problem(
            "symlink",
            f"a symbolic link to {link.target}, outside the table root: not followed, and every read, write, "
            "list and delete of a file behind it fails (SPEC §Table layout, confinement)",
            path=link.path,
        )

    def _confined(self, files: dict) -> dict:
        """``files`` without those behind a link out of the root (each such
        link reported once; the files are not opened). Paths under ``data/``
        need no check of their own when the walk of ``data/`` found no such
        link."""
        out = {}
        for path, p in files.items():
            walked = path.startswith(DATA_DIR + "/") and not self._links
            link = None if walked else self.storage.escaping_link(path)
            if link is None:
                out[path] = p
            else:
                self._link_problem(link)
        return out

    # ------------------------------------------------------------ data

    def _check_data(self, rep: Replay) -> None:
        """The data files of the latest version (of every version replay saw,
        with ``all_versions``) and the uniqueness of the row ids of each
        snapshot checked."""
        final = rep.final
        assert final is not None
        files = self._confined(rep.partitions if self.all_versions else dict(final.partitions))
        results = self._check_files(files, set(final.partitions), types_by_field_id(rep.schemas))
        for path in files:  # report in a stable order
            self._record(results[path])
        ids = {k: r.row_ids for k, r in results.items()}
        if not self.all_versions:
            self.report.snapshots_checked = [final.version]
            self._check_unique_ids(final.version, set(final.partitions), ids, {})
            return
        self._check_every_snapshot(rep, ids)

    def _check_files(
        self, files: dict[str, Partition], live: set[str], field_types: dict[int, str]
    ) -> dict[str, FileResult]:
        """:func:`check_file` of each of ``files`` on the worker threads (a
        file not ``live`` at the latest version may be gone)."""
        total = len(files)
        results: dict[str, FileResult] = {}
        self.progress("files", 0, total)

        def check(item):
            path, p = item
            return path, check_file(self.storage, p, field_types, removed=path not in live)

        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, total or 1))) as pool:
            for done, (path, res) in enumerate(pool.map(check, files.items()), start=1):
                results[path] = res
                self.progress("files", done, total)
        return results

    def _record(self, res: FileResult) -> None:
        """The findings and the counts of one file's checks, into the report."""
        self.report.problems.extend(res.problems)
        self.report.warnings.extend(res.warnings)
        self.report.files_checked += 1
        self.report.bytes_checked += res.size
        self.report.rows_checked += res.rows

    def _check_every_snapshot(self, rep: Replay, ids: dict[str, np.ndarray | None]) -> None:
        """Walk the versions; duplicates can only appear where partitions are
        added (or replay restarts from a checkpoint), so only those versions
        need the sort."""
        live: set[str] = set()
        reported: dict[frozenset, bool] = {}
        for version, reset, added, removed in rep.steps:
            self.report.snapshots_checked.append(version)
            if reset is not None:
                live = set(reset)
            live.difference_update(removed)
            live.update(added)
            if reset is not None or added:
                self._check_unique_ids(version, live, ids, reported)

    def _check_unique_ids(
        self, version: int, live: set[str], ids: dict[str, np.ndarray | None], reported: dict[frozenset, bool]
    ) -> None:
        """SPEC §Row lineage: no row id twice in the snapshot of ``version``
        (whose partitions are ``live``); a clash already ``reported`` at an
        earlier version is not reported again."""
        parts = sorted(p for p in live if ids.get(p) is not None)
        arrays = [ids[p] for p in parts]
        dups = _duplicates(arrays)
        if not len(dups):
            return
        holders = _holding(parts, arrays, dups)
        key = frozenset(holders)
        if key in reported:  # the same clash, still live at a later version
            return
        reported[key] = True
        examples = [f"{int(x)} in " + ", ".join(_holding(parts, arrays, x)) for x in dups[:_MAX_DUPLICATE_EXAMPLES]]
        msg = (
            f"{len(dups)} row ids appear more than once in the snapshot of version {version} "
            f"(e.g. {'; '.join(examples)})"
        )
        self.report.problems.append(VerifyProblem("duplicate_row_id", msg, version, ", ".join(holders)))

    def _check_changes(self, rep: Replay) -> None:
        """The change files of every retained entry, and the capture of the
        commits that had to be captured (SPEC §Change capture)."""
        commits = rep.change_commits
        if not commits:
            return
        field_types = types_by_field_id(rep.schemas)
        if self._links:  # a change file behind a link out of the root is not opened
            for c in commits:
                c.files = list(self._confined({f.path: f for f in c.files}).values())

        def check(c) -> ChangeResult:
            return check_change_commit(self.storage, c, field_types)

        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(commits)))) as pool:
            results = list(pool.map(check, commits))
        for res in results:  # in version order
            self.report.problems.extend(res.problems)
            for _, r in res.results:
                self.report.problems.extend(r.problems)
                self.report.files_checked += 1
                self.report.bytes_checked += r.size
                self.report.rows_checked += r.rows

    def _list_unreferenced(self, oldest: int | None, latest: int) -> None:
        """The files under ``data/`` and ``_ct_changes/`` outside :func:`retained_files` of the
        oldest reconstructable version: what vacuum deletes once they are
        older than its grace period. Not listed (left empty) when the retained
        history cannot be read or ``data/`` cannot be listed: the problems
        that prevent it are reported already."""
        if oldest is None:
            return
        try:
            referenced = retained_files(self.log, oldest, latest)
            infos = self.storage.list_dir(DATA_DIR) + self.storage.list_dir(CHANGES_DIR)
        except (CtfileError, OSError):
            return
        self.report.unreferenced_files = sorted(
            i.path for i in infos
            if i.path not in referenced and not i.path.rsplit("/", 1)[-1].startswith(TMP_PREFIX)
        )


def _duplicates(arrays: list[np.ndarray]) -> np.ndarray:
    """The values that appear more than once in ``arrays`` taken together, sorted."""
    if not arrays:
        return np.zeros(0, dtype=np.int64)
    s = np.sort(np.concatenate(arrays))
    return np.unique(s[1:][s[1:] == s[:-1]])


def _holding(parts: list[str], arrays: list[np.ndarray], values: np.ndarray | int) -> list[str]:
    """The partitions of ``parts`` (whose row ids are ``arrays``) that hold any of ``values``."""
    return [p for p, a in zip(parts, arrays) if np.isin(a, values).any()]


class StreamChecker(Recorder):
    """Checks the streams of the table in ``store`` against its latest state."""

    def __init__(self, store: StreamStore, report: VerifyReport):
        super().__init__(report)
        self.store = store

    def check(self, latest: TableState, oldest_version: int) -> None:
        """Every stream's states are readable and of this table; the protocol
        lists the streams feature if there are streams; a live stream that
        needs versions no longer retained is stale (a warning)."""
        current: list[StreamState] = []
        for name, files in self.store.listing().items():
            state = self._check_states(name, files, latest)
            if state is not None:
                current.append(state)
        if current and FEATURE_STREAMS not in latest.protocol.writer_features:
            self.problem("stream", f"the table has streams ({', '.join(s.name for s in current)}) but its protocol "
                         f"does not list the writer feature {FEATURE_STREAMS}", version=latest.version)
        for s in current:
            if _stale(s, latest, oldest_version):
                self.warning("stream", f"stream {s.name} has not consumed the versions after {s.offset}, but the "
                             f"oldest version retained is {oldest_version}: it is stale, and no vacuum marked it",
                             path=state_path(s.name, s.sequence))

    def _check_states(self, name: str, files: StreamFiles, latest: TableState) -> StreamState | None:
        """Read every state of stream ``name`` and check it is of this table;
        its current state, or None if unreadable."""
        states = {seq: self._read(name, seq) for seq in sorted(files.files)}
        table_id = latest.metadata.table_id
        for seq, s in states.items():
            if s is not None and s.table_id != table_id:
                self.problem("stream", f"stream {name} state {seq} names table {s.table_id}, not this table "
                             f"({table_id})", path=state_path(name, seq))
        return states[files.current_sequence]

    def _read(self, name: str, sequence: int) -> StreamState | None:
        try:
            return self.store.read(name, sequence)
        except (CtfileError, OSError) as e:
            self.problem("stream", f"stream {name} state {sequence} is unreadable: {e}",
                         path=state_path(name, sequence))
            return None


def _stale(stream: StreamState, latest: TableState, oldest_version: int) -> bool:
    """A live stream with versions left to consume that the retained history no longer holds."""
    return stream.is_live and stream.needs_from() < oldest_version and stream.offset < latest.version
