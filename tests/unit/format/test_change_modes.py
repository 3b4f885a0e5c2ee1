"""The change vocabulary has one home, ``ctfile.format.change_modes`` (issue
28, item 3): the reader's scans and the stream states persisted by
``ctfile.format.streams`` use the same enums, parsed from and written as
their string values."""

from __future__ import annotations

import json

import pytest

import ctfile
from ctfile.format.change_modes import ChangeMode, Changelog
from ctfile.format.streams import StreamState, decode_state, encode_state


def _state(information) -> StreamState:
    return StreamState.created("s", stream_id="ab" * 16, table_id="t", information=information,
                               initial_rows=False, offset=3, now_ms=1)


def test_one_definition_of_each_enum():
    assert ctfile.ChangeMode is ChangeMode and ctfile.Changelog is Changelog
    assert ctfile.reader.ChangeMode is ChangeMode
    assert ChangeMode.__module__ == Changelog.__module__ == "ctfile.format.change_modes"


@pytest.mark.parametrize("given", ["audit", ChangeMode.AUDIT])
def test_a_stream_state_holds_the_mode_and_persists_its_value(given):
    s = _state(given)
    assert s.information is ChangeMode.AUDIT
    data = encode_state(s)
    assert json.loads(data)["stream"]["information"] == "audit"
    assert decode_state(data, where="test").information is ChangeMode.AUDIT


def test_a_state_with_an_unknown_mode_is_corrupt_and_a_new_one_refused():
    data = json.loads(encode_state(_state("default")))
    data["stream"]["information"] = "redo"
    with pytest.raises(ctfile.CorruptLogError, match="information must be one of default, append_only, audit"):
        decode_state(json.dumps(data).encode(), where="test")
    with pytest.raises(ctfile.InvalidArgumentError, match="found 'redo'"):
        _state("redo")


def test_a_stream_reports_its_mode_as_the_enum(tmp_path):
    import pyarrow as pa

    t = ctfile.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    t.create_stream("s", information="append_only")
    assert t.stream("s").information is ChangeMode.APPEND_ONLY
    assert t.streams()[0].information is ChangeMode.APPEND_ONLY
