"""S3 specifics of the storage layer, against real servers.

* Both servers honour ``If-None-Match: *`` (raw boto3: 412 on an existing
  key), and ``FsspecStorage.put_if_absent`` turns that into FileExistsError
  although s3fs does not (it only does when the server names the condition).
* The answers a real S3 gives under contention or failure, injected by a
  proxy in front of moto: 409 ``ConditionalRequestConflict`` and a bare 412
  are lost races; throttling and dropped connections are retried; a put whose
  outcome is unknown (the server applied it, the client never heard) commits
  exactly once; a persistent server error leaves the data files in place
  (the outcome is unknown) and commits nothing.
* ``exists`` and ``list_dir`` never answer from s3fs's listing cache.
"""

from __future__ import annotations

import errno

import pyarrow as pa
import pytest
from botocore.exceptions import ClientError

import ctfile
from ctfile.format.actions import CommitInfo
from ctfile.format.paths import parse_commit_name
from ctfile.log.object_store import FsspecStorage
from ctfile.log.storage import open_storage
from ctfile.log.storage_errors import ErrorKind, classify_error

CONFLICT, THROTTLED, TRANSIENT, PERMANENT = ErrorKind

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)])


@pytest.fixture(params=["moto", "seaweedfs"])
def endpoint(request):
    return request.getfixturevalue(f"{request.param}_s3")


