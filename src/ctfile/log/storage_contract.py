"""The storage contract (SPEC §Commit protocol, step 4): :class:`Storage`,
the table root seen as a small key-value store with put-if-absent, and the
values it returns. Its backends are :class:`~ctfile.log.storage.LocalStorage`
and :class:`~ctfile.log.object_store.FsspecStorage`; :mod:`ctfile.log.storage`
describes the contract they share and opens one for a URI.

The contract is a module of its own, shorter than most, so that both
backends import it and :func:`~ctfile.log.storage.open_storage` imports
both without an import cycle.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterable

import pyarrow.fs as pafs


@dataclass(frozen=True)
class FileInfo:
    path: str  # relative to the table root
    size: int
    mtime_ms: int | None


@dataclass(frozen=True)
class EscapingLink:
    """A symbolic link under a table root whose target lies outside the real
    root: ``path`` is the link (relative to the root), ``target`` where it
    resolves (absolute, every link followed)."""

    path: str
    target: str


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
    def list_subdirs(self, path: str) -> list[str]:
        """Names of the directories directly under ``path`` (on an object
        store, the common prefixes); empty if it does not exist."""

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

    def escaping_link(self, path: str) -> EscapingLink | None:
        """The symbolic link on the way to ``path`` (the file included) whose
        target leaves the table root, or None. Object stores have no links."""
        return None

    def escaping_links(self, dirs: Iterable[str]) -> list[EscapingLink]:
        """Every symbolic link at or under the directories ``dirs`` whose
        target leaves the table root, found without following any such link.
        Object stores have no links: empty."""
        return []

    def blocking_file(self) -> str | None:
        """The regular file that stands where the root, or a directory above
        it, should be (so no table can be there), or None."""
        return None
