"""The storage contract every backend honours (see ctfile.log.storage).

To add a backend: write a factory ``def _make_x(tmp_path, request) -> (Storage, cleanup)``
and register it in :data:`BACKENDS`; add its name to :data:`ATOMIC_BACKENDS`
if its ``put_if_absent`` is exclusive under real concurrency.

The S3 backends run against real servers on 127.0.0.1 that the session
fixtures of ``tests/conftest.py`` start (moto in-process, SeaweedFS as a child
process): each test gets a fresh prefix of the servers' bucket.
"""

from __future__ import annotations

import threading
import uuid
from typing import Callable

import pyarrow.fs as pafs
import pytest

from ctfile.log.object_store import FsspecStorage
from ctfile.log.storage import TMP_PREFIX, LocalStorage, Storage, open_storage


def _make_local(tmp_path, request):
    return LocalStorage(str(tmp_path / "root")), lambda: None


def _make_memory(tmp_path, request):
    import fsspec

    uri = f"memory://ctfile-contract-{uuid.uuid4().hex}"
    storage = open_storage(uri)
    assert isinstance(storage, FsspecStorage)
    fs = fsspec.filesystem("memory")

    def cleanup():
        if fs.exists(storage.root):
            fs.rm(storage.root, recursive=True)

    return storage, cleanup


def _s3_factory(server_fixture: str) -> Callable:
    def make(tmp_path, request):
        endpoint = request.getfixturevalue(server_fixture)
        uri = endpoint.new_uri("contract")
        storage = open_storage(uri, endpoint.storage_options())
        assert isinstance(storage, FsspecStorage)

        def cleanup():
            client = endpoint.boto3_client()
            prefix = uri.split("/", 3)[3] + "/"
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=endpoint.bucket, Prefix=prefix):
                for obj in page.get("Contents", []):
                    client.delete_object(Bucket=endpoint.bucket, Key=obj["Key"])

        return storage, cleanup

    return make


BACKENDS: dict[str, Callable] = {
    "local": _make_local,
    "fsspec-memory": _make_memory,
    "s3-moto": _s3_factory("moto_s3"),
    "s3-seaweedfs": _s3_factory("seaweedfs_s3"),
}
# Backends whose put_if_absent is exclusive under concurrent writers. moto
# answers If-None-Match: * correctly but checks it before storing, not
# atomically (moto/s3/responses.py put_object), so it is only used where
# writers do not race; SeaweedFS is the real store for concurrency.
ATOMIC_BACKENDS = {"local", "s3-seaweedfs"}


@pytest.fixture(params=sorted(BACKENDS))
def storages(request, tmp_path):
    storage, cleanup = BACKENDS[request.param](tmp_path, request)
    storage.backend_name = request.param  # for tests that depend on a capability
    yield storage
    cleanup()


def _names(storage: Storage, path: str) -> list[str]:
    return sorted(i.path for i in storage.list_dir(path))


def test_put_if_absent_creates_then_raises(storages):
    storages.put_if_absent("_ct_log/00000000000000000000.json", b"first\n")
    assert storages.read_bytes("_ct_log/00000000000000000000.json") == b"first\n"
    with pytest.raises(FileExistsError):
        storages.put_if_absent("_ct_log/00000000000000000000.json", b"second\n")
    # The loser changed nothing and left nothing behind.
    assert storages.read_bytes("_ct_log/00000000000000000000.json") == b"first\n"
    assert _names(storages, "_ct_log") == ["_ct_log/00000000000000000000.json"]


def test_read_missing_raises_file_not_found(storages):
    with pytest.raises(FileNotFoundError):
        storages.read_bytes("_ct_log/missing.json")
    with pytest.raises(FileNotFoundError):
        storages.read_bytes("nodir/missing.json")


def test_put_creates_and_replaces(storages):
    storages.put("a/b/c.bin", b"one")
    assert storages.read_bytes("a/b/c.bin") == b"one"
    storages.put("a/b/c.bin", b"two-longer")
    assert storages.read_bytes("a/b/c.bin") == b"two-longer"
    storages.put("a/b/c.bin", b"")
    assert storages.read_bytes("a/b/c.bin") == b""
    assert _names(storages, "a/b") == ["a/b/c.bin"]


