"""Append-only tables (SPEC §Append-only tables): the rule writers enforce.

A table whose ``ctfile.appendOnly`` property is ``true`` takes only commits
that insert rows. A commit is *under the property* when the metadata of the
version it read, or the metadata it commits, sets it; such a commit may not
remove a partition with ``dataChange`` true, re-add one or hold a change
file. Writers refuse the statements that would need one before writing
anything (:func:`refuse_row_removal`, :class:`AppendOnlyError` naming the
property), and check the commit itself once more when it commits (the
statement may only then know that it removes a partition).

Examples
--------
>>> is_append_only({"ctfile.appendOnly": "true"}), is_append_only({}), is_append_only({"ctfile.appendOnly": "yes"})
(True, False, False)
>>> refuse_row_removal({"ctfile.appendOnly": "true"}, "DELETE", "/t")
Traceback (most recent call last):
...
ctfile.format.errors.AppendOnlyError: DELETE on /t: the table property ctfile.appendOnly is true, so the table takes only inserts (protocol feature appendOnly); found DELETE, which deletes or changes rows; nothing was written (set ctfile.appendOnly to false first, SPEC §Append-only tables)
>>> refuse_row_removal({}, "DELETE", "/t", committed={"ctfile.appendOnly": "false"})
"""

from __future__ import annotations

from typing import Mapping

from ctfile.format.errors import AppendOnlyError, InvalidArgumentError
from ctfile.format.properties import APPEND_ONLY, TableProperties

#: SPEC §Protocol, revision 9: writers that enforce ``ctfile.appendOnly``.
FEATURE_APPEND_ONLY = "appendOnly"

__all__ = ["FEATURE_APPEND_ONLY", "check_not_derived", "is_append_only", "refuse_row_removal"]


def is_append_only(properties: Mapping[str, str]) -> bool:
    """Whether ``properties`` (a table's ``metadata.properties``) set
    ``ctfile.appendOnly`` to ``true`` (a malformed value means the default,
    ``false``, SPEC §Table properties)."""
    return TableProperties.from_mapping(properties).append_only


def refuse_row_removal(
    read: Mapping[str, str], what: str, uri: str, *, committed: Mapping[str, str] | None = None,
) -> None:
    """:class:`AppendOnlyError` when ``what`` (a statement that deletes,
    changes or brings back rows) would commit under the property: when
    ``read`` (the properties of the version read) or ``committed`` (those
    the commit sets, if it sets any) make the table append-only."""
    if is_append_only(read) or (committed is not None and is_append_only(committed)):
        raise AppendOnlyError(
            f"{what} on {uri}: the table property {APPEND_ONLY} is true, so the table takes only inserts "
            f"(protocol feature {FEATURE_APPEND_ONLY}); found {what}, which deletes or changes rows; nothing was "
            f"written (set {APPEND_ONLY} to false first, SPEC §Append-only tables)"
        )


def check_not_derived(metadata) -> None:
    """Refuse ``ctfile.appendOnly`` on a derived table (``metadata`` a
    :class:`~ctfile.format.actions.Metadata` that sets it): its refreshes
    delete and change rows (SPEC §Append-only tables)."""
    if metadata.derived is not None:
        raise InvalidArgumentError(
            f"table property {APPEND_ONLY}: expected a table that is not derived; found a derived table, whose "
            f"refreshes delete and change rows (SPEC §Append-only tables)"
        )
