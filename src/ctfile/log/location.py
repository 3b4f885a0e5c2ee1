"""Where a table lives, as a value another process can open: the table's URI
and the storage options it was opened with.

Every picklable job (:class:`~ctfile.ScanTask`, :class:`~ctfile.ChangeTask`,
:class:`~ctfile.WriteJob`, :class:`~ctfile.RewriteJob`) carries a
:class:`TableLocation` instead of a URI and a dict of options, and opens its
storage with :meth:`TableLocation.open`, which keeps one storage handle per
location in each process (a Spark executor's Python worker runs many tasks
of the same table).

Storage options may hold credentials (``key``, ``secret``, tokens): the repr
of a location, and so of every job carrying one, names the option keys only.

Examples
--------
>>> import tempfile
>>> root = tempfile.mkdtemp()
>>> loc = TableLocation(root)
>>> loc.open() is loc.open(), loc.open().uri == root
(True, True)
>>> TableLocation("s3://bucket/t", {"key": "AKIA", "secret": "s3cr3t"})
TableLocation('s3://bucket/t', storage_options=<key, secret>)
>>> TableLocation("s3://bucket/t", ["key"])
Traceback (most recent call last):
...
ctfile.format.errors.InvalidArgumentError: storage_options must be a mapping or None, found list
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from ctfile.format.errors import InvalidArgumentError
from ctfile.log.storage import Storage, open_storage

_STORAGES: dict["TableLocation", Storage] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True, repr=False)
class TableLocation:
    """A table's URI (a local path or an fsspec URL) and the storage options
    to open it with (None when there are none; an empty mapping is None).

    Frozen and picklable; two locations are equal when both fields are.
    """

    uri: str
    storage_options: dict | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        uri = os.fspath(self.uri) if isinstance(self.uri, os.PathLike) else self.uri
        if not isinstance(uri, str) or not uri:
            raise InvalidArgumentError(f"a table location's uri must be a non-empty string or path, found {self.uri!r}")
        options = self.storage_options
        if options is not None and not isinstance(options, Mapping):
            raise InvalidArgumentError(f"storage_options must be a mapping or None, found {type(options).__name__}")
        object.__setattr__(self, "uri", uri)
        object.__setattr__(self, "storage_options", dict(options) if options else None)

    @classmethod
    def of(cls, storage: Storage) -> "TableLocation":
        """The location ``storage`` was opened from."""
        return cls(storage.uri, storage.storage_options)

    def open(self) -> Storage:
        """The storage of this location: one handle per location and
        process, opened on first use."""
        with _LOCK:
            storage = _STORAGES.get(self)
            if storage is None:
                storage = _STORAGES[self] = open_storage(self.uri, self.storage_options)
            return storage

    def __repr__(self) -> str:
        # Option values may be credentials: name the keys only.
        if not self.storage_options:
            return f"TableLocation({self.uri!r})"
        return f"TableLocation({self.uri!r}, storage_options=<{', '.join(sorted(map(str, self.storage_options)))}>)"

