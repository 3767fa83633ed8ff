"""What `import lsm` gives: the exported errors, and `lsm.inspect` as an attribute loaded on first use."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_fresh(code: str) -> None:
    """Run `code` in a fresh interpreter (nothing imported yet) and assert it succeeds."""
    p = subprocess.run(
        [sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr


def test_inspect_is_an_attribute_loaded_on_first_use() -> None:
    code = (
        "import sys, lsm\n"
        "assert 'lsm.inspect' not in sys.modules, 'import lsm should not load lsm.inspect'\n"
        "f = lsm.inspect.database_dir\n"
        "import lsm.inspect\n"
        "assert f is lsm.inspect.database_dir and 'inspect' not in lsm.__all__\n"
        "try:\n"
        "    lsm.no_such_name\n"
        "except AttributeError as e:\n"
        "    assert 'no_such_name' in str(e)\n"
        "else:\n"
        "    raise AssertionError('no AttributeError')\n"
    )
    run_fresh(code)


def test_spark_errors_are_exported() -> None:
    import lsm
    from compaction.spark import SparkJobError

    assert lsm.SparkJobError is SparkJobError
    assert {"SparkJobError", "SparkUnavailableError"} <= set(lsm.__all__)
    assert issubclass(lsm.SparkJobError, lsm.LsmError) and issubclass(lsm.SparkUnavailableError, lsm.LsmError)


def test_a_point_read_imports_neither_numpy_nor_pyspark(tmp_path) -> None:
    """`import lsm`, opening a database and reading a key load neither numpy nor pyspark: the columnar
    merge, the scan's array path, bulk loads and Spark import them when they first run, so a CLI command
    that only reads a key starts without them (a tenth of a second, and pyspark far more)."""
    code = (
        "import sys, lsm\n"
        f"with lsm.DB.open({str(tmp_path / 'db')!r}) as db:\n"
        "    db.put(b'k', b'v')\n"
        "    assert db.get(b'k') == b'v'\n"
        "heavy = sorted(m for m in ('numpy', 'pyspark') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    run_fresh(code)