def test_put_accepts_memoryview(storages):
    storages.put("data/x", memoryview(b"abc"))
    assert storages.read_bytes("data/x") == b"abc"


def test_exists(storages):
    assert not storages.exists("f")
    storages.put("f", b"1")
    assert storages.exists("f")


def test_list_dir(storages):
    storages.put("_ct_log/00000000000000000001.json", b"12345")
    storages.put("_ct_log/00000000000000000000.json", b"1")
    storages.put("_ct_log/sub/deeper.json", b"x")  # not listed: no recursion
    storages.put("other/file", b"x")
    infos = sorted(storages.list_dir("_ct_log"), key=lambda i: i.path)
    assert [i.path for i in infos] == [
        "_ct_log/00000000000000000000.json",
        "_ct_log/00000000000000000001.json",
    ]
    assert [i.size for i in infos] == [1, 5]
    assert all(i.mtime_ms is None or i.mtime_ms > 0 for i in infos)
    assert storages.list_dir("does/not/exist") == []


def test_list_subdirs(storages):
    """The streams' directories (SPEC §Streams): one name per directory
    directly under the path, files and deeper levels left out."""
    storages.put("_ct_streams/b/00000000000000000000.json", b"1")
    storages.put("_ct_streams/a/00000000000000000001.json", b"1")
    storages.put("_ct_streams/a/deeper/x.json", b"1")
    storages.put("_ct_streams/loose.json", b"1")
    assert storages.list_subdirs("_ct_streams") == ["a", "b"]
    assert storages.list_subdirs("does/not/exist") == []


def test_delete_ignores_missing(storages):
    storages.put("data/a", b"a")
    storages.put("data/b", b"b")
    storages.delete(["data/a", "data/never-existed", "nodir/x"])
    assert not storages.exists("data/a")
    assert storages.exists("data/b")
    storages.delete([])
    assert _names(storages, "data") == ["data/b"]


def test_arrow_filesystem_reads_what_storage_wrote(storages):
    storages.put("data/blob", b"hello arrow")
    fs = storages.arrow_filesystem
    assert isinstance(fs, pafs.FileSystem)
    with fs.open_input_file(storages.arrow_path("data/blob")) as f:
        assert f.read() == b"hello arrow"


def test_no_temporary_files_left(storages):
    storages.put("_ct_log/a", b"1")
    storages.put_if_absent("_ct_log/b", b"2")
    with pytest.raises(FileExistsError):
        storages.put_if_absent("_ct_log/b", b"3")
    assert not [p for p in _names(storages, "_ct_log") if p.rsplit("/", 1)[-1].startswith(TMP_PREFIX)]


def test_concurrent_put_if_absent_exactly_one_wins(storages):
    if storages.backend_name not in ATOMIC_BACKENDS:
        pytest.skip(f"{storages.backend_name}: put_if_absent is not exclusive across threads")
    path = "_ct_log/00000000000000000001.json"
    n = 8
    barrier = threading.Barrier(n)
    wins, losses, errors = [], [], []

    def worker(i: int) -> None:
        payload = f"writer {i}\n".encode() * 1000
        barrier.wait()
        try:
            storages.put_if_absent(path, payload)
            wins.append(i)
        except FileExistsError:
            losses.append(i)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    for _round in range(5):
        wins.clear()
        losses.clear()
        storages.delete([path])
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert len(wins) == 1 and len(losses) == n - 1
        # The file is the winner's, complete.
        assert storages.read_bytes(path) == f"writer {wins[0]}\n".encode() * 1000
        assert _names(storages, "_ct_log") == [path]


def test_open_storage_dispatch(tmp_path):
    assert isinstance(open_storage(str(tmp_path)), LocalStorage)
    assert isinstance(open_storage(f"file://{tmp_path}"), LocalStorage)
    assert isinstance(open_storage("memory://x"), FsspecStorage)
    from ctfile.format.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="storage_options"):
        open_storage(str(tmp_path), {"anon": True})
