"""An S3 endpoint for ``lsm bench --store s3``: the one the AWS environment names, else a local server.

Without ``AWS_ENDPOINT_URL`` the bench starts moto's S3 server (``pip install 'lsm-sim[bench]'``) in a
child process on 127.0.0.1, so the server's work does not share the benchmark's interpreter (its GIL),
creates the bench bucket on it, and stops it at the end. The figures then measure the engine against an
S3 API on loopback: request count and size matter, network latency does not (docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator

BUCKET = "lsm-bench"
LOCAL_ENV = {"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
             "AWS_ALLOW_HTTP": "true"}


_server_pid: int | None = None  # the local server's process while `endpoint` runs it


def server_cpu_seconds() -> float | None:
    """CPU seconds the local S3 server has used so far (None when the endpoint is not ours)."""
    if _server_pid is None:
        return None
    try:
        with open(f"/proc/{_server_pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def unavailable() -> str | None:
    """Why the bench cannot reach S3 (None when it can)."""
    if os.environ.get("AWS_ENDPOINT_URL") or importlib.util.find_spec("moto") is not None:
        return None
    return "no AWS_ENDPOINT_URL and moto is not installed (pip install 'lsm-sim[bench]')"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def endpoint() -> Iterator[str]:
    """Yield the bucket URL to put databases under (``s3://lsm-bench``), with the environment pointing
    the store at the endpoint for the duration."""
    if os.environ.get("AWS_ENDPOINT_URL"):
        yield f"s3://{os.environ.get('LSM_BENCH_BUCKET', BUCKET)}"
        return
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    old = {k: os.environ.get(k) for k in (*LOCAL_ENV, "AWS_ENDPOINT_URL")}
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(urllib.request.Request(f"{url}/{BUCKET}", method="PUT"), timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the local S3 server (moto) did not start") from None
                time.sleep(0.1)
        os.environ.update(LOCAL_ENV, AWS_ENDPOINT_URL=url)
        global _server_pid
        _server_pid = proc.pid
        yield f"s3://{BUCKET}"
    finally:
        _server_pid = None
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        proc.terminate()
        proc.wait()


def fresh_prefix(bucket_url: str, name: str) -> str:
    """A new, empty database URL under `bucket_url`."""
    return f"{bucket_url}/{name}-{uuid.uuid4().hex[:8]}"
