"""ctfile.spark and docs/spark.md's Spark examples beyond local mode (issue 26,
items 8 and 9): on a standalone cluster (a classic driver in a child
process, its tasks on the workers' executors) and from a Spark Connect
client (a child process too) against a Connect server whose application
runs on that cluster. The executors, not the driver, do the work: Spark's
REST status API counts their completed tasks.

Each target runs its scenarios (:mod:`_spark_child`) in one child process,
started once per module; each test checks its scenarios' outcomes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark_servers import app_conf, free_port

CHILD = Path(__file__).resolve().parent / "_spark_child.py"
README_SCENARIOS = ["pyspark_readme", "upsert_readme", "s3_upsert"]
DERIVED_SCENARIOS = ["derived_readme"]
#: On the standalone cluster only (its S3 tables and scheduler are Connect's too, and time is short).
PIPELINE_SCENARIOS = ["declared_pipeline"]
CONNECT_SCENARIOS = [
    "connect_dml", "connect_pruning", "connect_broadcast", "connect_sql", "connect_merge_builder", "parallelism",
]


class Child:
    """:mod:`_spark_child` running ``scenarios`` in ``work`` (started now)."""

    def __init__(self, work: Path, scenarios: list[str], env: dict[str, str]):
        self.scenarios = scenarios
        self.out = open(work / "child.out", "w+")
        self.proc = subprocess.Popen([sys.executable, str(CHILD), str(work), ",".join(scenarios)], env=env, cwd=work,
                                     stdout=self.out, stderr=subprocess.STDOUT, text=True)

    def result(self, timeout_s: float = 900) -> dict:
        try:
            self.proc.wait(timeout=timeout_s)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self.out.seek(0)
        text = self.out.read()
        self.out.close()
        lines = [line for line in text.splitlines() if line.startswith("CHILD-RESULT ")]
        assert lines, f"the child printed no result (exit {self.proc.returncode}):\n{text[-8000:]}"
        result = json.loads(lines[-1][len("CHILD-RESULT "):])
        print(f"child {self.scenarios}: seconds {result['seconds']}")
        return result


def child_env(s3, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SPARK_REMOTE", "PYSPARK_SUBMIT_ARGS"))}
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, AWS_EC2_METADATA_DISABLED="true",
               CTFILE_TEST_S3=json.dumps({**s3.storage_options(), "bucket": s3.bucket}), **extra)
    return env


def assert_ok(result: dict, names: list[str]) -> None:
    failed = {n: result["scenarios"].get(n, "not run") for n in names if result["scenarios"].get(n) != "ok"}
    assert not failed, "\n\n".join(f"{n}:\n{tb}" for n, tb in failed.items())


def assert_executors_worked(tasks_before: dict[str, int], tasks_after: dict[str, int]) -> None:
    """Executors other than the driver completed tasks in between; the driver none."""
    done = {e: n - tasks_before.get(e, 0) for e, n in tasks_after.items()}
    assert done.get("driver", 0) == 0, done
    assert sum(n for e, n in done.items() if e != "driver") > 0, done


@pytest.fixture(scope="module")
def runs(request, standalone_cluster, moto_s3, tmp_path_factory) -> dict:
    """The scenarios by a classic driver on the standalone cluster and from a
    Connect client, run at the same time (each application on one of the two
    workers: ``spark.cores.max=1`` for both), the Connect server starting
    while the classic child runs."""
    conf = " ".join(f"--conf {k}={v}" for k, v in {**app_conf(ui_port=free_port()), "spark.cores.max": "1"}.items())
    env = child_env(moto_s3, PYSPARK_SUBMIT_ARGS=f"--master {standalone_cluster.url} {conf} pyspark-shell",
                    SPARK_LOCAL_IP="127.0.0.1")
    classic = Child(tmp_path_factory.mktemp("on_cluster"),
                    [*README_SCENARIOS, *DERIVED_SCENARIOS, *PIPELINE_SCENARIOS, "parallelism"], env)
    try:
        server = request.getfixturevalue("connect_server")
        before = server.tasks_by_executor()
        env = child_env(moto_s3, SPARK_REMOTE=server.url,
                        CTFILE_TEST_UI=json.dumps({"port": server.ui_port, "app": server.app_id}))
        connect = Child(tmp_path_factory.mktemp("on_connect"),
                        [*README_SCENARIOS, *DERIVED_SCENARIOS, *CONNECT_SCENARIOS], env)
        out = {"connect": connect.result()}
        out["connect"]["tasks"] = (before, server.tasks_by_executor())
    finally:
        out_classic = classic.result()
    return {**out, "cluster": out_classic}


# ---------------------------------------------------------------- standalone cluster


def test_readme_examples_on_standalone_cluster(runs):
    on_cluster = runs["cluster"]
    assert on_cluster["session"] == "pyspark.sql.session"  # a classic driver
    assert_ok(on_cluster, README_SCENARIOS)
    assert_executors_worked({}, on_cluster["app"]["tasks"])


def test_derived_tables_on_standalone_cluster(runs):
    """docs/derived.md: derived tables run on a cluster, their refreshes'
    work on the executors (_spark_child.derived_readme: the README's gold
    example, a join, refresh_all, a DML commit, each table equal to its
    query run by Spark at its frontier)."""
    assert_ok(runs["cluster"], DERIVED_SCENARIOS)
    assert_executors_worked(*runs["cluster"]["facts"]["derived_tasks"])


def test_declared_pipeline_on_standalone_cluster_and_s3(runs):
    """docs/spark.md's declared pipeline (issue 30 item 6): an append-only
    bronze on S3, a deduplicated silver and a gold LEFT JOIN aggregate kept
    current by the scheduler, every refresh incremental and equal to the
    model (derived_pipeline.run_pipeline), its work on the executors."""
    assert_ok(runs["cluster"], PIPELINE_SCENARIOS)
    assert_executors_worked(*runs["cluster"]["facts"]["pipeline_tasks"])


def test_default_parallelism_is_the_cluster_s(runs):
    """ctfile's measure (a public-API job) equals SparkContext.defaultParallelism."""
    assert_ok(runs["cluster"], ["parallelism"])
    assert runs["cluster"]["facts"]["parallelism"] == runs["cluster"]["app"]["default_parallelism"]


