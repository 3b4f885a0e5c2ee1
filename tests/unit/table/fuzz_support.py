"""What the fuzz tests of the public entry points share: the values they
throw (:func:`anything`, types and extremes), a template table copied
fresh for every example, and the fingerprint of a table directory a
refused call must leave unchanged.

Imported by ``test_fuzz_api.py`` and ``test_fuzz_cli.py`` (this directory
is put on ``sys.path`` by them: ``--import-mode=importlib`` does not).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctfile

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False), ("x", pa.float64()), ("s", pa.string()),
    ("st", pa.struct([("a", pa.int64())])),
])
ROWS = pa.table({"id": [10, 11], "x": [0.5, -0.0], "s": ["é", None], "st": [{"a": 1}, None]}, schema=SCHEMA)


class Opaque:
    """An object no entry point can make sense of."""

    def __repr__(self) -> str:
        return "Opaque()"


#: Types and extremes: None, bools (ints to Python), ints at and beyond the
#: long range, non-finite and huge floats, empty, huge, non-ASCII and dotted
#: strings, containers and objects.
EXTREMES = (
    None, True, False,
    0, 1, -1, 2**31, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**30, -(10**30),
    0.0, -0.0, 0.5, 1e300, -1e300, math.inf, -math.inf, math.nan,
    "", "id", "x" * 3000, "é✓𝄞\u2028", "a.b.c", "`s.a`", "st.a", "_ct_row_id", "..", "-1", "9" * 25, "NaN",
    b"\x00\xff", (), [], ["id"], [1, None, "a"], [[[[]]]], {}, {"id": 1}, {1: 2}, {"a": {"b": [math.nan]}},
    frozenset({1}), Opaque(), dt.timedelta(days=-1), dt.timedelta.max, dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31),
    dt.date(1970, 1, 1), pa.scalar(1), pc.field("id") > 0, pc.field("nope") == 1, pc.field("s") + 1,
)


def anything() -> st.SearchStrategy:
    """Any value a caller might pass, weighted toward the extremes."""
    return st.one_of(
        st.sampled_from(EXTREMES),
        st.integers(),
        st.floats(),
        st.text(max_size=12),
        st.lists(st.sampled_from(EXTREMES[:40]), max_size=3),
        st.dictionaries(st.sampled_from(["id", "x", "s", "a", "ctfile.partitionRows"]), st.sampled_from(EXTREMES[:40]),
                        max_size=2),
    )


def either(*plausible) -> st.SearchStrategy:
    """A plausible value (one of ``plausible``: values or strategies) half
    the time, :func:`anything` otherwise."""
    options = [p if isinstance(p, st.SearchStrategy) else st.just(p) for p in plausible]
    return st.one_of(st.one_of(*options), anything())


def options(required: dict[str, st.SearchStrategy] | None = None, **optional: st.SearchStrategy) -> st.SearchStrategy:
    """Keyword arguments: those ``required`` always given, the others given or left out."""
    return st.fixed_dictionaries(required or {}, optional=optional)


def make_template(root: Path) -> Path:
    """A small table with some history: rows, an update, a schema change,
    a stream, a checkpoint and a user property."""
    t = ctfile.create_table(root, SCHEMA, properties={"owner": "fuzz"})
    t.insert(ROWS)
    t.update(pc.field("id") == 10, {"s": "u"})
    t.create_stream("s")
    with t.update_schema() as u:
        u.add_column("n", pa.int32())
    t.insert(pa.table({"id": [12], "n": pa.array([3], pa.int32())}))
    t.checkpoint()
    return root


class Copies:
    """Fresh copies of the template, one directory per example."""

    def __init__(self, template: Path, base: Path):
        self.template = template
        self.base = base
        self.n = 0

    def fresh(self) -> Path:
        self.n += 1
        dest = self.base / f"copy{self.n}"
        shutil.copytree(self.template, dest)
        return dest


def fingerprint(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``root`` (and every directory, size -1): size,
    modification time and SHA-256 of the content. Equal fingerprints mean
    the directory is byte-identical and no file was rewritten."""
    out: dict[str, tuple[int, int, str]] = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = (-1, 0, "")
        for f in filenames:
            p = os.path.join(dirpath, f)
            s = os.stat(p)
            out[os.path.relpath(p, root)] = (s.st_size, s.st_mtime_ns, hashlib.sha256(Path(p).read_bytes()).hexdigest())
    return out


def changed_files(before: dict, after: dict) -> list[str]:
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def long_run(check, *, max_examples: int) -> None:
    """The long run of a fuzz test: ``check(data)`` over ``max_examples``
    random examples; its test is marked ``long``, which a plain run of the
    suite skips (``tests/conftest.py``: its time budget)."""
    run = given(data=st.data())(check)
    settings(max_examples=max_examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])(run)()


def public_methods(cls: type) -> set[str]:
    """The names of the public methods of ``cls`` (properties are not methods)."""
    return {
        name for name in dir(cls)
        if not name.startswith("_") and callable(getattr(cls, name)) and not isinstance(getattr(cls, name), property)
    }
