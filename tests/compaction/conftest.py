import os
import shutil

import pytest

from tests.compaction._util import fast_tmp


@pytest.fixture
def db_dir():
    """A database path in a fresh directory (in /dev/shm when possible), removed afterwards."""
    d = fast_tmp("lsm-compaction-")
    try:
        yield os.path.join(d, "db")
    finally:
        shutil.rmtree(d, ignore_errors=True)
