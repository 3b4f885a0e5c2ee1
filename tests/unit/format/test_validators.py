"""The shared checks of integer arguments (ctfile.format.validators)."""

from __future__ import annotations

import pytest

from ctfile.format.errors import InvalidArgumentError
from ctfile.format.log_values import require_long
from ctfile.format.validators import (
    is_int,
    require_int,
    require_int_at_least,
    require_int_in,
    require_positive_int,
)


@pytest.mark.parametrize("value, expected", [(0, True), (-5, True), (2**70, True), (True, False), (False, False),
                                             (1.0, False), ("1", False), (None, False)])
def test_is_int_means_an_int_that_is_not_a_bool(value, expected):
    assert is_int(value) is expected


@pytest.mark.parametrize("check, good", [
    (lambda v: require_int(v, "version"), -3),
    (lambda v: require_int_at_least(v, "start_version", 0), 0),
    (lambda v: require_positive_int(v, "limit"), 1),
    (lambda v: require_int_in(v, "workers", 1, 1024), 1024),
])
def test_a_valid_value_is_returned(check, good):
    assert check(good) == good


@pytest.mark.parametrize("check, bad, message", [
    (lambda v: require_int(v, "version"), "3", "version must be an int, found '3'"),
    (lambda v: require_int(v, "version"), True, "version must be an int, found True"),
    (lambda v: require_int_at_least(v, "start_version", 0), True, "start_version must be an int, found True"),
    (lambda v: require_int_at_least(v, "start_version", 0), -1, "start_version must be >= 0, found -1"),
    (lambda v: require_positive_int(v, "limit"), 0, "limit must be a positive int, found 0"),
    (lambda v: require_positive_int(v, "limit"), False, "limit must be a positive int, found False"),
    (lambda v: require_int_in(v, "workers", 1, 1024), 1025, "workers must be an int in 1..1024, found 1025"),
    (lambda v: require_int_in(v, "workers", 1, 1024), 2.0, "workers must be an int in 1..1024, found 2.0"),
    (lambda v: require_long(v, "app_version", minimum=0), 2**63,
     "app_version must be an int in 0..9223372036854775807, found 9223372036854775808"),
])
def test_a_refused_value_raises_naming_the_argument_what_is_expected_and_what_was_found(check, bad, message):
    with pytest.raises(InvalidArgumentError) as ei:
        check(bad)
    assert str(ei.value) == message
