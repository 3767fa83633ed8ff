"""`lsm simulate`: replay a TTL workload on a simulated clock against the real engine, policy by policy.

``run(spec, out_dir)`` is the Python entry point (a stable API, docs/simulate.md): it checks the
spec, runs every simulation of its grid (`sweep.grid`: the policies, times the ``[sweep]`` values),
serially or as one Spark batch, writes ``summary.json``, ``timeseries.csv``, ``policies.csv`` (the key of
the plots' short labels) and (with matplotlib) the PNG plots into `out_dir`, and returns the summary. The parts:

* `spec`: the TOML spec and its checks; `workload`: the seeded operation generator;
* `runner`: one simulation (`Simulation`); `accounting`: the incremental du classes;
* `sweep`: the grid and the Spark batch; `output` and `plots`: what lands in `out_dir`;
* `costs`: on an object store (the spec's ``store``), the requests per simulated day and their price.

docs/simulate.md describes the spec, the outputs and two studies made with it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from tools.simulate.spec import Spec, SpecError, load_spec, parse_duration, parse_spec
from tools.simulate.sweep import Cell, grid, run_cells, run_cells_parallel, run_cells_spark

Progress = Callable[[Cell], Any]

# the fields of a policy's summary that are measured on the host, not simulated: the only ones that
# differ between two runs of one spec (everything else, and every CSV and plot, is the same bytes)
WALL_CLOCK_FIELDS = ("wall_s", "cpu_s", "sample_cpu_s")


def run(
    spec: Mapping[str, Any],
    out_dir: str | os.PathLike[str],
    *,
    engine: str = "local",
    master: str | None = None,
    session: Any = None,
    progress_for: Progress | None = None,
    plots: bool = True,
    jobs: int = 1,
) -> dict[str, Any]:
    """Simulate every cell of `spec` (a dict shaped like the TOML spec), write the outputs, return the summary.

    engine "local" runs the simulations one after another in this process, or with jobs > 1 that many
    at a time in worker processes; "spark" runs each as one Spark task (`master`, or an existing
    `session`). The results do not depend on either. SpecError (naming the field) before any work.

    ``progress_for(cell)`` (local engine) returns a callable that gets each sample's (simulated ms
    since the start, operations done) of that cell, or None; if `progress_for` also has a ``begin``
    method, it is called first with the number of simulations, and if it has a ``plot`` method, that is
    called with (plots written, plots) while the plots are drawn."""
    if engine not in ("local", "spark"):
        raise ValueError(f"unknown engine {engine!r}: use 'local' or 'spark'")
    if type(jobs) is not int or jobs < 1:
        raise ValueError(f"jobs must be an int >= 1, got {jobs!r}")
    base, cells = grid(spec)
    out = os.fspath(out_dir)
    os.makedirs(out, exist_ok=True)
    if engine == "local" and progress_for is not None and hasattr(progress_for, "begin"):
        progress_for.begin(len(cells))
    if engine == "spark":
        results = run_cells_spark(cells, master=master, session=session)
    elif jobs > 1 and len(cells) > 1:
        results = run_cells_parallel(cells, min(jobs, len(cells)), progress_for)
    else:
        results = run_cells(cells, progress_for)
    from tools.simulate import output
    from tools.simulate import plots as plot_mod

    summary: dict[str, Any] = {
        "spec": _without_credentials(spec),
        "engine": engine,
        "sample_every_ms": base.sample_every_ms,
        "compact_every_ms": base.compact_every_ms,
        "policies": [r["summary"] for r in results],
        "plots": [],
    }
    output.write_timeseries(os.path.join(out, "timeseries.csv"), results)
    output.write_key(os.path.join(out, "policies.csv"), summary["policies"])
    if plots and plot_mod.available():
        on_plot = getattr(progress_for, "plot", None)
        summary["plots"] = plot_mod.write_plots(out, results, base.compact_every_ms, on_plot)
    output.write_summary(os.path.join(out, "summary.json"), summary)
    return summary


def _without_credentials(v: Any) -> Any:
    """`v` (the spec, or a part of it) with the credentials of every ``object_store_options`` table
    redacted (`lsm.options.redacted_store_options`): summary.json is a report, not a secret store."""
    from lsm.options import redacted_store_options

    if isinstance(v, dict):
        return {
            k: redacted_store_options(x) if k == "object_store_options" and isinstance(x, dict) else _without_credentials(x)
            for k, x in v.items()
        }
    if isinstance(v, list):
        return [_without_credentials(x) for x in v]
    return v


__all__ = ["run", "WALL_CLOCK_FIELDS", "Spec", "SpecError", "load_spec", "parse_spec", "parse_duration", "grid", "Cell"]
