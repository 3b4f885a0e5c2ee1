"""Credential, endpoint and permission failures on real S3 servers raise
``StorageError`` naming the table URI, the operation and the file, with the
original error as ``__cause__``; the commit loop's semantics stay exact.

* An unreachable endpoint (a port nothing listens on, or a proxy that was
  stopped): opening, reading and writing.
* Wrong credentials: SeaweedFS checks them (moto does not).
* A bucket that does not exist (moto): NoSuchBucket is not "no table".
* A denied permission (403 ``AccessDenied`` answered by the fault proxy in
  front of moto, as a bucket policy would): a definite refusal of the log
  entry's put aborts the commit at once and deletes the staged file, where a
  5xx (outcome unknown) keeps it and retries.

No mocks: the errors come from the servers and the network stack.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import s3servers
from typer.testing import CliRunner

import ctfile
from ctfile.format.paths import parse_commit_name
from ctfile.tools.cli import app

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)])
#: One attempt per request inside botocore, so that failures come back fast.
NO_CLIENT_RETRIES = {"config_kwargs": {"retries": {"max_attempts": 1, "mode": "standard"}, "connect_timeout": 2}}


def _causes(exc: BaseException) -> set[str]:
    """The class names (with their bases) of ``exc`` and its causes."""
    out, e = set(), exc
    while e is not None:
        out.update(t.__name__ for t in type(e).__mro__)
        e = e.__cause__
    return out


def _assert_storage_error(exc: ctfile.StorageError, uri: str, operation: str, path: str | None, *hint: str) -> None:
    msg = str(exc)
    assert exc.uri == uri and exc.path == path, (exc.uri, exc.path)
    assert msg.startswith(f"{operation} of {uri}/{path}" if path else f"{operation} of {uri}"), msg
    assert exc.__cause__ is not None
    for h in hint:
        assert h in msg, (h, msg)


def _entry_puts(proxy, version: int) -> list:
    return [r for r in proxy.seen if r.method == "PUT" and r.path.endswith(f"/_ct_log/{version:020d}.json")]


def _data_files(endpoint, uri: str) -> list[str]:
    prefix = uri.split("/", 3)[3] + "/data/"
    client = endpoint.boto3_client()
    return [o["Key"] for o in client.list_objects_v2(Bucket=endpoint.bucket, Prefix=prefix).get("Contents", [])]


# ---------------------------------------------------------------- unreachable endpoint


def test_unreachable_endpoint(moto_s3):
    opts = {**moto_s3.storage_options(endpoint_url="http://127.0.0.1:1"), **NO_CLIENT_RETRIES}
    uri = moto_s3.new_uri("unreachable")
    with pytest.raises(ctfile.StorageError) as e:
        ctfile.open_table(uri, storage_options=opts)
    _assert_storage_error(e.value, uri, "read", "_ct_log/_last_checkpoint", "endpoint could not be reached")
    assert "EndpointConnectionError" in _causes(e.value)
    with pytest.raises(ctfile.StorageError) as e:
        ctfile.create_table(uri, SCHEMA, storage_options=opts)
    # Connection refused, but botocore may have sent an earlier attempt: the
    # outcome of the put of version 0 counts as unknown (an OSError too, for
    # the commit loop).
    _assert_storage_error(e.value, uri, "put-if-absent", "_ct_log/00000000000000000000.json",
                          "outcome unknown", "endpoint could not be reached")
    assert isinstance(e.value, OSError)


def test_endpoint_lost_after_opening(moto_s3):
    """Reads (log and data files, through pyarrow) and writes of a table
    whose endpoint went away."""
    proxy = s3servers.FaultProxy(moto_s3)
    try:
        uri = moto_s3.new_uri("lost")
        opts = {**proxy.endpoint.storage_options(), **NO_CLIENT_RETRIES}
        t = ctfile.create_table(uri, SCHEMA, storage_options=opts)
        t.insert(pa.table({"id": [1, 2]}, schema=SCHEMA))
        snap = t.snapshot()
        (part,) = snap.partitions
    finally:
        # Kept-alive connections are dropped at their next request; new
        # ones are refused once the listening socket is closed.
        dropped = threading.Event()
        dropped.set()
        proxy.rules.append(lambda req: ("hold", dropped))
        proxy.stop()
    with pytest.raises(ctfile.StorageError) as e:
        snap.to_arrow()  # data file, opened by pyarrow through fsspec
    _assert_storage_error(e.value, uri, "read", part.path, "endpoint could not be reached")
    with pytest.raises(ctfile.StorageError) as e:
        t.insert(pa.table({"id": [3]}, schema=SCHEMA))
    assert e.value.uri == uri and "endpoint could not be reached" in str(e.value)
    with pytest.raises(ctfile.StorageError):
        ctfile.open_table(uri, storage_options=opts)


# ---------------------------------------------------------------- credentials


def test_wrong_credentials(seaweedfs_s3):
    good = seaweedfs_s3.storage_options()
    uri = seaweedfs_s3.new_uri("creds")
    ctfile.create_table(uri, SCHEMA, storage_options=good).insert(pa.table({"id": [1]}, schema=SCHEMA))
    for bad in ({**good, "key": "no-such-key"}, {**good, "secret": "wrong-secret"}):
        with pytest.raises(ctfile.StorageError) as e:
            ctfile.open_table(uri, storage_options=bad)
        _assert_storage_error(e.value, uri, "read", "_ct_log/_last_checkpoint", "credentials")
        assert "ClientError" in _causes(e.value)
        other = seaweedfs_s3.new_uri("creds")
        with pytest.raises(ctfile.StorageError) as e:
            ctfile.create_table(other, SCHEMA, storage_options=bad)
        _assert_storage_error(e.value, other, "put-if-absent", "_ct_log/00000000000000000000.json", "credentials")
    assert ctfile.open_table(uri, storage_options=good).to_arrow().num_rows == 1


def test_no_such_bucket(moto_s3):
    uri = "s3://ctfile-no-such-bucket/t"
    opts = moto_s3.storage_options()
    with pytest.raises(ctfile.StorageError) as e:
        ctfile.open_table(uri, storage_options=opts)
    _assert_storage_error(e.value, uri, "read", "_ct_log/_last_checkpoint", "the bucket does not exist", "NoSuchBucket")
    with pytest.raises(ctfile.StorageError) as e:
        ctfile.create_table(uri, SCHEMA, storage_options=opts)
    _assert_storage_error(e.value, uri, "put-if-absent", "_ct_log/00000000000000000000.json", "the bucket does not exist")
    with pytest.raises(ctfile.StorageError, match="the bucket does not exist"):
        ctfile.verify_table(uri, storage_options=opts)
    # A missing table in a bucket that exists is still TableNotFoundError.
    with pytest.raises(ctfile.TableNotFoundError):
        ctfile.open_table(moto_s3.new_uri("absent"), storage_options=opts)


# ---------------------------------------------------------------- denied permissions (fault proxy)


def _denied(predicate):
    return lambda req: ("respond", 403, "AccessDenied", "Access Denied") if predicate(req) else None


def test_denied_entry_put_aborts_at_once_and_cleans_up(moto_s3, fault_proxy):
    """A 403 on the log entry's put is a definite refusal: no retry, the
    staged data file is deleted, nothing is committed (before: PermissionError
    was taken for an unknown outcome, retried six times and the file kept)."""
    uri = moto_s3.new_uri("denied")
    opts = {**fault_proxy.endpoint.storage_options(), **NO_CLIENT_RETRIES}
    t = ctfile.create_table(uri, SCHEMA, storage_options=opts)
    fault_proxy.record = True
    fault_proxy.rules.append(_denied(lambda req: req.method == "PUT" and "/_ct_log/" in req.path))
    with pytest.raises(ctfile.StorageError) as e:
        t.insert(pa.table({"id": [1, 2]}, schema=SCHEMA))
    _assert_storage_error(e.value, uri, "put-if-absent", "_ct_log/00000000000000000001.json", "access denied")
    assert "ClientError" in _causes(e.value)
    assert len(_entry_puts(fault_proxy, 1)) == 1
    fault_proxy.rules.clear()
    assert _data_files(moto_s3, uri) == []
    assert ctfile.open_table(uri, storage_options=opts).version == 0


def test_denied_data_put_and_read(moto_s3, fault_proxy):
    uri = moto_s3.new_uri("denied")
    opts = {**fault_proxy.endpoint.storage_options(), **NO_CLIENT_RETRIES}
    t = ctfile.create_table(uri, SCHEMA, storage_options=opts)
    fault_proxy.rules.append(_denied(lambda req: req.method == "PUT" and "/data/" in req.path))
    with pytest.raises(ctfile.StorageError) as e:
        t.insert(pa.table({"id": [1]}, schema=SCHEMA))
    assert e.value.path.startswith("data/") and "access denied" in str(e.value) and str(e.value).startswith(f"put of {uri}/data/")
    fault_proxy.rules.clear()
    t.insert(pa.table({"id": [1]}, schema=SCHEMA))
    (part,) = t.snapshot().partitions
    fault_proxy.rules.append(_denied(lambda req: req.method in ("GET", "HEAD") and "/data/" in req.path))
    with pytest.raises(ctfile.StorageError) as e:
        t.to_arrow()
    _assert_storage_error(e.value, uri, "read", part.path, "access denied")
    with pytest.raises(ctfile.StorageError):
        t.update(pc.field("id") == 1, {"id": 2})


def test_a_refusal_after_client_retries_is_an_unknown_outcome(moto_s3, fault_proxy):
    """botocore retried a 500 itself and then got a 403: the first attempt may
    have landed, so the put reports an unknown outcome (OSError) and the commit
    loop retries it; the third put goes through and commits once."""
    uri = moto_s3.new_uri("retried")
    opts = {**fault_proxy.endpoint.storage_options(),
            "config_kwargs": {"retries": {"max_attempts": 2, "mode": "standard"}}}
    t = ctfile.create_table(uri, SCHEMA, storage_options=opts)
    answers = [("respond", 500, "InternalError", "injected"), ("respond", 403, "AccessDenied", "injected")]
    fault_proxy.record = True
    fault_proxy.rules.append(
        lambda req: answers.pop(0) if answers and req.method == "PUT" and "/_ct_log/" in req.path else None
    )
    r = t.insert(pa.table({"id": [1, 2]}, schema=SCHEMA))
    assert r.committed and r.version == 1
    assert len(_entry_puts(fault_proxy, 1)) == 3
    assert ctfile.open_table(uri, storage_options=opts).to_arrow().num_rows == 2


# ---------------------------------------------------------------- the CLI


def test_cli_storage_errors_are_one_line(moto_s3):
    runner = CliRunner()
    so = ["--storage-option", "endpoint_url=http://127.0.0.1:1", "--storage-option", f"key={moto_s3.key}",
          "--storage-option", f"secret={moto_s3.secret}",
          "--storage-option", 'client_kwargs={"region_name": "us-east-1"}',
          "--storage-option", 'config_kwargs={"retries": {"max_attempts": 1}, "connect_timeout": 2}']
    r = runner.invoke(app, ["history", moto_s3.new_uri("cli"), *so])
    assert r.exit_code == 1, (r.stdout, r.stderr)
    err = r.stderr.strip()
    assert err.startswith("ctfile: error: read of s3://") and "\n" not in err
    assert "endpoint could not be reached" in err
