"""Decoding the partitions a change scan needs ahead of their consumer.

A minimum-delta change scan (:mod:`ctfile.reader.min_delta`) consumes each
partition it reads as a stream of needed rows, in a known order.
:class:`Streams` starts those streams in consumption order, a few partitions
ahead of the one being consumed, and :class:`Ahead` runs each on a thread
pool a bounded number of rows ahead (pyarrow releases the GIL while it
decodes), so partitions decode in parallel while memory stays bounded:
``to_batches()`` of a change set holds a few partitions' worth of rows, not
the whole change.
"""

from __future__ import annotations

import collections
import threading
from concurrent.futures import Executor
from typing import Iterator, Protocol, Sequence

import numpy as np
import pyarrow as pa

from ctfile.format.actions import Partition
from ctfile.format.schema import Schema
from ctfile.reader.integrity import DataFiles
from ctfile.reader.partition_reader import iter_rows

FILE_BATCH_ROWS = 65536  # rows decoded at a time from a file
AHEAD_ROWS = 65536  # needed rows a read may decode ahead of its consumer
LOOKAHEAD_READS = 2  # partitions started ahead of the one being consumed


class PartitionRead(Protocol):
    """What :class:`Streams` needs of a read: the partition, its needed row
    positions (ascending) and the table columns to decode (None: all)."""

    part: Partition
    positions: np.ndarray
    columns: list[str] | None


class Ahead:
    """Runs an iterator of ``(k, table)`` ahead of its consumer in a thread
    pool, in order, holding at most ``max_rows`` rows (at least one item)
    not yet taken. A worker never blocks: it stops when the buffer is full
    and the consumer restarts it."""

    def __init__(self, pool: Executor, it: Iterator[tuple[int, pa.Table]], max_rows: int):
        self._pool = pool
        self._it = it
        self._max_rows = max_rows
        self._cv = threading.Condition()
        self._items: collections.deque = collections.deque()
        self._rows = 0
        self._running = False
        self._done = False
        self._closed = False
        self._error: BaseException | None = None
        with self._cv:
            self._kick()

    def _kick(self) -> None:  # with the lock held
        if self._running or self._done or self._closed:
            return
        if self._items and self._rows >= self._max_rows:
            return
        self._running = True
        self._pool.submit(self._fill)

    def _fill(self) -> None:
        while True:
            try:
                item = next(self._it)
            except StopIteration:
                item = None
            except BaseException as e:  # handed to the consumer
                with self._cv:
                    self._error, self._done, self._running = e, True, False
                    self._cv.notify_all()
                return
            with self._cv:
                if item is None:
                    self._done = True
                else:
                    self._items.append(item)
                    self._rows += item[1].num_rows
                self._cv.notify_all()
                if self._done or self._closed or self._rows >= self._max_rows:
                    self._running = False
                    return

    def __iter__(self):
        return self

    def __next__(self):
        with self._cv:
            while not self._items:
                if self._done or self._closed:
                    if self._error is not None:
                        raise self._error
                    raise StopIteration
                self._kick()
                self._cv.wait()
            item = self._items.popleft()
            self._rows -= item[1].num_rows
            self._kick()
            return item

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._items.clear()


class Cursor:
    """Hands out a read's needed rows by index, in order."""

    def __init__(self, items):
        self._items = items
        self._head: tuple[int, pa.Table] | None = None
        self.taken = 0

    def take(self, end: int) -> list[pa.Table]:
        """The needed rows ``taken..end``."""
        out = []
        while self.taken < end:
            if self._head is None:
                self._head = next(self._items)
            k, t = self._head
            stop = min(k + t.num_rows, end)
            out.append(t.slice(self.taken - k, stop - self.taken))
            self.taken = stop
            if stop == k + t.num_rows:
                self._head = None
        return out

    def close(self) -> None:
        if isinstance(self._items, Ahead):
            self._items.close()


class Streams:
    """The reads of a scan, started in the order they are consumed, up to
    ``LOOKAHEAD_READS`` ahead of the last one asked for, each decoding at
    most ``AHEAD_ROWS`` needed rows ahead of its consumer: partitions decode
    in parallel, with a bounded number in flight."""

    def __init__(self, pool: Executor, files: DataFiles, schema: Schema, order: Sequence[PartitionRead], batch_rows: int, *, use_threads: bool = True):
        self._pool, self._files, self._schema = pool, files, schema
        self._use_threads = use_threads
        self._order = order
        self._rank = {id(r): i for i, r in enumerate(order)}
        self._cursors: dict[int, Cursor] = {}
        self._started = 0
        self._batch_rows = batch_rows

    def _start(self, r: PartitionRead) -> None:
        it = iter_rows(self._files, r.part, self._schema, r.positions, columns=r.columns, batch_rows=FILE_BATCH_ROWS, use_threads=self._use_threads)
        self._cursors[id(r)] = Cursor(Ahead(self._pool, it, max(AHEAD_ROWS, self._batch_rows)))

    def cursor(self, r: PartitionRead) -> Cursor:
        rank = self._rank[id(r)]
        while self._started < len(self._order) and self._started <= rank + LOOKAHEAD_READS:
            self._start(self._order[self._started])
            self._started += 1
        return self._cursors[id(r)]

    def close(self, r: PartitionRead) -> None:
        c = self._cursors.pop(id(r), None)
        if c is not None:
            c.close()

    def close_all(self) -> None:
        for c in self._cursors.values():
            c.close()
        self._cursors.clear()
