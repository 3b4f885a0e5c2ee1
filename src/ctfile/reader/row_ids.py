"""``METADATA$ROW_ID``: the opaque, stable row id of change scans (SPEC §Change scans).

The value is XXH3-64 of the 8-byte little-endian hidden ``_ct_row_id``, seeded
with a per-table seed (XXH3-64 of the table id), rendered as 16 lower-case hex
digits. Like Snowflake's ``$ROW_ID`` it is opaque (it does not leak the layout
or the insertion order) and stable across updates; the per-table seed keeps
ids of different tables apart.

Hashing a row at a time through the ``xxhash`` module would cost a Python
call per row, so this module implements XXH3's 4-to-8-byte input path over
numpy arrays. ``tests/unit/reader/test_row_ids.py`` checks it bit for bit
against ``xxhash.xxh3_64_intdigest``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import xxhash

# XXH3 default secret, bytes 8..15 and 16..23, read little-endian.
_SECRET_8 = np.uint64(0x1CAD21F72C81017C)
_SECRET_16 = np.uint64(0xDB979083E96DD4DE)
_PRIME_MX2 = np.uint64(0x9FB21C651E98DF25)
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
# _HEX4[i]: the 4 hex digits of the 16-bit value i as 4 ASCII bytes (little-endian uint32).
_HEX4 = (
    _HEX[(np.arange(65536) >> 12) & 15].astype("<u4")
    | (_HEX[(np.arange(65536) >> 8) & 15].astype("<u4") << 8)
    | (_HEX[(np.arange(65536) >> 4) & 15].astype("<u4") << 16)
    | (_HEX[np.arange(65536) & 15].astype("<u4") << 24)
).astype("<u4")
_U64 = np.uint64


def table_seed(table_id: str) -> int:
    return xxhash.xxh3_64_intdigest(table_id.encode("utf-8"))


def xxh3_64_int64(values: np.ndarray, seed: int) -> np.ndarray:
    """XXH3-64 of each int64 (as 8 little-endian bytes), vectorized."""
    v = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        s = _U64(seed)
        s32 = int(seed) & 0xFFFFFFFF
        swapped = int.from_bytes(s32.to_bytes(4, "little"), "big")
        s = s ^ _U64(swapped << 32)
        bitflip = (_SECRET_8 ^ _SECRET_16) - s
        # readLE32(input + len - 4) + (readLE32(input) << 32) is v rotated by
        # 32 bits. In-place operations on two buffers: no per-step temporaries.
        h = v << _U64(32)
        h |= v >> _U64(32)
        h ^= bitflip
        # rrmxmx: h ^= rotl(h, 49) ^ rotl(h, 24)
        t = h << _U64(49)
        t |= h >> _U64(15)
        u = h << _U64(24)
        u |= h >> _U64(40)
        t ^= u
        del u
        h ^= t
        h *= _PRIME_MX2
        np.right_shift(h, _U64(35), out=t)
        t += _U64(8)
        h ^= t
        h *= _PRIME_MX2
        np.right_shift(h, _U64(28), out=t)
        h ^= t
    return h


def hex_strings(h: np.ndarray) -> pa.Array:
    """Render uint64 values as 16-digit hex strings (a pyarrow ``string`` array)."""
    n = len(h)
    # Each big-endian 16-bit digit group maps to its 4 hex characters in one
    # lookup (a 256 KiB table): 4 gathers per value instead of 16 per-nibble ops.
    out = np.take(_HEX4, np.ascontiguousarray(h, dtype=np.uint64).astype(">u8").view(">u2"))
    offsets = np.arange(0, 16 * (n + 1), 16, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(out)])


def row_id_strings(row_ids: pa.Array | np.ndarray, seed: int) -> pa.Array:
    """``METADATA$ROW_ID`` values for materialized hidden row ids."""
    arr = row_ids.to_numpy(zero_copy_only=False) if isinstance(row_ids, (pa.Array, pa.ChunkedArray)) else row_ids
    return hex_strings(xxh3_64_int64(np.asarray(arr, dtype=np.int64), seed))
