"""Storage backends: the table root seen as a small key-value store with
put-if-absent (SPEC §Commit protocol, step 4).

Every backend offers the same contract (``tests/unit/log/test_storage_contract.py``
runs it against each): paths are relative to the table root and use ``/``;
``put_if_absent`` either creates the object atomically and exclusively or
raises :class:`FileExistsError`; reads of a missing object raise
:class:`FileNotFoundError`. These builtin errors are the storage boundary, as
in fsspec; the log layer turns them into ctfile errors.

``LocalStorage`` writes a temporary file and ``os.link``s it into place: the
link is atomic and fails if the target exists, and a reader never sees a
partly written version file. ``FsspecStorage`` delegates to fsspec's
``pipe_file(..., mode="create")`` (an ``If-None-Match: *`` PUT on S3), maps
the HTTP answers of a lost race (412, 409) to :class:`FileExistsError` and
retries transient failures (see :class:`FsspecStorage`).
"""

from __future__ import annotations

import errno
import logging
import os
import random
import time
import uuid
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterable

import pyarrow.fs as pafs

from ctfile.format.errors import InvalidArgumentError

TMP_PREFIX = ".tmp-"

log = logging.getLogger("ctfile")


@dataclass(frozen=True)
class FileInfo:
    path: str  # relative to the table root
    size: int
    mtime_ms: int | None


