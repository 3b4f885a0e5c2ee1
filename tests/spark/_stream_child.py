"""Child process of test_spark_stream's exactly-once test: its own SparkSession
runs a ctfile -> ctfile streaming query (append-only changes of SOURCE, one
source version per micro-batch, Trigger.AvailableNow) into TARGET with the
checkpoint CHECKPOINT, then exits. The test SIGKILLs it mid-stream and
restarts the same query (:func:`start_query`) from the same checkpoint.

usage: python _stream_child.py SOURCE TARGET CHECKPOINT
"""

from __future__ import annotations

import sys


def start_query(spark, source: str, target: str, checkpoint: str):
    """The streaming query of this test, started on ``spark``."""
    return (
        spark.readStream.format("ctfile")
        .option("changes", "append_only")
        .option("startingVersion", "1")
        .option("maxVersionsPerTrigger", "1")
        .load(source)
        .select("id", "x")
        .writeStream.format("ctfile")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(target)
    )


def main(source: str, target: str, checkpoint: str) -> None:
    from spark_helpers import build_session  # this script's directory is sys.path[0]

    spark = build_session("ctfile-stream-child")
    query = start_query(spark, source, target, checkpoint)
    print("started", flush=True)
    query.awaitTermination()
    spark.stop()
    print("done", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
