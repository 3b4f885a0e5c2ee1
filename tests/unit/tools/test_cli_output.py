"""The one output convention of the ``ctfile`` command (``ctfile.tools._output``):
every command gathers a frozen report and ``emit`` prints it as JSON or
text. The JSON documents keep their keys, in their order, and the text the
details the report objects carry (statistics, restored partitions)."""

from __future__ import annotations

import dataclasses
import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from typer.testing import CliRunner

import ctfile
from ctfile.tools import _output
from ctfile.tools.cli import app
from ctfile.tools.cmd_changes import ChangeRowsReport, ExportReport
from ctfile.tools.cmd_inspect import DiffReport, HistoryReport, PlotWritten, ShowReport
from ctfile.tools.cmd_maintain import CheckpointOutput, CompactOutput, RestoreOutput, VacuumOutput, VerifyOutput
from ctfile.tools.cmd_schema import SchemaReport
from ctfile.tools.cmd_streams import StreamsReport

runner = CliRunner()

REPORTS = (ChangeRowsReport, ExportReport, DiffReport, HistoryReport, PlotWritten, ShowReport, CheckpointOutput,
           CompactOutput, RestoreOutput, VacuumOutput, VerifyOutput, SchemaReport, StreamsReport)


def ok(*args: str) -> str:
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, (r.exit_code, r.stdout, r.stderr)
    return r.stdout


@pytest.mark.parametrize("report", REPORTS, ids=lambda c: c.__name__)
def test_every_report_is_a_frozen_dataclass_with_json_and_text(report):
    assert dataclasses.is_dataclass(report) and report.__dataclass_params__.frozen
    assert callable(report.as_json) and callable(report.print_text)


def test_emit_prints_json_or_text(capsys):
    report = PlotWritten("h.png")
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.path = "other.png"  # type: ignore[misc]
    _output.emit(report, json=True)
    assert json.loads(capsys.readouterr().out) == {"plot": "h.png"}
    _output.emit(report, json=False)
    assert capsys.readouterr().out == "wrote h.png\n"


@pytest.fixture
def scored(tmp_path) -> ctfile.Table:
    """v1 a partition with a null and a NaN; v2 delete; v3 restore of v1."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("score", pa.float64())])
    t = ctfile.create_table(tmp_path / "scored", schema)
    t.insert(pa.table({"id": [1, 2, 3], "score": [1.0, None, float("nan")]}, schema=schema))
    t.delete(pc.field("id") == 2)
    t.restore(version=1)
    return t


def _keys(doc: dict) -> list[str]:
    return list(doc)


def test_json_documents_keep_their_keys_in_order(scored):
    uri = scored.uri
    history = json.loads(ok("history", uri, "--json"))
    assert _keys(history) == ["uri", "versions"]
    assert _keys(history["versions"][0]) == [
        "version", "timestamp", "operation", "parameters", "partitions_added", "partitions_removed",
        "rows_inserted", "rows_updated", "rows_deleted", "rows_copied", "rows_added", "rows_removed",
        "bytes_added", "bytes_removed", "data_change", "read_version", "isolation_level", "blind_append",
        "captured", "change_files", "change_bytes", "schema_changed", "schema_changes",
    ]
    show = json.loads(ok("show", uri, "--json"))
    assert _keys(show) == [
        "uri", "version", "timestamp", "table_id", "name", "description", "created_time", "num_records",
        "num_partitions", "size_bytes", "protocol", "properties", "change_capture", "cluster_keys", "auto_compact",
        "clustering", "schema", "oldest_version", "hidden_columns", "partitions",
    ]
    assert _keys(show["hidden_columns"]) == [
        "next_row_id", "rows", "partitions_without_stats", "partitions_all_inherited", "rows_fresh",
        "rows_updated", "rows_copied", "min_row_version", "max_row_version",
    ]
    diff = json.loads(ok("diff", uri, "0", "1", "--json"))
    assert _keys(diff["partitions_added"][0]) == [
        "path", "num_records", "size_bytes", "first_row_id", "default_row_version", "modification_time", "checksum",
    ]
    restore = json.loads(ok("restore", uri, "-v", "2", "--json"))
    assert _keys(restore) == [
        "uri", "committed", "version", "restored_version", "timestamp", "partitions_re_added", "partitions_removed",
        "rows_re_added", "rows_removed",
    ]
    vacuum = json.loads(ok("vacuum", uri, "--dry-run", "--json"))
    assert _keys(vacuum) == [
        "uri", "dry_run", "version", "oldest_version", "checkpoint_version", "retain_s", "grace_period_s",
        "effective_retain_s", "history_cutoff", "deleted_log_files", "deleted_data_files", "deleted_change_files",
        "deleted_temp_files", "deleted_stream_files", "bytes_freed", "change_bytes_freed", "holding_streams",
        "stale_streams", "notes",
    ]


def test_show_reports_statistics_and_restored_partitions(scored):
    doc = json.loads(ok("show", scored.uri, "--json"))
    (p,) = doc["partitions"]
    # Re-added by the RESTORE (SPEC §Restore): the key is there for it only.
    assert p["restored_row_version"] == 1
    assert p["stats"]["score"] == {"field_id": 2, "min": 1.0, "max": 1.0, "null_count": 1, "nan_count": 1}
    # The hidden columns are all null in a partition of inserted rows: counts, no range.
    assert p["stats"][ctfile.ROW_ID_COLUMN] == {"field_id": ctfile.ROW_ID_FIELD_ID, "null_count": 3}
    v2 = json.loads(ok("show", scored.uri, "-v", "2", "--json"))
    assert all("restored_row_version" not in q for q in v2["partitions"])
    text = ok("show", scored.uri)
    assert "id [1..3]; score [1.0..1.0] nulls=1 nans=1" in text
    assert "_ct_row_id [" not in text  # the hidden columns stay out of the statistics column
