"""Helpers of the `lsm` command-line tests: the real entry point in a subprocess, goldens, small inputs.

Every CLI test runs the installed console script (``.venv/bin/lsm``, next to the interpreter running the
tests), falling back to ``python -m tools.cli``; `run_lsm` also asserts that no traceback ever reaches
stderr, whatever the exit status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import lsm
from formats.sst import write_sst
from lsm.testing import LSM_CLOCK_START

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
_SCRIPT = Path(sys.executable).with_name("lsm")
LSM_CMD = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "tools.cli"]
T0 = LSM_CLOCK_START


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


def lsm_env(env: dict[str, str | None] | None = None) -> dict[str, str]:
    """The environment of an `lsm` subprocess: this process's, without LSM_TRACEBACK, with PYTHONPATH at
    the repository, then `env` over it (a None value drops that variable)."""
    full = {k: v for k, v in os.environ.items() if k != "LSM_TRACEBACK"}
    full["PYTHONPATH"] = str(ROOT)
    for k, v in (env or {}).items():
        if v is None:
            full.pop(k, None)
        else:
            full[k] = v
    return full


def run_lsm(*args: str, cwd: str | os.PathLike | None = None, env: dict[str, str | None] | None = None) -> Result:
    """`lsm ARGS` in a subprocess; `env` overrides variables of this process's environment (None drops one)."""
    p = subprocess.run(
        [*LSM_CMD, *map(str, args)], cwd=cwd or ROOT, env=lsm_env(env), capture_output=True, text=True, timeout=60
    )
    assert "Traceback" not in p.stderr, p.stderr
    return Result(p.returncode, p.stdout, p.stderr)


