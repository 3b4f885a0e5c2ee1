"""Reading data files with their damage check (SPEC §Micro-partition files,
reader requirements).

Every read of a data file goes through a :class:`DataFiles`, one per read (a
snapshot scan, a change scan, a DML statement, one Spark task). The first
time a read opens a file, the file is read whole (one read; one GET on an
object store), its length is compared with the ``sizeBytes`` of its ``add``
and its XXH3-128 with the ``checksum``, and Parquet is decoded from those
bytes. A file whose ``add`` has no ``checksum`` (it is optional in the SPEC)
can only be checked for its length. Later opens of the same file in the same
read (a change scan reads a partition's hidden columns, then its rows, then
compares column chunks with its successor's) use ranged reads of the file,
checking only its length: the file was verified moments before and data
files are immutable (SPEC §Table layout). What is left unchecked is a file
replaced by another of the same length *during* one read.

Failures are typed: :class:`~ctfile.format.errors.MissingDataFileError` for a
file storage does not hold, :class:`~ctfile.format.errors.CorruptDataFileError`
for a wrong length or checksum, a file that is not Parquet, a row count other
than ``numRecords`` or data that does not decode;
:class:`~ctfile.format.errors.StorageError` for a transport failure. Each
message names the table, the file and the version that added it.

:func:`unchecked_reads` turns the length and checksum checks off, for
diagnostics and for measuring what they cost (``benchmarks/``); see its
docstring.

Examples
--------
>>> import ctfile, os, pyarrow as pa, tempfile
>>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
>>> _ = t.insert(pa.table({"id": [1, 2, 3]}))
>>> p = t.snapshot().partitions[0]
>>> with open(os.path.join(t.uri, p.path), "r+b") as f:  # flip one bit
...     b = f.read(5); _ = f.seek(4); _ = f.write(bytes([b[4] ^ 1]))
>>> t.snapshot().to_arrow()
Traceback (most recent call last):
...
ctfile.format.errors.CorruptDataFileError: data file data/part-...parquet of table ... (added by version 1) is damaged: checksum mismatch: the file hashes to ... (XXH3-128), the log records ...
"""

from __future__ import annotations

import enum
import threading
from contextlib import contextmanager
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from ctfile.format.actions import Partition
from ctfile.format.errors import CorruptDataFileError, CtfileError, MissingDataFileError, StorageError
from ctfile.log.storage import Storage
from ctfile.log.storage_errors import ErrorKind, classify_error
from ctfile.log.transaction import PENDING


class Damage(enum.Enum):
    """How a file's bytes differ from its ``add`` action (the check names of
    ``ctfile verify``)."""

    SIZE = "size"
    CHECKSUM = "checksum"


def damage(p: Partition, data) -> list[tuple[Damage, str]]:
    """The ways ``data`` (the whole file, any bytes-like object) differs from
    ``p``'s ``sizeBytes`` and ``checksum``: empty for an intact file.

    Examples
    --------
    >>> from ctfile.format.actions import Partition
    >>> p = Partition("data/x.parquet", 3, 1, 0, 1, 0, checksum=xxhash.xxh3_128_hexdigest(b"abc"))
    >>> damage(p, b"abc")
    []
    >>> [(d.value, m) for d, m in damage(p, b"abcd")]  # doctest: +NORMALIZE_WHITESPACE
    [('size', 'the file holds 4 bytes, the log records sizeBytes 3'),
     ('checksum', 'checksum mismatch: the file hashes to ... (XXH3-128), the log records ...')]
    """
    out: list[tuple[Damage, str]] = []
    n = memoryview(data).nbytes
    if n != p.size_bytes:
        out.append((Damage.SIZE, f"the file holds {n} bytes, the log records sizeBytes {p.size_bytes}"))
    if p.checksum is not None:
        actual = xxhash.xxh3_128_hexdigest(data)
        if actual != p.checksum:
            out.append((Damage.CHECKSUM, f"checksum mismatch: the file hashes to {actual} (XXH3-128), the log records {p.checksum}"))
    return out


# ---------------------------------------------------------------- the switch

_unchecked_depth = 0
_unchecked_lock = threading.Lock()


@contextmanager
def unchecked_reads() -> Iterator[None]:
    """Within this block, reads in this process skip the length and checksum
    checks of data files: every open is a ranged read of the file, as
    before ctfile checked files on read.

    For diagnostics (reading what can still be decoded from a damaged file,
    knowing the rows may be wrong) and for benchmarks that measure what the
    check costs. It is process-wide (reads on other threads are unchecked
    too; tasks in other processes, such as Spark executors, are not
    affected) and nests. Missing files, files that are not Parquet, row
    counts other than ``numRecords`` and decoding failures are still
    reported as typed errors.

    Examples
    --------
    >>> checks_enabled()
    True
    >>> with unchecked_reads():
    ...     checks_enabled()
    False
    """
    global _unchecked_depth
    with _unchecked_lock:
        _unchecked_depth += 1
    try:
        yield
    finally:
        with _unchecked_lock:
            _unchecked_depth -= 1


def checks_enabled() -> bool:
    """False inside :func:`unchecked_reads`."""
    return _unchecked_depth == 0


# ---------------------------------------------------------------- one read's files


def describe(uri: str, p: Partition) -> str:
    """``data file <path> of table <uri> (added by version <v>)``."""
    added = "staged by this transaction" if p.default_row_version == PENDING else f"added by version {p.default_row_version}"
    return f"data file {p.path} of table {uri} ({added})"


