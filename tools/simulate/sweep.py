"""The grid of simulations a spec asks for, and running it serially or as one Spark batch.

A spec's grid is its policies, times every combination of the values in its optional ``[sweep]`` table.
Each ``[sweep]`` entry maps a path in the spec to the list of values it takes::

    [sweep]
    seed = [1, 2]
    "workload.keys" = [10000, 100000]
    "workload.phases[0].ops_per_sec" = [1, 4]
    "policy.l0_compaction_threshold" = [4, 8]       # "policy.X" sets X in every policy

The combinations are taken in the order the entries are written (the last one varies fastest), and for
each combination every policy in order: 2 x 2 x 2 x 2 values x 2 policies = 32 simulations, each named
``<policy> <path>=<value> ...`` and labelled ``P1`` .. ``P32`` in that order (the plots and the table
use the labels; ``policies.csv`` maps them to the names and values). Without a ``[sweep]`` a cell's
label is its policy's name. Every cell is checked (`parse_spec`) before any simulation runs.

`run_cells` runs them one after another in this process; `run_cells_spark` makes each cell one Spark
task (``parallelize(cells, len(cells))``): the task generates the cell's operations, simulates in its
own temporary directory, deletes it and returns the result. Simulations are deterministic, so both give
identical summaries and samples (except wall times).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tools.simulate.spec import Spec, SpecError, parse_spec

_STEP = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)")


@dataclasses.dataclass(frozen=True)
class Cell:
    """One simulation of the grid: its name, a spec dict without [sweep], the index of its policy, the
    sweep's (path, value) pairs, and the short label the plots use (``P3``, or the policy's name)."""

    name: str
    raw: dict[str, Any]
    policy: int
    params: tuple[tuple[str, Any], ...]
    label: str = ""


def _set_path(d: dict[str, Any], path: str, value: Any) -> None:
    """Set `value` at a dotted path with [i] indexes, e.g. ``workload.phases[0].ops_per_sec``."""
    steps: list[str | int] = []
    for part in path.split("."):
        m = _STEP.fullmatch(part)
        if m is None:
            raise SpecError(f"sweep.{path}: not a path like 'workload.phases[0].ops_per_sec'")
        steps.append(m.group(1))
        steps += [int(i) for i in re.findall(r"\[(\d+)\]", m.group(2))]
    cur: Any = d
    for s in steps[:-1]:
        try:
            cur = cur[s]
        except (KeyError, IndexError, TypeError):
            raise SpecError(f"sweep.{path}: the spec has nothing at {s!r} on this path") from None
    if isinstance(cur, list) or (isinstance(steps[-1], int)):
        try:
            cur[steps[-1]] = value
        except (IndexError, TypeError):
            raise SpecError(f"sweep.{path}: the spec has nothing at {steps[-1]!r} on this path") from None
    else:
        cur[steps[-1]] = value


def grid(raw: Mapping[str, Any]) -> tuple[Spec, list[Cell]]:
    """The checked spec (without [sweep]) and its cells, each cell's spec checked too (SpecError)."""
    base = {k: v for k, v in raw.items() if k != "sweep"}
    spec = parse_spec(base)
    sweep = raw.get("sweep", {})
    if not isinstance(sweep, Mapping):
        raise SpecError("sweep: expected a table of path = [values]")
    for path, values in sweep.items():
        if not isinstance(values, list) or not values:
            raise SpecError(f"sweep.{path}: expected a non-empty list of values")
    axes = [[(p, v) for v in vs] for p, vs in sweep.items()]
    cells: list[Cell] = []
    for combo in itertools.product(*axes):
        cell_raw = copy.deepcopy(base)
        for path, value in combo:
            if path.startswith("policy."):
                field = path.removeprefix("policy.")
                for pol in cell_raw.get("policy", []):
                    pol[field] = value
            else:
                _set_path(cell_raw, path, value)
        label = " ".join(f"{p}={v}" for p, v in combo)
        try:
            cell_spec = parse_spec(cell_raw)
        except SpecError as e:
            raise SpecError(f"sweep ({label}): {e}") from None
        for i, pol in enumerate(cell_spec.policies):
            name = f"{pol.name} {label}" if label else pol.name
            short = f"P{len(cells) + 1}" if sweep else pol.name
            cells.append(Cell(name, cell_raw, i, tuple(combo), short))
    return spec, cells


