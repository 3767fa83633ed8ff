"""What every ``lsm`` command shares: finding a store, its newest manifest, and starting Spark.

- `db_dir` / `latest_manifest`: check that a path is a database; read its newest manifest version.
- `start_spark`: a SparkSession for a master URL, or `SparkStartError` with one line saying why not
  (`lsm.SparkUnavailableError` when pyspark or Java 17+ is missing: nothing was started).
- `spark_session_for`: what every command that starts Spark runs its Spark work in: the session, its
  JVM's output in one log file (named in the error when something fails, removed after success) and a
  progress line on a terminal.
- `stderr_to`: point file descriptor 2 at a log file meanwhile.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
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
    "SparkCompactionError",
    "SparkRun",
    "SparkStartError",
    "db_dir",
    "latest_manifest",
    "spark_session_for",
    "start_spark",
    "stderr_to",
]