class DataFiles:
    """The data files of one read, each verified the first time the read
    opens it (see the module docstring).

    Safe to share between the threads of one read. Create one per read: a
    ``DataFiles`` remembers which files it verified, so reusing one across
    reads would skip the check of every later read.
    """

    def __init__(self, storage: Storage):
        self.storage = storage
        self._verified: set[tuple] = set()
        self._lock = threading.Lock()

    @classmethod
    def of(cls, files: "DataFiles | Storage") -> "DataFiles":
        """``files`` itself, or a new ``DataFiles`` over a :class:`Storage`."""
        return files if isinstance(files, DataFiles) else cls(files)

    def error(self, cls: type[CtfileError], p: Partition, what: str, cause: BaseException | None = None) -> CtfileError:
        """An error of class ``cls`` (a :class:`DataFileError` or
        :class:`StorageError`) saying what is wrong with ``p``'s file."""
        text = f"{describe(self.storage.uri, p)} {what}"
        if cause is not None and str(cause).strip():
            text += f" ({str(cause).strip().splitlines()[0]})"
        if cls is StorageError:
            return StorageError(text, uri=self.storage.uri, path=p.path)
        return cls(text, uri=self.storage.uri, path=p.path, version=p.default_row_version)

    def fetch(self, p: Partition) -> pa.NativeFile:
        """A readable source over ``p``'s file, verified if this read has not
        verified it yet (then an in-memory buffer of the whole file), else a
        ranged reader whose length is checked. The caller closes it; use it
        through :meth:`open`. Safe to run ahead on another thread."""
        key = (p.path, p.size_bytes, p.checksum)
        checking = checks_enabled()
        with self._lock:
            verify = checking and key not in self._verified
        with self.translate(p, fetching=True):
            if verify:
                src = pa.BufferReader(self._read_verified(p))
            else:
                src = self.storage.arrow_filesystem.open_input_file(self.storage.arrow_path(p.path))
                size = src.size()
                if checking and size != p.size_bytes:
                    src.close()
                    raise self.error(
                        CorruptDataFileError, p,
                        f"is damaged: the file holds {size} bytes, the log records sizeBytes {p.size_bytes}",
                    )
        if verify:
            with self._lock:
                self._verified.add(key)
        return src

    @contextmanager
    def open(self, p: Partition, *, fetched: pa.NativeFile | None = None) -> Iterator[pa.NativeFile]:
        """``p``'s file as a source from :meth:`fetch` (or ``fetched``, one
        fetched ahead), closed at the end of the block. Errors raised inside
        the block while reading or decoding the file become typed errors
        (see :meth:`translate`)."""
        src = self.fetch(p) if fetched is None else fetched
        try:
            with self.translate(p, in_memory=isinstance(src, pa.BufferReader)):
                yield src
        finally:
            src.close()

    def _read_verified(self, p: Partition) -> bytes:
        """The whole file, after checking its length and checksum."""
        data = self.storage.read_bytes(p.path)
        found = damage(p, data)
        if found:
            raise self.error(CorruptDataFileError, p, "is damaged: " + "; ".join(m for _, m in found))
        return data

    def parquet(self, source: pa.NativeFile, p: Partition, **options) -> pq.ParquetFile:
        """``pq.ParquetFile`` over a source from :meth:`open` (``options``
        go to it), after checking the file's row count against
        ``numRecords``. Ranged sources pre-buffer (the column chunks of a
        read are fetched in a few coalesced reads, as ``pq.read_table``
        does); an in-memory source needs no buffering. Call it inside
        :meth:`open`'s block, which turns its errors into typed ones."""
        if not isinstance(source, pa.BufferReader):
            options.setdefault("pre_buffer", True)
        pf = pq.ParquetFile(source, **options)
        n = pf.metadata.num_rows
        if n != p.num_records:
            raise self.error(CorruptDataFileError, p, f"is damaged: the file holds {n} rows, the log records numRecords {p.num_records}")
        return pf

    def chunk_reader(self, source: pa.NativeFile, p: Partition):
        """``read(offset, n) -> pa.Buffer``: raw bytes of ``p``'s file from a
        source of :meth:`open`, read errors typed as in :meth:`translate`."""
        in_memory = isinstance(source, pa.BufferReader)

        def read(offset: int, n: int) -> pa.Buffer:
            with self.translate(p, in_memory=in_memory):
                source.seek(offset)
                return source.read_buffer(n)

        return read

    @contextmanager
    def translate(self, p: Partition, *, in_memory: bool = False, fetching: bool = False) -> Iterator[None]:
        """Raise the errors of reading ``p``'s file inside the block as typed
        errors: an absent file as :class:`MissingDataFileError`, a refused or
        failed read as :class:`StorageError`, anything pyarrow cannot decode
        as :class:`CorruptDataFileError`. pyarrow reports undecodable Parquet
        as ``OSError`` too, so an ``OSError`` counts as a transport failure
        only while ``fetching`` (opening, or reading the whole file), or when
        it is a refusal or a transient failure of a ranged read (not
        ``in_memory``)."""
        try:
            yield
        except CtfileError:
            raise
        except FileNotFoundError as e:
            raise self.error(MissingDataFileError, p, "is missing: storage holds no such file", e) from e
        except (pa.ArrowException, OSError) as e:
            if isinstance(e, OSError) and (fetching or not in_memory and (
                isinstance(e, PermissionError) or classify_error(e) is ErrorKind.TRANSIENT
            )):
                raise self.error(StorageError, p, "could not be read", e) from e
            raise self.error(CorruptDataFileError, p, "is damaged: it does not decode as Parquet", e) from e