# ---------------------------------------------------------------- Spark Connect


def test_readme_examples_on_spark_connect(runs):
    assert runs["connect"]["session"] == "pyspark.sql.connect.session"
    assert_ok(runs["connect"], README_SCENARIOS)
    assert_executors_worked(*runs["connect"]["tasks"])


def test_derived_tables_on_spark_connect(runs):
    """docs/derived.md: derived tables run from a Spark Connect client, their
    refreshes' work on the server's executors (as on the cluster)."""
    assert_ok(runs["connect"], DERIVED_SCENARIOS)
    assert_executors_worked(*runs["connect"]["facts"]["derived_tasks"])


def test_merge_update_delete_to_df_changes_df_on_spark_connect(runs):
    assert_ok(runs["connect"], ["connect_dml"])


def test_merge_builder_and_transactions_on_spark_connect(runs):
    """CtfileTable.merge_builder on the executors and in the driver, and a
    transaction, from a Connect client (_spark_child.connect_merge_builder)."""
    assert_ok(runs["connect"], ["connect_merge_builder"])


def test_sql_conditions_prune_on_spark_connect(runs):
    assert_ok(runs["connect"], ["connect_pruning"])


def test_sql_text_on_spark_connect(runs):
    assert_ok(runs["connect"], ["connect_sql"])


def test_small_merge_source_is_broadcast_on_spark_connect(runs):
    assert_ok(runs["connect"], ["connect_broadcast"])


def test_default_parallelism_on_spark_connect(runs):
    """The Connect server's application has one executor core: Spark's
    default parallelism is then its minimum, 2."""
    assert_ok(runs["connect"], ["parallelism"])
    assert runs["connect"]["facts"]["parallelism"] == 2
