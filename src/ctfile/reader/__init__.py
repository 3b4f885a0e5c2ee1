"""Reading tables: snapshots, partition reads, pruning by statistics."""

from ctfile.reader.snapshot import Snapshot

__all__ = ["Snapshot"]
