"""Checking a table's integrity offline: ``fsck`` for ctfile (``ctfile verify``).

:func:`verify_table` reads the whole log and the data files a snapshot needs,
and reports every inconsistency it finds instead of stopping at the first:

* **log** -- every entry parses (UTF-8, final newline, one JSON object with one
  action per line, required fields) and follows the entry rules of SPEC §Log
  entries (one ``commitInfo``, protocol and metadata in version 0,
  ``defaultRowVersion`` equal to the version, ``firstRowId`` assigned from the
  row-id counter, no path twice in an entry);
* **dense** -- no version is missing between the oldest retained entry and the
  latest, and the history has a starting point (version 0 or a checkpoint);
* **path** -- no ``add``/``remove`` path escapes the table root (such a path is
  never opened);
* **replay** -- no ``add`` of a live path, no ``remove`` of a path that is not
  live, strictly increasing commit timestamps;
* **checkpoint** -- every readable checkpoint equals the state replay of the
  log yields for its version;
* **missing_file**, **size**, **checksum**, **unreadable**, **row_count** --
  every data file of the checked snapshots exists, has the recorded
  ``sizeBytes`` and XXH3-128 ``checksum``, is valid Parquet and holds
  ``numRecords`` rows;
* **stats** -- the recorded statistics are true of the data: exact null and
  NaN counts, bounds that really bound the values;
* **row_lineage** -- materialized row ids lie below ``firstRowId +
  numRecords`` and row versions at or below ``defaultRowVersion``;
* **duplicate_row_id** -- row ids are unique within every checked snapshot.

By default the data checks cover the latest snapshot; ``all_versions=True``
checks every version that can be reconstructed (files of partitions removed
before the latest version that no longer exist are then reported as warnings,
since vacuum deletes them on purpose). The log checks always cover every
retained entry. Nothing is written.

Examples
--------
>>> import ctfile, pyarrow as pa, tempfile
>>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
>>> _ = t.insert(pa.table({"id": [1, 2, 3]}))
>>> report = ctfile.verify_table(t.uri)
>>> report.healthy, report.latest_version, report.files_checked, report.problems
(True, 1, 1, [])
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash

from ctfile.format.actions import (
    AddPartition,
    CommitInfo,
    Metadata,
    Partition,
    PartitionStats,
    Protocol,
    RemovePartition,
    SetTransaction,
)
from ctfile.format.codec import action_from_json
from ctfile.format.errors import CorruptLogError, InvalidArgumentError, TableNotFoundError
from ctfile.format.paths import (
    DATA_DIR,
    LAST_CHECKPOINT,
    LOG_DIR,
    commit_path,
    validate_relative_path,
)
from ctfile.format.schema import (
    PARQUET_FIELD_ID_KEY,
    ROW_ID_COLUMN,
    ROW_ID_FIELD_ID,
    ROW_VERSION_COLUMN,
    ROW_VERSION_FIELD_ID,
    Schema,
)
from ctfile.format.stats import decode_bound, has_bounds
from ctfile.log.manifest import ManifestLog
from ctfile.log.replay import TableState, check_reader_protocol
from ctfile.log.storage import TMP_PREFIX, LocalStorage, Storage, open_storage
from ctfile.reader.partition_reader import materialize_hidden

# Kinds of problem (VerifyProblem.check).
CHECKS = (
    "log", "dense", "path", "replay", "checkpoint", "missing_file", "size", "checksum",
    "unreadable", "row_count", "stats", "row_lineage", "duplicate_row_id",
)
_MAX_DUPLICATE_EXAMPLES = 5


@dataclass(frozen=True)
class VerifyProblem:
    """One finding: what is wrong (``check``, one of :data:`CHECKS`), where
    (``version`` of the log entry or snapshot, ``path`` of the file or
    partition) and a readable ``message``."""

    check: str
    message: str
    version: int | None = None
    path: str | None = None

    def __str__(self) -> str:
        where = []
        if self.version is not None:
            where.append(f"version {self.version}")
        if self.path is not None:
            where.append(self.path)
        return f"[{self.check}] {', '.join(where)}: {self.message}" if where else f"[{self.check}] {self.message}"


@dataclass
class VerifyReport:
    """What :func:`verify_table` checked and found.

    ``problems`` make the table unhealthy; ``warnings`` are worth knowing but
    do not make a read fail or return wrong data (an unreadable checkpoint, a
    stale checkpoint hint, a vacuumed file of an old version).
    """

    uri: str
    all_versions: bool
    latest_version: int | None = None
    oldest_version: int | None = None
    entries_checked: int = 0
    snapshots_checked: list[int] = field(default_factory=list)
    files_checked: int = 0
    bytes_checked: int = 0
    rows_checked: int = 0
    problems: list[VerifyProblem] = field(default_factory=list)
    warnings: list[VerifyProblem] = field(default_factory=list)
    unreferenced_files: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        """A JSON-serializable form (``ctfile verify --json``)."""
        out = asdict(self)
        out["healthy"] = self.healthy
        return out


ProgressFn = Callable[[str, int, int], None]


def verify_table(
    uri: str | os.PathLike,
    *,
    storage_options: Mapping[str, Any] | None = None,
    all_versions: bool = False,
    progress: ProgressFn | None = None,
    workers: int | None = None,
) -> VerifyReport:
    """Check the table at ``uri`` (see the module documentation for the checks).

    Parameters
    ----------
    all_versions : bool
        Check the data and row-id uniqueness of every reconstructible version,
        not only the latest.
    progress : callable, optional
        ``progress(phase, done, total)`` is called as entries (phase ``"log"``)
        and data files (phase ``"files"``) are checked.

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
    if not isinstance(uri, (str, os.PathLike)) or not os.fspath(uri):
        raise InvalidArgumentError(f"uri must be a non-empty path or URL string, found {uri!r}")
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise InvalidArgumentError(f"storage_options must be a mapping, found {type(storage_options).__name__}")
    if not isinstance(all_versions, bool):
        raise InvalidArgumentError(f"all_versions must be a bool, found {all_versions!r}")
    storage = open_storage(os.fspath(uri), dict(storage_options) if storage_options else None)
    return _Verifier(storage, all_versions, progress, workers).run()


