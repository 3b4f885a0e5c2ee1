"""A derived table built with the storage API alone (SPEC §Derived tables),
for the tests of the format, the table and the tools: a source table of
events and a derived table ``SELECT id, v FROM src`` whose derivation key is
the source row's ``METADATA$ROW_ID``, refreshed by hand (no compiler: these
tests are about storage, not about computing the query)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

import ctfile

SOURCE_SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
DERIVED_SCHEMA = pa.schema([
    ("id", pa.int64()), ("v", pa.string()), pa.field("_ct_dt_key", pa.string(), nullable=False),
    ("_ct_dt_rows", pa.int64()),
])
QUERY = "SELECT id, v FROM src"


def definition(source: ctfile.Table, *, mode: str = "incremental") -> ctfile.DerivedDefinition:
    return ctfile.DerivedDefinition(
        QUERY, (ctfile.SourceBinding("src", source.metadata.table_id, source.uri),), mode, "5 minutes", 1,
        ("_ct_dt_key", "_ct_dt_rows"),
    )


def make_pair(root, *, partition_rows: int | None = None, storage_options=None) -> tuple[ctfile.Table, ctfile.Table]:
    """A source with 4 rows (version 1) and its derived table (version 0, never refreshed)."""
    source = ctfile.create_table(f"{root}/src", SOURCE_SCHEMA, storage_options=storage_options)
    source.insert(pa.table({"id": [1, 2, 3, 4], "v": ["a", "b", "c", "d"]}, schema=SOURCE_SCHEMA))
    derived = ctfile.create_table(f"{root}/dt", DERIVED_SCHEMA, derived=definition(source),
                                  partition_rows=partition_rows, storage_options=storage_options)
    return source, derived


def frontier(source: ctfile.Table, version: int | None = None) -> tuple[ctfile.SourceVersion, ...]:
    v = source.refresh().version if version is None else version
    return (ctfile.SourceVersion("src", source.metadata.table_id, v, ctfile.schema_id(source.schema_at(v))),)


def query_rows(source: ctfile.Table, version: int) -> pa.Table:
    """The query at ``version`` of the source, with the derivation columns."""
    snap = source.changes(start_version=0, end_version=version)  # every live row as an INSERT, with its row id
    t = snap.to_arrow()
    return pa.table({
        "id": t.column("id"), "v": t.column("v"), "_ct_dt_key": t.column("METADATA$ROW_ID"),
        "_ct_dt_rows": pa.array([1] * t.num_rows, pa.int64()),
    }, schema=DERIVED_SCHEMA)


def refresh_info(source: ctfile.Table, action: str, rows_in: int, rows_out: int, *,
                 data_timestamp: int = 1_795_000_000_000, duration_ms: int | None = None) -> ctfile.RefreshInfo:
    return ctfile.RefreshInfo(action, f"test {action}", frontier(source), data_timestamp, rows_in, rows_out,
                              duration_ms)


def full_refresh(derived: ctfile.Table, source: ctfile.Table, **kw) -> ctfile.CommitResult:
    """A FULL refresh by MERGE on the key: unchanged rows keep their row ids."""
    rows = query_rows(source, source.refresh().version)
    info = refresh_info(source, "FULL", rows.num_rows, rows.num_rows, **kw)
    with derived.transaction(refresh=info) as tx:
        (tx.merge_builder(rows, on="_ct_dt_key")
         .when_matched_update_all(condition=(pc.field("t.v") != pc.field("s.v")) | (pc.field("t.id") != pc.field("s.id")))
         .when_not_matched_insert_all()
         .when_not_matched_by_source_delete()
         .execute())
    return tx.result