def test_server_honours_if_none_match(endpoint):
    client = endpoint.boto3_client()
    key = endpoint.new_uri("inm").split("/", 3)[3] + "/00000000000000000000.json"
    client.put_object(Bucket=endpoint.bucket, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as e:
        client.put_object(Bucket=endpoint.bucket, Key=key, Body=b"second", IfNoneMatch="*")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert e.value.response["Error"]["Code"] == "PreconditionFailed"
    assert client.get_object(Bucket=endpoint.bucket, Key=key)["Body"].read() == b"first"
    # Without the header the same PUT overwrites: the condition is what protects.
    client.put_object(Bucket=endpoint.bucket, Key=key, Body=b"third")
    assert client.get_object(Bucket=endpoint.bucket, Key=key)["Body"].read() == b"third"


def test_put_if_absent_maps_412_to_file_exists(endpoint):
    storage = open_storage(endpoint.new_uri("inm"), endpoint.storage_options())
    assert isinstance(storage, FsspecStorage)
    storage.put_if_absent("_ct_log/00000000000000000001.json", b"mine")
    with pytest.raises(FileExistsError) as e:
        storage.put_if_absent("_ct_log/00000000000000000001.json", b"theirs")
    assert storage.read_bytes("_ct_log/00000000000000000001.json") == b"mine"


def test_exists_and_list_bypass_listing_caches(endpoint):
    """Another client's write is seen at once, even right after a listing."""
    uri = endpoint.new_uri("cache")
    a = open_storage(uri, endpoint.storage_options())
    b = open_storage(uri, endpoint.storage_options())
    assert a.fs is b.fs  # fsspec shares the instance, and with it the cache
    a.put("_ct_log/00000000000000000000.json", b"0")
    assert [i.path for i in a.list_dir("_ct_log")] == ["_ct_log/00000000000000000000.json"]
    assert not a.exists("_ct_log/00000000000000000001.json")
    # A third party (raw boto3, not this fsspec instance) adds version 1.
    client = endpoint.boto3_client()
    client.put_object(Bucket=endpoint.bucket, Key=uri.split("/", 3)[3] + "/_ct_log/00000000000000000001.json", Body=b"1")
    assert a.exists("_ct_log/00000000000000000001.json")
    assert len(a.list_dir("_ct_log")) == 2
    info = a.list_dir("_ct_log")[0]
    assert info.mtime_ms is not None and info.mtime_ms > 0


# ---------------------------------------------------------------- error classification


def _client_error(status: int, code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "PutObject")


@pytest.mark.parametrize(
    "exc, kind",
    [
        (_client_error(412, "PreconditionFailed"), CONFLICT),
        (_client_error(409, "ConditionalRequestConflict"), CONFLICT),
        (_client_error(409, "OperationAborted"), CONFLICT),
        (_client_error(409, "BucketAlreadyExists"), PERMANENT),
        (_client_error(503, "SlowDown"), THROTTLED),
        (_client_error(429, "TooManyRequests"), THROTTLED),
        (_client_error(500, "InternalError"), TRANSIENT),
        (_client_error(504, "GatewayTimeout"), TRANSIENT),
        (_client_error(403, "AccessDenied"), PERMANENT),
        (_client_error(404, "NoSuchKey"), PERMANENT),
        (FileExistsError(), CONFLICT),
        (ConnectionResetError(), TRANSIENT),
        (TimeoutError(), TRANSIENT),
        (ValueError("bad"), PERMANENT),
    ],
)
def test_classify_error(exc, kind):
    assert classify_error(exc) == kind
    # s3fs wraps the botocore error: the cause decides.
    wrapped = OSError(errno.EINVAL, "wrapped")
    wrapped.__cause__ = exc
    if isinstance(exc, ClientError):
        assert classify_error(wrapped) == kind


def test_botocore_transport_errors_are_transient():
    from botocore.exceptions import ConnectionClosedError, EndpointConnectionError, ReadTimeoutError

    assert classify_error(ReadTimeoutError(endpoint_url="http://x")) == TRANSIENT
    assert classify_error(EndpointConnectionError(endpoint_url="http://x")) == TRANSIENT
    assert classify_error(ConnectionClosedError(endpoint_url="http://x")) == TRANSIENT


# ---------------------------------------------------------------- injected faults (moto behind a proxy)


def _log_puts(proxy) -> list:
    return [r for r in proxy.seen if r.method == "PUT" and parse_commit_name(r.path.rsplit("/", 1)[-1]) is not None]


def _once(predicate, action):
    """A proxy rule applying ``action`` to the first request matching ``predicate``."""
    fired = []

    def rule(req):
        if not fired and predicate(req):
            fired.append(req)
            return action
        return None

    return rule


def _is_entry_put(version: int):
    return lambda req: req.method == "PUT" and req.path.endswith(f"/_ct_log/{version:020d}.json")


def _table(proxy, moto_s3, **opts_extra):
    uri = moto_s3.new_uri("fault")
    opts = {**proxy.endpoint.storage_options(), **opts_extra}
    t = ctfile.create_table(uri, SCHEMA, storage_options=opts)
    return uri, opts, t


def _entries_by_txn(t) -> dict:
    out = {}
    for v in range(t.version + 1):
        info = next(a for a in t.log.read_entry(v) if isinstance(a, CommitInfo))
        out.setdefault(info.txn_id, []).append(v)
    return out


@pytest.mark.parametrize(
    "status, code",
    [(409, "ConditionalRequestConflict"), (412, "PreconditionFailed")],
)
def test_conflict_answers_make_the_commit_retry(moto_s3, fault_proxy, status, code):
    """A 409 (a concurrent conditional write in flight) or a bare 412 on the
    entry's PUT is a lost race: the transaction re-reads the log, finds no
    winner, and puts the same version again."""
    uri, opts, t = _table(fault_proxy, moto_s3)
    fault_proxy.record = True
    fault_proxy.rules.append(_once(_is_entry_put(1), ("respond", status, code, "injected")))
    r = t.insert(pa.table({"id": [1, 2]}, schema=SCHEMA))
    assert r.committed and r.version == 1 and r.attempts == 2
    assert len(_log_puts(fault_proxy)) == 2
    fresh = ctfile.open_table(uri, storage_options=opts)
    assert fresh.version == 1 and fresh.to_arrow().num_rows == 2


def test_throttling_is_retried(moto_s3, fault_proxy):
    uri, opts, t = _table(fault_proxy, moto_s3)
    fault_proxy.record = True
    fault_proxy.rules.append(_once(_is_entry_put(1), ("respond", 503, "SlowDown", "Please reduce your request rate.")))
    fault_proxy.rules.append(_once(lambda req: req.method == "PUT" and "/data/" in req.path,
                                   ("respond", 503, "SlowDown", "Please reduce your request rate.")))
    r = t.insert(pa.table({"id": [1, 2]}, schema=SCHEMA))
    assert r.committed and r.version == 1
    assert len(_log_puts(fault_proxy)) == 2  # the throttled one and the retry
    assert ctfile.open_table(uri, storage_options=opts).to_arrow().num_rows == 2


def test_unknown_outcome_commits_exactly_once(moto_s3, fault_proxy):
    """The server applies the entry's PUT but the connection drops before the
    answer: the retried put finds the entry, the transaction recognises its own
    txnId and reports that version; no duplicate version, no lost data file."""
    uri, opts, t = _table(fault_proxy, moto_s3)
    fault_proxy.record = True
    fault_proxy.rules.append(_once(_is_entry_put(1), ("forward_then_drop",)))
    r = t.insert(pa.table({"id": [1, 2]}, schema=SCHEMA))
    assert r.committed and r.version == 1
    assert len(_log_puts(fault_proxy)) >= 2
    fresh = ctfile.open_table(uri, storage_options=opts)
    assert fresh.version == 1
    assert fresh.to_arrow().num_rows == 2
    assert sorted(len(v) for v in _entries_by_txn(fresh).values()) == [1, 1]
    # And the table goes on at version 2.
    assert t.insert(pa.table({"id": [3]}, schema=SCHEMA)).version == 2


def test_unknown_outcome_of_create_table_is_settled_by_its_txn_id(moto_s3, fault_proxy):
    """Version 0 lands but the answer is lost: the retried put finds an entry
    and recognises its own txnId, so create_table succeeds instead of
    reporting another writer's table (TableExistsError)."""
    uri = moto_s3.new_uri("fault")
    opts = fault_proxy.endpoint.storage_options()
    fault_proxy.record = True
    fault_proxy.rules.append(_once(_is_entry_put(0), ("forward_then_drop",)))
    t = ctfile.create_table(uri, SCHEMA, storage_options=opts)
    assert t.version == 0
    assert len(_log_puts(fault_proxy)) >= 2
    with pytest.raises(ctfile.TableExistsError):  # a second creation is still refused
        ctfile.create_table(uri, SCHEMA, storage_options=opts)
    assert t.insert(pa.table({"id": [1]}, schema=SCHEMA)).version == 1


def test_persistent_server_error_keeps_files_and_commits_nothing(moto_s3, fault_proxy):
    """Every PUT of the entry fails with 500: the outcome of each is unknown, so
    the transaction gives up with an OSError but does not delete its data files
    (the entry might have landed); they are orphans that vacuum collects."""
    uri, opts, t = _table(fault_proxy, moto_s3, config_kwargs={"retries": {"max_attempts": 1, "mode": "standard"}})
    fault_proxy.rules.append(lambda req: ("respond", 500, "InternalError", "injected") if _is_entry_put(1)(req) else None)
    with pytest.raises(OSError) as e:
        t.insert(pa.table({"id": [1, 2]}, schema=SCHEMA))
    assert not isinstance(e.value, FileExistsError)
    fault_proxy.rules.clear()
    fresh = ctfile.open_table(uri, storage_options=opts)
    assert fresh.version == 0
    orphans = {i.path for i in fresh.storage.list_dir("data")}
    assert len(orphans) == 1
    r = fresh.vacuum(retain=86400, grace_period=0)
    assert set(r.deleted_data_files) == orphans
