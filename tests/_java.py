"""Environments in which Spark cannot find a usable Java, for the SparkUnavailableError tests.

`env_without_java` strips every PATH directory holding a ``java`` and unsets JAVA_HOME, and with
`fake_version` puts first on PATH a ``java`` script that answers ``-version`` like that release would
(``openjdk version "11.0.2"`` on stderr). Nothing here starts a JVM.
"""

from __future__ import annotations

import os
from pathlib import Path


def path_without_java() -> str:
    """This process's PATH without the directories that hold an executable ``java``."""
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(d for d in dirs if d and not os.access(os.path.join(d, "java"), os.X_OK))


def env_without_java(tmp: Path, fake_version: str | None = None) -> dict[str, str | None]:
    """Overrides for a subprocess environment (None: unset): no Java, or only a fake one of `fake_version`.

    TMPDIR is a fresh directory under `tmp`, so a test can check that no Spark log was left behind."""
    path = path_without_java()
    if fake_version is not None:
        bin_dir = tmp / "fake-java-bin"
        bin_dir.mkdir()
        java = bin_dir / "java"
        java.write_text(f"#!/bin/sh\necho 'openjdk version \"{fake_version}\" 2019-01-15' >&2\n")
        java.chmod(0o755)
        path = os.pathsep.join([str(bin_dir), path])
    tmpdir = tmp / "tmpdir"
    tmpdir.mkdir()
    return {"PATH": path, "JAVA_HOME": None, "TMPDIR": str(tmpdir)}
