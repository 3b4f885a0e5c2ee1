"""The Spark suite: one session-scoped local SparkSession, real tables in tmp dirs.

Spark start-up costs tens of seconds on a loaded machine, so every test shares
the ``spark`` fixture. Python workers must run the interpreter that has ctfile
installed (the venv's), hence ``PYSPARK_PYTHON`` before the session exists
(:func:`spark_helpers.build_session`). Nothing registers the data source on
this session: ``format("ctfile")`` must resolve through the installed
``pyspark_ctfile`` module (auto-registration); tests that register explicitly
do it on ``spark.newSession()``.

``standalone_cluster`` and ``connect_server`` (:mod:`spark_servers`) are Spark
beyond local mode, one each per test session, started when a test first
asks for them and stopped at the end; a start that fails is an error, never
a skip.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The tests import their helpers as a plain module (pytest runs with
# --import-mode=importlib, which does not put test directories on sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parent))

from spark_helpers import build_session, make_people  # noqa: E402
from spark_servers import ConnectServer, StandaloneCluster  # noqa: E402


@pytest.fixture(scope="session")
def spark():
    session = build_session()
    yield session
    session.stop()


@pytest.fixture
def people(tmp_path):
    """The worked example table (versions 0-5), see :func:`spark_helpers.make_people`."""
    return make_people(tmp_path / "people")


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory):
    """A standalone master and two one-core workers on 127.0.0.1 (logs in a tmp dir)."""
    cluster = StandaloneCluster(tmp_path_factory.mktemp("standalone"))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def connect_server(standalone_cluster, tmp_path_factory):
    """A Spark Connect server on 127.0.0.1 whose application runs on
    ``standalone_cluster`` with one core."""
    server = ConnectServer(tmp_path_factory.mktemp("connect"), standalone_cluster)
    yield server
    server.stop()
