"""Can Spark start here? pyspark importable, a Java 17+ for its driver JVM, and a reachable master, checked
before any JVM starts.

pyspark starts its driver JVM through ``spark-submit``, which runs ``$JAVA_HOME/bin/java`` when JAVA_HOME
is set and the ``java`` on PATH otherwise. Without one (or with one too old for pyspark 4) pyspark fails
with ``[JAVA_GATEWAY_EXITED]`` and pages of launcher output; `require_spark` looks the same way first and
raises `SparkUnavailableError` saying what to install instead. ``java -version`` runs once per Java
executable (cached): a later session start costs a `shutil.which`.

A standalone master (``spark://host:port``, or ``spark://h1:p1,h2:p2`` for standby masters) that cannot be
reached makes Spark retry its registration three times 20 s apart and then fail with a Py4J error whose
cause is only in the JVM's log. `check_master` opens a TCP connection to each master first (resolving the
host and connecting within `MASTER_TIMEOUT` seconds) and raises `SparkMasterUnreachableError` naming the
URL and why: an unknown host, connection refused, or no answer in time. A port that accepts connections
but is not a Spark master still meets Spark's own minute of retries.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import socket
import subprocess
import threading

from formats.errors import SparkMasterUnreachableError, SparkUnavailableError

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


MASTER_TIMEOUT = 5.0  # seconds to resolve a master's host and connect to it (each master in parallel)
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):(\d{1,5})$")


def master_addresses(master: str) -> list[tuple[str, int]]:
    """The (host, port) of each master of a standalone URL ``spark://h1:p1[,h2:p2...]``; [] for any other
    master (``local[...]``, ``yarn``, ``k8s://...``: nothing to probe). SparkMasterUnreachableError when a
    ``spark://`` URL is malformed."""
    if not master.startswith("spark://"):
        return []
    out = []
    for part in master[len("spark://"):].split(","):
        m = _HOST_PORT.match(part.strip())
        if m is None or not 0 < int(m.group(2)) < 65536:
            raise SparkMasterUnreachableError(
                f"invalid Spark master URL {master!r}: use spark://host:port (or spark://h1:p1,h2:p2)"
            )
        out.append((m.group(1).strip("[]"), int(m.group(2))))
    return out


def _probe(host: str, port: int, timeout: float) -> str | None:
    """None if a TCP connection to host:port opens within `timeout` seconds, else why not (a short phrase)."""
    found: list = []

    def resolve() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except (socket.gaierror, UnicodeError, OSError) as e:
            found.append(e)

    # getaddrinfo has no timeout of its own (a resolver that does not answer takes its own retries)
    t = threading.Thread(target=resolve, name="lsm-spark-master-resolve", daemon=True)
    t.start()
    t.join(timeout)
    if not found:
        return f"unknown host {host!r} (no answer from the name resolver within {timeout:g} s)"
    if isinstance(found[0], BaseException):
        return f"unknown host {host!r} ({found[0]})"
    why = "no address"
    for family, kind, proto, _name, addr in found[0]:
        with socket.socket(family, kind, proto) as sock:
            sock.settimeout(timeout)
            try:
                sock.connect(addr)
                return None
            except ConnectionRefusedError:
                why = f"connection refused by {addr[0]} port {port} (no Spark master listens there)"
            except TimeoutError:
                why = f"timeout: {addr[0]} port {port} did not answer within {timeout:g} s"
            except OSError as e:
                why = f"{e.strerror or e} ({addr[0]} port {port})"
    return why


def check_master(master: str, timeout: float = MASTER_TIMEOUT) -> None:
    """Return if `master` is not a standalone URL or at least one of its masters accepts a TCP connection;
    else SparkMasterUnreachableError naming the URL and the cause (each master probed in parallel, so this
    takes at most about `timeout` seconds)."""
    addresses = master_addresses(master)
    if not addresses:
        return
    results: dict[tuple[str, int], str | None] = {}

    def run(hp: tuple[str, int]) -> None:
        results[hp] = _probe(hp[0], hp[1], timeout)

    threads = [threading.Thread(target=run, args=(hp,), daemon=True) for hp in addresses]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * timeout + 1)
    if any(hp in results and results[hp] is None for hp in addresses):
        return
    causes = "; ".join(f"{h}:{p}: {results.get((h, p)) or 'no answer'}" for h, p in addresses)
    if len(addresses) == 1:
        causes = results.get(addresses[0]) or "no answer"
    raise SparkMasterUnreachableError(f"cannot reach the Spark master {master}: {causes}")


__all__ = [
    "JAVA_MIN",
    "MASTER_TIMEOUT",
    "check_master",
    "java_executable",
    "master_addresses",
    "parse_java_version",
    "require_spark",
]
