"""How a Spark task reaches the object stores of its job, with no secret in the task.

A Spark task is a pickled closure: Spark sends it over its RPC connections to every executor (in plain
text unless ``spark.network.crypto.enabled``), and pyspark writes a large one to the block manager's
disk as a broadcast. So the driver ships, for each object store a job touches (`executor_stores`), its
root URL and the driver's settings for it (endpoint, region, ``allow_http``, retry and client settings)
and never a credential: `ExecutorStore` holds no secret. The executor registers the store with those
settings before its task touches a URL (`on_executor`) and takes the credentials from one of two places:

* a ``local[...]`` master (`local_master`): the executors are processes of this machine that the driver's
  JVM started. `handed_off` writes the driver's credentials for the store into a file only the driver's
  user can read (mode 0600, in a directory of mode 0700 of its own), ships the file's path, and removes
  both when the job ends: the executors read it, the task never holds the secret.
* any other master: the executor's own credential chain (`storage.objstore_config.s3_config`): the AWS variables
  of its environment, else the AWS shared credentials file (``AWS_SHARED_CREDENTIALS_FILE`` or
  ``~/.aws/credentials``), else the instance's role. docs/spark.md ("Credentials") says how a cluster
  node gets them without a secret on a command line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

import storage
from formats.errors import LsmError, SparkStoreError

# obstore's credential keys (and their aws_ aliases): what never travels in a task
CREDENTIAL_KEYS = frozenset(
    {
        "access_key_id",
        "secret_access_key",
        "session_token",
        "token",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "aws_token",
    }
)
# any other setting whose name says it holds a secret (an SSE-C key, a password, a token) stays home too
_SECRET_NAME = re.compile(r"(?i)secret|password|token|customer_key")


def is_credential(key: str) -> bool:
    """Whether the object-store setting `key` holds a credential or a secret (never shipped in a task)."""
    return key in CREDENTIAL_KEYS or bool(_SECRET_NAME.search(key))


@dataclasses.dataclass(frozen=True)
class ExecutorStore:
    """One object store as a task receives it: its root URL, the driver's settings for it without any
    credential, and (local masters only) the path of the file holding the driver's credentials."""

    root: str
    options: dict[str, Any]
    handoff: str | None = None


class ExecutorCredentialsError(LsmError):
    """A task could not read the credentials the driver handed it (its file is gone: the job ended)."""


def _settings(st: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(settings without credentials, credentials) the driver uses for object store `st`: its options
    with the environment and shared-file defaults filled in (`storage.objstore_config.s3_config`)."""
    from storage.objstore import CLIENT_KEYS, RETRY_KEYS
    from storage.objstore_config import s3_config

    options = dict(st.options)
    if not st.root.startswith(("s3://", "s3a://")):
        full = options
    else:
        full = dict(s3_config(options, RETRY_KEYS + CLIENT_KEYS))
        full.update({k: v for k, v in options.items() if k in RETRY_KEYS or k in CLIENT_KEYS})
    public = {k: v for k, v in full.items() if not is_credential(k)}
    secret = {k: v for k, v in full.items() if is_credential(k)}
    return public, secret


def executor_stores(paths: Sequence[str]) -> list[ExecutorStore]:
    """The object stores holding `paths`, as tasks receive them (no credential; no hand-off yet: see
    `handed_off`). Empty for local paths. SparkStoreError if a path is in a store other processes cannot
    see (``memory://``)."""
    found: dict[str, Any] = {}
    for p in paths:
        st = storage.storage_for(p)  # registers the bucket of a URL no database registered
        if not st.shared:
            raise SparkStoreError(
                f"{p}: a memory:// store (a database, a log) lives in this process only and Spark's executors are other "
                "processes: run this job with the local engine, or keep the database on an object store "
                "(s3://...) or a directory every executor mounts"
            )
        if st.root is not None:  # a store reached by URL: the executor registers it
            found[st.root] = st
    return [ExecutorStore(root, _settings(st)[0]) for root, st in sorted(found.items())]


def local_master(master: str) -> bool:
    """Whether the executors of `master` run on the driver's machine (``local``, ``local[N]``,
    ``local[N,F]``, ``local-cluster[...]``)."""
    return master.startswith("local")


@contextlib.contextmanager
def handed_off(stores: list[ExecutorStore], master: str) -> Iterator[list[ExecutorStore]]:
    """``with handed_off(stores, sc.master) as shipped:`` the stores to ship for one job. For a local master
    each store whose driver settings hold credentials gets a hand-off file (mode 0600, in a new directory
    of mode 0700) removed when the block ends; for any other master the stores as they are."""
    if not stores or not local_master(master):
        yield list(stores)
        return
    directory = tempfile.mkdtemp(prefix="lsm-spark-credentials-")  # mode 0700
    try:
        shipped = []
        for i, s in enumerate(stores):
            secret = _settings(storage.storage_for(s.root))[1]
            if not secret:
                shipped.append(s)
                continue
            path = os.path.join(directory, f"store-{i}.json")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(secret, f)
            shipped.append(dataclasses.replace(s, handoff=path))
        yield shipped
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def on_executor(stores: Sequence[ExecutorStore]) -> None:
    """Executor side, before a task touches a URL: register the job's object stores with the driver's
    settings and the credentials of the hand-off file or of this process's own chain (module docstring;
    a reused Python worker keeps them, `storage.install` replaces one whose settings changed)."""
    entries = []
    for s in stores:
        options = dict(s.options)
        if s.handoff is not None:
            try:
                with open(s.handoff) as f:
                    options.update(json.load(f))
            except (OSError, ValueError) as e:
                raise ExecutorCredentialsError(
                    f"{s.root}: the credentials the driver handed this task are gone ({type(e).__name__}): "
                    "its job has ended"
                ) from None
        entries.append((s.root, options))
    if entries:
        storage.install(entries)


__all__ = [
    "CREDENTIAL_KEYS",
    "ExecutorCredentialsError",
    "ExecutorStore",
    "executor_stores",
    "handed_off",
    "is_credential",
    "local_master",
    "on_executor",
]