# ---------------------------------------------------------------- internals


@dataclass
class _Entry:
    version: int
    actions: list = field(default_factory=list)
    ok: bool = True  # parsed without a problem


@dataclass
class _FileResult:
    problems: list[VerifyProblem] = field(default_factory=list)
    warnings: list[VerifyProblem] = field(default_factory=list)
    row_ids: np.ndarray | None = None
    size: int = 0
    rows: int = 0


class _Verifier:
    def __init__(self, storage: Storage, all_versions: bool, progress: ProgressFn | None, workers: int | None):
        self.storage = storage
        self.log = ManifestLog(storage)
        self.all_versions = all_versions
        self.progress = progress or (lambda phase, done, total: None)
        self.workers = workers or (4 if isinstance(storage, LocalStorage) else 16)
        self.report = VerifyReport(uri=storage.uri, all_versions=all_versions)

    def problem(self, check: str, message: str, version: int | None = None, path: str | None = None) -> None:
        self.report.problems.append(VerifyProblem(check, message, version, path))

    def warning(self, check: str, message: str, version: int | None = None, path: str | None = None) -> None:
        self.report.warnings.append(VerifyProblem(check, message, version, path))

    # ------------------------------------------------------------ driver

    def run(self) -> VerifyReport:
        listing = self.log.list()
        commits, checkpoints = listing.commits, listing.checkpoints
        if not commits and not checkpoints:
            raise TableNotFoundError(f"no ctfile table at {self.storage.uri}: {LOG_DIR}/ holds no version file")
        present = set(commits)
        latest = max(commits + checkpoints)
        self.report.latest_version = latest
        self._check_hint(set(checkpoints))
        self._check_dense(commits, checkpoints, latest)

        # Replay every entry from the oldest starting point, checking as we go.
        base = self._starting_state(present, checkpoints)
        replay = self._replay(base, present, checkpoints, latest)
        if replay.final is None:
            self.problem("dense", "no version of the table can be reconstructed from its log")
            return self._sorted()
        self.report.oldest_version = replay.oldest
        end = replay.final.version
        if end != latest:
            self.problem(
                "dense",
                f"the latest version {latest} cannot be reconstructed (replay stops at version {end})",
                version=latest,
            )
        self._check_data(replay)
        self._list_unreferenced(set(replay.partitions))
        return self._sorted()

    def _sorted(self) -> VerifyReport:
        def key(p: VerifyProblem):
            return -1 if p.version is None else p.version

        self.report.problems.sort(key=key)  # stable: keeps the order within a version
        self.report.warnings.sort(key=key)
        return self.report

    # ------------------------------------------------------------ log structure

    def _check_hint(self, checkpoints: set[int]) -> None:
        try:
            raw = self.storage.read_bytes(LAST_CHECKPOINT)
        except FileNotFoundError:
            return
        try:
            v = json.loads(raw)["version"]
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(v)
        except (ValueError, KeyError, TypeError):
            self.warning("checkpoint", "the checkpoint hint is unreadable (readers fall back to listing)", path=LAST_CHECKPOINT)
            return
        if v not in checkpoints:
            self.warning(
                "checkpoint", f"the checkpoint hint names version {v}, which has no checkpoint "
                "(readers fall back to listing)", version=v, path=LAST_CHECKPOINT,
            )

    def _check_dense(self, commits: list[int], checkpoints: list[int], latest: int) -> None:
        if not commits:
            return
        present = set(commits)
        first = commits[0]
        for v in range(first, latest + 1):
            if v not in present and v not in checkpoints:
                self.problem("dense", f"version {v} is missing from the log (versions must be dense)", version=v, path=commit_path(v))
            elif v not in present and v > first:
                # A checkpoint without its entry: replay can restart there,
                # but the entry itself is gone.
                self.problem("dense", f"version {v} has a checkpoint but no log entry", version=v, path=commit_path(v))
        if first > 0 and not any(first - 1 <= c <= latest for c in checkpoints):
            self.problem(
                "dense",
                f"the log starts at version {first} and no checkpoint at version {first - 1} or later "
                f"lets replay start there",
                version=first,
            )

    def _starting_state(self, present: set[int], checkpoints: list[int]) -> TableState | None:
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

    def _read_entry(self, v: int) -> _Entry:
        path = commit_path(v)
        entry = _Entry(v)
        try:
            data = self.storage.read_bytes(path)
        except FileNotFoundError:
            entry.ok = False
            return entry
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            self.problem("log", f"not valid UTF-8 ({e})", v, path)
            entry.ok = False
            return entry
        if text and not text.endswith("\n"):
            self.problem("log", "truncated entry: the last line has no terminating newline", v, path)
            entry.ok = False
        for lineno, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            where = f"line {lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                self.problem("log", f"{where}: invalid JSON ({e.msg})", v, path)
                entry.ok = False
                continue
            if isinstance(obj, dict) and len(obj) == 1:
                (key, body), = obj.items()
                if key in ("add", "remove") and isinstance(body, dict) and isinstance(body.get("path"), str):
                    try:
                        validate_relative_path(body["path"], where=where)
                    except CorruptLogError:
                        self.problem(
                            "path", f"{where}: {key} path {body['path']!r} escapes the table root "
                            f"(not opened)", v, body["path"],
                        )
                        entry.ok = False
                        continue
            try:
                act = action_from_json(obj, where)
            except CorruptLogError as e:
                self.problem("log", str(e), v, _raw_path(obj) or path)
                entry.ok = False
                act = _without_stats(obj, where)  # keep replaying with what is usable
            if act is not None:
                entry.actions.append(act)
        return entry

    def _read_entries(self, versions: list[int]) -> Iterable[_Entry]:
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

    def _replay(
        self, base: TableState | None, present: set[int], checkpoints: list[int], latest: int
    ) -> "_Replay":
        """Replay the log, checking every entry; keeps only the current state
        and, per version, which paths were added and removed."""
        rep = _Replay()
        state: TableState | None = None
        if base is not None:
            state = base
            rep.start(base)
            first = base.version + 1
        elif 0 in present:
            first = 0
        else:
            return rep
        cps = set(checkpoints)
        for entry in self._read_entries(list(range(first, latest + 1))):
            v = entry.version
            if v not in present:
                state = None  # a gap: restart from a checkpoint at or after it
                continue
            self.report.entries_checked += 1
            if state is None and v > 0:
                state = self._restart(v - 1, cps)
                if state is None:
                    continue
                rep.start(state)
            applied = self._apply(state, entry)
            if applied is None:
                state = None
                continue
            state, added, removed = applied
            rep.step(state, added, removed)
            if v in cps:
                self._compare_checkpoint(state)
        return rep

    def _restart(self, c: int, cps: set[int]) -> TableState | None:
        if c not in cps:
            return None
        try:
            return self.log.read_checkpoint(c, decode_stats=True)
        except (FileNotFoundError, CorruptLogError) as e:
            self.problem("checkpoint", f"checkpoint {c} is needed to resume replay after a gap but is unreadable: {e}", version=c)
            return None

    def _apply(self, state: TableState | None, entry: _Entry) -> tuple[TableState, list[Partition], list[str]] | None:
        """Fold one entry leniently, reporting each broken rule and going on.
        Updates the maps of ``state`` in place (replay holds no older state)."""
        v = entry.version
        path = commit_path(v)
        acts = entry.actions
        infos = [a for a in acts if isinstance(a, CommitInfo)]
        if len(infos) != 1:
            self.problem("log", f"expected exactly one commitInfo, found {len(infos)}", v, path)
        new_protocol = next((a for a in acts if isinstance(a, Protocol)), None)
        new_metadata = next((a for a in acts if isinstance(a, Metadata)), None)
        if v == 0 and (new_protocol is None or new_metadata is None):
            self.problem("log", "version 0 must contain protocol and metadata actions", v, path)
        protocol = new_protocol or (state.protocol if state else None)
        metadata = new_metadata or (state.metadata if state else None)
        if protocol is None or metadata is None:
            return None
        if new_protocol is not None:
            check_reader_protocol(new_protocol, where=f"{self.storage.uri}/{path}")  # raises: cannot verify
        timestamp = infos[0].timestamp if infos else (state.timestamp + 1 if state else 0)
        if state is not None and timestamp <= state.timestamp:
            self.problem(
                "replay", f"commit timestamp {timestamp} is not after version {state.version}'s {state.timestamp}", v, path,
            )
        partitions = state.partitions if state else {}
        txns = state.app_transactions if state else {}
        next_row_id = state.next_row_id if state else 0
        seen: set[str] = set()
        adds = [a for a in acts if isinstance(a, AddPartition)]
        rems = [a for a in acts if isinstance(a, RemovePartition)]
        for a in rems + adds:
            if a.path in seen:
                self.problem("log", "the path appears in more than one add/remove of the entry", v, a.path)
            seen.add(a.path)
        removed = []
        for r in rems:
            if partitions.pop(r.path, None) is None:
                self.problem("replay", "remove of a partition that is not live", v, r.path)
            else:
                removed.append(r.path)
        counter = next_row_id  # ids below it are taken
        added = []
        for a in adds:
            p = a.partition
            if p.default_row_version != v:
                self.problem("log", f"add has defaultRowVersion {p.default_row_version}, expected {v}", v, p.path)
            if p.first_row_id < counter and p.num_records:
                self.problem(
                    "row_lineage", f"add has firstRowId {p.first_row_id}, but ids below {counter} are already "
                    "assigned (SPEC §Row lineage: firstRowId comes from the table's row-id counter)", v, p.path,
                )
            counter = max(counter, p.first_row_id + p.num_records)
            if p.path in partitions:
                self.problem("replay", "add of a partition that is already live", v, p.path)
            partitions[p.path] = p
            added.append(p)
            next_row_id = max(next_row_id, p.first_row_id + p.num_records)
        for a in acts:
            if isinstance(a, SetTransaction):
                txns[a.app_id] = a
        return TableState(v, timestamp, protocol, metadata, partitions, next_row_id, txns), added, removed

    def _compare_checkpoint(self, state: TableState) -> None:
        v = state.version
        try:
            cp = self.log.read_checkpoint(v, decode_stats=True)
        except (FileNotFoundError, CorruptLogError) as e:
            self.warning("checkpoint", f"checkpoint is unreadable and will be skipped by readers: {e}", v)
            return
        diffs = []
        if set(cp.partitions) != set(state.partitions):
            extra = sorted(set(cp.partitions) - set(state.partitions))
            missing = sorted(set(state.partitions) - set(cp.partitions))
            diffs.append(f"live partitions differ (only in checkpoint: {extra[:3]}, only in log: {missing[:3]})")
        else:
            changed = [k for k in state.partitions if cp.partitions[k] != state.partitions[k]]
            if changed:
                diffs.append(f"descriptors of {len(changed)} partitions differ (e.g. {changed[0]})")
        if cp.next_row_id != state.next_row_id:
            diffs.append(f"nextRowId {cp.next_row_id} != {state.next_row_id}")
        if cp.timestamp != state.timestamp:
            diffs.append(f"timestamp {cp.timestamp} != {state.timestamp}")
        if cp.metadata != state.metadata:
            diffs.append("metadata differs")
        if cp.protocol != state.protocol:
            diffs.append("protocol differs")
        if diffs:
            self.problem("checkpoint", "checkpoint does not match the log: " + "; ".join(diffs), v)

    # ------------------------------------------------------------ data

    def _check_data(self, rep: "_Replay") -> None:
        final = rep.final
        assert final is not None
        files = rep.partitions if self.all_versions else dict(final.partitions)
        field_types = _field_types(rep.schemas)
        total = len(files)
        results: dict[str, _FileResult] = {}
        self.progress("files", 0, total)

        def check(item):
            path, p = item
            return path, _check_file(self.storage, p, field_types, removed=path not in final.partitions)

        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, total or 1))) as pool:
            for done, (path, res) in enumerate(pool.map(check, files.items()), start=1):
                results[path] = res
                self.progress("files", done, total)
        for path in files:  # report in a stable order
            res = results[path]
            self.report.problems.extend(res.problems)
            self.report.warnings.extend(res.warnings)
            self.report.files_checked += 1
            self.report.bytes_checked += res.size
            self.report.rows_checked += res.rows
        ids = {k: r.row_ids for k, r in results.items()}
        if not self.all_versions:
            self.report.snapshots_checked = [final.version]
            self._check_unique_ids(final.version, set(final.partitions), ids, {})
            return
        # Walk the versions; duplicates can only appear where partitions are
        # added (or replay restarts from a checkpoint), so only those versions
        # need the sort.
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
        parts = sorted(p for p in live if ids.get(p) is not None)
        if len(parts) == 0:
            return
        arrays = [ids[p] for p in parts]
        s = np.sort(np.concatenate(arrays))
        dup_mask = s[1:] == s[:-1]
        if not dup_mask.any():
            return
        dups = np.unique(s[1:][dup_mask])
        holders = [p for p, a in zip(parts, arrays) if np.isin(a, dups).any()]
        key = frozenset(holders)
        if key in reported:  # the same clash, still live at a later version
            return
        reported[key] = True
        examples = []
        for x in dups[:_MAX_DUPLICATE_EXAMPLES]:
            examples.append(f"{int(x)} in " + ", ".join(p for p, a in zip(parts, arrays) if (a == x).any()))
        msg = (
            f"{len(dups)} row ids appear more than once in the snapshot of version {version} "
            f"(e.g. {'; '.join(examples)})"
        )
        self.report.problems.append(VerifyProblem("duplicate_row_id", msg, version, ", ".join(holders)))

    def _list_unreferenced(self, referenced: set[str]) -> None:
        try:
            infos = self.storage.list_dir(DATA_DIR)
        except OSError:
            return
        self.report.unreferenced_files = sorted(
            i.path for i in infos
            if i.path not in referenced and not i.path.rsplit("/", 1)[-1].startswith(TMP_PREFIX)
        )