def run_lsm_each(runs: list[tuple[str, ...]], env: dict[str, str | None] | None = None) -> list[Result]:
    """`run_lsm(*args, env=env)` for each of `runs`, two at a time (the results in the order of `runs`).
    Only for runs that do not depend on one another: each is a process of its own, and on two cores two
    of them take about the time of one."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda args: run_lsm(*args, env=env), runs))


def one_line_error(r: Result, code: int) -> str:
    """Assert the run failed with `code` and exactly one ``lsm: error:`` line on stderr; return it."""
    assert r.code == code, (r.code, r.out, r.err)
    lines = r.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lsm: error: "), r.err
    return lines[0]


# what `lsm simulate` says on stderr when it cannot import matplotlib (tools/simulate/plots.py)
NO_PLOTS = "lsm: note: no plots: plots need matplotlib: pip install 'lsm-sim[sim]'"


def without_matplotlib(tmp_path: Path) -> dict[str, str]:
    """An environment for `run_lsm` in which `import matplotlib` fails, so `lsm simulate` draws no plots
    (and says `NO_PLOTS`): the test of that, and tests of what is not the plots, which save the ~2 s of
    drawing them per run."""
    hide = tmp_path / "hide"
    (hide / "matplotlib").mkdir(parents=True, exist_ok=True)
    (hide / "matplotlib" / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    return {"PYTHONPATH": os.pathsep.join([str(hide), str(ROOT)])}


def check_golden(name: str, text: str) -> None:
    """Compare `text` with tests/tools/golden/<name>; LSM_UPDATE_GOLDEN=1 rewrites the file instead."""
    path = GOLDEN / name
    if os.environ.get("LSM_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"golden file {path} is missing: run with LSM_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(), f"output differs from {path} (LSM_UPDATE_GOLDEN=1 to accept)"


# -- a small fixed SST -----------------------------------------------------------------------------------
GOLDEN_ROWS = [
    # (key, seq, ts, expire_ts, value): key ascending, seq descending within a key
    (b"apple", 7, T0 + 7, None, b"green"),
    (b"apple", 3, T0 + 3, None, b"red"),
    (b"banana", 5, T0 + 5, T0 + 60_005, b"yellow"),
    (b"cherry", 6, T0 + 6, None, None),
    (b"cherry", 2, T0 + 2, None, b"dark red"),
    (b"date", 4, T0 + 4, None, b"tab\there"),
    (b"elder", 8, T0 + 8, T0 + 1_000, b"flower"),
    (b"fig", 1, T0 + 1, None, b"purple"),
    (b"\xff\x00bin", 9, T0 + 9, None, b"\x00\x01\x02"),
]


def write_golden_sst(path: Path) -> Path:
    """The fixed SST of the golden tests: several small data blocks, TTL rows, a tombstone, binary bytes."""
    write_sst(path, GOLDEN_ROWS, creation_timestamp=T0 + 10, block_bytes=64, sync=False)
    return path


# -- a small database built through the engine --------------------------------------------------------
def build_db(path: Path, clock: lsm.ManualClock) -> lsm.DB:
    """Two L0 SSTs and unflushed WAL rows; returns the still-open writer handle.

    L0 #1 (older): k1=v1, k2=v2, k3=v3 (ttl 10 s), k4=v4.   L0 #2: k2 overwritten, k4 deleted.
    WAL: k5=v5, and k1 overwritten.
    """
    # no WAL timer: on an object store the unflushed rows reach a WAL object only at a sync write or a
    # flush, not whenever the 100 ms group commit happens to fire (two objects instead of one, by timing)
    db = lsm.DB.open(path, lsm.DbOptions(clock=clock, background_compaction=False, wal_flush_interval_ms=None))
    db.put(b"k1", b"v1")
    db.put(b"k2", b"v2")
    db.put(b"k3", b"v3", ttl=10_000)
    db.put(b"k4", b"v4")
    db.flush()
    clock.advance(1_000)
    db.put(b"k2", b"v2-new")
    db.delete(b"k4")
    db.flush()
    clock.advance(1_000)
    db.put(b"k5", b"v5")
    db.put(b"k1", b"v1-new")
    return db


# -- a database with sorted runs, written file by file -----------------------------------------------------
def _name(n: int) -> str:
    return f"{n:020d}-0000.sst"


RUNS_DB_SSTS = {
    # name: rows (key, seq, ts, expire_ts, value)
    _name(1): [  # run 1, the oldest
        (b"a", 1, T0 + 1, None, b"a1"),
        (b"b", 2, T0 + 2, None, b"b1"),
        (b"c", 3, T0 + 3, T0 + 100, b"c1"),
        (b"z", 4, T0 + 4, None, b"z1"),
    ],
    _name(2): [(b"a", 5, T0 + 5, None, b"a2"), (b"c", 6, T0 + 6, None, None)],  # run 2, first SST
    _name(3): [  # run 2, second SST
        (b"d", 11, T0 + 11, T0 + 500, b"d1"),
        (b"e", 12, T0 + 12, None, b"e1"),
        (b"f", 13, T0 + 13, T0 + 500, b"f1"),
    ],
    _name(4): [(b"b", 20, T0 + 20, None, b"b2"), (b"d", 21, T0 + 21, None, b"d2")],  # L0
}


def build_runs_db(path: Path) -> dict:
    """A database written without the engine: L0 = [sst 4], runs = [run 2: sst 2, 3; run 1: sst 1], and
    a WAL record (seq 22) deleting z. Returns {name: SstEntry} for tests that write other manifests."""
    from formats.manifest import Manifest, SortedRun, SstEntry
    from formats.wal import encode_record
    from lsm.manifest import ManifestStore

    for sub in ("manifest", "wal", "sst"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    entries = {}
    for name, rows in RUNS_DB_SSTS.items():
        info = write_sst(path / "sst" / name, rows, creation_timestamp=T0 + 30, sync=False)
        entries[name] = SstEntry(name, info)
    (path / "wal" / f"{1:020d}.wal").write_bytes(encode_record(22, T0 + 40, [(b"z", None, None)]))
    m = Manifest(
        next_sst_id=5,
        next_run_id=3,
        last_seq=21,
        wal_replay_from=1,
        clock_watermark=T0 + 30,
        l0=(entries[_name(4)],),
        runs=(SortedRun(2, (entries[_name(2)], entries[_name(3)])), SortedRun(1, (entries[_name(1)],))),
    )
    assert ManifestStore(str(path)).try_create(1, m)
    return entries


def write_manifest(path: Path, **changes) -> int:
    """Publish the next manifest version of `path` with `changes` applied to the newest; return its id."""
    from lsm.manifest import ManifestStore

    store = ManifestStore(str(path))
    mid, m = store.latest()
    assert store.try_create(mid + 1, m.replace(**changes))
    return mid + 1
