"""The ctfile data model and JSON codec: pure, no I/O, imports nothing of ctfile."""

from ctfile.format.actions import (
    Action,
    AddPartition,
    ChangeFile,
    CheckpointHeader,
    CommitInfo,
    Metadata,
    Partition,
    PartitionStats,
    Protocol,
    RemovePartition,
    SetTransaction,
)
from ctfile.format.codec import decode_actions, encode_actions
from ctfile.format.derived import (
    DERIVED_COLUMN_PREFIX,
    DERIVED_KEY_COLUMN,
    FEATURE_DERIVED_TABLES,
    REFRESH_OPERATION,
    DerivedDefinition,
    RefreshAction,
    RefreshInfo,
    RefreshMode,
    SourceBinding,
    SourceVersion,
    schema_id,
    visible_schema,
)
from ctfile.format.entries import decode_entry, encode_entry
from ctfile.format.errors import *  # noqa: F403
from ctfile.format.errors import __all__ as _errors_all
from ctfile.format.schema import (
    HIDDEN_COLUMNS,
    ROW_ID_COLUMN,
    ROW_VERSION_COLUMN,
    Field,
    Schema,
    schema_from_arrow,
)

__all__ = [
    "Action",
    "AddPartition",
    "ChangeFile",
    "CheckpointHeader",
    "CommitInfo",
    "Metadata",
    "Partition",
    "PartitionStats",
    "Protocol",
    "RemovePartition",
    "SetTransaction",
    "decode_actions",
    "encode_actions",
    "DERIVED_COLUMN_PREFIX",
    "DERIVED_KEY_COLUMN",
    "FEATURE_DERIVED_TABLES",
    "REFRESH_OPERATION",
    "DerivedDefinition",
    "RefreshAction",
    "RefreshInfo",
    "RefreshMode",
    "SourceBinding",
    "SourceVersion",
    "schema_id",
    "visible_schema",
    "decode_entry",
    "encode_entry",
    "HIDDEN_COLUMNS",
    "ROW_ID_COLUMN",
    "ROW_VERSION_COLUMN",
    "Field",
    "Schema",
    "schema_from_arrow",
    *_errors_all,
]
