"""``targetLag`` (SPEC §Derived tables, target lag): a duration or
``downstream``; writers refuse anything else and write nothing, readers
accept any string (an older writer's free text)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

import ctfile
from ctfile.format import TargetLagSpec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from derived_support import DERIVED_SCHEMA, definition, make_pair  # noqa: E402


@pytest.mark.parametrize("text, seconds", [
    ("90 seconds", 90.0), ("1 second", 1.0), ("5 minutes", 300.0), ("5minutes", 300.0), ("1 Hour", 3600.0),
    ("1.5 days", 129600.0), ("  2 hours ", 7200.0), ("downstream", None), ("DOWNSTREAM", None),
])
def test_lags_a_scheduler_reads(text, seconds):
    assert TargetLagSpec.parse(text).seconds == seconds


@pytest.mark.parametrize("text", ["", "5", "0 minutes", "-1 hour", "5 min", "1 week", "1e3 seconds", "soon", 5, None,
                                  "downstream please", "1 hour 5 minutes"])
def test_other_lags_are_refused_naming_the_forms(text):
    with pytest.raises(ctfile.InvalidArgumentError, match="targetLag: expected a duration such as '5 minutes'"):
        TargetLagSpec.parse(text)


def test_writers_refuse_a_lag_in_another_form_and_write_nothing(tmp_path):
    source, derived = make_pair(tmp_path)
    bad = dataclasses.replace(definition(source), target_lag="every so often")
    with pytest.raises(ctfile.InvalidArgumentError, match="found 'every so often'"):
        ctfile.create_table(str(tmp_path / "other"), DERIVED_SCHEMA, derived=bad)
    assert not (tmp_path / "other").exists()
    version = derived.version
    with pytest.raises(ctfile.InvalidArgumentError, match="targetLag"), derived.transaction() as tx:
        tx.alter_derived(refresh_mode="incremental", target_lag="hourly")
    assert derived.refresh().version == version
    with derived.transaction() as tx:
        tx.alter_derived(refresh_mode="incremental", target_lag="downstream")
    assert derived.refresh().derived.lag == TargetLagSpec(None)


def test_readers_accept_an_older_writers_free_text(tmp_path):
    source, _ = make_pair(tmp_path)
    d = dataclasses.replace(definition(source), target_lag="about an hour")  # read from a log: not checked
    assert d.target_lag == "about an hour"
    with pytest.raises(ctfile.InvalidArgumentError, match="found 'about an hour'"):
        d.lag  # noqa: B018 - only a scheduler needs to read it
