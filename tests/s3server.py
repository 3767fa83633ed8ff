"""A real S3 endpoint for the tests: moto's S3 server on 127.0.0.1, on a free port, in this process.

Nothing mocks the client: the store talks HTTP to the server through obstore exactly as it would to S3.
`S3Server.env` holds the standard AWS variables that point a client (the store, a subprocess running
`lsm`, a Spark executor) at it.

`AuthS3Server` is one that checks credentials as S3 does (moto's IAM authentication: a setting of the
whole server process, so it runs in a process of its own): a request with an unknown access key id is
refused with 403 InvalidAccessKeyId, one signed with the wrong secret with 403 SignatureDoesNotMatch, one
of a user without a policy with 403 AccessDenied.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

BUCKET = "lsm-test"
# ThreadedMotoServer on a free port of 127.0.0.1, its port on stdout, until the parent closes our stdin
_SERVE = """
import logging, sys
from moto.server import ThreadedMotoServer
logging.getLogger("werkzeug").setLevel(logging.ERROR)
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print("port", server.get_host_and_port()[1], flush=True)
sys.stdin.read()
"""


class S3Server:
    """One moto S3 server with one bucket (`BUCKET`)."""

    def __init__(self) -> None:
        # the server runs in a child process of its own: its request handling then takes the other core
        # instead of the GIL of the test that is waiting for it
        self._proc = subprocess.Popen([sys.executable, "-c", _SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True)
        line = self._proc.stdout.readline() if self._proc.stdout else ""
        if not line.startswith("port "):
            self._proc.kill()
            raise RuntimeError("moto's server did not start")
        self.endpoint = f"http://127.0.0.1:{int(line.split()[1])}"
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
        self._proc.terminate()
        self._proc.wait()


class AuthS3Server:
    """moto's S3 server in a child process with IAM authentication on: bucket `BUCKET`, a user allowed
    everything (`key_id`, `secret`) and a user allowed nothing (`denied_key_id`, `denied_secret`)."""

    def __init__(self) -> None:
        import boto3

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{port}"
        self._proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2).read()
                break
            except OSError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("moto's server did not start") from None
                time.sleep(0.1)
        # set up while authentication is still off, then turn it on for every later request
        kw = {"endpoint_url": self.endpoint, "region_name": "us-east-1", "aws_access_key_id": "setup",
              "aws_secret_access_key": "setup"}
        boto3.client("s3", **kw).create_bucket(Bucket=BUCKET)
        iam = boto3.client("iam", **kw)
        keys = {}
        for user in ("allowed", "denied"):
            iam.create_user(UserName=user)
            keys[user] = iam.create_access_key(UserName=user)["AccessKey"]
        iam.put_user_policy(UserName="allowed", PolicyName="all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        self.key_id, self.secret = keys["allowed"]["AccessKeyId"], keys["allowed"]["SecretAccessKey"]
        self.denied_key_id, self.denied_secret = keys["denied"]["AccessKeyId"], keys["denied"]["SecretAccessKey"]
        urllib.request.urlopen(urllib.request.Request(
            f"{self.endpoint}/moto-api/reset-auth", data=b"0", method="POST", headers={"Content-Type": "text/plain"}
        )).read()

    def env(self, key_id: str, secret: str) -> dict[str, str]:
        """The AWS variables that point a client at this server with these credentials."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": key_id,
                "AWS_SECRET_ACCESS_KEY": secret, "AWS_ALLOW_HTTP": "true"}

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait()


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
