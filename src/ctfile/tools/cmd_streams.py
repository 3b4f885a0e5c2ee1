"""``ctfile streams``: list a table's streams, or create or drop one
(SPEC §Streams).

Each stream is listed with its mode, offset, lag (versions after the offset,
the rows their commits changed, how long the oldest of them has waited),
whether it is stale (and since when) or when it goes stale if nobody
consumes it (``Table.streams``: the oldest pending commit plus the default
vacuum windows plus ``ctfile.maxRetentionExtension``), and a consumption in
progress (an unresolved claim). The report is computed first
(:class:`StreamsReport`) and then printed as text or JSON.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated, Any, Optional

import typer
from rich.table import Table as RichTable
from rich.text import Text

import ctfile
from ctfile.tools import _output as out
from ctfile.tools._common import JsonOpt, StorageOpt, UriArg, handle_errors, open_uri
from ctfile.tools._duration import format_duration


@dataclass(frozen=True)
class ClaimRow:
    """A consumption in progress: the claim of a stream's next versions by a target (SPEC §Streams)."""

    end: int
    target_uri: str
    target_table_id: str
    claimed_time: str

    @classmethod
    def of(cls, c: Any) -> "ClaimRow":
        return cls(c.end, c.target_uri, c.target_table_id, out.fmt_ms(c.claimed_time))


@dataclass(frozen=True)
class StreamRow:
    """One stream as ``ctfile streams`` lists it (from a ``ctfile.StreamInfo``)."""

    name: str
    mode: str
    offset: int
    initial_rows: bool
    lag_versions: int
    lag_rows: int | None
    age_s: float | None
    oldest_pending: Any
    stale: bool
    stale_since: Any
    stale_after: Any
    created: Any
    claim: ClaimRow | None

    @classmethod
    def of(cls, info: ctfile.StreamInfo) -> "StreamRow":
        age = info.age
        return cls(
            name=info.name, mode=info.information, offset=info.offset, initial_rows=info.initial_rows,
            lag_versions=info.lag_versions, lag_rows=info.lag_rows,
            age_s=None if age is None else round(age.total_seconds(), 3),
            oldest_pending=out.fmt_time(info.oldest_pending) or None, stale=info.stale,
            stale_since=out.fmt_time(info.stale_since) or None, stale_after=out.fmt_time(info.stale_after) or None,
            created=out.fmt_time(info.created), claim=None if info.claim is None else ClaimRow.of(info.claim),
        )

    def staleness_text(self) -> Text:
        if self.stale:
            return Text(f"STALE since {self.stale_since or '?'}", style="bold red")
        if self.stale_after is None:
            return Text("up to date" if not self.initial_rows else "initial rows pending")
        return Text(f"stale after {self.stale_after}")

    def claim_text(self) -> str:
        c = self.claim
        if c is None:
            return ""
        return f"versions {self.offset + 1}..{c.end} into {c.target_uri} since {c.claimed_time}"


@dataclass(frozen=True)
class StreamsReport:
    """What ``ctfile streams`` shows: the streams after the stream created
    or dropped, if any."""

    uri: str
    version: int
    created: str | None
    dropped: str | None
    streams: list[StreamRow]

    @classmethod
    def of(cls, uri: str, table: ctfile.Table, *, created: str | None = None,
           dropped: str | None = None) -> "StreamsReport":
        rows = [StreamRow.of(i) for i in table.streams()]
        return cls(uri, table.version, created, dropped, rows)

    def as_json(self) -> dict:
        return {
            "uri": self.uri, "version": self.version, "created": self.created, "dropped": self.dropped,
            "streams": [dataclasses.asdict(r) for r in self.streams],
        }

    def print_text(self) -> None:
        con = out.console()
        if self.created is not None:
            con.print(f"created stream {self.created}")
        if self.dropped is not None:
            con.print(f"dropped stream {self.dropped}")
        if not self.streams:
            con.print(f"no streams on {self.uri} (version {self.version})", soft_wrap=True)
            return
        t = RichTable(title=f"streams of {self.uri} (latest version {self.version})", title_justify="left")
        for c, just in (("name", "left"), ("mode", "left"), ("offset", "right"), ("lag (versions)", "right"),
                        ("lag (rows)", "right"), ("age", "right"), ("staleness (UTC)", "left"),
                        ("consumption in progress", "left")):
            t.add_column(c, justify=just, overflow="fold")
        for r in self.streams:
            age = "" if r.age_s is None else format_duration(round(r.age_s))
            lag_rows = "" if r.lag_rows is None else str(r.lag_rows)
            t.add_row(r.name, r.mode, str(r.offset), str(r.lag_versions), lag_rows, age, r.staleness_text(),
                      r.claim_text())
        con.print(t)


def streams(
    uri: UriArg,
    create: Annotated[
        Optional[str], typer.Option("--create", metavar="NAME", help="Create stream NAME, then list the streams.")
    ] = None,
    drop: Annotated[
        Optional[str], typer.Option("--drop", metavar="NAME", help="Drop stream NAME, then list the streams.")
    ] = None,
    information: Annotated[
        Optional[ctfile.ChangeMode],
        typer.Option("--information", "-i", help="With --create: the stream's mode (default: default)."),
    ] = None,
    start_version: Annotated[
        Optional[int],
        typer.Option("--start-version", min=0, metavar="V",
                     help="With --create: the first version whose changes it hands out (default: the next one)."),
    ] = None,
    initial_rows: Annotated[
        bool, typer.Option("--initial-rows", help="With --create: hand out the rows of the table first, as inserts.")
    ] = False,
    json_: JsonOpt = False,
    storage_option: StorageOpt = None,
) -> None:
    """List a table's streams, or create or drop one.

    Each stream is listed with its mode, offset (the last version consumed),
    lag (versions and rows after the offset, age of the oldest pending
    change), when it goes stale unless consumed (vacuum keeps its pending
    history for the default retention plus the table's
    ctfile.maxRetentionExtension), whether it is stale and since when, and a
    consumption in progress.
    """
    if create is not None and drop is not None:
        raise typer.BadParameter("give --create or --drop, not both", param_hint="'--create'")
    if create is None and _creation_options_given(information, start_version, initial_rows):
        raise typer.BadParameter("--information, --start-version and --initial-rows go with --create",
                                 param_hint="'--create'")
    with handle_errors(json_):
        table = open_uri(uri, storage_option)
        if create is not None:
            mode = (information or ctfile.ChangeMode.DEFAULT).value
            table.create_stream(create, information=mode, start_version=start_version, initial_rows=initial_rows)
        if drop is not None:
            table.drop_stream(drop)
        report = StreamsReport.of(uri, table, created=create, dropped=drop)
    out.emit(report, json=json_)


def _creation_options_given(information: ctfile.ChangeMode | None, start_version: int | None,
                            initial_rows: bool) -> bool:
    """Any of the options that only ``--create`` takes was given."""
    return information is not None or start_version is not None or initial_rows


COMMANDS = (streams,)
