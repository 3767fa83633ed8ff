"""``lsm simulate SPEC --out DIR``: replay a workload spec against the engine, policy by policy.

The spec (TOML, docs/simulate.md) is checked in full before any work: a bad field is one line naming it
and exit status 2. While running, progress bars on stderr (when it is a terminal and tqdm is installed)
show the simulations done out of all of them and, for each running one (several with ``--jobs N``),
simulated days and engine operations per wall second. Then the summary table (or ``--json``, the
summary.json object) on stdout; the files are in DIR. Without matplotlib one line on stderr says how to
get the plots. ``--engine spark`` runs each simulation of the grid as one Spark task (the JVM's output
goes to a log file, `tools.common.spark_session_for`; a progress line shows the tasks done).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from typing import Any

from tools import render
from tools.common import add_conf_arg, check_conf_engine, spark_session_for
from tools.simulate.output import TABLE_WIDTH

DAY_MS = 86_400_000


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``lsm simulate`` to the command tree."""
    p = sub.add_parser(
        "simulate",
        help="replay a TTL workload on a simulated clock, compaction policies side by side",
        description="Run the workload of SPEC (a TOML spec: phases in simulated time, key and value "
        "distributions, op and TTL mixes, a seed) on the real engine once per policy (named DbOptions "
        "overrides) and per combination of its [sweep] values, on a simulated clock in a temporary "
        "directory. Writes DIR/summary.json, DIR/timeseries.csv and, with matplotlib, PNG plots of disk "
        "bytes by class, space and write amplification and the purge-lag distribution. Same spec, same "
        "results. Docs: docs/simulate.md",
    )
    p.add_argument("spec", metavar="SPEC", help="the spec file (TOML)")
    p.add_argument("--out", metavar="DIR", required=True, help="output directory (created if needed)")
    p.add_argument(
        "--engine",
        choices=("local", "spark"),
        default="local",
        help="local: the simulations one after another in this process (default); spark: one Spark task each",
    )
    p.add_argument("--master", metavar="URL", help="Spark master for --engine spark (default local[*])")
    add_conf_arg(p)
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="with the local engine, run N simulations at a time in worker processes (default 1; the "
        "results are the same)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--wide",
        action="store_true",
        help=f"print every column of the table (by default, columns are left out to fit {TABLE_WIDTH})",
    )
    render.add_output_args(p, bytes_args=False)
    p.set_defaults(func=cmd_simulate)


class _Bars:
    """A bar of simulations done / total, and one bar per running simulation: simulated days done,
    engine operations per wall second (with --jobs N, N of them at once)."""

    def __init__(self, enabled: bool) -> None:
        self.tqdm = None
        self.overall: Any = None
        self.plots: Any = None
        if enabled and sys.stderr.isatty():
            try:
                from tqdm import tqdm

                self.tqdm = tqdm
            except ImportError:
                pass

    def plot(self, done: int, total: int) -> None:
        """`tools.simulate.run` draws the plots: a bar of plots written, cleared once all are."""
        if self.tqdm is None:
            return
        if self.plots is None:
            self.plots = self.tqdm(total=total, desc="plots", unit="plot", file=sys.stderr, leave=False)
        self.plots.update(done - self.plots.n)
        if done >= total:
            self.plots.close()

    def begin(self, n: int) -> None:
        """`tools.simulate.run` says how many simulations there are."""
        if self.tqdm is not None and n > 1:
            self.overall = self.tqdm(total=n, desc="simulations", unit="sim", file=sys.stderr, leave=False)

    def __call__(self, cell: Any) -> Any:
        if self.tqdm is None:
            return None
        from tools.simulate import parse_spec

        total_ms = parse_spec(cell.raw).duration_ms
        bar = self.tqdm(
            total=round(total_ms / DAY_MS, 2),
            desc=cell.label or cell.name,  # a sweep's P3, not its 75-character name
            unit="day",
            file=sys.stderr,
            leave=False,
        )
        t0 = time.perf_counter()

        def update(sim_ms: int, ops: int) -> None:
            if bar.disable:  # closed: a late sample from a worker
                return
            bar.set_postfix_str(f"{ops / max(time.perf_counter() - t0, 1e-9):,.0f} ops/s", refresh=False)
            bar.update(round(sim_ms / DAY_MS, 2) - bar.n)  # redraws at most every mininterval
            if sim_ms >= total_ms:
                bar.close()
                if self.overall is not None:
                    self.overall.update(1)
                    if self.overall.n >= self.overall.total:
                        self.overall.close()

        return update


def cmd_simulate(args: argparse.Namespace) -> int:
    """Check the spec, run its simulations, print the table (or JSON) and where the files are."""
    from tools import simulate
    from tools.simulate import output, plots
    from tools.simulate.spec import SpecError

    raw = simulate.load_spec(args.spec)
    try:
        simulate.grid(raw)  # every field checked before any work
    except SpecError as e:
        raise SpecError(f"{args.spec}: {e}") from None
    if args.engine != "spark" and args.master:
        raise ValueError("--master needs --engine spark")
    check_conf_engine(args.conf, args.engine)
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    if args.jobs > 1 and args.engine == "spark":
        raise ValueError("--jobs is for the local engine (Spark runs its tasks in parallel itself)")
    with contextlib.ExitStack() as stack:
        session = None
        if args.engine == "spark":  # the JVM and its workers log to a file, not on our stderr
            run = spark_session_for(
                args.master or "local[*]",
                "simulate",
                conf=args.conf,
                progress=not (args.no_progress or args.json),
            )
            session = stack.enter_context(run).session
        summary = simulate.run(
            raw,
            args.out,
            engine=args.engine,
            session=session,
            progress_for=_Bars(not args.no_progress),
            jobs=args.jobs,
        )
    if args.json:
        render.print_json(summary)
    else:
        key = output.key_table(summary["policies"])
        if key is not None:  # a sweep: what P1, P2, ... stand for, before the rows that use them
            render.print_text(key + "\n\n")
        render.print_text(output.summary_table(summary["policies"], None if args.wide else TABLE_WIDTH))
        files = ["summary.json", "timeseries.csv", "policies.csv", *summary["plots"]]
        render.print_text(f"wrote {', '.join(files)} in {args.out}")
    if not summary["plots"]:
        sys.stdout.flush()
        sys.stderr.write(f"lsm: note: no plots: {plots.INSTALL_HINT}\n")
    return 0
