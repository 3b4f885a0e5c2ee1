"""``ctfile schema``: the schema of a version and the schema's history, and
the rendering of schemas and schema changes that ``show`` and ``history``
share (SPEC §Schema evolution).

A schema is listed field by field with its id, nested fields (struct
fields, list ``element``, map ``key`` and ``value``) under their parent,
and the version that introduced each id (``Table.introduced_versions``:
checkpoint footers and a few log entries). ``ctfile schema`` lists the
schema's history too (``Table.schema_history``: the table-level actions of
every log entry). None reads a data file.
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
    ctfile.SchemaChangeKind.ADD: lambda c: f"add {c.path} ({c.detail})",
    ctfile.SchemaChangeKind.DROP: lambda c: f"drop {c.path}",
    ctfile.SchemaChangeKind.RENAME: lambda c: f"rename {c.path} -> {c.detail}",
    ctfile.SchemaChangeKind.WIDEN: lambda c: f"widen {c.path} ({c.detail})",
    ctfile.SchemaChangeKind.MAKE_NULLABLE: lambda c: f"make {c.path} nullable",
    ctfile.SchemaChangeKind.MOVE: lambda c: f"move {c.path}" if c.path else f"reorder ({c.detail})",
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
    its path (``address.zip``, ``tags.element``, ```a.b``` for a column
    named ``a.b``); ``introduced_in`` the
    version that added its id (None: before the oldest version available)."""

    id: int
    name: str
    type: str
    nullable: bool
    comment: str | None
    introduced_in: int | None
    # For the text layout only: its own name, and how deep it is nested.
    leaf: str
    depth: int

    def as_json(self) -> dict:
        d = dataclasses.asdict(self)
        del d["leaf"], d["depth"]
        return d


def field_rows(schema: Any, introduced: ctfile.IntroducedVersions) -> list[FieldRow]:
    """Every field of ``schema`` (a ``ctfile.format.Schema``) in pre-order,
    nested ones after their parent, with the version that introduced it.
    Its name is its path as :func:`ctfile.field_paths` writes it (a name
    holding a ``.`` or a backtick quoted: the path ``update_schema()`` takes)."""
    rows: list[FieldRow] = []
    paths = ctfile.field_paths(schema)

    def add(fid: int, leaf: str, t: Any, nullable: bool, comment: str | None, depth: int) -> None:
        rows.append(FieldRow(fid, paths[fid], _type_str(t), nullable, comment, introduced.get(fid), leaf, depth))
        nested(t, depth + 1)

    def nested(t: Any, depth: int) -> None:
        if hasattr(t, "element_type"):
            add(t.element_id, "element", t.element_type, t.contains_null, None, depth)
        elif hasattr(t, "key_type"):
            add(t.key_id, "key", t.key_type, False, None, depth)
            add(t.value_id, "value", t.value_type, t.value_contains_null, None, depth)
        elif hasattr(t, "fields"):
            for f in t.fields:
                add(f.id, f.name, f.type, f.nullable, f.metadata.get("comment"), depth)

    nested(schema, 0)
    return rows


def fields_table(rows: Sequence[FieldRow], *, oldest: int) -> RichTable:
    """The fields as a table, nested ones indented under their parent; a
    field older than the history available (``oldest``) was introduced
    "before" it."""
    t = RichTable(title="schema", title_justify="left")
    for c in ("field id", "column", "type", "nullable", "introduced", "comment"):
        t.add_column(c, overflow="fold")
    for r in rows:
        introduced = f"before v{oldest}" if r.introduced_in is None else f"v{r.introduced_in}"
        t.add_row(
            str(r.id), "  " * r.depth + r.leaf, r.type, "yes" if r.nullable else "no", introduced, r.comment or "",
        )
    return t


# ---------------------------------------------------------------- ctfile schema

_VACUUMED = "oldest version available: the schema changes before it were vacuumed"


def _is_derivation_column(name: str) -> bool:
    """A derived table's hidden derivation column (SPEC §Derived tables: only
    those may carry the prefix), left out as every ordinary read leaves it."""
    return name.startswith(ctfile.format.DERIVED_COLUMN_PREFIX)


def visible_changes(changes: Sequence[ctfile.SchemaChange]) -> tuple[ctfile.SchemaChange, ...]:
    """``changes`` without those of derivation columns (hidden like the columns)."""
    return tuple(c for c in changes if not _is_derivation_column(ctfile.parse_field_path(c.path)[0]))


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
        introduced = table.introduced_versions(version=version)  # VersionNotFoundError for a version not there
        history = table.schema_history()
        upto = [s for s in history if s.version <= introduced.version]
        if not upto:
            raise ctfile.VersionNotFoundError(
                f"version {introduced.version} of {uri} is older than its schema history, which starts at "
                f"version {history[-1].version} (older entries are gone)"
            )
        fields = [f for f in field_rows(upto[0].schema, introduced) if not _is_derivation_column(f.name)]
        return cls(uri, introduced.version, table.version, introduced.oldest_version, fields, upto)

    def as_json(self) -> dict:
        return {
            "uri": self.uri,
            "version": self.version,
            "latest_version": self.latest_version,
            "oldest_version": self.oldest_version,
            "fields": [f.as_json() for f in self.fields],
            "history": [
                {"version": s.version, "timestamp": out.commit_time(s.timestamp_ms), "operation": s.operation,
                 "complete": s.complete, "changes": [c.to_json() for c in visible_changes(s.changes)]}
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
            text = "\n".join(change_text(c) for c in visible_changes(s.changes)) if s.complete else _VACUUMED
            t.add_row(str(s.version), out.fmt_ms(s.timestamp_ms), s.operation or "", text)
        con.print(t)


def schema(
    uri: UriArg,
    version: Annotated[
        Optional[int], typer.Option("--version", "-v", help="Show the schema of this version (default: latest).")
    ] = None,
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
    out.emit(report, json=json_)


COMMANDS = (schema,)
