"""ctfile: a change-tracking table format for Spark lakehouses.

A table is a directory of immutable Parquet micro-partitions plus a versioned
manifest log; hidden row-lineage columns give every row a stable id so that
changes between versions are computed from the partitions added and removed.
See ``format_spec/SPEC.md`` for the normative format.
"""

from ctfile.format.errors import (
    AppendOnlyError,
    CommitConflictError,
    CorruptDataFileError,
    CorruptLogError,
    CtfileError,
    DataFileError,
    DerivedTableError,
    InvalidArgumentError,
    MissingDataFileError,
    SchemaMismatchError,
    StaleIntervalError,
    StaleStreamError,
    StorageError,
    StreamExistsError,
    StreamNotFoundError,
    TableExistsError,
    TableNotFoundError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from ctfile.format.properties import TABLE_PROPERTIES, validate_properties
from ctfile.format.derived import (
    DerivedDefinition,
    RefreshAction,
    RefreshInfo,
    RefreshMode,
    SourceBinding,
    SourceVersion,
    schema_id,
)
from ctfile.format.schema import ROW_ID_COLUMN, ROW_ID_FIELD_ID, ROW_VERSION_COLUMN, ROW_VERSION_FIELD_ID
from ctfile.format.column_paths import format_field_path, parse_field_path
from ctfile.format.schema_evolution import SchemaChange, SchemaChangeKind, diff_schemas, field_paths
from ctfile.log.commit_options import CommitOptions
from ctfile.log.location import TableLocation
from ctfile.log.transaction import CommitResult
from ctfile.reader.scan_task import POSITION_COLUMN
from ctfile.reader import ChangeMode, Changelog, ChangeScan, ChangeSet, ChangeTask, PlanShape, ScanTask, Snapshot
from ctfile.reader.clustering import ClusteringInfo, clustering_depth
from ctfile.reader.verify import VerifyProblem, VerifyReport, verify_table
from ctfile.table import HistoryEntry, IntroducedVersions, SchemaVersion, Table, create_table, open_table
from ctfile.table.streams import Stream, StreamInfo
from ctfile.writer.distributed import SchemaMode, WriteJob
from ctfile.writer.merge import shorthand_statement
from ctfile.writer.merge_builder import ARROW_EXPRESSIONS, MergeBuilder, MergeExpressions
from ctfile.writer.merge_plan import MergePlan, MergeSpec, SourceColumn, assigned_new_columns
from ctfile.writer.merge_rows import CLAUSE_COLUMN, value_column
from ctfile.writer.merge_run import PreparedMerge
from ctfile.writer.merge_spread import SpreadMerge
from ctfile.writer.merge_statement import MatchKind, MergeAction, MergeClause, MergeStatement
from ctfile.writer.rewrite_job import ACTION_COLUMN, PartitionRewrite, RewriteJob, RewriteKind, RowAction
from ctfile.writer.transaction import WriteTransaction

__version__ = "0.1.0"

__all__ = [
    "create_table",
    "open_table",
    "verify_table",
    "VerifyReport",
    "VerifyProblem",
    "Table",
    "Snapshot",
    "ChangeSet",
    "ChangeScan",
    "ChangeMode",
    "Changelog",
    "PlanShape",
    "ScanTask",
    "ChangeTask",
    "TableLocation",
    "ClusteringInfo",
    "clustering_depth",
    "CommitOptions",
    "CommitResult",
    "HistoryEntry",
    "SchemaVersion",
    "SchemaChange",
    "SchemaChangeKind",
    "diff_schemas",
    "IntroducedVersions",
    "field_paths",
    "parse_field_path",
    "format_field_path",
    "WriteTransaction",
    "WriteJob",
    "SchemaMode",
    "RewriteJob",
    "RewriteKind",
    "PartitionRewrite",
    "MergeSpec",
    "MergePlan",
    "MergeStatement",
    "PreparedMerge",
    "SpreadMerge",
    "MergeClause",
    "MatchKind",
    "MergeAction",
    "MergeBuilder",
    "RowAction",
    "ACTION_COLUMN",
    "POSITION_COLUMN",
    "ROW_ID_COLUMN",
    "ROW_VERSION_COLUMN",
    "ROW_ID_FIELD_ID",
    "ROW_VERSION_FIELD_ID",
    "SchemaChange",
    "SchemaChangeKind",
    "diff_schemas",
    "TABLE_PROPERTIES",
    "validate_properties",
    "CtfileError",
    "InvalidArgumentError",
    "TableNotFoundError",
    "TableExistsError",
    "SchemaMismatchError",
    "VersionNotFoundError",
    "StaleIntervalError",
    "StaleStreamError",
    "StreamNotFoundError",
    "StreamExistsError",
    "Stream",
    "StreamInfo",
    "CorruptLogError",
    "DerivedTableError",
    "AppendOnlyError",
    "DerivedDefinition",
    "RefreshAction",
    "RefreshInfo",
    "RefreshMode",
    "SourceBinding",
    "SourceVersion",
    "schema_id",
    "UnsupportedFeatureError",
    "CommitConflictError",
    "StorageError",
    "DataFileError",
    "MissingDataFileError",
    "CorruptDataFileError",
]
