"""Spark beyond local mode, started by the suite on 127.0.0.1: a standalone
cluster (a master and two one-core workers) and a Spark Connect server
running its application on that cluster.

Every process runs PySpark's own launcher scripts from the installed
``pyspark`` package, with this interpreter as Spark's Python, in its own
process group (so that its executors and Python workers go with it) that
dies with the test process; logs go to the directory given. Ports are chosen
free. A start that does not complete fails loudly, naming the log.

Standalone scheduling: an application takes every free core by default
and keeps it while it lives. The Connect server is a long-lived application
shared by the session's tests, so it is capped at one core
(``spark.cores.max=1``): it holds one worker and the other stays free for a
classic application (the children of test_spark_clusters.py), whichever
starts first.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from s3servers import die_with_parent, free_port

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent
START_TIMEOUT_S = 180.0
FAST_JVM = "-XX:TieredStopAtLevel=1"  # tiny jobs: C2 compilation costs more than it saves


def spark_env(log_dir: Path) -> dict[str, str]:
    """The environment of every Spark process here: this interpreter for
    Python, loopback addresses, logs and work files under ``log_dir``."""
    return {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
        "SPARK_LOG_DIR": str(log_dir), "SPARK_DAEMON_JAVA_OPTS": FAST_JVM,
    }


def app_conf(*, ui_port: int) -> dict[str, str]:
    """Configuration of an application on the cluster (the classic child's
    and the Connect server's)."""
    return {
        "spark.ui.port": str(ui_port), "spark.ui.showConsoleProgress": "false",
        "spark.pyspark.python": sys.executable, "spark.pyspark.driver.python": sys.executable,
        "spark.executor.memory": "512m", "spark.sql.shuffle.partitions": "2",
        # A Python worker (foreachBatch's on the Connect server, a data source
        # planner's) connects back within this; a loaded 2-core machine can take longer than 15 s.
        "spark.python.authenticate.socketTimeout": "120s",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": FAST_JVM, "spark.executor.extraJavaOptions": FAST_JVM,
    }


def http_json(url: str, timeout: float = 10.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read().decode())


def tasks_by_executor(ui_port: int, app_id: str) -> dict[str, int]:
    """Completed tasks by executor id, ``driver`` included, of the
    application whose UI is on ``ui_port`` (Spark's REST status API)."""
    found = http_json(f"http://127.0.0.1:{ui_port}/api/v1/applications/{app_id}/allexecutors")
    return {e["id"]: e["completedTasks"] for e in found}


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Daemon:
    """One Spark process (and its process group), logging to ``log``."""

    def __init__(self, name: str, args: list[str], log: Path, env: dict[str, str], cwd: Path):
        self.name = name
        self.log = log
        self._log_file = open(log, "ab")
        self.proc = subprocess.Popen(
            args, stdout=self._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, cwd=cwd, preexec_fn=die_with_parent,
        )

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; its log {self.log}:\n{log_tail(self.log)}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=20)
        self._log_file.close()


def wait_until(what: str, ready, daemons: list[Daemon], timeout_s: float = START_TIMEOUT_S):
    """Poll ``ready()`` (a value, or None/False while not ready) until it is
    truthy; fail naming ``what`` and the logs when a daemon dies or time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        for d in daemons:
            d.check_alive()
        try:
            value = ready()
        except OSError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {d.name} ({d.log}):\n{log_tail(d.log)}" for d in daemons)
            raise RuntimeError(f"{what} not ready after {timeout_s:.0f} s\n{logs}")
        time.sleep(0.5)


class StandaloneCluster:
    """A standalone master and two workers of one core and 1 GiB each."""

    WORKERS = 2

    def __init__(self, work_dir: Path):
        self.work_dir = Path(work_dir)
        env = {**spark_env(self.work_dir), "SPARK_DAEMON_MEMORY": "256m"}  # the master and workers only
        port, self.ui_port = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{port}"
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        self.daemons = [Daemon(
            "master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                       "--port", str(port), "--webui-port", str(self.ui_port)],
            self.work_dir / "master.log", env, self.work_dir,
        )]
        try:
            wait_until("the standalone master", lambda: self._status() is not None, self.daemons)
            for i in range(self.WORKERS):
                d = self.work_dir / f"worker{i}"
                d.mkdir()
                self.daemons.append(Daemon(
                    f"worker{i}", [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                   "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()),
                                   "--work-dir", str(d), self.url],
                    self.work_dir / f"worker{i}.log", env, d,
                ))
            wait_until(f"{self.WORKERS} workers", lambda: len(self.alive_workers()) == self.WORKERS, self.daemons)
        except BaseException:
            self.stop()
            raise

    def _status(self) -> dict | None:
        return http_json(f"http://127.0.0.1:{self.ui_port}/json/")

    def alive_workers(self) -> list[dict]:
        return [w for w in (self._status() or {}).get("workers", []) if w.get("state") == "ALIVE"]

    def stop(self) -> None:
        for d in reversed(self.daemons):
            d.stop()


class ConnectServer:
    """A Spark Connect server whose application runs on ``cluster`` with one core."""

    def __init__(self, work_dir: Path, cluster: StandaloneCluster):
        self.work_dir = Path(work_dir)
        self.port, self.ui_port = free_port(), free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        conf = {
            **app_conf(ui_port=self.ui_port), "spark.cores.max": "1",
            "spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(self.port),
        }
        args = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster.url,
                "--class", "org.apache.spark.sql.connect.service.SparkConnectServer", "--name", "ctfile-connect-tests"]
        for k, v in conf.items():
            args += ["--conf", f"{k}={v}"]
        self.daemon = Daemon("connect server", args, self.work_dir / "connect.log", spark_env(self.work_dir), self.work_dir)
        try:
            wait_until("the Spark Connect server", self._serving, [self.daemon])
            self.app_id = wait_until("its application's UI", self._app_id, [self.daemon])
            wait_until("its executor", lambda: self.executors(active_only=True), [self.daemon])
        except BaseException:
            self.stop()
            raise

    def _serving(self) -> bool:
        if "Spark Connect server started" not in self.daemon.log.read_text(errors="replace"):
            return False
        with socket.create_connection(("127.0.0.1", self.port), timeout=2):
            return True

    def _app_id(self) -> str | None:
        apps = http_json(f"http://127.0.0.1:{self.ui_port}/api/v1/applications")
        return apps[0]["id"] if apps else None

    def executors(self, *, active_only: bool = False) -> list[dict]:
        """The application's executors other than the driver (Spark's REST status API)."""
        path = "executors" if active_only else "allexecutors"
        found = http_json(f"http://127.0.0.1:{self.ui_port}/api/v1/applications/{self.app_id}/{path}")
        return [e for e in found if e["id"] != "driver"]

    def tasks_by_executor(self) -> dict[str, int]:
        return tasks_by_executor(self.ui_port, self.app_id)

    def stop(self) -> None:
        self.daemon.stop()
