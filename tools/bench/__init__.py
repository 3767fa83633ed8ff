"""`lsm bench`: benchmarks of the engine, its formats and its compaction, one module per suite.

    lsm bench [--benchmarks fillseq,fillrandom,...] [--num N] [--compare rocksdict,plyvel] ...   (db)
    lsm bench formats|compression|merge|compact|time|ingest|load|simulate ...
    python -m tools.bench ...                                                       (the same)

The first argument picks a suite from `SUITES`; without one (or when it is an option) the ``db`` suite
runs. Layout of the package:

- `tools.bench.harness`: what every suite shares: `Result` (db_bench's result line and its JSON form),
  `timed_chunks` / `timed_scan` / `timed_call` (wall and CPU time over the same span), the one ``/proc``
  CPU reader (`proc_cpu`, `process_tree_cpu`), `median_ms` / `medians`, `make_values` (db_bench's values).
- `tools.bench.engines`: the stores the db suite compares: lsm, RocksDB (rocksdict), LevelDB (plyvel).
- one module per suite, each with ``main(argv: list[str]) -> int`` (the exit code) and an argparse
  parser whose numeric options go through `tools.render.int_arg` / `tools.render.float_arg`:
  `db` (db_bench workloads), `formats` (row codec, SST write/scan), `compression` (each SST block
  codec's size and speed), `merge` (the merge against its
  Python limit, write amplification), `compact` (local executor vs Spark), `timemaps` (the seq<->time
  maps, suite ``time``).

Adding a suite is one import and one entry below: write a module ``tools/bench/<name>.py`` with
``main(argv) -> int``, then::

    from tools.bench import ingest            # the import
    SUITES = {..., "ingest": ingest.main}     # the entry

Suite modules are imported with the package, so they keep heavy imports (pyspark, rocksdict, plyvel,
the engine) inside the functions that need them. The harness names are re-exported here (`Result`,
`timed_chunks`, `make_values`, ...) so a suite may write ``from tools.bench import make_values``;
they are bound before the suites are imported, so such a suite imports cleanly.
"""

from __future__ import annotations

from collections.abc import Callable

from tools.bench.harness import (  # noqa: F401 - re-exported for suites (see the docstring)
    CHUNK,
    DEFAULT_SEED,
    KEY_SIZE,
    Result,
    Timing,
    make_values,
    median_ms,
    medians,
    print_results,
    process_tree_cpu,
    progress_bar,
    ratio_line,
    settle_gc,
    timed_call,
    timed_chunks,
    timed_scan,
)

# isort: split
# the suites, after the re-exports above (a suite may import them from tools.bench)
from tools.bench import compact, compression, db, formats, ingest, load, merge, simulate, timemaps

Suite = Callable[[list[str]], int]

SUITES: dict[str, Suite] = {
    "db": db.main,
    "formats": formats.main,
    "compression": compression.main,
    "merge": merge.main,
    "compact": compact.main,
    "time": timemaps.main,
    "ingest": ingest.main,
    "load": load.main,
    "simulate": simulate.main,
}


def main(argv: list[str]) -> int:
    """``lsm bench [SUITE] ARGS``: SUITE is one of `SUITES` (default ``db``); returns the exit code.

    A first word that is neither a suite nor an option is a usage error listing the suites (exit 2), not
    an argument the db suite does not know."""
    if argv and argv[0] in SUITES:
        return SUITES[argv[0]](argv[1:])
    if argv and not argv[0].startswith("-"):
        db.parser().error(f"unknown suite {argv[0]!r}; suites: {', '.join(SUITES)} (lsm bench SUITE --help)")
    return SUITES["db"](argv)
