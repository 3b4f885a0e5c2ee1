"""Storage backends: the table root seen as a small key-value store with
put-if-absent (SPEC §Commit protocol, step 4).

Every backend offers the same contract (``tests/unit/log/test_storage_contract.py``
runs it against each): paths are relative to the table root and use ``/``;
``put_if_absent`` either creates the object atomically and exclusively or
raises :class:`FileExistsError`; reads of a missing object raise
:class:`FileNotFoundError` (so does a path under a regular file). These
builtin errors are the storage boundary, as in fsspec; the log layer turns
them into ctfile errors. A failure that retrying will not fix (denied,
bad credentials, no such bucket, unreachable endpoint, a symbolic link out of
the table root) raises :class:`~ctfile.format.errors.StorageError` naming the
table, the operation and the file; the put-if-absent of a log entry raises
:class:`OSError` when its outcome is unknown (see :class:`FsspecStorage`).

``LocalStorage`` writes a temporary file and ``os.link``s it into place: the
link is atomic and fails if the target exists, and a reader never sees a
partly written version file. It confines every access to the real table
root (SPEC §Table layout, confinement). ``FsspecStorage`` delegates to
fsspec's ``pipe_file(..., mode="create")`` (an ``If-None-Match: *`` PUT on
S3), maps the HTTP answers of a lost race (412, 409) to
:class:`FileExistsError` and retries transient failures.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import uuid
from contextlib import contextmanager
from typing import Iterable, Iterator

import pyarrow.fs as pafs

from ctfile.format.errors import InvalidArgumentError, StorageError
from ctfile.log.storage_contract import EscapingLink, FileInfo, Storage
from ctfile.log.storage_errors import file_in_the_way

__all__ = ["TMP_PREFIX", "EscapingLink", "FileInfo", "LocalStorage", "Storage", "open_storage"]

TMP_PREFIX = ".tmp-"
# Local errors that say the operation was refused and nothing was done.
_DEFINITE_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT, errno.EROFS})

log = logging.getLogger("ctfile")


# fdatasync flushes the data and the metadata needed to read it back (the
# size of a new file) but not timestamps: enough for a file that is linked
# into place afterwards, and about a third cheaper than fsync per commit.
_sync = getattr(os, "fdatasync", os.fsync)


class LocalStorage(Storage):
    """A directory on a local (POSIX) file system, confined to its real root.

    The root is resolved once (:func:`os.path.realpath`), so a root that is a
    symbolic link, or lies under one, is fine. Every read, write, list and
    delete then checks the components of its path below the real root with
    ``lstat`` (two calls for ``data/<file>``); a component that is a link is
    resolved, and if it leads out of the real root the access raises
    :class:`StorageError` naming the table, the file and the link's target,
    having touched nothing (a delete checks every path before unlinking any).
    Links that stay inside are followed. ``list_dir`` leaves out a link
    leading out (vacuum deletes only what it lists; ``verify`` reports it).
    Deleting a file that is itself a link (inside the root) unlinks the link,
    never its target, which is another name under the root that the log
    references or not on its own.

    Limits: the check and the access are separate system calls, so a process
    that can write inside the table root can still swap a checked directory
    for a link in between (a TOCTOU race); closing it would need
    ``openat2(RESOLVE_BENEATH)`` for every open, which neither :mod:`os` nor
    pyarrow's local filesystem offers for path-based access. The check guards
    against links present before an operation starts (a copied or
    mis-mounted tree, a link planted earlier), not against a concurrent
    attacker with write access to the root, who could rewrite the log anyway.
    """

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.uri = self.root
        self.real_root = os.path.realpath(self.root)
        self._arrow_fs = pafs.LocalFileSystem()

    # ------------------------------------------------------------ confinement

    def _leaves(self, link_path: str, full: str) -> EscapingLink | None:
        """``link_path`` (at ``full``) resolved: an :class:`EscapingLink` if
        it lands outside the real root."""
        target = os.path.realpath(full)
        if target == self.real_root or target.startswith(self.real_root + os.sep):
            return None
        return EscapingLink(link_path, target)

    def escaping_link(self, path: str) -> EscapingLink | None:
        return self._resolve(path)[1]

    def _resolve(self, path: str) -> tuple[str, EscapingLink | None]:
        """(absolute path of ``path``, the first link on the way to it, the
        file included, that leads out of the real root, or None). Costs one
        ``lstat`` per path component below the root (two for
        ``data/<file>``), plus a ``realpath`` per link met; it runs for every
        file a scan opens."""
        if not path:
            return self.real_root, None
        parts = path.split("/")
        full = os.path.join(self.real_root, *parts)
        if not _plain_segments(parts):  # resolve it whole
            return full, self._leaves(path, full)
        start = len(self.real_root) + 1
        end = start - 1
        while end >= 0:  # each component of ``full`` below the root, in order
            end = full.find(os.sep, end + 1)
            component = full if end < 0 else full[:end]
            try:
                mode = os.lstat(component).st_mode
            except (FileNotFoundError, NotADirectoryError):
                break  # nothing further exists; writers create real directories
            if stat.S_ISLNK(mode):
                escape = self._leaves(component[start:].replace(os.sep, "/"), component)
                if escape is not None:
                    return full, escape
        return full, None

    def _refusal(self, operation: str, path: str, escape: EscapingLink) -> StorageError:
        return StorageError(
            f"{operation} of {path} in table {self.uri} refused: {escape.path} is a symbolic link to "
            f"{escape.target}, which leaves the table root {self.real_root} (SPEC §Table layout, confinement)",
            uri=self.uri, path=path,
        )

    def _abs(self, path: str, operation: str) -> str:
        """The absolute path of ``path``, checked to stay inside the real root."""
        full, escape = self._resolve(path)
        if escape is not None:
            raise self._refusal(operation, path, escape)
        return full

    def escaping_links(self, dirs: Iterable[str]) -> list[EscapingLink]:
        found: dict[str, EscapingLink] = {}
        walked: set[str] = set()

        def walk(rel: str, full: str) -> None:
            real = os.path.realpath(full)
            if real in walked:  # a link back to a directory already walked
                return
            walked.add(real)
            try:
                entries = sorted(os.scandir(full), key=lambda e: e.name)
            except (FileNotFoundError, NotADirectoryError):
                return
            for e in entries:
                sub = f"{rel}/{e.name}"
                if e.is_symlink():
                    escape = self._leaves(sub, e.path)
                    if escape is not None:
                        found.setdefault(sub, escape)
                        continue
                if e.is_dir():  # a real directory, or a link to one inside the root
                    walk(sub, e.path)

        for d in dirs:
            escape = self.escaping_link(d)
            if escape is not None:
                found.setdefault(escape.path, escape)
            else:
                walk(d, os.path.join(self.real_root, *d.split("/")))
        return sorted(found.values(), key=lambda e: e.path)

    def blocking_file(self) -> str | None:
        return file_in_the_way(self.root)

    # ------------------------------------------------------------ Storage

    @contextmanager
    def _refusals(self, operation: str, path: str) -> Iterator[None]:
        """Local failures that retrying will not fix -- a denied permission,
        a full or read-only disk -- as :class:`StorageError` naming the table,
        the operation and the file. A missing or existing file stays the
        contract's :class:`FileNotFoundError` / :class:`FileExistsError`;
        other errors (``EIO``) stay :class:`OSError`, an unknown outcome for
        a put-if-absent."""
        try:
            yield
        except (FileNotFoundError, FileExistsError):
            raise
        except OSError as e:
            if not isinstance(e, PermissionError) and e.errno not in _DEFINITE_ERRNOS:
                raise
            raise StorageError(
                f"{operation} of {path} in table {self.uri} failed: {e.strerror or e}", uri=self.uri, path=path,
            ) from e

    def read_bytes(self, path: str) -> bytes:
        full = self._abs(path, "read")
        try:
            with self._refusals("read", path), open(full, "rb") as f:
                return f.read()
        except NotADirectoryError as e:  # a regular file where a directory should be
            raise FileNotFoundError(errno.ENOENT, f"no such file (a parent is not a directory): {e}", full) from e

    def _write_tmp(self, path: str, data: bytes) -> str:
        """A temporary file holding ``data`` in the (checked) directory of ``path``."""
        target = self._abs(path, "write")
        directory = os.path.dirname(target)
        try:
            os.makedirs(directory, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as e:
            # Not a lost race: a regular file stands where a directory must be.
            raise StorageError(
                f"write of {path} in table {self.uri} failed: {file_in_the_way(directory) or directory} "
                "is a file, not a directory", uri=self.uri, path=path,
            ) from e
        tmp = os.path.join(directory, f"{TMP_PREFIX}{uuid.uuid4().hex}")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            _sync(f.fileno())
        return tmp

    @staticmethod
    def _beside(tmp: str, path: str) -> str:
        """The target of ``path``, in the directory ``_write_tmp`` checked."""
        return os.path.join(os.path.dirname(tmp), path.rsplit("/", 1)[-1])

    def put_if_absent(self, path: str, data: bytes) -> None:
        """``link(2)`` answers definitely: a refusal means nothing was
        created (:class:`StorageError`); if only removing the temporary file
        fails afterwards, the raised :class:`OSError` is taken for an unknown
        outcome, and the commit loop then finds its entry."""
        with self._refusals("write", path):
            tmp = self._write_tmp(path, data)
        try:
            with self._refusals("write", path):
                os.link(tmp, self._beside(tmp, path))  # atomic, exclusive: EEXIST if taken
        finally:
            os.unlink(tmp)

    def put(self, path: str, data: bytes) -> None:
        with self._refusals("write", path):
            tmp = self._write_tmp(path, data)
        try:
            with self._refusals("write", path):
                os.replace(tmp, self._beside(tmp, path))
        except BaseException:
            os.unlink(tmp)
            raise

    def exists(self, path: str) -> bool:
        return os.path.exists(self._abs(path, "exists check"))

    def list_dir(self, path: str) -> list[FileInfo]:
        base = self._abs(path, "list")
        out = []
        try:
            with self._refusals("list", path):
                entries = list(os.scandir(base))
        except (FileNotFoundError, NotADirectoryError):
            return []
        for e in entries:
            rel = f"{path}/{e.name}" if path else e.name
            if e.is_symlink() and self._leaves(rel, e.path) is not None:
                # Left out, not followed: a listing names the table's files
                # (vacuum deletes from it), and a stray link must not make the
                # log unlistable (SPEC §Table layout: readers ignore foreign
                # names). verify reports it; an access to it is refused.
                log.warning("%s: %s is a symbolic link out of the table root; left out of the listing", self.uri, rel)
                continue
            try:
                if not e.is_file():
                    continue
                st = e.stat()
            except FileNotFoundError:
                continue  # removed since the scan (a concurrent writer's temp file)
            else:
                out.append(FileInfo(rel, st.st_size, int(st.st_mtime * 1000)))
        return out

    def list_subdirs(self, path: str) -> list[str]:
        base = self._abs(path, "list")
        try:
            with self._refusals("list", path):
                entries = list(os.scandir(base))
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for e in entries:
            rel = f"{path}/{e.name}" if path else e.name
            if e.is_symlink() and self._leaves(rel, e.path) is not None:
                log.warning("%s: %s is a symbolic link out of the table root; left out of the listing", self.uri, rel)
                continue
            if e.is_dir():
                out.append(e.name)
        return sorted(out)

    def delete(self, paths: Iterable[str]) -> None:
        # Check every path first: a refused one deletes nothing.
        paths = list(paths)
        targets = [self._abs(p, "delete") for p in paths]
        for p, full in zip(paths, targets):
            try:
                with self._refusals("delete", p):
                    os.unlink(full)  # a link is unlinked itself, never its target
            except (FileNotFoundError, NotADirectoryError):
                pass

    @property
    def arrow_filesystem(self) -> pafs.FileSystem:
        return self._arrow_fs

    def arrow_path(self, path: str) -> str:
        return self._abs(path, "read")


def _plain_segments(parts: list[str]) -> bool:
    """Whether the segments of a relative path hold no empty, ``.`` or ``..`` one."""
    return not _SPECIAL_SEGMENTS.intersection(parts)


_SPECIAL_SEGMENTS = frozenset({"", ".", ".."})


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
    from ctfile.log.object_store import FsspecStorage  # lazily: fsspec is imported by object-store tables only

    try:
        fs, root = fsspec.core.url_to_fs(uri, **(storage_options or {}))
    except (ValueError, ImportError, TypeError) as e:  # unknown protocol, missing package, bad option
        raise InvalidArgumentError(f"cannot open {uri!r} with storage options {sorted(storage_options or {})}: {e}") from e
    storage = FsspecStorage(fs, root, uri.rstrip("/"))
    storage.storage_options = dict(storage_options) if storage_options else None
    return storage
