"""A real S3 endpoint for the tests: moto's S3 server on 127.0.0.1, on a free port, in this process.

Nothing mocks the client: the store talks HTTP to the server through obstore exactly as it would to S3.
`S3Server.env` holds the standard AWS variables that point a client (the store, a subprocess running
`lsm`, a Spark executor) at it.
"""

from __future__ import annotations

import logging
import os
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

BUCKET = "lsm-test"


class S3Server:
    """One moto S3 server with one bucket (`BUCKET`)."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/{BUCKET}", method="PUT")).read()
        self.env = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_ALLOW_HTTP": "true",
        }

    def options(self, endpoint: str | None = None) -> dict[str, object]:
        """obstore config for `DbOptions.object_store_options` (another endpoint: a proxy in front)."""
        return {
            "endpoint": endpoint or self.endpoint,
            "region": "us-east-1",
            "access_key_id": "testing",
            "secret_access_key": "testing",
            "allow_http": True,
        }

    def new_url(self, name: str = "db") -> str:
        """A fresh, empty prefix in the bucket: ``s3://lsm-test/<unique>/<name>``."""
        return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}/{name}"

    def stop(self) -> None:
        self._server.stop()


@contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """Set `env` in os.environ for the block (the store reads the standard AWS variables)."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
