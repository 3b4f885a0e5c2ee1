"""The public Python API: :func:`create_table`, :func:`open_table` and :class:`Table`."""

from ctfile.table.create import create_table, open_table
from ctfile.table.history import HistoryEntry, IntroducedVersions, SchemaVersion, timestamp_to_ms
from ctfile.table.table import Table

__all__ = [
    "create_table", "open_table", "Table", "HistoryEntry", "SchemaVersion", "IntroducedVersions", "timestamp_to_ms",
]
