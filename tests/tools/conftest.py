"""Fixtures of the `lsm` command-line tests (helpers live in `tests.tools._cli`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

import lsm
from tests.tools._cli import T0, build_db, write_golden_sst


@pytest.fixture
def golden_sst(tmp_path: Path) -> Path:
    return write_golden_sst(tmp_path / "golden.sst")


@pytest.fixture(scope="module")
def small_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A database left as a crashed process would leave it: 2 L0 SSTs, 2 unflushed WAL records."""
    path = tmp_path_factory.mktemp("cli") / "db"
    db = build_db(path, lsm.ManualClock(T0))
    yield path  # the handle stays open while the tests run (close() would flush the WAL rows)
    with contextlib.suppress(lsm.LsmError):  # a test may have fenced it (a CLI write took the database)
        db.close()  # then closed: an open handle would keep its threads and files for the whole session
