"""``ctfile schema``: the schema of a version and the schema's history, and
the rendering of schemas and schema changes that ``show`` and ``history``
share (SPEC §Schema evolution).

A schema is listed field by field with its id, nested fields (struct
fields, list ``element``, map ``key`` and ``value``) under their parent,
and the version that introduced each id, from ``Table.schema_history()``:
a command reads the log's table-level actions for it, never a data file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated, Any, Optional, Sequence

import typer
from rich.table import Table as RichTable
from rich.text import Text

import ctfile
from ctfile.tools import _output as out
from ctfile.tools._common import JsonOpt, StorageOpt, UriArg, handle_errors, open_uri

# ``ctfile history`` summarizes a commit's schema changes in one cell: at
# most this many, then how many more (``--json`` and ``ctfile schema`` list
# them all).
SUMMARY_CHANGES = 4

# How one change reads in text, by kind (``--json`` gives kind, path, detail).
_CHANGE_TEXT = {
    ctfile.ChangeKind.ADD: lambda c: f"add {c.path} ({c.detail})",
    ctfile.ChangeKind.DROP: lambda c: f"drop {c.path}",
    ctfile.ChangeKind.RENAME: lambda c: f"rename {c.path} -> {c.detail}",
    ctfile.ChangeKind.WIDEN: lambda c: f"widen {c.path} ({c.detail})",
    ctfile.ChangeKind.MAKE_NULLABLE: lambda c: f"make {c.path} nullable",
    ctfile.ChangeKind.MOVE: lambda c: f"move {c.path}" if c.path else f"reorder ({c.detail})",
}


def change_text(change: ctfile.SchemaChange) -> str:
    """One schema change for people: ``add email (string)``, ``drop legacy``,
    ``rename name -> full_name``, ``widen id (integer -> long)`` ..."""
    return _CHANGE_TEXT[change.kind](change)


def change_summary(changes: Sequence[ctfile.SchemaChange]) -> str:
    """The first :data:`SUMMARY_CHANGES` changes, and how many more."""
    shown = ", ".join(change_text(c) for c in changes[:SUMMARY_CHANGES])
    more = len(changes) - SUMMARY_CHANGES
    return f"{shown}, ... {more} more" if more > 0 else shown


# ---------------------------------------------------------------- fields


def _type_str(t: Any) -> str:
    """A ctfile type as text (duck-typed over the schema model)."""
    if isinstance(t, str):
        return t
    if hasattr(t, "element_type"):
        return f"array<{_type_str(t.element_type)}>"
    if hasattr(t, "key_type"):
        return f"map<{_type_str(t.key_type)}, {_type_str(t.value_type)}>"
    if hasattr(t, "fields"):
        return "struct<" + ", ".join(f"{f.name}: {_type_str(f.type)}" for f in t.fields) + ">"
    return str(t)


@dataclass(frozen=True)
class FieldRow:
    """One field, list element, map key or value of a schema. ``name`` is
    its path (``address.zip``, ``tags.element``); ``introduced_in`` the
    version that added its id (None: before the oldest version available)."""

    id: int
    name: str
    type: str
    nullable: bool
    comment: str | None
    introduced_in: int | None
    depth: int  # for the text layout only

    def as_json(self) -> dict:
        d = dataclasses.asdict(self)
        del d["depth"]
        return d


def field_rows(schema: Any, introduced: dict[int, int | None]) -> list[FieldRow]:
    """Every field of ``schema`` (a ``ctfile.format.Schema``) in pre-order,
    nested ones after their parent; ``introduced`` as
    :func:`ctfile.introduced_versions` gives it."""
    rows: list[FieldRow] = []

    def add(fid: int, name: str, t: Any, nullable: bool, comment: str | None, depth: int) -> None:
        rows.append(FieldRow(fid, name, _type_str(t), nullable, comment, introduced.get(fid), depth))
        nested(t, name, depth + 1)

    def nested(t: Any, name: str, depth: int) -> None:
        if hasattr(t, "element_type"):
            add(t.element_id, f"{name}.element", t.element_type, t.contains_null, None, depth)
        elif hasattr(t, "key_type"):
            add(t.key_id, f"{name}.key", t.key_type, False, None, depth)
            add(t.value_id, f"{name}.value", t.value_type, t.value_contains_null, None, depth)
        elif hasattr(t, "fields"):
            for f in t.fields:
                add(f.id, f"{name}.{f.name}" if name else f.name, f.type, f.nullable, f.metadata.get("comment"), depth)

    nested(schema, "", 0)
    return rows


def introduced_text(version: int | None, oldest: int) -> str:
    return f"before v{oldest}" if version is None else f"v{version}"


def fields_table(rows: Sequence[FieldRow], *, oldest: int, title: str = "schema") -> RichTable:
    """The fields as a table; nested ones indented under their parent."""
    t = RichTable(title=title, title_justify="left")
    for c in ("field id", "column", "type", "nullable", "introduced", "comment"):
        t.add_column(c, overflow="fold")
    for r in rows:
        leaf = r.name.rsplit(".", 1)[-1] if r.depth else r.name
        t.add_row(
            str(r.id), "  " * r.depth + leaf, r.type, "yes" if r.nullable else "no",
            introduced_text(r.introduced_in, oldest), r.comment or "",
        )
    return t


def oldest_version(history: Sequence[ctfile.SchemaVersion]) -> int:
    """The oldest version the schema history reaches (0 unless vacuumed)."""
    return history[-1].version if history and not history[-1].complete else 0


# ---------------------------------------------------------------- ctfile schema

_VACUUMED = "oldest version available: the schema changes before it were vacuumed"



@dataclass(frozen=True)
class SchemaReport:
    """What ``ctfile schema`` shows: the schema of ``version`` and the
    versions that changed the schema up to it, newest first."""

    uri: str
    version: int
    latest_version: int
    oldest_version: int
    fields: list[FieldRow]
    history: list[ctfile.SchemaVersion]

    @classmethod
    def of(cls, uri: str, table: ctfile.Table, version: int | None) -> "SchemaReport":
        history = table.schema_history()
        latest, oldest = table.version, oldest_version(history)
        version = latest if version is None else version
        if not 0 <= version <= latest:
            raise ctfile.VersionNotFoundError(f"version {version} does not exist in {uri}; the latest version is {latest}")
        if version < oldest:
            raise ctfile.VersionNotFoundError(
                f"version {version} of {uri} can no longer be read: the history before version {oldest} was vacuumed"
            )
        upto = [s for s in history if s.version <= version]
        fields = field_rows(upto[0].schema, ctfile.introduced_versions(history))
        return cls(uri, version, latest, oldest, fields, upto)

    def as_json(self) -> dict:
        return {
            "uri": self.uri,
            "version": self.version,
            "latest_version": self.latest_version,
            "oldest_version": self.oldest_version,
            "fields": [f.as_json() for f in self.fields],
            "history": [
                {"version": s.version, "timestamp": s.timestamp, "operation": s.operation, "complete": s.complete,
                 "changes": [c.to_json() for c in s.changes]}
                for s in self.history
            ],
        }

    def print_text(self) -> None:
        con = out.console()
        latest = f" (latest {self.latest_version})" if self.version != self.latest_version else ""
        con.print(Text(f"schema of {self.uri} at version {self.version}{latest}", style="bold"))
        con.print(fields_table(self.fields, oldest=self.oldest_version))
        t = RichTable(title="schema history (newest first)", title_justify="left")
        for c, just in (("version", "right"), ("time (UTC)", "left"), ("operation", "left"), ("changes", "left")):
            t.add_column(c, justify=just, overflow="fold")
        for s in self.history:
            text = "\n".join(change_text(c) for c in s.changes) if s.complete else _VACUUMED
            t.add_row(str(s.version), out.fmt_time(s.timestamp), s.operation or "", text)
        con.print(t)


def schema(
    uri: UriArg,
    version: Annotated[Optional[int], typer.Option("--version", "-v", help="Show the schema of this version (default: latest).")] = None,
    json_: JsonOpt = False,
    storage_option: StorageOpt = None,
) -> None:
    """Show the schema of a version and how the schema changed.

    Every field with its id, type, nullability, comment and the version that
    introduced it (nested fields under their parent); then each version that
    changed the schema up to the one shown, newest first, with its changes
    (added, dropped, renamed, widened, made nullable, moved). Reads the log
    only, never a data file.
    """
    with handle_errors(json_):
        report = SchemaReport.of(uri, open_uri(uri, storage_option), version)
    if json_:
        out.print_json(report.as_json())
    else:
        report.print_text()


COMMANDS = (schema,)
