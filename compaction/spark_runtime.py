"""Can Spark start here? pyspark importable and a Java 17+ for its driver JVM, checked before any JVM starts.

pyspark starts its driver JVM through ``spark-submit``, which runs ``$JAVA_HOME/bin/java`` when JAVA_HOME
is set and the ``java`` on PATH otherwise. Without one (or with one too old for pyspark 4) pyspark fails
with ``[JAVA_GATEWAY_EXITED]`` and pages of launcher output; `require_spark` looks the same way first and
raises `SparkUnavailableError` saying what to install instead. ``java -version`` runs once per Java
executable (cached): a later session start costs a `shutil.which`.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess

from formats.errors import SparkUnavailableError

JAVA_MIN = 17  # pyspark 4 (the spark extra pins pyspark>=4,<5) runs on Java 17 and newer
INSTALL = (
    f"install Java {JAVA_MIN} or newer (e.g. 'apt-get install openjdk-{JAVA_MIN}-jre-headless') "
    f"or set JAVA_HOME to a Java {JAVA_MIN}+ installation"
)
PYSPARK_INSTALL = "pip install 'lsm-sim[spark]'"
_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


def java_executable() -> str:
    """The java that spark-submit would run: ``$JAVA_HOME/bin/java``, else ``java`` on PATH.

    SparkUnavailableError when there is none."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not (os.path.isfile(java) and os.access(java, os.X_OK)):
            raise SparkUnavailableError(f"Spark needs Java, but JAVA_HOME={home} has no bin/java: {INSTALL}")
        return java
    java = shutil.which("java")
    if java is None:
        raise SparkUnavailableError(
            f"Spark needs Java and none was found (no JAVA_HOME, no java on PATH): {INSTALL}"
        )
    return java


def parse_java_version(text: str) -> int | None:
    """The major version in ``java -version`` output (``1.8.0_292`` -> 8, ``17.0.2`` -> 17); None if absent."""
    m = _VERSION.search(text)
    if m is None:
        return None
    major = int(m.group(1))
    if major == 1 and m.group(2) is not None:  # the pre-9 scheme: 1.<major>
        major = int(m.group(2))
    return major


@functools.lru_cache(maxsize=8)
def _java_version(java: str) -> tuple[int | None, str]:
    """(major version or None, first line of its ``-version`` output) of the executable at `java`."""
    try:
        p = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SparkUnavailableError(
            f"Spark needs Java, but {java} -version failed ({e}): {INSTALL}"
        ) from None
    out = (p.stderr or "") + (p.stdout or "")
    first = next((line.strip() for line in out.splitlines() if line.strip()), "")
    if p.returncode != 0:
        raise SparkUnavailableError(
            f"Spark needs Java, but {java} -version exited with status {p.returncode} ({first[:200]}): {INSTALL}"
        )
    return parse_java_version(out), first


def require_spark() -> None:
    """Return if pyspark imports and a Java >= `JAVA_MIN` is there for its JVM; else SparkUnavailableError.

    A Java whose version cannot be read is let through: Spark itself then has the last word."""
    try:
        import pyspark  # noqa: F401 - only whether it imports
    except ImportError as e:
        raise SparkUnavailableError(f"Spark needs pyspark ({e}): {PYSPARK_INSTALL}") from None
    java = java_executable()
    major, first = _java_version(java)
    if major is not None and major < JAVA_MIN:
        raise SparkUnavailableError(
            f"Spark (pyspark 4) needs Java {JAVA_MIN} or newer, but {java} is Java {major} ({first[:120]}): {INSTALL}"
        )


__all__ = ["JAVA_MIN", "java_executable", "parse_java_version", "require_spark"]
