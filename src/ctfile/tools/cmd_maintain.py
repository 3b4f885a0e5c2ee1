"""``ctfile verify``, ``ctfile vacuum``, ``ctfile compact``, ``ctfile
checkpoint`` and ``ctfile restore``: checking and maintaining a table."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.text import Text

import ctfile
from ctfile.tools import _output as out
from ctfile.tools._clustering import ClusteringReport, change_text
from ctfile.tools._common import JsonOpt, StorageOpt, UriArg, handle_errors, open_uri, parse_storage_options
from ctfile.tools._duration import format_duration, parse_duration


# ---------------------------------------------------------------- verify


def verify(
    uri: UriArg,
    all_versions: Annotated[
        bool, typer.Option("--all-versions", help="Check the data files and row ids of every version, not only the latest.")
    ] = False,
    json_: JsonOpt = False,
    storage_option: StorageOpt = None,
) -> None:
    """Check a table's integrity (fsck); exit 0 healthy, 1 problems, 2 could not run.

    Checks that the log parses and is dense, every referenced file exists with
    its recorded size and checksum, statistics match the data, row ids are
    unique in each snapshot, no path escapes the table root, and no symbolic
    link in a local table directory leads out of it (such a link is reported,
    never followed). Each problem is printed with its version and path.
    """
    with handle_errors(json_, code=2):
        so = parse_storage_options(storage_option)
        with out.progress_bar("verifying") as prog:
            report = ctfile.verify_table(uri, storage_options=so, all_versions=all_versions, progress=prog)
    out.emit(VerifyOutput(report), json=json_)
    raise typer.Exit(0 if report.healthy else 1)


@dataclass(frozen=True)
class VerifyOutput:
    """What ``ctfile verify`` reports: a ``ctfile.VerifyReport`` (its own
    ``to_dict()`` is the JSON document)."""

    report: ctfile.VerifyReport

    def as_json(self) -> dict:
        return self.report.to_dict()

    def print_text(self) -> None:
        con, report = out.console(), self.report
        con.print(
            f"checked {report.entries_checked} log entries ({self._span()}) "
            f"and {report.files_checked} data files ({out.fmt_bytes(report.bytes_checked)}, {report.rows_checked} rows) "
            f"of {self._versions()}"
        )
        for p in report.problems:  # one line each, whatever the width: easy to grep
            con.print(Text("PROBLEM ", style="bold red") + Text(_problem_text(p)), soft_wrap=True)
        for w in report.warnings:
            con.print(Text("warning ", style="yellow") + Text(_problem_text(w)), soft_wrap=True)
        if report.unreferenced_files:
            con.print(
                f"{len(report.unreferenced_files)} files under data/ are referenced by no retained version "
                "(vacuum deletes them once they are older than its grace period)"
            )
        if report.healthy:
            con.print(Text("healthy", style="bold green"))
        else:
            con.print(Text(f"{len(report.problems)} problems found", style="bold red"))

    def _versions(self) -> str:
        """The versions whose data files were checked."""
        versions = self.report.snapshots_checked
        if not versions:
            return "no version"
        if len(versions) == 1:
            return f"version {versions[0]}"
        return f"{len(versions)} versions ({versions[0]}..{versions[-1]})"

    def _span(self) -> str:
        """The versions of the log that were read."""
        if self.report.latest_version is None:
            return "the log could not be read"
        return f"versions {self.report.oldest_version}..{self.report.latest_version}"


def _problem_text(p: Any) -> str:
    where = []
    if p.version is not None:
        where.append(f"version {p.version}")
    if p.path is not None:
        where.append(p.path)
    return f"{p.check}: {', '.join(where)}: {p.message}" if where else f"{p.check}: {p.message}"


# ---------------------------------------------------------------- maintenance


def vacuum(
    uri: UriArg,
    retain: Annotated[
        Optional[str],
        typer.Option("--retain", "-r", metavar="DURATION",
                     help="Keep every version committed within this age, e.g. 7d, 12h, 1w2d. History is kept "
                          "for at least --grace-period too: --retain below it (e.g. 0s) needs a lower "
                          "--grace-period as well. Default: 7d."),
    ] = None,
    grace_period: Annotated[
        Optional[str],
        typer.Option("--grace-period", metavar="DURATION",
                     help="Delete unreferenced files only once this old (they may belong to a running writer); "
                          "also the least history kept. Default: 24h."),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be deleted; delete nothing.")] = False,
    json_: JsonOpt = False,
    storage_option: StorageOpt = None,
) -> None:
    """Expire old history and delete the files no retained version needs.

    Versions committed within max(--retain, --grace-period) stay readable
    (snapshots, time travel, change scans starting there): a running writer
    may still commit on a version younger than the grace period, so history
    is never expired inside it, and '--retain 0s' alone keeps 24h. Older log
    entries, checkpoints and data files only they used are deleted, as are
    unreferenced files older than --grace-period. The output notes when the
    grace period kept more history than --retain asked for. History a stream
    has not consumed is kept up to the table's ctfile.maxRetentionExtension
    longer; the output names the streams that hold history back and those
    the vacuum makes stale (their history goes).
    """
    durations = {}
    for name, value in (("--retain", retain), ("--grace-period", grace_period)):
        try:
            durations[name] = None if value is None else parse_duration(value)
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint=f"'{name}'") from None
    with handle_errors(json_):
        table = open_uri(uri, storage_option)
        with out.progress_bar("vacuuming", enabled=out.stdout_is_terminal() and not dry_run) as prog:
            if prog is not None:
                prog("deleting expired files", 0, 0)
            r = table.vacuum(retain=durations["--retain"], grace_period=durations["--grace-period"], dry_run=dry_run)
    out.emit(VacuumOutput.of(uri, r), json=json_)


@dataclass(frozen=True)
class StreamHold:
    """A stream a vacuum held history for, or made stale (SPEC §Streams)."""

    name: str
    offset: int
    needs_version: int
    oldest_pending: str | None
    stale_after: str | None

    @classmethod
    def of(cls, h: Any) -> "StreamHold":
        return cls(h.name, h.offset, h.needs_version, out.fmt_ms(h.oldest_pending_ms) or None,
                   out.fmt_ms(h.stale_after_ms) or None)


def _retain_note(r: Any) -> list[str]:
    """The note that the grace period kept more history than --retain asked for, if it did."""
    if not r.retain_extended:
        return []
    return [
        f"--retain {format_duration(r.retain_s)} is shorter than the grace period "
        f"{format_duration(r.grace_period_s)}: history is kept for {format_duration(r.effective_retain_s)} "
        f"(pass --grace-period to expire more; a writer running longer than it may then fail)"
    ]


@dataclass(frozen=True)
class VacuumOutput(out.FieldsAsJson):
    """What ``ctfile vacuum`` reports, gathered from a ``VacuumResult`` (:meth:`of`)."""

    uri: str
    dry_run: bool
    version: int
    oldest_version: int
    checkpoint_version: int | None
    retain_s: float
    grace_period_s: float
    effective_retain_s: float
    history_cutoff: str
    deleted_log_files: tuple[str, ...]
    deleted_data_files: tuple[str, ...]
    deleted_change_files: tuple[str, ...]
    deleted_temp_files: tuple[str, ...]
    deleted_stream_files: tuple[str, ...]
    bytes_freed: int
    change_bytes_freed: int
    holding_streams: tuple[StreamHold, ...]
    stale_streams: tuple[StreamHold, ...]
    notes: tuple[str, ...]

    @classmethod
    def of(cls, uri: str, r: Any) -> "VacuumOutput":
        return cls(
            uri=uri, dry_run=r.dry_run, version=r.version, oldest_version=r.oldest_version,
            checkpoint_version=r.checkpoint_version, retain_s=r.retain_s, grace_period_s=r.grace_period_s,
            effective_retain_s=r.effective_retain_s, history_cutoff=out.fmt_ms(r.history_cutoff_ms),
            deleted_log_files=tuple(r.deleted_log_files), deleted_data_files=tuple(r.deleted_data_files),
            deleted_change_files=tuple(r.deleted_change_files), deleted_temp_files=tuple(r.deleted_temp_files),
            deleted_stream_files=tuple(r.deleted_stream_files),
            bytes_freed=r.bytes_freed, change_bytes_freed=r.change_bytes_freed,
            holding_streams=tuple(StreamHold.of(h) for h in r.holding_streams),
            stale_streams=tuple(StreamHold.of(h) for h in r.stale_streams),
            notes=tuple(_retain_note(r)),
        )

    def print_text(self) -> None:
        con = out.console()
        con.print(self._deleted_text())
        con.print(self._kept_text())
        self._print_streams(con)
        for note in self.notes:
            con.print(Text("note: ", style="yellow") + Text(note), soft_wrap=True)
        for f in (self.deleted_log_files + self.deleted_data_files + self.deleted_change_files
                  + self.deleted_temp_files + self.deleted_stream_files):
            con.print(f"  {f}", soft_wrap=True)

    def _deleted_text(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        changes = f" and {len(self.deleted_change_files)} change files" if self.deleted_change_files else ""
        streams = (f", {len(self.deleted_stream_files)} old stream state files" if self.deleted_stream_files
                   else "")
        return (f"{verb} {len(self.deleted_data_files)} data files{changes} ({out.fmt_bytes(self.bytes_freed)}), "
                f"{len(self.deleted_log_files)} log files{streams} and {len(self.deleted_temp_files)} temporary files")

    def _kept_text(self) -> str:
        remain = "would remain" if self.dry_run else "remain"
        checkpoint = ""
        if self.checkpoint_version is not None:
            checkpoint = f"; checkpoint {'to write' if self.dry_run else 'written'} at version {self.checkpoint_version}"
        return (f"versions {self.oldest_version}..{self.version} {remain} readable"
                f" (history after {self.history_cutoff} kept){checkpoint}")

    def _print_streams(self, con: Console) -> None:
        """The streams that held history back, and those made stale (SPEC §Streams)."""
        for h in self.holding_streams:
            con.print(
                f"stream {h.name} (offset {h.offset}) holds history from version {h.needs_version}: its "
                f"oldest pending change committed at {h.oldest_pending}; it goes stale after {h.stale_after}",
                soft_wrap=True,
            )
        for h in self.stale_streams:
            con.print(
                Text(f"stream {h.name} (offset {h.offset}) {'would be made' if self.dry_run else 'made'} stale",
                     style="bold red")
                + Text(f": it needs version {h.needs_version}, older than the history kept "
                       "(drop it and create it again)"),
                soft_wrap=True,
            )


def compact(
    uri: UriArg,
    target_rows: Annotated[
        Optional[int], typer.Option("--target-rows", min=1, help="Rows per output partition (default: the table's ctfile.partitionRows).")
    ] = None,
    max_rows: Annotated[
        Optional[int], typer.Option("--max-rows", min=1, help="Rewrite at most about this many rows, deepest overlaps first (default: no bound).")
    ] = None,
    json_: JsonOpt = False,
    storage_option: StorageOpt = None,
) -> None:
    """Merge small partitions and recluster overlapping ones (a dataChange=false commit).

    With clustering keys (ctfile.clusterBy), partitions whose key ranges
    overlap are rewritten sorted, deepest overlaps first, and the clustering
    depth before and after is reported. Row ids and row versions are kept,
    so change scans show nothing for it.
    """
    with handle_errors(json_):
        table = open_uri(uri, storage_option)
        with out.progress_bar("compacting", enabled=out.stdout_is_terminal()) as prog:
            if prog is not None:
                prog("rewriting small and overlapping partitions", 0, 0)
            r = table.compact(target_rows=target_rows, max_rows=max_rows)
        report = CompactOutput.of(uri, table, r, max_rows=max_rows)
    out.emit(report, json=json_)


@dataclass(frozen=True)
class CompactOutput:
    """What ``ctfile compact`` reports: the commit and, with clustering keys,
    the clustering of the versions before and after it (:meth:`of`), printed
    as text or JSON."""

    uri: str
    result: ctfile.CommitResult
    max_rows: int | None
    before: ClusteringReport | None
    after: ClusteringReport | None

    @classmethod
    def of(cls, uri: str, table: ctfile.Table, r: ctfile.CommitResult, *, max_rows: int | None) -> "CompactOutput":
        # The log is linear: the version before the COMPACT's is the one it
        # applied to (after any retry), and a COMPACT changes no property.
        after = ClusteringReport.of(table.snapshot(r.version))
        before = ClusteringReport.of(table.snapshot(r.version - 1)) if r.committed and after else after
        return cls(uri, r, max_rows, before, after)

    def as_json(self) -> dict:
        r = self.result
        return {
            "uri": self.uri,
            "committed": r.committed,
            "version": r.version,
            "partitions_removed": r.num_removed_partitions,
            "partitions_added": r.num_added_partitions,
            "rows_copied": r.num_copied_rows,
            "max_rows": self.max_rows,
            "clustering_before": self.before and self.before.as_json(),
            "clustering_after": self.after and self.after.as_json(),
        }

    def print_text(self) -> None:
        con, r = out.console(), self.result
        if r.committed:
            con.print(
                f"compacted {r.num_removed_partitions} partitions into {r.num_added_partitions} "
                f"({r.num_copied_rows} rows) in version {r.version}"
            )
        else:
            bound = f" of at most {self.max_rows} rows" if self.max_rows is not None else ""
            con.print(f"nothing to compact (no group of small or overlapping partitions{bound}); "
                      f"the table stays at version {r.version}")
        if self.before and self.after:
            con.print(change_text(self.before, self.after) if r.committed
                      else f"{self.after.title()}: {self.after.depth_text()}")


def checkpoint(
    uri: UriArg,
    version: Annotated[
        Optional[int], typer.Option("--version", "-v", min=0, help="Checkpoint this version (default: latest).")
    ] = None,
    json_: JsonOpt = False,
    storage_option: StorageOpt = None,
) -> None:
    """Write a checkpoint of the latest version now.

    A checkpoint is one Parquet file listing every live partition, so that
    opening the table reads it and the log entries after it instead of
    replaying the whole log. Writers already write one every
    ctfile.checkpointInterval versions (default 100).
    """
    with handle_errors(json_):
        table = open_uri(uri, storage_option)
        with out.progress_bar("checkpointing", enabled=out.stdout_is_terminal()) as prog:
            if prog is not None:
                prog("writing the checkpoint", 0, 0)
            r = table.checkpoint(version=version)
    out.emit(CheckpointOutput(uri, r.version, r.path, r.num_partitions, r.size_bytes), json=json_)


@dataclass(frozen=True)
class CheckpointOutput(out.FieldsAsJson):
    """What ``ctfile checkpoint`` reports: the checkpoint written."""

    uri: str
    version: int
    path: str
    num_partitions: int
    size_bytes: int

    def print_text(self) -> None:
        out.console().print(
            f"wrote the checkpoint of version {self.version}: {self.num_partitions} live partitions, "
            f"{out.fmt_bytes(self.size_bytes)} ({self.path})",
            soft_wrap=True,
        )


def restore(
    uri: UriArg,
    version: Annotated[
        Optional[int], typer.Option("--version", "-v", min=0, help="Restore this version.")
    ] = None,
    timestamp: Annotated[
        Optional[str], typer.Option("--timestamp", "-t", metavar="ISO-8601",
                                    help="Restore the last version committed at or before this time, instead of --version.")
    ] = None,
    json_: JsonOpt = False,
    storage_option: StorageOpt = None,
) -> None:
    """Make the table equal to an earlier version, in one new version (RESTORE).

    The partitions of that version that are not live are re-added (the same
    files: rows come back with their row ids and row versions) and the
    others removed; the schema and properties are set back too. No data file
    is written. A change scan of the new version shows exactly what it
    changed. A table already equal to that version is left as it is.
    """
    if (version is None) == (timestamp is None):
        raise typer.BadParameter("give --version or --timestamp, exactly one", param_hint="'--version' / '--timestamp'")
    if timestamp is not None:
        try:
            dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
        except ValueError:
            raise typer.BadParameter(f"{timestamp!r} is not an ISO-8601 timestamp", param_hint="'--timestamp'") from None
    with handle_errors(json_):
        table = open_uri(uri, storage_option)
        r = table.restore(version=version, timestamp=timestamp)
        report = RestoreOutput.of(uri, table, r)
    out.emit(report, json=json_)


@dataclass(frozen=True)
class RestoreOutput(out.FieldsAsJson):
    """What ``ctfile restore`` reports: the commit, gathered from its
    result and its ``commitInfo`` (:meth:`of`)."""

    uri: str
    committed: bool
    version: int
    restored_version: int | None
    timestamp: str | None
    partitions_re_added: int
    partitions_removed: int
    rows_re_added: int
    rows_removed: int

    @classmethod
    def of(cls, uri: str, table: ctfile.Table, r: ctfile.CommitResult) -> "RestoreOutput":
        ci = table.log.commit_info(r.version) if r.committed else None
        params = ci.operation_parameters if ci is not None else {}
        metrics = ci.operation_metrics if ci is not None else {}
        return cls(
            uri=uri, committed=r.committed, version=r.version,
            restored_version=params.get("version"), timestamp=params.get("timestamp"),
            partitions_re_added=r.num_added_partitions, partitions_removed=r.num_removed_partitions,
            rows_re_added=metrics.get("numAddedRows", 0), rows_removed=metrics.get("numRemovedRows", 0),
        )

    def print_text(self) -> None:
        con = out.console()
        if not self.committed:
            con.print(f"the table is already equal to the version asked for: nothing committed (version {self.version})")
            return
        con.print(
            f"restored version {self.restored_version} in version {self.version}: re-added "
            f"{self.partitions_re_added} partitions ({self.rows_re_added} rows), removed "
            f"{self.partitions_removed} ({self.rows_removed} rows)",
            soft_wrap=True,
        )


COMMANDS = (verify, vacuum, compact, checkpoint, restore)
