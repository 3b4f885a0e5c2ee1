"""A MERGE statement, whatever engine evaluates its expressions (SPEC
§Copy-on-write, MERGE).

A :class:`MergeStatement` is the user's statement: the ON condition (key
pairs compared by SPEC's key equality, and an optional further predicate)
and ordered :class:`MergeClause` objects, each of a :class:`MatchKind` with
an optional condition and a :class:`MergeAction`. Conditions and values are
the engine's expressions (pyarrow ``Expression`` objects in the Python
engine, Spark ``Column`` objects or SQL strings in ``ctfile.spark``) or
plain literals: this module never looks inside them. It checks what needs
no engine, when the objects are made: the action a kind allows, a clause
that could never apply, a column assigned twice, the keys and the aliases.
Checking a statement against a table is :mod:`ctfile.writer.merge_plan`.

Examples
--------
>>> stmt = MergeStatement(
...     keys=(("id", "id"),),
...     clauses=(
...         MergeClause(MatchKind.MATCHED, MergeAction.DELETE, condition="s.op = 'delete'"),
...         MergeClause(MatchKind.MATCHED, MergeAction.UPDATE_ALL),
...         MergeClause(MatchKind.NOT_MATCHED, MergeAction.INSERT_ALL),
...     ),
... )
>>> [str(c) for c in stmt.clauses]
["WHEN MATCHED AND s.op = 'delete' THEN DELETE", 'WHEN MATCHED THEN UPDATE SET *', 'WHEN NOT MATCHED THEN INSERT *']
>>> stmt.parameters()["clauses"][0]
{'kind': 'matched', 'action': 'delete', 'condition': "s.op = 'delete'"}
>>> MergeStatement(keys=(("id", "id"),), clauses=(
...     MergeClause(MatchKind.MATCHED, MergeAction.DELETE),
...     MergeClause(MatchKind.MATCHED, MergeAction.UPDATE_ALL)))
Traceback (most recent call last):
...
ctfile.format.errors.InvalidArgumentError: WHEN MATCHED THEN UPDATE SET * can never apply: it follows WHEN MATCHED THEN DELETE, which has no condition (only the last clause of a kind may omit it)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ctfile.format.errors import InvalidArgumentError


class Side(enum.Enum):
    """A side of a MERGE: the table it writes, or its source."""

    TARGET = "target"
    SOURCE = "source"


class MergeAction(str, enum.Enum):
    """What a clause does to the row it applies to."""

    UPDATE = "update"
    UPDATE_ALL = "updateAll"
    DELETE = "delete"
    INSERT = "insert"
    INSERT_ALL = "insertAll"

    @property
    def updates(self) -> bool:
        return self in (MergeAction.UPDATE, MergeAction.UPDATE_ALL)

    @property
    def inserts(self) -> bool:
        return self in (MergeAction.INSERT, MergeAction.INSERT_ALL)

    @property
    def assigns(self) -> bool:
        """Whether the clause lists its columns (``SET`` or ``VALUES``)."""
        return self in (MergeAction.UPDATE, MergeAction.INSERT)

    @property
    def copies_source(self) -> bool:
        """``UPDATE SET *`` or ``INSERT *``: columns taken from the source by name."""
        return self in (MergeAction.UPDATE_ALL, MergeAction.INSERT_ALL)

    @property
    def sql(self) -> str:
        return {
            MergeAction.UPDATE: "UPDATE SET", MergeAction.UPDATE_ALL: "UPDATE SET *",
            MergeAction.DELETE: "DELETE", MergeAction.INSERT: "INSERT", MergeAction.INSERT_ALL: "INSERT *",
        }[self]


class MatchKind(str, enum.Enum):
    """Which rows a clause applies to (SPEC §Copy-on-write, MERGE)."""

    MATCHED = "matched"
    NOT_MATCHED = "notMatched"
    NOT_MATCHED_BY_SOURCE = "notMatchedBySource"

    @property
    def sees(self) -> tuple[Side, ...]:
        """The sides its conditions and values may name."""
        return {
            MatchKind.MATCHED: (Side.TARGET, Side.SOURCE),
            MatchKind.NOT_MATCHED: (Side.SOURCE,),
            MatchKind.NOT_MATCHED_BY_SOURCE: (Side.TARGET,),
        }[self]

    @property
    def actions(self) -> tuple[MergeAction, ...]:
        """The actions a clause of this kind may take."""
        return {
            MatchKind.MATCHED: (MergeAction.UPDATE, MergeAction.UPDATE_ALL, MergeAction.DELETE),
            MatchKind.NOT_MATCHED: (MergeAction.INSERT, MergeAction.INSERT_ALL),
            MatchKind.NOT_MATCHED_BY_SOURCE: (MergeAction.UPDATE, MergeAction.DELETE),
        }[self]

    @property
    def sql(self) -> str:
        return {
            MatchKind.MATCHED: "WHEN MATCHED", MatchKind.NOT_MATCHED: "WHEN NOT MATCHED",
            MatchKind.NOT_MATCHED_BY_SOURCE: "WHEN NOT MATCHED BY SOURCE",
        }[self]


def _text(value: Any) -> str:
    """An expression or literal as the log records it (an engine's own
    ``str``; a string literal is text already)."""
    return value if isinstance(value, str) else str(value)


@dataclass(frozen=True)
class MergeClause:
    """One ``WHEN`` clause: its ``kind``, ``action``, ``condition`` (an
    engine expression, or None: always) and, for ``UPDATE`` and ``INSERT``,
    its ``assignments``: (column of the table, expression or literal) pairs.

    >>> str(MergeClause(MatchKind.NOT_MATCHED_BY_SOURCE, MergeAction.UPDATE, assignments=(("active", False),)))
    'WHEN NOT MATCHED BY SOURCE THEN UPDATE SET active = False'
    >>> MergeClause(MatchKind.NOT_MATCHED, MergeAction.DELETE)
    Traceback (most recent call last):
    ...
    ctfile.format.errors.InvalidArgumentError: WHEN NOT MATCHED cannot DELETE; it takes INSERT or INSERT *
    """

    kind: MatchKind
    action: MergeAction
    condition: Any = None
    assignments: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.kind, MatchKind) or not isinstance(self.action, MergeAction):
            raise InvalidArgumentError(
                f"a clause needs a MatchKind and a MergeAction, found {self.kind!r} and {self.action!r}"
            )
        if self.action not in self.kind.actions:
            allowed = " or ".join(a.sql for a in self.kind.actions)
            raise InvalidArgumentError(f"{self.kind.sql} cannot {self.action.sql}; it takes {allowed}")
        self._check_assignments()

    def _check_assignments(self) -> None:
        """An assigning action has assignments, another has none."""
        if not self.action.assigns:
            if self.assignments:
                raise InvalidArgumentError(f"{self.action.sql} takes no columns, found {dict(self.assignments)}")
            return
        if not self.assignments:
            raise InvalidArgumentError(f"{self.kind.sql} THEN {self.action.sql} needs at least one column")
        self._check_assigned_names()

    def _check_assigned_names(self) -> None:
        """The assigned columns are non-empty names, each assigned once."""
        names = [name for name, _ in self.assignments]
        bad = [n for n in names if not isinstance(n, str) or not n]
        if bad:
            raise InvalidArgumentError(f"{self.action.sql} names columns by non-empty strings, found {bad}")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise InvalidArgumentError(f"{self} assigns {twice} more than once")

    @property
    def is_conditional(self) -> bool:
        return self.condition is not None

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns it assigns, as written."""
        return tuple(name for name, _ in self.assignments)

    def describe(self, render: Callable[[Any], str] = _text) -> dict:
        """The clause as a commit's ``operationParameters`` record it (SPEC §commitInfo)."""
        out: dict[str, Any] = {"kind": self.kind.value, "action": self.action.value}
        if self.condition is not None:
            out["condition"] = render(self.condition)
        if self.action.assigns:
            out["set" if self.action.updates else "values"] = {n: render(v) for n, v in self.assignments}
        return out

    def __str__(self) -> str:
        cond = "" if self.condition is None else f" AND {_text(self.condition)}"
        action = self.action.sql
        if self.action is MergeAction.UPDATE:
            action += " " + ", ".join(f"{n} = {_text(v)}" for n, v in self.assignments)
        elif self.action is MergeAction.INSERT:
            action += f" ({', '.join(self.columns)}) VALUES ({', '.join(_text(v) for _, v in self.assignments)})"
        return f"{self.kind.sql}{cond} THEN {action}"


