"""The ctfile tables a SQL statement of :func:`ctfile.spark.sql` names
(README "SQL"): ``ctfile.`<uri>``` (Delta Lake's ``delta.`<path>```
convention; its storage options are those given to ``ctfile.spark.sql``),
or a name :func:`ctfile.spark.register` gave it in the session, with its
own storage options.

A registration is kept in the session's configuration (key
``ctfile.sql.table.<name in lower case>``, a JSON object of the URI and the
storage options), so it holds in every session object of that Spark
session, ``foreachBatch``'s on Spark Connect included (its function runs in
a Python process on the server), and in no other session.

Examples
--------
>>> import sqlglot
>>> names = Names({"ctfile.sql.table.people": '{"uri": "s3://b/people"}'}.get)
>>> table = lambda text: sqlglot.parse_one(f"SELECT * FROM {text}", dialect="spark").find(exp.Table)
>>> names.resolve(table("ctfile.`/data/events`")), names.resolve(table("People"))
(CtfileRef(uri='/data/events', storage_options=None, name=None), CtfileRef(uri='s3://b/people', storage_options=None, name='People'))
>>> names.resolve(table("other")) is None, names.resolve(table("db.people")) is None
(True, True)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from sqlglot import exp

REGISTRY_PREFIX = "ctfile.sql.table."  # session configuration key of a registered name (lower case)
CTFILE_SCHEMA = "ctfile"


@dataclass(frozen=True)
class CtfileRef:
    """A ctfile table as a statement names it: its ``uri``, the storage
    options to open it with, and the ``name`` it is registered under (None
    for ``ctfile.`<uri>```)."""

    uri: str
    storage_options: dict | None = field(default=None, hash=False)
    name: str | None = None

    def table(self, spark: Any):
        """A :class:`ctfile.spark.CtfileTable` of it (the table must exist)."""
        from ctfile.spark.table import CtfileTable

        return CtfileTable.for_path(spark, self.uri, storage_options=self.storage_options)

    def read_options(self) -> dict[str, str]:
        opts = {"path": self.uri}
        if self.storage_options:
            opts["storageOptions"] = json.dumps(self.storage_options, sort_keys=True)
        return opts

    def __str__(self) -> str:
        return self.name or f"{CTFILE_SCHEMA}.`{self.uri}`"


class Names:
    """How a statement's table names resolve: ``ctfile.`<uri>``` with
    ``storage_options``, registered names through ``lookup`` (a session
    configuration getter: key -> value or None)."""

    def __init__(self, lookup: Callable[[str], str | None], storage_options: dict | None = None):
        self._lookup = lookup
        self.storage_options = storage_options

    @classmethod
    def of(cls, spark: Any, storage_options: dict | None = None) -> "Names":
        return cls(lambda key: spark.conf.get(key, None), storage_options)

    def resolve(self, table: exp.Table) -> CtfileRef | None:
        """The ctfile table ``table`` names, or None (not a ctfile table)."""
        if not isinstance(table.this, exp.Identifier) or table.args.get("catalog"):
            return None
        db = table.args.get("db")
        if db is not None:
            if db.name.lower() != CTFILE_SCHEMA:
                return None
            return CtfileRef(table.name, self.storage_options)
        raw = self._lookup(REGISTRY_PREFIX + table.name.lower())
        if raw is None:
            return None
        entry = json.loads(raw)
        return CtfileRef(entry["uri"], entry.get("storageOptions"), table.name)


def registration(name: str, uri: str, storage_options: dict | None) -> tuple[str, str]:
    """The session configuration key and value that register ``name``
    (read back by :meth:`Names.resolve`)."""
    entry = {"uri": uri, **({"storageOptions": storage_options} if storage_options else {})}
    return REGISTRY_PREFIX + name.lower(), json.dumps(entry)
