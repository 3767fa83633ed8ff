"""The deterministic simulation (tests/lsm/_dst.py over storage/simstore.py): many seeds of writers,
fencing, flushes, compactions, gc, ingest and readers on a faulty simulated object store, against a model;
in a quarter of the seeds also checkpoints, clones and a following reader (tests/lsm/_dst_checkpoints.py).

``LSM_SIM_SEEDS=N`` runs N seeds instead of the default 200; ``LSM_SIM_SEED=S`` runs seed S alone. A
failing seed is printed with what it broke and how to run it again; it reproduces exactly.
"""

from __future__ import annotations

import os

import pytest

from tests.lsm._dst import FAULTS, run_seed

SEEDS = int(os.environ.get("LSM_SIM_SEEDS", "200"))
ONE = os.environ.get("LSM_SIM_SEED")
MIN_OPS = 10_000  # operations the default run must simulate in all


def _report(failed: list) -> str:
    lines = []
    for r in failed:
        lines.append(f"seed {r.seed} ({r.ops} ops, {r.requests} requests): LSM_SIM_SEED={r.seed} "
                     f"pytest tests/lsm/test_dst.py")
        lines += [f"    {p}" for p in r.problems]
    return "\n".join(lines)


def test_every_seed_keeps_every_acknowledged_write_and_shows_no_fenced_one():
    seeds = [int(ONE)] if ONE is not None else range(SEEDS)
    results = [run_seed(s) for s in seeds]
    failed = [r for r in results if r.problems]
    assert not failed, f"{len(failed)} of {len(results)} seeds broke the model:\n{_report(failed)}"
    ops = sum(r.ops for r in results)
    if ONE is None and SEEDS >= 200:
        assert ops >= MIN_OPS, f"only {ops} operations simulated over {SEEDS} seeds"
    # the runs exercised what they are meant to: takeovers, faults, held requests, every operation
    events: dict[str, int] = {}
    for r in results:
        for k, v in r.events.items():
            events[k] = events.get(k, 0) + v
    if ONE is None and SEEDS >= 100:
        for op in ("put", "delete", "batch", "flush", "compact", "gc", "ingest", "fenced", "abandoned",
                   "checkpoint", "checkpoint deleted", "checkpoint read", "clone", "clone gc", "clone compact",
                   "follower moved"):
            assert events.get(op, 0) > 0, (op, events)


def test_a_seed_runs_the_same_every_time():
    first, again = run_seed(97), run_seed(97)
    assert first.trace_digest == again.trace_digest
    assert (first.ops, first.requests, first.problems, first.events) == (
        again.ops, again.requests, again.problems, again.events)
    assert run_seed(98).trace_digest != first.trace_digest


def test_faults_are_injected_and_requests_land_out_of_order():
    dealt: dict[str, int] = {}
    out_of_order = 0
    for seed in range(20):
        r = run_seed(seed)
        for k, v in r.injected.items():
            dealt[k] = dealt.get(k, 0) + v
        # the trace is in landing order: a request held in flight lands after later ones, so the
        # actors' requests interleave with gaps of seconds
        out_of_order += any(b[0] - a[0] > 4.0 for a, b in zip(r.trace, r.trace[1:], strict=False))
    assert FAULTS.hold > 0 and dealt["held"] > 0 and dealt["failed"] > 0 and dealt["lost"] > 0, dealt
    assert out_of_order > 0


@pytest.mark.parametrize("rule", ["gc ignores the fence", "WAL grace ignores the request bound",
                                  "gc ignores checkpoints"])
def test_the_simulation_finds_the_defects_it_was_built_for(rule, monkeypatch):
    """Put back the rule each defect broke and the simulation finds a failing seed within a bounded
    search: it can see what it guards against."""
    if rule == "gc ignores the fence":
        from lsm.versions import VersionSet

        monkeypatch.setattr(VersionSet, "owns_store", lambda self: True)
        expect = ("does not open", "live file is gone", "FileNotFoundError")
    elif rule == "gc ignores checkpoints":
        monkeypatch.setattr("lsm.versions.kept_paths", lambda *a: set())
        expect = ("checkpoint", "clone", "follower")
    else:
        from lsm.wal_object import WalBound

        # the old rule: WAL objects deleted once gc_grace_ms old (at least 10 s), whatever a request may
        # take, and a writer that never checks how long its PUT took
        monkeypatch.setattr("lsm.wal_manager.wal_bound", lambda o: WalBound(0, 10**12))
        monkeypatch.setattr("lsm.wal_manager.wal_grace_ms", lambda o: max(o.gc_grace_ms, 10_000))
        expect = ("acknowledged write lost",)
    for seed in range(400):
        r = run_seed(seed)
        if any(any(e in p for e in expect) for p in r.problems):
            return
    pytest.fail(f"no seed of 400 found the defect '{rule}'")
