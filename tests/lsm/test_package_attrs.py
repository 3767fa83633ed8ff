"""What `import lsm` gives: the exported errors, and `lsm.inspect` as an attribute loaded on first use."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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
    p = subprocess.run(
        [sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr


def test_spark_errors_are_exported() -> None:
    import lsm
    from compaction.spark import SparkJobError

    assert lsm.SparkJobError is SparkJobError
    assert {"SparkJobError", "SparkUnavailableError"} <= set(lsm.__all__)
    assert issubclass(lsm.SparkJobError, lsm.LsmError) and issubclass(lsm.SparkUnavailableError, lsm.LsmError)
