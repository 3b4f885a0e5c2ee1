"""What ``ctfile verify`` reports: the kinds of check, one finding
(:class:`VerifyProblem`), the whole report (:class:`VerifyReport`) and the
:class:`Recorder` the check modules append their findings through."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable

# Kinds of problem (VerifyProblem.check).
CHECKS = (
    "log", "dense", "path", "replay", "checkpoint", "missing_file", "size", "checksum",
    "unreadable", "row_count", "stats", "row_lineage", "duplicate_row_id", "symlink", "change_rows", "capture",
    "stream",
)


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
    ``unreferenced_files`` are the files under ``data/`` and ``_ct_changes/`` that the retained
    history does not reference (the files vacuum deletes once they are older
    than its grace period); empty when a problem prevents listing them.
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


class Recorder:
    """Appends findings to ``report``; the check classes derive from it."""

    def __init__(self, report: VerifyReport):
        self.report = report

    def problem(self, check: str, message: str, version: int | None = None, path: str | None = None) -> None:
        self.report.problems.append(VerifyProblem(check, message, version, path))

    def warning(self, check: str, message: str, version: int | None = None, path: str | None = None) -> None:
        self.report.warnings.append(VerifyProblem(check, message, version, path))