def run_cell(cell: Cell, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Simulate one cell in a temporary directory (deleted afterwards); {"summary", "samples"}."""
    from tools.simulate.workload import generate

    spec = parse_spec(cell.raw)
    ops = generate(spec)
    return _simulate(spec, spec.policies[cell.policy], ops, cell, progress)


def _simulate(spec: Spec, policy, ops, cell: Cell, progress) -> dict[str, Any]:
    from tools.simulate.runner import Simulation, options_summary

    d = tempfile.mkdtemp(prefix="lsm-sim-")
    try:
        sim = Simulation(spec, policy, ops, d, progress)
        try:
            res = sim.run()
        finally:
            sim.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    summary = {
        **res.summary,
        "name": cell.name,
        "label": cell.label or cell.name,
        "policy": policy.name,
        "params": dict(cell.params),
    }
    summary["options"] = options_summary(policy)
    return {"summary": summary, "samples": res.samples}


def run_cells(
    cells: Sequence[Cell], progress_for: Callable[[Cell], Any] | None = None
) -> list[dict[str, Any]]:
    """Every cell, in order, in this process; cells with the same spec share one generated workload."""
    from tools.simulate.workload import generate

    out = []
    cache: tuple[Any, Spec, Any] | None = None
    for cell in cells:
        if cache is None or cache[0] != cell.raw:
            spec = parse_spec(cell.raw)
            cache = (cell.raw, spec, generate(spec))
        _raw, spec, ops = cache
        progress = progress_for(cell) if progress_for is not None else None
        out.append(_simulate(spec, spec.policies[cell.policy], ops, cell, progress))
    return out


def run_cells_parallel(
    cells: Sequence[Cell], jobs: int, progress_for: Callable[[Cell], Any] | None = None
) -> list[dict[str, Any]]:
    """Every cell in its own worker process, `jobs` at a time (`run_cell`: each generates its workload
    from the spec's seed, so the results are those of `run_cells`); results in cell order.

    With `progress_for`, the workers send each sample's (simulated ms, operations) back on a queue and
    this process feeds them to ``progress_for(cell)``'s callable, as `run_cells` does."""
    import concurrent.futures
    import multiprocessing
    from queue import Empty

    ctx = multiprocessing.get_context("spawn")  # no fork of a parent that may hold threads
    if progress_for is None:
        with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            return list(pool.map(run_cell, cells))
    queue = ctx.Queue()
    updates: dict[int, Any] = {}

    def drain() -> None:
        while True:
            try:
                i, sim_ms, ops = queue.get_nowait()
            except Empty:
                return
            if i not in updates:
                updates[i] = progress_for(cells[i])
            if updates[i] is not None:
                updates[i](sim_ms, ops)

    results: list[dict[str, Any] | None] = [None] * len(cells)
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=jobs, mp_context=ctx, initializer=_set_queue, initargs=(queue,)
    ) as pool:
        pending = {pool.submit(_reporting_task, (i, c)) for i, c in enumerate(cells)}
        while pending:
            done, pending = concurrent.futures.wait(pending, timeout=0.25)
            drain()
            for f in done:
                i, r = f.result()
                results[i] = r
    drain()
    return results  # type: ignore[return-value]


_queue: Any = None  # a worker's queue back to the parent (run_cells_parallel with progress)


def _set_queue(queue: Any) -> None:
    global _queue
    _queue = queue


def _reporting_task(item: tuple[int, Cell]) -> tuple[int, dict[str, Any]]:
    i, cell = item
    return i, run_cell(cell, lambda sim_ms, ops: _queue.put((i, sim_ms, ops)))


def run_cells_spark(
    cells: Sequence[Cell], master: str | None = None, session: Any = None
) -> list[dict[str, Any]]:
    """Every cell as one Spark task; results in cell order."""
    if session is None:
        from compaction.spark import get_session

        session = get_session(master or "local[*]")
    sc = session.sparkContext
    rdd = sc.parallelize(list(enumerate(cells)), len(cells))
    got = rdd.map(_spark_task).collect()
    got.sort(key=lambda x: x[0])
    return [r for _i, r in got]


def _spark_task(item: tuple[int, Cell]) -> tuple[int, dict[str, Any]]:
    i, cell = item
    return i, run_cell(cell)


__all__ = ["Cell", "grid", "run_cell", "run_cells", "run_cells_spark"]