def key_pairs(on: Any) -> tuple[tuple[str, str], ...]:
    """The key pairs ``on`` names: a column name (the same on both sides),
    a sequence of names or of (table column, source column) pairs, or a
    mapping of table column to source column.

    >>> key_pairs("id"), key_pairs(["a", "b"]), key_pairs({"customer_id": "merge_key"})
    ((('id', 'id'),), (('a', 'a'), ('b', 'b')), (('customer_id', 'merge_key'),))
    """
    pairs = _pairs_named(on)
    if not pairs or not all(_is_key_pair(pair) for pair in pairs):
        raise InvalidArgumentError(
            f"on must name one or more key columns (a name, a sequence of names, or a mapping of table "
            f"column to source column), found {on!r}"
        )
    targets = [t for t, _ in pairs]
    if len(set(targets)) < len(targets):
        raise InvalidArgumentError(f"on names a table column twice: {targets}")
    return tuple(pairs)


def _pairs_named(on: Any) -> list[tuple]:
    """The (table column, source column) pairs ``on`` names, as given (not
    checked yet); none for a value of another kind."""
    if isinstance(on, str):
        return [(on, on)]
    if isinstance(on, Mapping):
        return list(on.items())
    if isinstance(on, Sequence):
        return [tuple(k) if isinstance(k, (tuple, list)) else (k, k) for k in on]
    return []