class Storage(ABC):
    """A table root. ``uri`` is what the user passed, normalised;
    ``storage_options`` are what it was opened with (so another process,
    e.g. a Spark executor, can open the same root)."""

    uri: str
    storage_options: dict | None = None

    @abstractmethod
    def read_bytes(self, path: str) -> bytes: ...

    @abstractmethod
    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create ``path`` with ``data`` atomically; FileExistsError if it exists."""

    @abstractmethod
    def put(self, path: str, data: bytes) -> None:
        """Create or replace ``path`` (readers see the old or the new bytes, never a mix)."""

    @abstractmethod
    def exists(self, path: str) -> bool: ...

    @abstractmethod
    def list_dir(self, path: str) -> list[FileInfo]:
        """Files directly under ``path`` (no recursion); empty if it does not exist."""

    @abstractmethod
    def delete(self, paths: Iterable[str]) -> None:
        """Delete files; missing ones are ignored."""

    @property
    @abstractmethod
    def arrow_filesystem(self) -> pafs.FileSystem:
        """A pyarrow filesystem for Parquet I/O under this root."""

    @abstractmethod
    def arrow_path(self, path: str) -> str:
        """``path`` as the :attr:`arrow_filesystem` names it."""


# fdatasync flushes the data and the metadata needed to read it back (the
# size of a new file) but not timestamps: enough for a file that is linked
# into place afterwards, and about a third cheaper than fsync per commit.
_sync = getattr(os, "fdatasync", os.fsync)


class LocalStorage(Storage):
    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.uri = self.root
        self._arrow_fs = pafs.LocalFileSystem()

    def _abs(self, path: str) -> str:
        return os.path.join(self.root, *path.split("/"))

    def read_bytes(self, path: str) -> bytes:
        with open(self._abs(path), "rb") as f:
            return f.read()

    def _write_tmp(self, path: str, data: bytes) -> str:
        target = self._abs(path)
        directory = os.path.dirname(target)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f"{TMP_PREFIX}{uuid.uuid4().hex}")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            _sync(f.fileno())
        return tmp

    def put_if_absent(self, path: str, data: bytes) -> None:
        tmp = self._write_tmp(path, data)
        try:
            os.link(tmp, self._abs(path))  # atomic, exclusive: EEXIST if taken
        finally:
            os.unlink(tmp)

    def put(self, path: str, data: bytes) -> None:
        tmp = self._write_tmp(path, data)
        try:
            os.replace(tmp, self._abs(path))
        except BaseException:
            os.unlink(tmp)
            raise

    def exists(self, path: str) -> bool:
        return os.path.exists(self._abs(path))

    def list_dir(self, path: str) -> list[FileInfo]:
        base = self._abs(path)
        out = []
        try:
            entries = list(os.scandir(base))
        except FileNotFoundError:
            return []
        for e in entries:
            try:
                if not e.is_file():
                    continue
                st = e.stat()
            except FileNotFoundError:
                continue  # removed since the scan (a concurrent writer's temp file)
            else:
                out.append(FileInfo(f"{path}/{e.name}" if path else e.name, st.st_size, int(st.st_mtime * 1000)))
        return out

    def delete(self, paths: Iterable[str]) -> None:
        for p in paths:
            try:
                os.unlink(self._abs(p))
            except FileNotFoundError:
                pass

    @property
    def arrow_filesystem(self) -> pafs.FileSystem:
        return self._arrow_fs

    def arrow_path(self, path: str) -> str:
        return self._abs(path)


class FsspecStorage(Storage):
    """Any fsspec filesystem that honours ``pipe_file(mode="create")``.

    Object stores add three concerns that a local disk does not have:

    * **Lost races come back as HTTP errors.** s3fs turns a failed
      ``If-None-Match: *`` PUT into :class:`FileExistsError` only when the
      server names the condition (AWS does, SeaweedFS does not), and S3 answers
      a conditional write that races another in flight with 409
      ``ConditionalRequestConflict``. :meth:`put_if_absent` maps HTTP 412 and
      409 to :class:`FileExistsError`, so the commit loop rebases.
    * **Transient errors.** Throttling (429, 503 ``SlowDown``), server errors
      and timeouts are retried with exponential backoff and jitter. For the
      put-if-absent of a log entry only a *rejected* request (throttling) is
      retried here: after an ambiguous failure (timeout, connection reset, 5xx)
      the entry may have landed, so the error is raised as :class:`OSError`
      ("outcome unknown") and the transaction retries, keeps its data files
      and recognises its own ``txnId`` if the entry did land (SPEC §Commit
      protocol, step 7). Transport errors that are not ``OSError`` (botocore,
      aiohttp) are converted, so they cannot be mistaken for a definite failure.
    * **Client-side listing caches.** fsspec filesystems may answer ``exists``
      from a cached listing; every check here bypasses or invalidates it, as
      the log needs read-after-write consistency across processes.
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

    def _call(self, what: str, fn, *args, **kwargs):
        """Run an idempotent request, retrying transient failures."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                kind = classify_error(e)
                if kind in (THROTTLED, TRANSIENT) and attempt < self.max_attempts:
                    log.debug("%s on %s failed (%s, attempt %d): %s; retrying", what, self.uri, kind, attempt, e)
                    self._sleep_before_retry(attempt)
                    continue
                if kind in (THROTTLED, TRANSIENT) and not isinstance(e, OSError):
                    raise OSError(errno.EIO, f"{what} on {self.uri} failed after {attempt} attempts: {e!r}") from e
                raise

    # ------------------------------------------------------------ Storage

    def read_bytes(self, path: str) -> bytes:
        if self._is_s3:
            # One GET: by default s3fs first HEADs the object for its size
            # (and follows a 404 with a LIST), tripling the cost of a probe.
            return self._call("read", self.fs.cat_file, self._abs(path), max_concurrency=1)
        return self._call("read", self.fs.cat_file, self._abs(path))

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
                if kind == CONFLICT:
                    raise FileExistsError(
                        errno.EEXIST, f"{self.uri}/{path} already exists (conditional put lost: {_describe(e)})"
                    ) from e
                if kind == THROTTLED and attempt < self.max_attempts:
                    # Rejected before anything was written: safe to repeat here.
                    self._sleep_before_retry(attempt)
                    continue
                if kind in (THROTTLED, TRANSIENT):
                    raise OSError(
                        errno.EIO,
                        f"put-if-absent of {self.uri}/{path} failed, outcome unknown: {_describe(e)}",
                    ) from e
                raise
            finally:
                self._invalidate(target)

    def put(self, path: str, data: bytes) -> None:
        target = self._abs(path)
        try:
            self._call("put", self.fs.pipe_file, target, bytes(data))
        finally:
            self._invalidate(target)

    def exists(self, path: str) -> bool:
        target = self._abs(path)
        if self._is_s3:
            # One HEAD; s3fs's exists() may answer from a cached listing and
            # follows a 404 with a LIST to detect "directories".
            bucket, key, _ = self.fs.split_path(target)
            try:
                self._call("exists", self.fs.call_s3, "head_object", Bucket=bucket, Key=key)
                return True
            except FileNotFoundError:
                return False
        self._invalidate(target)
        return self._call("exists", self.fs.exists, target)

    def list_dir(self, path: str) -> list[FileInfo]:
        target = self._abs(path)
        try:
            entries = self._call("list", self.fs.ls, target, detail=True, refresh=True)
        except FileNotFoundError:
            return []
        finally:
            self._invalidate(target)
        out = []
        prefix = self.root + "/"
        for e in entries:
            if e.get("type") != "file":
                continue
            name = e["name"]
            rel = name[len(prefix):] if name.startswith(prefix) else name.split(self.root, 1)[-1].lstrip("/")
            out.append(FileInfo(rel, int(e.get("size") or 0), _mtime_ms(e)))
        return out

    def delete(self, paths: Iterable[str]) -> None:
        targets = [self._abs(p) for p in paths]
        if not targets:
            return

        def rm(target: str) -> None:
            try:
                self._call("delete", self.fs.rm_file, target)
            except FileNotFoundError:
                pass
            finally:
                self._invalidate(target)

        if len(targets) == 1:
            rm(targets[0])
            return
        with ThreadPoolExecutor(max_workers=min(16, len(targets))) as pool:
            list(pool.map(rm, targets))

    def _invalidate(self, target: str) -> None:
        try:
            self.fs.invalidate_cache(target)
            self.fs.invalidate_cache(target.rsplit("/", 1)[0])
        except Exception:  # pragma: no cover - a cache, never a correctness matter
            pass

    @property
    def arrow_filesystem(self) -> pafs.FileSystem:
        if self._arrow_fs is None:
            self._arrow_fs = pafs.PyFileSystem(pafs.FSSpecHandler(self.fs))
        return self._arrow_fs

    def arrow_path(self, path: str) -> str:
        return self._abs(path)


# ---------------------------------------------------------------- error classes

#: A conditional put lost to an existing object (HTTP 412) or to a concurrent
#: conditional write (HTTP 409 ``ConditionalRequestConflict``).
CONFLICT = "conflict"
#: The server refused the request without acting on it (429, 503 ``SlowDown``).
THROTTLED = "throttled"
#: A timeout, dropped connection or server error: the request may have been applied.
TRANSIENT = "transient"
#: Anything else (missing object, access denied, bad request ...): not retried.
PERMANENT = "permanent"

_CONFLICT_CODES = {"PreconditionFailed", "ConditionalRequestConflict", "OperationAborted"}
_THROTTLE_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests",
                   "ServiceUnavailable", "RequestThrottled"}
_TRANSIENT_CODES = {"InternalError", "RequestTimeout", "RequestTimeTooSkewed", "BadGateway", "GatewayTimeout"}
_TRANSIENT_TYPE_NAMES = {
    # botocore / urllib3 / aiohttp transport errors, by name so that no
    # optional dependency has to be imported here.
    "HTTPClientError", "ConnectionError", "EndpointConnectionError", "ConnectionClosedError",
    "ReadTimeoutError", "ConnectTimeoutError", "ProxyConnectionError", "IncompleteReadError",
    "ResponseStreamingError", "ResponseParserError", "IncompleteRead", "ClientPayloadError",
    "ServerDisconnectedError", "ClientConnectionError", "ClientOSError", "ServerTimeoutError",
    "ClientConnectorError", "FSTimeoutError", "ProtocolError", "RemoteDisconnected",
}


def _http_details(exc: BaseException) -> tuple[int | None, str | None]:
    """(HTTP status, error code) from an exception or the chain that caused it."""
    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        response = getattr(e, "response", None)
        if isinstance(response, dict):  # botocore ClientError
            status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            code = (response.get("Error") or {}).get("Code")
            if status is not None or code:
                if status is None and isinstance(code, str) and code.isdigit():
                    status = int(code)
                return status, code
        for attr in ("status", "status_code", "code"):  # aiohttp, gcsfs, adlfs style
            v = getattr(e, attr, None)
            if isinstance(v, int) and not isinstance(v, bool) and 100 <= v <= 599:
                return v, None
        e = e.__cause__ or e.__context__
    return None, None


def classify_error(exc: BaseException) -> str:
    """How an object-store request failed: :data:`CONFLICT`, :data:`THROTTLED`,
    :data:`TRANSIENT` or :data:`PERMANENT`.

    >>> classify_error(FileExistsError("x")), classify_error(FileNotFoundError("x"))
    ('conflict', 'permanent')
    >>> classify_error(TimeoutError()), classify_error(PermissionError("denied"))
    ('transient', 'permanent')
    """
    if isinstance(exc, FileExistsError):
        return CONFLICT
    status, code = _http_details(exc)
    if code in _CONFLICT_CODES or status == 412 or (status == 409 and code in (None, "409", "Conflict")):
        return CONFLICT
    if code in _THROTTLE_CODES or status in (429, 503):
        return THROTTLED
    if code in _TRANSIENT_CODES or (status is not None and status >= 500) or status == 408:
        return TRANSIENT
    if status is not None:
        return PERMANENT
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)):
        return PERMANENT
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return TRANSIENT
    e: BaseException | None = exc
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if any(t.__name__ in _TRANSIENT_TYPE_NAMES for t in type(e).__mro__):
            return TRANSIENT
        e = e.__cause__ or e.__context__
    if isinstance(exc, OSError) and exc.errno in (errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNABORTED,
                                                  errno.ECONNREFUSED, errno.EPIPE, errno.EBUSY):
        return TRANSIENT
    return PERMANENT


def _describe(exc: BaseException) -> str:
    status, code = _http_details(exc)
    parts = [p for p in (f"HTTP {status}" if status else None, code) if p]
    return f"{', '.join(parts)}: {exc}" if parts else repr(exc)


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


def open_storage(uri: str, storage_options: dict | None = None) -> Storage:
    """The storage backend for a table URI: a local path or any fsspec URL."""
    import fsspec
    from fsspec.core import split_protocol

    if isinstance(uri, os.PathLike):
        uri = os.fspath(uri)
    protocol, rest = split_protocol(uri)
    if protocol in (None, "file", "local"):
        if storage_options:
            raise InvalidArgumentError(
                f"storage_options are only meaningful for object-store URIs; {uri!r} is a local path"
            )
        return LocalStorage(rest if protocol else uri)
    fs, root = fsspec.core.url_to_fs(uri, **(storage_options or {}))
    storage = FsspecStorage(fs, root, uri.rstrip("/"))
    storage.storage_options = dict(storage_options) if storage_options else None
    return storage
