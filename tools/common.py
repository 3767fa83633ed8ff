"""What every ``lsm`` command shares: finding a store, its newest manifest, and starting Spark.

- `db_dir` / `latest_manifest`: check that a path is a database; read its newest manifest version.
- `start_spark`: a SparkSession for a master URL, or `SparkStartError` with one line saying why not
  (`lsm.SparkUnavailableError` when pyspark or Java 17+ is missing: nothing was started).
- `spark_session_for`: what every command that starts Spark runs its Spark work in: the session, its
  JVM's output in one log file (named in the error when something fails, removed after success) and a
  progress line on a terminal.
- `add_conf_arg` / `conf_pair`: the repeatable ``--conf KEY=VALUE`` of every command that starts Spark,
  handed to the SparkSession builder; a key that names a secret is refused (see `conf_pair`).
- `stderr_to`: point file descriptor 2 at a log file meanwhile.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from formats.errors import LsmError, SparkUnavailableError

if TYPE_CHECKING:
    from formats.manifest import Manifest


class SparkStartError(LsmError):
    """Spark could not be started (a bad master URL, a JVM that exited); see also SparkUnavailableError."""


class SparkCompactionError(LsmError):
    """A Spark job of an ``lsm`` command failed; the message names the Spark log."""


def db_dir(path: str) -> str:
    """Check that `path` is an lsm-sim database directory; return it (`lsm.inspect.database_dir`)."""
    from lsm.inspect import database_dir

    return database_dir(path)


def latest_manifest(path: str) -> tuple[int, Manifest]:
    """(id, manifest) of the newest version of the database at `path` (`lsm.inspect.latest_manifest`)."""
    from lsm.inspect import latest_manifest as latest

    return latest(path)


def start_spark(master: str, *, app: str | None = None, conf: Sequence[tuple[str, str]] = ()) -> Any:
    """A SparkSession for `master`, or SparkStartError with one line saying why not.

    Without `app` and `conf` it is the session `compaction.spark.get_session` keeps for `master`; with
    them a session built by `compaction.spark.session_builder` with those settings. SparkUnavailableError
    (no pyspark, no Java 17+) passes through unchanged: it says what to install."""
    from compaction.spark import get_session, session_builder

    try:
        if app is None and not conf:
            return get_session(master)
        b = session_builder(master, app=app or "lsm")
        for k, v in conf:
            b = b.config(k, v)
        session = b.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        return session
    except SparkUnavailableError:
        raise
    except Exception as e:  # noqa: BLE001 - a bad master URL, a JVM that died...: one line, not a traceback
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise SparkStartError(f"cannot start Spark with master {master!r}: {first[:300]}") from None


# a setting whose name says it holds a secret (Spark's own spark.redaction.regex, and AWS's names), unless it
# names a file or a path that holds one (spark.authenticate.secret.file, AWS_SHARED_CREDENTIALS_FILE)
_SECRET_NAME = re.compile(r"(?i)secret|password|passwd|token|access[._]?key")
_FILE_NAME = re.compile(r"(?i)([._]file|[._]path|[._]dir)$")


def conf_pair(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` of a ``--conf`` option as (key, value); argparse.ArgumentTypeError unless KEY is a
    Spark setting (``spark.``...) or when its name says it holds a secret: the value of every ``--conf``
    is on this command's command line and on that of the JVM it starts, which every user of the machine
    can read (``ps``). Credentials reach the executors by the channels of docs/spark.md instead."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text[:80]!r} is not KEY=VALUE")
    if not key.startswith("spark."):
        raise argparse.ArgumentTypeError(f"{key!r} is not a Spark setting (they start with 'spark.')")
    if _SECRET_NAME.search(key) and not _FILE_NAME.search(key):
        raise argparse.ArgumentTypeError(
            f"{key} names a secret, and a --conf value is on the command line of this process and of the "
            "JVM, where every user of the machine can read it (ps): give the executors credentials "
            "through their own environment or a credentials file (docs/spark.md, 'Credentials')"
        )
    return key, value


def add_conf_arg(p: argparse.ArgumentParser) -> None:
    """The repeatable ``--conf KEY=VALUE`` (Spark settings for the session the command starts)."""
    p.add_argument(
        "--conf",
        action="append",
        type=conf_pair,
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the session this command starts, as spark-submit's --conf (repeatable; "
        "e.g. spark.executor.memory=4g, spark.executorEnv.AWS_SHARED_CREDENTIALS_FILE=/etc/lsm/aws); never a "
        "secret: it would be on the command line",
    )


def check_conf_engine(conf: Sequence[tuple[str, str]], engine: str | None) -> None:
    """ValueError when ``--conf`` is given to a command that will start no Spark session."""
    if conf and engine != "spark":
        raise ValueError("--conf applies to --engine spark only (it configures the Spark session)")


@dataclasses.dataclass
class SparkRun:
    """What `spark_session_for` yields: the session, the JVM's log file (None for a session the caller
    gave) and the seconds it took to start (0.0 when given)."""

    session: Any
    log: str | None
    startup_seconds: float


@contextlib.contextmanager
def spark_session_for(
    master: str,
    command: str,
    *,
    session: Any = None,
    app: str | None = None,
    conf: Sequence[tuple[str, str]] = (),
    progress: bool = False,
) -> Iterator[SparkRun]:
    """``with spark_session_for(master, "compact") as run:`` the Spark work of one ``lsm`` command.

    Starts a session for `master` (`start_spark`, with `app` and `conf`) with file descriptor 2 pointed at
    a new log file ``lsm-<command>-spark-*.log`` in the temp directory: the JVM inherits it, so its output,
    and that of the Python workers it starts and relays, goes there for the session's whole life while
    this process's own stderr (progress bars, errors) stays on the terminal. An LsmError in the block
    (a failed job) becomes SparkCompactionError naming the log; a failed start SparkStartError naming it;
    SparkUnavailableError passes unchanged (no JVM started, no log kept). The session is stopped at the
    end and the log removed when the block succeeded. With `progress` a progress line of the running
    stages is drawn while the block runs, if stderr is a terminal (`tools.spark_progress`).

    With `session` (a caller's session, e.g. in tests) nothing is started, logged or stopped."""
    from tools.spark_progress import SparkProgress

    if session is not None:
        with SparkProgress(session.sparkContext, enabled=None if progress else False):
            yield SparkRun(session, None, 0.0)
        return
    fd, log = tempfile.mkstemp(prefix=f"lsm-{command}-spark-", suffix=".log")
    t0 = time.perf_counter()
    try:
        with stderr_to(fd):
            session = start_spark(master, app=app, conf=conf)
    except SparkUnavailableError:
        os.unlink(log)  # raised before a JVM was started: nothing was logged
        raise
    except SparkStartError as e:
        raise SparkStartError(f"{e} (Spark log: {log})") from None
    finally:
        os.close(fd)
    run = SparkRun(session, log, time.perf_counter() - t0)
    try:
        with SparkProgress(session.sparkContext, enabled=None if progress else False):
            yield run
    except LsmError as e:
        raise SparkCompactionError(f"{e} (Spark log: {log})") from e
    finally:
        session.stop()
    os.unlink(log)


@contextlib.contextmanager
def stderr_to(fd: int) -> Iterator[None]:
    """Point file descriptor 2 at `fd` meanwhile: processes started meanwhile keep writing there."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(fd, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


__all__ = [
    "add_conf_arg",
    "check_conf_engine",
    "conf_pair",
    "SparkCompactionError",
    "SparkRun",
    "SparkStartError",
    "db_dir",
    "latest_manifest",
    "spark_session_for",
    "start_spark",
    "stderr_to",
]
