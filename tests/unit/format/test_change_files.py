"""The change-file layout and the ``ctfile.changeCapture`` property (SPEC §Change capture)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ctfile.format import properties as P
from ctfile.format.change_files import CHANGE_TYPE_FIELD_ID, change_file_schema, check_change_rows
from ctfile.format.errors import CorruptDataFileError, InvalidArgumentError
from ctfile.format.paths import change_file_path, is_change_file_path
from ctfile.format.schema import PARQUET_FIELD_ID_KEY, schema_from_arrow


def test_change_capture_property_parses_and_validates():
    assert P.TableProperties().change_capture is P.ChangeCapture.NONE
    on = P.TableProperties.from_mapping({"ctfile.changeCapture": "before_after"})
    assert on.change_capture is P.ChangeCapture.BEFORE_AFTER
    assert P.TableProperties.from_mapping({"ctfile.changeCapture": "both"}).change_capture is P.ChangeCapture.NONE
    assert P.validate_properties({"ctfile.changeCapture": "none"}) == {"ctfile.changeCapture": "none"}
    with pytest.raises(InvalidArgumentError, match=r"ctfile.changeCapture must be none or before_after, found 'on'"):
        P.validate_properties({"ctfile.changeCapture": "on"})


def test_change_file_paths():
    p = change_file_path("abc", 7)
    assert p == "_ct_changes/change-abc-00007.parquet" and is_change_file_path(p)
    assert not is_change_file_path("data/part-abc-00007.parquet")


def test_change_file_schema_has_the_reserved_field_ids():
    s = change_file_schema(schema_from_arrow(pa.schema([("id", pa.int64()), ("v", pa.string())])))
    assert [int(f.metadata[PARQUET_FIELD_ID_KEY]) for f in s] == [1, 2, 2147483540, 2147483539, CHANGE_TYPE_FIELD_ID]
    assert [f.nullable for f in s][2:] == [False, True, False]


def _rows(types, ids):
    n = len(types)
    return pa.table({"id": list(range(n)), "_ct_row_id": ids, "_ct_row_version": [1] * n, "_ct_change_type": types})


@pytest.mark.parametrize("types, ids, match", [
    (["delete", "insert"], [0, 1], "must be one of delete, update_preimage, update_postimage, found 'insert'"),
    (["delete", None], [0, 1], "found None"),
    (["delete"], [None], "must not be null"),
    (["update_preimage", "delete"], [0, 1], "row 1 is not the update_postimage"),
    (["update_preimage"], [0], "last row is an update_preimage"),
    (["update_preimage", "update_postimage"], [0, 1], "row 1 has row id 1, its update_preimage 0"),
])
def test_change_rows_that_break_the_rules_are_corrupt(types, ids, match):
    with pytest.raises(CorruptDataFileError, match=match):
        check_change_rows(_rows(types, ids), uri="/t", path="_ct_changes/c.parquet", version=3)
