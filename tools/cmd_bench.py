"""``lsm bench ...``: forwards every argument after ``bench`` to `tools.bench.main`."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    # prefix_chars="\0": no argument looks like an option, so all of them (--help too) reach the benchmark.
    p = sub.add_parser(
        "bench",
        help="benchmarks (arguments are passed to tools.bench; 'lsm bench --help' for its options)",
        add_help=False,
        prefix_chars="\0",
    )
    p.add_argument("bench_args", nargs=argparse.REMAINDER, metavar="ARGS")
    p.set_defaults(func=run_bench)


def run_bench(args: argparse.Namespace) -> int:
    try:
        from tools import bench  # imported here: the benchmark pulls in optional dependencies
    except ModuleNotFoundError as e:
        if e.name in ("tools.bench", "tools"):
            raise ValueError("the benchmarks (tools/bench/) are not part of this installation") from None
        raise ValueError(f"lsm bench needs the module {e.name!r}: pip install 'lsm-sim[bench]'") from None
    return bench.main(list(args.bench_args))