def _is_key_pair(pair: tuple) -> bool:
    """Whether ``pair`` is two non-empty column names."""
    return len(pair) == 2 and all(isinstance(n, str) and n for n in pair)


def check_aliases(source_alias: Any, target_alias: Any) -> None:
    """Aliases are distinct non-empty names without a ``.`` (``t.x`` must
    read as column ``x`` of side ``t``)."""
    for what, alias in (("source_alias", source_alias), ("target_alias", target_alias)):
        if not isinstance(alias, str) or not alias or "." in alias:
            raise InvalidArgumentError(f"{what} must be a non-empty name without '.', found {alias!r}")
    if source_alias == target_alias:
        raise InvalidArgumentError(f"source_alias and target_alias must differ, both are {source_alias!r}")


def check_reachable(clauses: Sequence[MergeClause]) -> None:
    """Refuse a clause that follows an unconditional clause of its kind: it
    could never apply (Delta Lake and Spark refuse it too)."""
    final: dict[MatchKind, MergeClause] = {}
    for c in clauses:
        if c.kind in final:
            raise InvalidArgumentError(
                f"{c} can never apply: it follows {final[c.kind]}, which has no condition "
                f"(only the last clause of a kind may omit it)"
            )
        if not c.is_conditional:
            final[c.kind] = c


def merge_text(keys: Sequence[tuple[str, str]], on_condition: Any, clauses: Sequence[MergeClause], *,
               source_alias: str, target_alias: str) -> str:
    """A statement (or one being built, with no clause yet) as SQL-like
    text, for messages: ``MERGE ON t.id = s.id [AND condition] WHEN ...``."""
    on = " AND ".join(f"{target_alias}.{t} = {source_alias}.{s}" for t, s in keys)
    if on_condition is not None:
        on += f" AND {on_condition}"
    return " ".join([f"MERGE ON {on}"] + [str(c) for c in clauses])


