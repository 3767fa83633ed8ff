"""What every ``lsm`` command shares: finding a store, its newest manifest, and starting Spark.

- `db_dir` / `latest_manifest`: check that a path is a database; read its newest manifest version.
- `start_spark`: a SparkSession for a master URL, or `SparkStartError` with one line saying why not.
- `stderr_to`: point file descriptor 2 at a log file meanwhile, so the JVM and the Python workers it
  starts write there and a failing job is one line on the terminal, naming the log.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from formats.errors import LsmError

if TYPE_CHECKING:
    from formats.manifest import Manifest


class SparkStartError(LsmError):
    """Spark could not be started (no pyspark, no Java, a bad master URL)."""


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


def start_spark(master: str) -> Any:
    """A SparkSession for `master`, or SparkStartError with one line saying why not."""
    try:
        from compaction.spark import get_session
    except ImportError as e:  # pragma: no cover - pyspark is a dependency of the spark extra
        raise SparkStartError(f"--engine spark needs pyspark ({e}): pip install 'lsm-sim[spark]'") from None
    try:
        return get_session(master)
    except ImportError as e:
        raise SparkStartError(f"--engine spark needs pyspark ({e}): pip install 'lsm-sim[spark]'") from None
    except Exception as e:  # noqa: BLE001 - Java missing, a bad master URL...: one line, not a traceback
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise SparkStartError(f"cannot start Spark with master {master!r}: {first[:300]}") from None


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
    "SparkStartError",
    "db_dir",
    "latest_manifest",
    "start_spark",
    "stderr_to",
]
