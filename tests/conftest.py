"""Suite-wide fixtures: real S3-compatible servers on 127.0.0.1.

``moto_s3`` (moto's ThreadedMotoServer, in-process) and ``seaweedfs_s3``
(SeaweedFS ``weed mini``, a child process) are session-scoped and started only
when a test asks for them; each is stopped at the end of the session. They
yield an :class:`s3servers.S3Endpoint` (endpoint URL, credentials, a bucket);
``S3Endpoint.new_uri()`` gives a fresh table URI and
``S3Endpoint.storage_options()`` the matching fsspec options. Nothing relies on
a server already running on the machine.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

_OBJECTSTORE = Path(__file__).resolve().parent / "objectstore"
if str(_OBJECTSTORE) not in sys.path:
    # Test modules import the helpers as plain modules (--import-mode=importlib
    # does not put test directories on sys.path).
    sys.path.insert(0, str(_OBJECTSTORE))

import s3servers  # noqa: E402

# The CLI tests read the `ctfile` tool's output as a pipe prints it (rich's
# pipe width); pytest-xdist's workers inherit a COLUMNS that would narrow it.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``long`` (long property and fuzz runs) are skipped unless
    the marker expression names them (``-m long``): the default run, which CI
    makes, has a time budget."""
    if "long" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="a long run: select it with -m long")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def moto_server():
    server = s3servers.start_moto()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moto_s3(moto_server) -> "s3servers.S3Endpoint":
    return moto_server.endpoint


@pytest.fixture(scope="session")
def seaweedfs_server(tmp_path_factory):
    try:
        s3servers.weed_binary()
    except FileNotFoundError as e:  # pragma: no cover - the test extra installs it
        pytest.fail(str(e))
    server = s3servers.start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def seaweedfs_s3(seaweedfs_server) -> "s3servers.S3Endpoint":
    return seaweedfs_server.endpoint


@pytest.fixture
def fault_proxy(moto_s3):
    """A :class:`s3servers.FaultProxy` in front of moto, stopped after the test."""
    proxy = s3servers.FaultProxy(moto_s3)
    yield proxy
    proxy.rules.clear()
    proxy.stop()


@pytest.fixture
def no_aws_env(monkeypatch):
    """No AWS credentials in the environment (Spark's Python workers are
    forked from the driver's): a test that reaches S3 then proves its
    storage options travelled."""
    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture(scope="session")
def spark():
    """The suite's local SparkSession (``tests/spark/spark_helpers.build_session``).

    ``tests/spark/conftest.py`` defines its own ``spark`` fixture for its
    directory; both use ``getOrCreate``, so a run shares one session (Spark
    start-up costs tens of seconds on a loaded machine).
    """
    spark_dir = str(Path(__file__).resolve().parent / "spark")
    if spark_dir not in sys.path:
        sys.path.insert(0, spark_dir)
    from spark_helpers import build_session

    session = build_session()
    yield session
    session.stop()


def _wait_past_latest_commit(table) -> None:
    """Sleep until the wall clock has passed the latest commit's timestamp.

    Quick commits take timestamps a few ms ahead of the clock (SPEC §Commit
    timestamps: strictly increasing), so a ``vacuum(retain=0)`` right after
    them would still count the previous version as current at its cutoff.
    """
    import time

    latest = table.log.commit_info(table.version).timestamp
    while time.time() * 1000 <= latest:
        time.sleep(0.005)


@pytest.fixture
def settle_clock():
    """A function ``settle_clock(table)``: wait until a retain-0 vacuum's
    cutoff is past the table's latest commit (see ``_wait_past_latest_commit``)."""
    return _wait_past_latest_commit