@dataclass(frozen=True)
class MergeStatement:
    """``MERGE INTO target USING source ON keys [AND on_condition] WHEN ...``.

    ``keys``: (table column, source column) pairs (:func:`key_pairs`);
    ``on_condition``: a further predicate over both sides, or None;
    ``clauses``: in statement order (the first whose condition holds
    applies); ``source_alias`` and ``target_alias``: the names expressions
    qualify columns with (``s.amount``, ``t.total``); ``schema_evolution``:
    add the columns the statement writes that the table lacks (SPEC
    §Copy-on-write, MERGE, schema evolution).
    """

    keys: tuple[tuple[str, str], ...]
    clauses: tuple[MergeClause, ...]
    on_condition: Any = None
    source_alias: str = "s"
    target_alias: str = "t"
    schema_evolution: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", key_pairs(self.keys))
        check_aliases(self.source_alias, self.target_alias)
        if not self.clauses or not all(isinstance(c, MergeClause) for c in self.clauses):
            raise InvalidArgumentError(
                f"a MERGE needs at least one WHEN clause (MergeClause objects), found {self.clauses!r}"
            )
        object.__setattr__(self, "clauses", tuple(self.clauses))
        check_reachable(self.clauses)
        if not isinstance(self.schema_evolution, bool):
            raise InvalidArgumentError(f"schema_evolution must be a bool, found {self.schema_evolution!r}")

    @property
    def target_keys(self) -> tuple[str, ...]:
        return tuple(t for t, _ in self.keys)

    @property
    def source_keys(self) -> tuple[str, ...]:
        return tuple(s for _, s in self.keys)

    def clauses_of(self, kind: MatchKind) -> tuple[MergeClause, ...]:
        """The clauses of ``kind``, in statement order."""
        return tuple(c for c in self.clauses if c.kind is kind)

    def has(self, kind: MatchKind) -> bool:
        return any(c.kind is kind for c in self.clauses)

    @property
    def matches_source(self) -> bool:
        """Whether some clause acts on matched pairs or unmatched source rows
        (the statement then reads the table by the source's keys)."""
        return self.has(MatchKind.MATCHED) or self.has(MatchKind.NOT_MATCHED)

    @property
    def inserts_only(self) -> bool:
        """Whether every clause is ``WHEN NOT MATCHED ... INSERT``: the
        statement only inserts rows, as an append-only table allows (SPEC
        §Append-only tables).

        >>> insert = MergeClause(MatchKind.NOT_MATCHED, MergeAction.INSERT_ALL)
        >>> MergeStatement((("id", "id"),), (insert,)).inserts_only
        True
        >>> MergeStatement((("id", "id"),), (MergeClause(MatchKind.MATCHED, MergeAction.DELETE), insert)).inserts_only
        False
        """
        return all(c.kind is MatchKind.NOT_MATCHED for c in self.clauses)

    @property
    def reads_unmatched_target(self) -> bool:
        """Whether the statement has ``NOT MATCHED BY SOURCE`` clauses (it
        reads the table rows no source row matches)."""
        return self.has(MatchKind.NOT_MATCHED_BY_SOURCE)

    def on_text(self) -> str | list[str]:
        """The keys as ``operationParameters.on`` records them."""
        names = [t if t == s else f"{t} = {s}" for t, s in self.keys]
        return names[0] if len(names) == 1 and self.keys[0][0] == self.keys[0][1] else names

    def __str__(self) -> str:
        """The statement as SQL-like text (:func:`merge_text`).

        >>> print(MergeStatement((("id", "id"),), (MergeClause(MatchKind.MATCHED, MergeAction.DELETE),)))
        MERGE ON t.id = s.id WHEN MATCHED THEN DELETE
        """
        return merge_text(self.keys, self.on_condition, self.clauses, source_alias=self.source_alias,
                          target_alias=self.target_alias)

    def parameters(self, render: Callable[[Any], str] = _text) -> dict:
        """The statement as its commit's ``operationParameters`` (SPEC §commitInfo)."""
        out: dict[str, Any] = {"on": self.on_text()}
        if self.on_condition is not None:
            out["onCondition"] = render(self.on_condition)
        out["clauses"] = [c.describe(render) for c in self.clauses]
        if self.schema_evolution:
            out["schemaEvolution"] = True
        return out
