"""Creating a table: the entry of version 0 (SPEC §Creating a table).

Kept apart from :mod:`ctfile.log.transaction`: creation reads no state and
has no conflicts to check, only the outcome of one put to decide (SPEC
§Commit protocol, step 7).
"""

from __future__ import annotations

import logging
import time
import uuid

from ctfile.format.actions import FEATURE_CHANGE_CAPTURE, Action, CommitInfo, Metadata, Protocol
from ctfile.format.append_only import FEATURE_APPEND_ONLY, check_not_derived
from ctfile.format.derived import FEATURE_DERIVED_TABLES
from ctfile.format.entries import decode_entry, encode_entry
from ctfile.format.errors import TableExistsError
from ctfile.format.paths import commit_path
from ctfile.format.properties import ChangeCapture, TableProperties

from ctfile.log.transaction import ENGINE_INFO

log = logging.getLogger("ctfile")


def new_table_actions(metadata: Metadata, timestamp: int) -> list[Action]:
    """The entry of version 0 (SPEC §Creating a table); its protocol lists
    ``changeCapture`` when the properties turn capture on, ``appendOnly``
    when they make the table append-only, and ``derivedTables`` (reader and
    writer) for a derived table (SPEC §Protocol)."""
    protocol = Protocol()
    props = TableProperties.from_mapping(metadata.properties)
    if props.change_capture is ChangeCapture.BEFORE_AFTER:
        protocol = protocol.with_writer_feature(FEATURE_CHANGE_CAPTURE)
    if props.append_only:  # SPEC §Append-only tables: never a derived table
        check_not_derived(metadata)
        protocol = protocol.with_writer_feature(FEATURE_APPEND_ONLY)
    if metadata.is_derived:  # SPEC §Derived tables: listed from version 0
        protocol = protocol.with_reader_feature(FEATURE_DERIVED_TABLES)
    return [
        CommitInfo(
            timestamp=timestamp,
            operation="CREATE TABLE",
            operation_parameters={},
            read_version=None,
            data_change=False,
            engine_info=ENGINE_INFO,
            txn_id=uuid.uuid4().hex,
        ),
        protocol,
        metadata,
    ]


def create_table_log(storage, metadata: Metadata) -> None:
    """Commit version 0 of a new table (SPEC §Creating a table).

    A put whose outcome is unknown (an :class:`OSError`: a timeout, a
    dropped connection) is retried; when version 0 exists, its ``txnId``
    tells whether it is this creation's own entry, landed by an earlier
    attempt (SPEC §Commit protocol, step 7), or another writer's table.

    Raises
    ------
    TableExistsError
        If another writer's version 0 already exists at ``storage``.
    """
    actions = new_table_actions(metadata, metadata.created_time)
    data = encode_entry(actions)
    txn_id = next(a.txn_id for a in actions if isinstance(a, CommitInfo))
    unknown = 0
    while True:
        try:
            storage.put_if_absent(commit_path(0), data)
            return
        except FileExistsError as e:
            # The client may have retried a put that landed (botocore does,
            # after a dropped connection): the entry can be our own.
            if _own_entry(storage, txn_id):
                return
            raise TableExistsError(f"a table already exists at {storage.uri}") from e
        except OSError as e:
            unknown += 1
            if unknown > 5:
                raise
            log.warning("put of version 0 of %s failed (%s); retrying", storage.uri, e)
            time.sleep(min(2.0, 0.05 * 2**unknown))


def _own_entry(storage, txn_id: str) -> bool:
    where = f"{storage.uri}/{commit_path(0)}"
    entry = decode_entry(storage.read_bytes(commit_path(0)), version=0, where=where)
    return any(isinstance(a, CommitInfo) and a.txn_id == txn_id for a in entry)
