"""Reading tables: snapshots, change scans, partition reads, pruning by statistics."""

from ctfile.format.change_modes import ChangeMode, Changelog
from ctfile.reader.change_plan import PlanShape
from ctfile.reader.change_scan import ChangeSet, ChangeTask
from ctfile.reader.change_spec import ChangeScan
from ctfile.reader.scan_task import ScanTask
from ctfile.reader.snapshot import Snapshot

__all__ = ["Snapshot", "ChangeSet", "ChangeScan", "ChangeMode", "Changelog", "PlanShape", "ScanTask", "ChangeTask"]
