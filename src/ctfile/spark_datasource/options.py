"""Parsing and validating the options of ``spark.read/readStream/write.format("ctfile")``.

Spark hands options over as strings under lower-cased keys. Every option is
checked here, on the driver, so a typo fails the query at once with a message
naming the option, instead of being silently ignored.

A write may also set the table properties of a table it creates, as options
named like the property (``.option("ctfile.checkpointInterval", "10")``;
``partitionRows`` is short for ``ctfile.partitionRows``). Their values are
checked against ``ctfile.TABLE_PROPERTIES`` here, whether or not the table
exists. User properties (keys without the ``ctfile.`` prefix) cannot be set
this way: Spark lower-cases option names, and a user key keeps its case.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

import ctfile
from ctfile import InvalidArgumentError

# Option name (as documented, camelCase) -> what it is for.
READ_OPTIONS = {
    "path": "table URI",
    "versionAsOf": "snapshot version (time travel)",
    "timestampAsOf": "snapshot timestamp (time travel)",
    "changes": "change scan mode: default | append_only | audit",
    "startingVersion": "first version of a change interval (inclusive)",
    "endingVersion": "last version of a change interval (inclusive)",
    "startingTimestamp": "start of a change interval by commit time",
    "endingTimestamp": "end of a change interval by commit time",
    "initialRows": "true: start from the empty table (initial rows as inserts)",
    "changelog": "op: render changes as a two-event changelog",
    "maxVersionsPerTrigger": "streaming: at most this many versions per micro-batch",
    "allowSchemaChanges": "streaming: true reads across drops, renames and widenings, by field id in the query's schema",
    "rowIds": "true, snapshot reads: add METADATA$ROW_ID, each row's id as change scans give it",
    "maxRowsPerTask": "rows per Spark task: splits large partitions of a snapshot, packs parts of a change scan",
    "pushdownPruning": "auto | true | false: prune micro-partitions with pushed-down filters",
    "stream": "batch: read the pending changes of this stream of the table (pinned at planning)",
    "streamPin": "with stream: read exactly this pin (StreamPin.token) instead of pinning",
    "storageOptions": "JSON object of fsspec storage options",
}
# What a stream read fixes itself (its interval and mode): options that
# would contradict it.
STREAM_EXCLUDES = ("versionAsOf", "timestampAsOf", "changes", "startingVersion", "endingVersion",
                   "startingTimestamp", "endingTimestamp", "initialRows", "rowIds")
WRITE_OPTIONS = {
    "path": "table URI",
    "txnAppId": "streaming sink: application id for exactly-once commits",
    "mergeSchema": "true: add the DataFrame's new columns and widen types, in the version of the write",
    "overwriteSchema": "true, with mode overwrite: replace the schema by the DataFrame's",
    "partitionRows": "target rows per micro-partition of a new table (table property ctfile.partitionRows)",
    "consumeStream": "batch: consume this stream (of streamTable) exactly once with the write",
    "streamTable": "with consumeStream: URI of the stream's table (opened with the write's storage options)",
    "streamPin": "with consumeStream: the pin consumed (StreamPin.token)",
    "storageOptions": "JSON object of fsspec storage options",
    # Set by Spark or by users of writeStream; accepted and used as a default txnAppId.
    "checkpointLocation": "streaming checkpoint location",
    "queryName": "streaming query name",
}
STORAGE_PREFIX = "storage."
# Write options that name a table property: lower-cased option -> (option as
# documented, property key).
PROPERTY_PREFIX = "ctfile."
PROPERTY_OPTIONS = {
    "partitionrows": ("partitionRows", "ctfile.partitionRows"),
    **{key.lower(): (key, key) for key in ctfile.TABLE_PROPERTIES},
}
# Families of options by prefix -> how an error message names them.
READ_PREFIXES = {STORAGE_PREFIX: "storage.<key> for storage options"}
WRITE_PREFIXES = {**READ_PREFIXES, PROPERTY_PREFIX: "ctfile.<property> for table properties"}


def _lower(names) -> dict[str, str]:
    return {n.lower(): n for n in names}


def _int(opts: Mapping[str, str], name: str, *, minimum: int = 0) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidArgumentError(f"option {name} must be an integer, found {raw!r}") from None
    if value < minimum:
        raise InvalidArgumentError(f"option {name} must be >= {minimum}, found {value}")
    return value


def _bool(opts: Mapping[str, str], name: str) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return False
    v = str(raw).strip().lower()
    if v not in ("true", "false"):
        raise InvalidArgumentError(f"option {name} must be true or false, found {raw!r}")
    return v == "true"


def _choice(opts: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    v = str(raw).strip().lower()
    if v not in choices:
        raise InvalidArgumentError(f"option {name} must be one of {', '.join(choices)}, found {raw!r}")
    return v


def _check_known(opts: Mapping[str, str], known: dict[str, str], prefixes: dict[str, str], what: str) -> None:
    allowed = _lower(known)
    for key in opts:
        k = key.lower()
        if k in allowed or k.startswith(tuple(prefixes)):
            continue
        raise InvalidArgumentError(
            f"unknown {what} option {key!r} for format 'ctfile'; known options: "
            f"{', '.join(sorted(known))}; also {'; '.join(prefixes.values())}"
        )


def _table_properties(opts: Mapping[str, str]) -> dict[str, str]:
    """The table properties the write options set, validated by
    ``ctfile.validate_properties`` (so an unknown ``ctfile.`` key or a bad
    value fails here, naming the option)."""
    out: dict[str, str] = {}
    named: dict[str, str] = {}  # property key -> the option that set it
    for option, raw in opts.items():
        if not (option in PROPERTY_OPTIONS or option.startswith(PROPERTY_PREFIX)):
            continue
        name, key = PROPERTY_OPTIONS.get(option, (option, option))
        if key in named:
            raise InvalidArgumentError(f"options {named[key]} and {name} both set table property {key}; give one")
        try:
            out.update(ctfile.validate_properties({key: str(raw)}))
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"option {name}: {e}") from None
        named[key] = name
    return out


def _storage_options(opts: Mapping[str, str]) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    raw = opts.get("storageoptions")
    if raw:
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as e:
            raise InvalidArgumentError(f"option storageOptions must be a JSON object: {e}") from e
        if not isinstance(parsed, dict):
            raise InvalidArgumentError(f"option storageOptions must be a JSON object, found {raw!r}")
        out.update(parsed)
    for key, value in opts.items():
        if key.lower().startswith(STORAGE_PREFIX):
            out[key[len(STORAGE_PREFIX):]] = value
    return out or None


def _path(opts: Mapping[str, str]) -> str:
    path = opts.get("path")
    if not path:
        raise InvalidArgumentError("format 'ctfile' needs a table path: .load(path) or .option('path', ...)")
    return path


@dataclass(frozen=True)
class ReadOptions:
    path: str
    storage_options: dict | None = None
    version_as_of: int | None = None
    timestamp_as_of: str | None = None
    changes: ctfile.ChangeMode | None = None
    starting_version: int | None = None
    ending_version: int | None = None
    starting_timestamp: str | None = None
    ending_timestamp: str | None = None
    initial_rows: bool = False
    changelog: ctfile.Changelog | None = None
    max_versions_per_trigger: int | None = None
    allow_schema_changes: bool = False
    max_rows_per_task: int | None = None
    pushdown_pruning: str = "auto"
    stream: str | None = None
    stream_pin: str | None = None
    row_ids: bool = False
    raw: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def is_change_scan(self) -> bool:
        return self.changes is not None or self.stream is not None


def parse_read_options(options: Mapping[str, str], *, streaming: bool | None = False) -> ReadOptions:
    """Validate read options; ``streaming`` None skips the batch-only and
    stream-only checks (schema inference, which serves both).

    The checks run in a fixed order (the options, a stream read, time
    travel, the change mode, the interval, the streaming options), so a
    query with several mistakes is told about the same one each time."""
    opts = {k.lower(): v for k, v in dict(options).items()}
    _check_known(opts, READ_OPTIONS, READ_PREFIXES, "read")
    _check_stream_read(opts, streaming)
    version_as_of, timestamp_as_of = _time_travel(opts)
    changes = _change_mode(opts, streaming, travels=version_as_of is not None or timestamp_as_of is not None)
    changelog = opts.get("changelog")
    if changelog is not None:
        changelog = ctfile.Changelog.parse(changelog, what="option changelog", optional=False)
    starting_version, ending_version = _interval_versions(opts, streaming)
    max_versions = _int(opts, "maxVersionsPerTrigger", minimum=1)
    _check_streaming_only(opts, streaming)
    row_ids = _row_ids(opts, changes)
    return ReadOptions(
        path=_path(opts),
        storage_options=_storage_options(opts),
        version_as_of=version_as_of,
        timestamp_as_of=timestamp_as_of,
        changes=changes,
        starting_version=starting_version,
        ending_version=ending_version,
        starting_timestamp=opts.get("startingtimestamp"),
        ending_timestamp=opts.get("endingtimestamp"),
        initial_rows=_bool(opts, "initialRows"),
        changelog=changelog,
        max_versions_per_trigger=max_versions,
        allow_schema_changes=_bool(opts, "allowSchemaChanges"),
        max_rows_per_task=_int(opts, "maxRowsPerTask", minimum=1),
        pushdown_pruning=_choice(opts, "pushdownPruning", ("auto", "true", "false"), "auto"),
        stream=opts.get("stream"),
        stream_pin=opts.get("streampin"),
        row_ids=row_ids,
        raw=opts,
    )


#: The options of a change interval, which need a change scan.
_INTERVAL_OPTIONS = ("startingVersion", "endingVersion", "startingTimestamp", "endingTimestamp", "initialRows",
                     "changelog")


def _time_travel(opts: Mapping[str, str]) -> tuple[int | None, str | None]:
    """``versionAsOf`` and ``timestampAsOf``, at most one of them given."""
    version_as_of = _int(opts, "versionAsOf")
    timestamp_as_of = opts.get("timestampasof")
    if version_as_of is not None and timestamp_as_of is not None:
        raise InvalidArgumentError("give option versionAsOf or timestampAsOf, not both")
    return version_as_of, timestamp_as_of


def _change_mode(opts: Mapping[str, str], streaming: bool | None, *, travels: bool) -> Any:
    """The ``changes`` option as a :class:`ctfile.ChangeMode` (None: a
    snapshot read): required by a streaming read and by the interval
    options (unless a stream read fixes the interval), refused with time
    travel (``travels``)."""
    changes = opts.get("changes")
    if changes is not None:
        changes = ctfile.ChangeMode.parse(changes, what="option changes")
    if streaming and changes is None:
        raise InvalidArgumentError(
            "spark.readStream.format('ctfile') streams changes: set option changes to "
            "default, append_only or audit"
        )
    if changes is None and "stream" not in opts:
        _refuse_interval_without_changes(opts)
    if changes is not None and travels:
        raise InvalidArgumentError("versionAsOf/timestampAsOf select a snapshot; they cannot be combined with changes")
    return changes


def _refuse_interval_without_changes(opts: Mapping[str, str]) -> None:
    """Refuse the interval options in a snapshot read."""
    interval_opts = [n for n in _INTERVAL_OPTIONS if n.lower() in opts]
    if interval_opts:
        raise InvalidArgumentError(
            f"options {', '.join(interval_opts)} apply to change scans; add .option('changes', 'default') "
            f"(or append_only / audit)"
        )


def _interval_versions(opts: Mapping[str, str], streaming: bool | None) -> tuple[int | None, int | None]:
    """``startingVersion`` and ``endingVersion``: each given as a version
    or a timestamp, not both; a streaming read has no end."""
    starting_version = _int(opts, "startingVersion")
    ending_version = _int(opts, "endingVersion")
    if starting_version is not None and "startingtimestamp" in opts:
        raise InvalidArgumentError("give option startingVersion or startingTimestamp, not both")
    if ending_version is not None and "endingtimestamp" in opts:
        raise InvalidArgumentError("give option endingVersion or endingTimestamp, not both")
    if streaming and (ending_version is not None or "endingtimestamp" in opts):
        raise InvalidArgumentError("a streaming read has no end: endingVersion/endingTimestamp are for batch reads")
    return starting_version, ending_version


def _row_ids(opts: Mapping[str, str], changes: Any) -> bool:
    """The ``rowIds`` option: snapshot reads only (a change scan's rows
    carry ``METADATA$ROW_ID`` already)."""
    row_ids = _bool(opts, "rowIds")
    if row_ids and changes is not None:
        raise InvalidArgumentError(
            f"option rowIds adds METADATA$ROW_ID to snapshot reads; a change scan (changes={changes.value}) "
            f"has that column already: drop rowIds"
        )
    return row_ids


def _check_streaming_only(opts: Mapping[str, str], streaming: bool | None) -> None:
    """Refuse the options of a streaming read in a batch read."""
    for name in ("maxVersionsPerTrigger", "allowSchemaChanges"):
        if name.lower() in opts and streaming is False:
            raise InvalidArgumentError(f"option {name} applies to streaming reads (spark.readStream)")


def _check_stream_read(opts: Mapping[str, str], streaming: bool | None) -> None:
    """``stream`` reads a stream's pending changes as a batch, in its own
    mode and interval: refuse what contradicts that."""
    if "stream" not in opts:
        if "streampin" in opts:
            raise InvalidArgumentError("option streamPin is the pin of a stream read: add option stream")
        return
    if streaming:
        raise InvalidArgumentError(
            "option stream reads a stream's pending changes as a batch (spark.read); spark.readStream follows a "
            "table's changes with option changes"
        )
    clash = [n for n in STREAM_EXCLUDES if n.lower() in opts]
    if clash:
        raise InvalidArgumentError(
            f"option stream reads the stream's pending changes in its own mode and interval; options "
            f"{', '.join(clash)} contradict it: drop them (changelog and maxRowsPerTask apply)"
        )


@dataclass(frozen=True)
class WriteOptions:
    """``properties``: the table properties of a table the write creates
    (keys as in ``ctfile.TABLE_PROPERTIES``), already validated.
    ``schema_mode``: ``mergeSchema`` / ``overwriteSchema`` (None: neither)."""

    path: str
    storage_options: dict | None = None
    txn_app_id: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    schema_mode: ctfile.SchemaMode | None = None
    consume: "StreamConsumption | None" = None

    @property
    def schema_option(self) -> str | None:
        """The option that set :attr:`schema_mode`, as documented (for messages)."""
        return None if self.schema_mode is None else _SCHEMA_OPTIONS[self.schema_mode]


_SCHEMA_OPTIONS = {ctfile.SchemaMode.MERGE: "mergeSchema", ctfile.SchemaMode.OVERWRITE: "overwriteSchema"}


def _schema_mode(opts: Mapping[str, str]) -> ctfile.SchemaMode | None:
    chosen = [mode for mode, name in _SCHEMA_OPTIONS.items() if _bool(opts, name)]
    if len(chosen) > 1:
        raise InvalidArgumentError("give option mergeSchema or overwriteSchema, not both")
    return chosen[0] if chosen else None


@dataclass(frozen=True)
class StreamConsumption:
    """``consumeStream`` / ``streamTable`` / ``streamPin``: the stream pin a
    batch write consumes."""

    stream: str
    table: str
    pin: str


_CONSUME_OPTIONS = ("consumeStream", "streamTable", "streamPin")


def _consumption(opts: Mapping[str, str]) -> StreamConsumption | None:
    given = [n for n in _CONSUME_OPTIONS if n.lower() in opts]
    if not given:
        return None
    if len(given) < len(_CONSUME_OPTIONS):
        missing = [n for n in _CONSUME_OPTIONS if n not in given]
        raise InvalidArgumentError(
            f"a write consuming a stream needs options {', '.join(_CONSUME_OPTIONS)}; found {', '.join(given)}, "
            f"missing {', '.join(missing)}"
        )
    if "txnappid" in opts:
        raise InvalidArgumentError("options txnAppId and consumeStream both record a txn; a consuming write records the stream's")
    return StreamConsumption(*(opts[n.lower()] for n in _CONSUME_OPTIONS))


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    opts = {k.lower(): v for k, v in dict(options).items()}
    _check_known(opts, WRITE_OPTIONS, WRITE_PREFIXES, "write")
    return WriteOptions(
        path=_path(opts),
        storage_options=_storage_options(opts),
        txn_app_id=opts.get("txnappid") or opts.get("checkpointlocation"),
        properties=_table_properties(opts),
        schema_mode=_schema_mode(opts),
        consume=_consumption(opts),
    )
