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
``pipe_file(..., mode="create")`` (an ``If-None-Match: *`` PUT on S3).
"""

from __future__ import annotations

import os
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Iterable

import pyarrow.fs as pafs

from ctfile.format.errors import InvalidArgumentError

TMP_PREFIX = ".tmp-"


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
            os.fsync(f.fileno())
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
            if e.is_file():
                st = e.stat()
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
    """Any fsspec filesystem that honours ``pipe_file(mode="create")``."""

    def __init__(self, fs: Any, root: str, uri: str):
        self.fs = fs
        self.root = root.rstrip("/")
        self.uri = uri
        self._arrow_fs: pafs.FileSystem | None = None

    def _abs(self, path: str) -> str:
        return f"{self.root}/{path}" if path else self.root

    def read_bytes(self, path: str) -> bytes:
        return self.fs.cat_file(self._abs(path))

    def put_if_absent(self, path: str, data: bytes) -> None:
        self.fs.pipe_file(self._abs(path), data, mode="create")

    def put(self, path: str, data: bytes) -> None:
        self.fs.pipe_file(self._abs(path), data)

    def exists(self, path: str) -> bool:
        return self.fs.exists(self._abs(path))

    def list_dir(self, path: str) -> list[FileInfo]:
        try:
            entries = self.fs.ls(self._abs(path), detail=True, refresh=True)
        except FileNotFoundError:
            return []
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
        for p in paths:
            try:
                self.fs.rm_file(self._abs(p))
            except FileNotFoundError:
                pass

    @property
    def arrow_filesystem(self) -> pafs.FileSystem:
        if self._arrow_fs is None:
            self._arrow_fs = pafs.PyFileSystem(pafs.FSSpecHandler(self.fs))
        return self._arrow_fs

    def arrow_path(self, path: str) -> str:
        return self._abs(path)


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
