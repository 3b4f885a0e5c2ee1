"""Object-store tables: :class:`FsspecStorage`, the :class:`~ctfile.log.storage_contract.Storage`
of any fsspec filesystem that honours ``pipe_file(mode="create")`` (an
``If-None-Match: *`` PUT on S3). How its requests fail is classified in
:mod:`ctfile.log.storage_errors`."""

from __future__ import annotations

import errno
import logging
import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable

import pyarrow.fs as pafs

from ctfile.log.storage_contract import FileInfo, Storage
from ctfile.log.storage_errors import (
    ErrorKind,
    StorageErrorHandler,
    classify_error,
    definite_refusal,
    describe,
    is_missing_object,
    outcome_unknown,
    storage_error,
)

log = logging.getLogger("ctfile")


class FsspecStorage(Storage):
    """Any fsspec filesystem that honours ``pipe_file(mode="create")``.

    Object stores add four concerns that a local disk does not have:

    * **Lost races come back as HTTP errors.** s3fs turns a failed
      ``If-None-Match: *`` PUT into :class:`FileExistsError` only when the
      server names the condition (AWS does, SeaweedFS does not), and S3 answers
      a conditional write that races another in flight with 409
      ``ConditionalRequestConflict``. :meth:`put_if_absent` maps HTTP 412 and
      409 to :class:`FileExistsError`, so the commit loop rebases.
    * **Transient errors.** Throttling (429, 503 ``SlowDown``), server errors
      and timeouts are retried with exponential backoff and jitter.
    * **Definite failures.** Everything else a request can fail with (access
      denied, rejected or missing credentials, a bucket that does not exist,
      an endpoint still unreachable after the retries) raises
      :class:`StorageError` naming the table URI, the operation and the file,
      with the original error as ``__cause__``. Only a missing object stays
      :class:`FileNotFoundError` (the storage contract), and only a lost race
      :class:`FileExistsError`.
    * **Client-side listing caches.** fsspec filesystems may answer ``exists``
      from a cached listing; every check here bypasses or invalidates it, as
      the log needs read-after-write consistency across processes.

    :meth:`put_if_absent`, which claims a log entry (SPEC §Commit protocol),
    has exactly three ways to fail, and the commit loop relies on them:

    * :class:`FileExistsError`: the entry exists (a lost race, 412/409): rebase.
    * :class:`~ctfile.log.storage_errors.OutcomeUnknownError`, an
      :class:`OSError` (and a :class:`StorageError`): the outcome is
      **unknown** -- a timeout, a dropped connection, a 5xx, throttling that
      outlasted the retries, or any failure without evidence that nothing was
      written (a refused connection included: botocore may have sent an
      earlier attempt). The entry may have landed: the transaction keeps its
      data files and retries the same version, where it finds its own
      ``txnId`` if the entry did land (step 7).
    * :class:`StorageError` that is not an :class:`OSError`: a **definite
      refusal** -- the server answered 4xx at the first attempt (403 denied
      or bad credentials, 404 ``NoSuchBucket``, 400), or the client never
      sent the request (no credentials). Nothing was written: the
      transaction aborts at once (the loop's ``except OSError`` does not
      catch it) and deletes its data files, unless an earlier attempt had an
      unknown outcome. A refusal that botocore received only after retrying
      the request itself (``RetryAttempts`` > 0) counts as unknown, since an
      earlier attempt may have landed. Limit: s3fs retries some transport
      errors itself without a trace in the final error, so a 4xx after such
      a retry would be taken for a definite refusal; that needs the
      credentials or permissions to change between two attempts of one put.

    Only throttled puts are repeated here: they were refused before anything
    was written.
    """

    #: Attempts for a request that failed transiently (the first included).
    max_attempts = 5
    #: Backoff before retry ``i`` (1-based): ``min(cap, base * 2**(i-1))``, full jitter.
    backoff_base_s = 0.05
    backoff_cap_s = 2.0

    def __init__(self, fs: Any, root: str, uri: str):
        self.fs = fs
        self.root = root.rstrip("/")
        self.uri = uri
        self._arrow_fs: pafs.FileSystem | None = None
        self._is_s3 = _is_s3fs(fs)
        if self._is_s3:
            # botocore and s3fs already retry transient errors inside each call.
            self.max_attempts = 2

    def _abs(self, path: str) -> str:
        return f"{self.root}/{path}" if path else self.root

    # ------------------------------------------------------------ retries

    def _sleep_before_retry(self, attempt: int) -> None:
        time.sleep(random.uniform(0, min(self.backoff_cap_s, self.backoff_base_s * 2 ** (attempt - 1))))

    def _call(self, operation: str, path: str, fn, *args, **kwargs):
        """Run an idempotent request on ``path``, retrying transient failures;
        a missing object raises FileNotFoundError, any other failure
        :class:`StorageError`."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                kind = classify_error(e)
                if kind in (ErrorKind.THROTTLED, ErrorKind.TRANSIENT) and attempt < self.max_attempts:
                    log.debug("%s of %s/%s failed (%s, attempt %d): %s; retrying",
                              operation, self.uri, path, kind.value, attempt, e)
                    self._sleep_before_retry(attempt)
                    continue
                if is_missing_object(e):
                    raise
                raise storage_error(self.uri, operation, path, e, attempts=attempt) from e

    # ------------------------------------------------------------ Storage

    def read_bytes(self, path: str) -> bytes:
        if self._is_s3:
            # One GET: by default s3fs first HEADs the object for its size
            # (and follows a 404 with a LIST), tripling the cost of a probe.
            return self._call("read", path, self.fs.cat_file, self._abs(path), max_concurrency=1)
        return self._call("read", path, self.fs.cat_file, self._abs(path))

    def put_if_absent(self, path: str, data: bytes) -> None:
        target = self._abs(path)
        body = bytes(data)
        attempt = 0
        while True:
            attempt += 1
            try:
                self.fs.pipe_file(target, body, mode="create")
                return
            except FileExistsError:
                raise
            except Exception as e:
                kind = classify_error(e)
                if kind is ErrorKind.CONFLICT:
                    raise FileExistsError(
                        errno.EEXIST, f"{self.uri}/{path} already exists (conditional put lost: {describe(e)})"
                    ) from e
                if kind is ErrorKind.THROTTLED and attempt < self.max_attempts:
                    # Rejected before anything was written: safe to repeat here.
                    self._sleep_before_retry(attempt)
                    continue
                if definite_refusal(e):
                    raise storage_error(self.uri, "put-if-absent", path, e, attempts=attempt) from e
                raise outcome_unknown(self.uri, path, e) from e
            finally:
                self._invalidate(target)

    def put(self, path: str, data: bytes) -> None:
        target = self._abs(path)
        try:
            self._call("put", path, self.fs.pipe_file, target, bytes(data))
        finally:
            self._invalidate(target)

    def exists(self, path: str) -> bool:
        target = self._abs(path)
        if self._is_s3:
            # One HEAD; s3fs's exists() may answer from a cached listing and
            # follows a 404 with a LIST to detect "directories".
            bucket, key, _ = self.fs.split_path(target)
            try:
                self._call("exists check", path, self.fs.call_s3, "head_object", Bucket=bucket, Key=key)
                return True
            except FileNotFoundError:
                return False
        self._invalidate(target)
        return self._call("exists check", path, self.fs.exists, target)

    def _ls(self, path: str) -> list[dict]:
        """The entries directly under ``path``, listed by the store (never
        from fsspec's listing cache); empty if it does not exist."""
        target = self._abs(path)
        try:
            return self._call("list", path, self.fs.ls, target, detail=True, refresh=True)
        except FileNotFoundError:
            return []
        finally:
            self._invalidate(target)

    def list_dir(self, path: str) -> list[FileInfo]:
        entries = self._ls(path)
        out = []
        prefix = self.root + "/"
        for e in entries:
            if e.get("type") != "file":
                continue
            name = e["name"]
            rel = name[len(prefix):] if name.startswith(prefix) else name.split(self.root, 1)[-1].lstrip("/")
            out.append(FileInfo(rel, int(e.get("size") or 0), _mtime_ms(e)))
        return out

    def list_subdirs(self, path: str) -> list[str]:
        entries = self._ls(path)
        return sorted(e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e.get("type") == "directory")

    def delete(self, paths: Iterable[str]) -> None:
        paths = list(paths)
        if not paths:
            return

        def rm(path: str) -> None:
            target = self._abs(path)
            try:
                self._call("delete", path, self.fs.rm_file, target)
            except FileNotFoundError:
                pass
            finally:
                self._invalidate(target)

        if len(paths) == 1:
            rm(paths[0])
            return
        with ThreadPoolExecutor(max_workers=min(16, len(paths))) as pool:
            list(pool.map(rm, paths))

    def _invalidate(self, target: str) -> None:
        try:
            self.fs.invalidate_cache(target)
            self.fs.invalidate_cache(target.rsplit("/", 1)[0])
        except Exception:  # pragma: no cover - a cache, never a correctness matter
            pass

    @property
    def arrow_filesystem(self) -> pafs.FileSystem:
        if self._arrow_fs is None:
            self._arrow_fs = pafs.PyFileSystem(StorageErrorHandler(self.fs, uri=self.uri, root=self.root))
        return self._arrow_fs

    def arrow_path(self, path: str) -> str:
        return self._abs(path)


def _is_s3fs(fs: Any) -> bool:
    return any(c.__module__.startswith("s3fs") and c.__name__ == "S3FileSystem" for c in type(fs).__mro__)


def _mtime_ms(entry: dict) -> int | None:
    for key in ("LastModified", "mtime", "created", "last_modified"):
        v = entry.get(key)
        if v is None:
            continue
        if hasattr(v, "timestamp"):
            return int(v.timestamp() * 1000)
        try:
            return int(float(v) * 1000)
        except (TypeError, ValueError):
            continue
    return None
