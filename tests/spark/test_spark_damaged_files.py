"""A damaged data file fails a Spark read (snapshot scan and change scan) with
ctfile's error, raised in the executor and shown in the driver's exception,
instead of returning the file's rows decoded wrong (SPEC §Micro-partition
files, reader requirements)."""

from __future__ import annotations

import pytest

from spark_helpers import id_x_table, read


def test_a_damaged_file_fails_the_spark_read_with_the_ctfile_error(spark, tmp_path):
    t = id_x_table(tmp_path / "t", 40, partition_rows=20)
    p = t.snapshot().partitions[1]
    data = bytearray(t.storage.read_bytes(p.path))
    data[len(data) // 2] ^= 0x10
    t.storage.put(p.path, bytes(data))
    expected = f"CorruptDataFileError: data file {p.path} of table {t.uri} (added by version 1) is damaged"
    for df in (read(spark, t.uri), read(spark, t.uri, changes="append_only", startingVersion=1)):
        with pytest.raises(Exception) as e:
            df.collect()
        assert expected in str(e.value)