@dataclass
class _Replay:
    """What replay keeps: the last state, every partition some version held,
    and per version the paths added and removed (``reset``: the live set when
    replay (re)starts from a checkpoint)."""

    final: TableState | None = None
    oldest: int | None = None
    partitions: dict[str, Partition] = field(default_factory=dict)
    steps: list[tuple[int, set[str] | None, list[str], list[str]]] = field(default_factory=list)
    schemas: list[Schema] = field(default_factory=list)

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


def _field_types(schemas: Iterable[Schema]) -> dict[int, str]:
    """Field id -> type name of every top-level primitive column any version had."""
    out: dict[int, str] = {}
    for s in schemas:
        for f in s.fields:
            if isinstance(f.type, str):
                out.setdefault(f.id, f.type)
    out[ROW_ID_FIELD_ID] = "long"
    out[ROW_VERSION_FIELD_ID] = "long"
    return out


def _check_file(storage: Storage, p: Partition, field_types: dict[int, str], *, removed: bool) -> _FileResult:
    res = _FileResult()
    v = p.default_row_version

    def bad(check: str, message: str) -> None:
        res.problems.append(VerifyProblem(check, message, v, p.path))

    try:
        data = storage.read_bytes(p.path)
    except FileNotFoundError:
        if removed:
            res.warnings.append(VerifyProblem(
                "missing_file", "the file of a partition removed before the latest version is gone "
                "(vacuumed?): older versions that hold it can no longer be read", v, p.path,
            ))
        else:
            bad("missing_file", "the data file is missing")
        return res
    except OSError as e:
        bad("unreadable", f"the data file cannot be read: {e}")
        return res
    res.size = len(data)
    if len(data) != p.size_bytes:
        bad("size", f"the file holds {len(data)} bytes, the log records sizeBytes {p.size_bytes}")
    if p.checksum is not None:
        actual = xxhash.xxh3_128_hexdigest(data)
        if actual != p.checksum:
            bad("checksum", f"checksum mismatch: the file hashes to {actual}, the log records {p.checksum}")
    try:
        pf = pq.ParquetFile(pa.BufferReader(data))
        n = pf.metadata.num_rows
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError ... on a bad footer
        bad("unreadable", f"not a readable Parquet file: {_short(e)}")
        return res
    res.rows = n
    if n != p.num_records:
        bad("row_count", f"the file holds {n} rows, the log records numRecords {p.num_records}")
        return res
    try:
        table = pf.read(use_threads=False)
    except Exception as e:
        bad("unreadable", f"the Parquet data cannot be decoded: {_short(e)}")
        return res
    by_id: dict[int, str] = {}
    for f in table.schema:
        if f.metadata and PARQUET_FIELD_ID_KEY in f.metadata:
            by_id[int(f.metadata[PARQUET_FIELD_ID_KEY])] = f.name
    if not by_id:  # a file without field ids: hidden columns by name only
        by_id = {fid: name for fid, name in ((ROW_ID_FIELD_ID, ROW_ID_COLUMN), (ROW_VERSION_FIELD_ID, ROW_VERSION_COLUMN)) if name in table.column_names}
    if p.stats is not None:
        for msg in _stats_mismatches(p.stats, table, by_id, field_types):
            bad("stats", msg)
    # Row lineage: materialized hidden values.
    rid_name, rv_name = by_id.get(ROW_ID_FIELD_ID), by_id.get(ROW_VERSION_FIELD_ID)
    rid = table.column(rid_name).combine_chunks() if rid_name else pa.nulls(n, pa.int64())
    rv = table.column(rv_name).combine_chunks() if rv_name else pa.nulls(n, pa.int64())
    try:
        rid = rid.cast(pa.int64())
        rv = rv.cast(pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        bad("row_lineage", f"hidden columns are not int64: {_short(e)}")
        return res
    rid, rv = materialize_hidden(p, rid, rv)
    ids = rid.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    versions = rv.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    res.row_ids = ids
    if n:
        limit = p.first_row_id + p.num_records
        if ids.min() < 0 or ids.max() >= limit:
            bad("row_lineage", f"row ids range over [{ids.min()}, {ids.max()}], outside [0, {limit}) "
                f"(firstRowId + numRecords bounds every id a partition can hold)")
        if versions.max() > p.default_row_version or versions.min() < 0:
            bad("row_lineage", f"row versions range over [{versions.min()}, {versions.max()}], "
                f"beyond the partition's defaultRowVersion {p.default_row_version}")
    return res


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


def _raw_path(obj: Any) -> str | None:
    """The ``path`` of an undecodable add/remove line, for the report."""
    if isinstance(obj, dict) and len(obj) == 1:
        body = next(iter(obj.values()))
        if isinstance(body, dict) and isinstance(body.get("path"), str):
            return body["path"]
    return None


def _short(e: Exception) -> str:
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


def _stats_mismatches(stats: PartitionStats, table: pa.Table, by_id: dict[int, str], field_types: dict[int, str]) -> list[str]:
    """Messages for each statistic the data contradicts."""
    out: list[str] = []
    n = table.num_rows
    ids = set(stats.min_values) | set(stats.max_values) | set(stats.null_count) | set(stats.nan_count)
    for fid in sorted(ids):
        typ = field_types.get(fid)
        if typ is None:
            continue  # SPEC §Statistics: ignore ids not in the schema
        name = by_id.get(fid)
        label = {ROW_ID_FIELD_ID: ROW_ID_COLUMN, ROW_VERSION_FIELD_ID: ROW_VERSION_COLUMN}.get(fid, f"field {fid}")
        if name is not None:
            label = f"{label} ({name})" if not label.startswith("_ct_") else label
        col = table.column(name) if name is not None else pa.chunked_array([pa.nulls(n)])
        nulls = col.null_count
        if fid in stats.null_count and stats.null_count[fid] != nulls:
            out.append(f"{label}: nullCount is {stats.null_count[fid]}, the data holds {nulls} nulls")
        values = col
        if typ in ("float", "double") and name is not None:
            isnan = pc.fill_null(pc.is_nan(col), False)
            nans = int(pc.sum(isnan).as_py() or 0)
            if fid in stats.nan_count and stats.nan_count[fid] != nans:
                out.append(f"{label}: nanCount is {stats.nan_count[fid]}, the data holds {nans} NaNs")
            values = col.filter(pc.invert(isnan))
        if (fid in stats.min_values) != (fid in stats.max_values):
            out.append(f"{label}: has a {'minimum' if fid in stats.min_values else 'maximum'} but not the other bound")
            continue
        if fid not in stats.min_values or not has_bounds(typ) or name is None:
            continue
        if values.null_count == len(values):
            continue  # no value to bound
        try:
            lo = decode_bound(typ, stats.min_values[fid])
            hi = decode_bound(typ, stats.max_values[fid])
        except (ValueError, TypeError, ArithmeticError) as e:
            out.append(f"{label}: bound does not decode as {typ}: {e}")
            continue
        mm = pc.min_max(values)
        amin, amax = mm["min"].as_py(), mm["max"].as_py()
        try:
            if amin is not None and lo > amin:
                out.append(f"{label}: minValues is {stats.min_values[fid]!r}, the data holds {_fmt(amin)}")
            if amax is not None and hi < amax:
                out.append(f"{label}: maxValues is {stats.max_values[fid]!r}, the data holds {_fmt(amax)}")
        except TypeError as e:
            out.append(f"{label}: bounds cannot be compared with the data ({e})")
    return out


def _fmt(x: Any) -> str:
    if hasattr(x, "isoformat"):
        return x.isoformat()
    return repr(x)
