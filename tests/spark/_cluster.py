"""A real Spark standalone cluster and an S3 server that checks credentials, for tests/spark/test_cluster.py.

`StandaloneCluster` starts a master and one worker with ``spark-class`` from pyspark's installation (pip's
pyspark has no ``start-master.sh``), as docs/spark.md's cluster recipe does. The worker, and so every
executor it launches, runs with a scrubbed environment (no AWS variable, no PYTHONPATH, a HOME of its own)
in a working directory of its own: an executor sees neither the driver's environment nor its directory.

`AuthS3` is moto's S3 server in a subprocess with IAM authentication on: every request must be signed
with the secret of an access key its IAM knows (a wrong secret is SignatureDoesNotMatch), and a user's
policy decides what it may do. The tests give the driver and the executors different keys, and deny the
driver's key the PUT of task outputs, so a job succeeds only if its tasks signed with the executors' own
credentials.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

BUCKET = "lsm-cluster"
# what a task writes and nothing else does: the outputs of compaction and bulk-load tasks
TASK_OUTPUTS = f"arn:aws:s3:::{BUCKET}/*-t0*"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(what: str, check: Any, timeout: float, proc: subprocess.Popen | None = None, log: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.1)
    tail = ""
    if log and os.path.exists(log):
        with open(log, errors="replace") as f:
            tail = f.read()[-3000:]
    raise RuntimeError(f"{what} did not happen within {timeout} s{': ' + tail if tail else ''}")


class AuthS3:
    """moto's S3 server with IAM authentication, on a free port, with one bucket and two users:
    ``driver`` (everything but the PUT of task outputs) and ``executor`` (everything)."""

    def __init__(self, root: str) -> None:
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = os.path.join(root, "moto.log")
        env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="10")  # the set-up below, then signed only
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        _wait_for("moto's start", self._up, 60, self.proc, self.log)
        import boto3

        iam = boto3.client("iam", endpoint_url=self.endpoint, region_name="us-east-1",
                           aws_access_key_id="setup", aws_secret_access_key="setup")
        everything = {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}
        no_task_outputs = {"Effect": "Deny", "Action": "s3:PutObject", "Resource": TASK_OUTPUTS}
        self.keys: dict[str, tuple[str, str]] = {}
        for user, statements in (("driver", [everything, no_task_outputs]), ("executor", [everything])):
            iam.create_user(UserName=user)
            iam.put_user_policy(UserName=user, PolicyName="s3",
                                PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}))
            k = iam.create_access_key(UserName=user)["AccessKey"]
            self.keys[user] = (k["AccessKeyId"], k["SecretAccessKey"])
        key, secret = self.keys["executor"]
        s3 = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                          aws_access_key_id=key, aws_secret_access_key=secret)
        s3.create_bucket(Bucket=BUCKET)

    def _up(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), 0.2):
                return True
        except OSError:
            return False

    def env(self, user: str) -> dict[str, str]:
        """The AWS variables that reach this server as `user`."""
        key, secret = self.keys[user]
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true",
                "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}

    def options(self, user: str) -> dict[str, Any]:
        """obstore options that reach this server as `user`."""
        key, secret = self.keys[user]
        return {"endpoint": self.endpoint, "region": "us-east-1", "allow_http": True,
                "access_key_id": key, "secret_access_key": secret}

    def credentials_file(self, path: str, user: str) -> str:
        """Write `user`'s keys as an AWS shared credentials file at `path`, mode 0600; return the path."""
        key, secret = self.keys[user]
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"[default]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n")
        return path

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


class StandaloneCluster:
    """A Spark master and one worker (`cores` cores, `memory` for executors), started with spark-class."""

    def __init__(self, root: str, cores: int = 2, memory: str = "1g") -> None:
        self.root = root
        self.home = spark_home()
        self.spark_class = os.path.join(self.home, "bin", "spark-class")
        self.worker_home = os.path.join(root, "worker-home")  # the worker's HOME and working directory
        self.work_dir = os.path.join(root, "worker-work")  # where it runs executors (app-*/<id>/)
        conf_dir = os.path.join(root, "conf")  # empty: no spark-defaults.conf, no spark-env.sh
        for d in (self.worker_home, self.work_dir, conf_dir):
            os.makedirs(d)
        base = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "SPARK_HOME": self.home,
            "SPARK_CONF_DIR": conf_dir,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_DAEMON_JAVA_OPTS": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        }
        if os.environ.get("JAVA_HOME"):
            base["JAVA_HOME"] = os.environ["JAVA_HOME"]
        self.procs: list[subprocess.Popen] = []
        self.master_log = os.path.join(root, "master.log")
        master_env = dict(base, HOME=root, SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
        self._start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
                     "--webui-port", "0"], master_env, root, self.master_log)
        found = _wait_for("the master's start", lambda: self._grep(r"Starting Spark master at (spark://\S+)"),
                          120, self.procs[0], self.master_log)
        self.url = found.group(1)
        self.worker_env = dict(base, HOME=self.worker_home, SPARK_LOCAL_DIRS=os.path.join(root, "worker-tmp"),
                               TMPDIR=os.path.join(root, "worker-tmp"))
        os.makedirs(self.worker_env["TMPDIR"])
        self.worker_log = os.path.join(root, "worker.log")
        self._start(["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1", "--cores",
                     str(cores), "--memory", memory, "--work-dir", self.work_dir, "--webui-port", "0"],
                    self.worker_env, self.worker_home, self.worker_log)
        _wait_for("the worker's registration", lambda: self._grep(r"Registering worker"), 120, self.procs[1],
                  self.worker_log)

    def _start(self, args: list[str], env: dict[str, str], cwd: str, log: str) -> None:
        with open(log, "w") as out:
            # spark-class execs the JVM: this process is the master or the worker itself
            self.procs.append(subprocess.Popen([self.spark_class, *args], env=env, cwd=cwd, stdout=out,
                                               stderr=subprocess.STDOUT, start_new_session=True))

    def _grep(self, pattern: str) -> re.Match | None:
        with open(self.master_log, errors="replace") as f:
            return re.search(pattern, f.read())

    def app_dirs(self) -> list[str]:
        """The executor directories the worker made (``app-*/<executor id>``)."""
        out = []
        for app in sorted(os.listdir(self.work_dir)):
            d = os.path.join(self.work_dir, app)
            out += [os.path.join(d, e) for e in sorted(os.listdir(d))]
        return out

    def stop(self) -> None:
        for p in reversed(self.procs):  # the worker first: it stops its executors
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


class ClusterSetup:
    """What test_cluster.py needs, started together in the background: the S3 server and the cluster."""

    def __init__(self) -> None:
        self.root = tempfile.mkdtemp(prefix="lsm-spark-cluster-")
        self.s3: AuthS3 | None = None
        self.cluster: StandaloneCluster | None = None
        self.error: BaseException | None = None
        import threading

        self.thread = threading.Thread(target=self._run, name="spark-cluster-start", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.s3 = AuthS3(self.root)
            self.cluster = StandaloneCluster(self.root)
        except BaseException as e:  # noqa: BLE001 - handed to the fixture
            self.error = e

    def get(self) -> ClusterSetup:
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self

    def stop(self) -> None:
        self.thread.join()
        if self.cluster is not None:
            self.cluster.stop()
        if self.s3 is not None:
            self.s3.stop()
        shutil.rmtree(self.root, ignore_errors=True)

