"""The DB's side of compaction: turn scheduler plans into jobs, run them, commit the result.

`compaction` knows nothing of the DB: it takes a `CompactionJob` and returns output SSTs. This module owns
what only the DB can do — reading the manifest, choosing the executor, committing one manifest edit under
the DB's epochs (compare-and-swap), pointing the read path at the new shape, and deleting the inputs once
no iterator still reads them. A job that fails (a filter raising, an executor error, a fenced commit)
removes its outputs and leaves the manifest as it was. An I/O error puts the DB into the failed state
(`lsm.errors.DbFailedError`); when it struck while publishing the manifest, the outputs are kept.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from compaction import scheduler
from compaction.filter import Reason
from compaction.local import BackgroundCompactor, run_in_worker, run_local
from compaction.merge import CompactionJob, CompactionStats, MergeResult
from compaction.purge_lag import accumulate
from formats.manifest import Manifest, SortedRun, SstEntry
from lsm.errors import CompactionError
from lsm.events import CompactionInfo, notify
from lsm.fsutil import fsync_dir, unlink_quiet
from lsm.syskeys import SYSTEM_PREFIX

if TYPE_CHECKING:
    from lsm.db import DB

Executor = Callable[[CompactionJob], MergeResult]


class DbCompactor:
    """The DB's compaction driver: picks plans (scheduler), builds jobs, runs them on an executor,
    commits their result, and owns the background compaction thread. Jobs run one at a time."""

    def __init__(self, db: DB) -> None:
        self.db = db
        o = db.options
        self.sched = scheduler.SchedulerOptions(
            l0_compaction_threshold=o.l0_compaction_threshold,
            size_ratio=o.size_ratio,
            max_merge_inputs=o.max_merge_inputs,
            periodic_compaction_interval=o.periodic_compaction_interval,
            periodic_compaction_jitter=o.periodic_compaction_jitter,
            periodic_compaction_max_bytes=o.periodic_compaction_max_bytes,
        )
        self.stats = CompactionStats()
        self._lock = threading.Lock()
        self.background: BackgroundCompactor | None = None
        if o.background_compaction:
            poll = None
            if o.periodic_compaction_interval is not None:
                poll = min(60.0, max(0.05, o.periodic_compaction_interval / 4000))
            self.background = BackgroundCompactor(self.step, poll)

    # -- executors ---------------------------------------------------------------------------------
    def _executor(self, job: CompactionJob, requested: str | None, background: bool = False) -> Executor:
        o = self.db.options
        if requested is None:
            offload = o.spark_offload_min_bytes
            requested = "spark" if offload is not None and job.input_bytes >= offload else "local"
        if requested == "local":
            return run_in_worker if background and o.compaction_process else run_local
        if requested == "spark":
            from compaction.spark import SparkExecutor

            return SparkExecutor(o.spark_session, master=o.spark_master, tasks=o.spark_tasks)
        raise ValueError(f"unknown executor {requested!r}: use 'local' or 'spark'")

    # -- picking -----------------------------------------------------------------------------------
    def step(self) -> bool:
        """Run one scheduled job if one is due; True if a job ran (for the background thread)."""
        db = self.db
        if db._closed or db._bg_error is not None:
            return False
        db._flush_if_idle()  # the poll that checks periodic compaction also flushes an old memtable
        with self._lock:
            t0 = time.perf_counter()
            m = db.manifest
            plan = scheduler.pick(m.l0, m.runs, db._clock.read(), self.sched)
            if plan is None:
                return False
            self._run(plan, None, background=True, planned=time.perf_counter() - t0)
            return True

    def compact(self, full: bool = False, executor: str | None = None) -> CompactionStats:
        """Run what the scheduler picks until nothing is due (or, with full=True, merge everything)."""
        if executor not in (None, "local", "spark"):
            raise ValueError(f"unknown executor {executor!r}: use 'local' or 'spark'")
        total = CompactionStats()
        if not full:
            self.db._flush_if_idle()
        with self._lock:
            if full:
                t0 = time.perf_counter()
                m = self.db.manifest
                plan = scheduler.pick_full(m.l0, m.runs)
                if plan is not None:
                    total.add(self._run(plan, executor, planned=time.perf_counter() - t0))
                return total
            for _ in range(10_000):
                t0 = time.perf_counter()
                m = self.db.manifest
                plan = scheduler.pick(m.l0, m.runs, self.db._clock.read(), self.sched)
                if plan is None:
                    break
                total.add(self._run(plan, executor, planned=time.perf_counter() - t0))
        return total

    # -- running -----------------------------------------------------------------------------------
    def make_job(self, plan: scheduler.Plan, m: Manifest, tick: int) -> CompactionJob:
        """The `CompactionJob` for `plan` on manifest `m` at compaction tick `tick`: input paths and
        SsTableInfos, a fresh output name prefix, the filters, live snapshots and the retention cutoff."""
        db = self.db
        src = plan.input_entries(m.l0, m.runs)
        return CompactionJob(
            sources=tuple(tuple(db.sst_path(e.name) for e in s) for s in src),
            inputs=tuple(e.info for s in src for e in s),
            is_last_run=plan.is_last_run,
            tick=tick,
            reason=plan.reason,
            output=db._output_spec(f"{db._alloc_ids():020d}", db.options.target_sst_bytes),
            filters=tuple(db.options.compaction_filters),
            snapshots=db.snapshot_seqs(),
            retention_cutoff=db._retention_cutoff(tick),
            protected_prefix=SYSTEM_PREFIX,
        )

    def _run(
        self, plan: scheduler.Plan, executor: str | None, background: bool = False, planned: float = 0.0
    ) -> CompactionStats:
        """Run one job and commit it, with the compaction events around it (lsm.events)."""
        listeners = self.db.options.event_listeners
        if not listeners:
            return self._run_job(plan, executor, background, planned, None)[0]
        begun: list[CompactionInfo] = []  # the begin event's info, once the job is planned

        def on_begin(info: CompactionInfo) -> None:
            begun.append(info)
            notify(listeners, "on_compaction_begin", info)

        try:
            stats, outputs = self._run_job(plan, executor, background, planned, on_begin)
        except BaseException as e:
            if begun:
                notify(listeners, "on_compaction_end", dataclasses.replace(begun[0], error=e))
            raise
        notify(listeners, "on_compaction_end", dataclasses.replace(begun[0], outputs=outputs, stats=stats))
        return stats

    def _run_job(
        self,
        plan: scheduler.Plan,
        executor: str | None,
        background: bool,
        planned: float,
        on_begin: Callable[[CompactionInfo], None] | None,
    ) -> tuple[CompactionStats, tuple[str, ...]]:
        db = self.db
        db._check_writable()
        t0 = time.perf_counter()
        tick = db._clock.read()
        m = db.manifest
        job = self.make_job(plan, m, tick)
        run = self._executor(job, executor, background)
        input_names = [e.name for s in plan.input_entries(m.l0, m.runs) for e in s]
        if on_begin is not None:
            on_begin(CompactionInfo(str(plan.reason), executor_name(run), tuple(input_names)))
        t1 = time.perf_counter()
        try:
            result = run(job)
        except OSError as e:  # the merge removed what it wrote; the DB's files are as they were
            raise db._fail(e) from e
        t2 = time.perf_counter()
        outputs = tuple(SstEntry(name, info) for name, info in result.outputs)
        stats = result.stats
        stats.seconds = t2 - t0
        stats.plan_seconds = planned + (t1 - t0)
        stats.execute_seconds = t2 - t1
        # counted before the commit publishes the new shape, so whoever sees it sees its stats too;
        # only this job touches them (jobs are serialized), so a failed commit can restore them
        before = copy.deepcopy(self.stats)
        self.stats.add(stats)
        try:
            try:
                fsync_dir(db._sst_dir)
            except OSError as e:
                raise db._fail(e) from e
            db._commit(
                lambda cur: with_purge_lag(apply_plan(cur, plan, outputs, tick, stats.history_floor), stats),
                db._install,
            )
        except BaseException as e:
            self.stats = before
            # a commit that may have been published (DbFailedError.published None) keeps its outputs:
            # a manifest on disk may reference them, and the next open decides
            if getattr(e, "published", False) is not None:
                for o in outputs:
                    unlink_quiet(db.sst_path(o.name))
            raise
        db._retire_files(input_names)
        stats.commit_seconds = time.perf_counter() - t2
        self.stats.commit_seconds += stats.commit_seconds  # known only now; the rest was added above
        return stats, tuple(e.name for e in outputs)

    def stop(self) -> None:
        """Stop the background compaction thread (waits for a running job); idempotent."""
        if self.background is not None:
            self.background.stop()
            self.background = None

    # -- garbage ---------------------------------------------------------------------------------
    def gc(self, grace_ms: int | None = None) -> list[str]:
        """Delete SSTs the manifest does not reference, older than the grace period (wall time)."""
        db = self.db
        grace = db.options.gc_grace_ms if grace_ms is None else grace_ms
        return collect_garbage(db._sst_dir, db.manifest, grace, keep=set(db._readers))


def apply_plan(
    m: Manifest, plan: scheduler.Plan, outputs: tuple[SstEntry, ...], tick: int, history_floor: int = 0
) -> Manifest:
    """The manifest after `plan` produced `outputs` (raises CompactionError if its inputs are gone).

    `history_floor` is the largest seq of a version the job dropped or rewrote (`CompactionStats`)."""
    l0_names = {e.name for e in m.l0}
    if not set(plan.l0) <= l0_names or not set(plan.runs) <= {r.id for r in m.runs}:
        raise CompactionError("the compaction's inputs changed before it could commit")
    gone = set(plan.l0)
    new_l0 = tuple(e for e in m.l0 if e.name not in gone)
    runs = list(m.runs)
    next_run_id = m.next_run_id
    if plan.partial is not None:
        rid, names = plan.partial
        idx = next(k for k, r in enumerate(runs) if r.id == rid)
        kept = [e for e in runs[idx].ssts if e.name not in set(names)]
        ssts = tuple(sorted(kept + list(outputs), key=lambda e: e.info.first_key))
        if ssts:
            runs[idx] = SortedRun(rid, ssts)
        else:
            del runs[idx]
    else:
        positions = [k for k, r in enumerate(runs) if r.id in plan.runs]
        at = positions[0] if positions else 0
        runs = [r for r in runs if r.id not in plan.runs]
        if outputs:
            runs.insert(at, SortedRun(next_run_id, outputs))
            next_run_id += 1
    return m.replace(
        l0=new_l0,
        runs=tuple(runs),
        next_run_id=next_run_id,
        history_floor=max(m.history_floor, history_floor),
    )


def executor_name(run: Executor) -> str:
    """How CompactionInfo names an executor: "local", "worker", "spark", or a custom one's name."""
    if run is run_local:
        return "local"
    if run is run_in_worker:
        return "worker"
    spark = sys.modules.get("compaction.spark")  # not loaded: it cannot be a SparkExecutor
    if spark is not None and isinstance(run, spark.SparkExecutor):
        return "spark"
    return getattr(run, "__name__", type(run).__name__)


def with_purge_lag(m: Manifest, stats: CompactionStats) -> Manifest:
    """`m` with the job's purge lags added to the cumulative histogram the manifest keeps."""
    if not stats.purge_lag.count:
        return m
    return m.replace(purge_lag=accumulate(m.purge_lag, stats.purge_lag))


def collect_garbage(sst_dir: str, m: Manifest, grace_ms: int, keep: set[str] = frozenset()) -> list[str]:
    """Remove unreferenced ``*.sst`` files whose mtime is older than `grace_ms`; return their names."""
    live = {e.name for e in m.all_ssts()} | set(keep)
    cutoff = time.time() - grace_ms / 1000
    removed = []
    for name in sorted(os.listdir(sst_dir)):
        if not name.endswith(".sst") or name in live:
            continue
        p = os.path.join(sst_dir, name)
        try:
            if os.stat(p).st_mtime > cutoff:
                continue
        except FileNotFoundError:
            continue
        if unlink_quiet(p):  # a file that could not be deleted is left for the next gc
            removed.append(name)
    if removed:
        fsync_dir(sst_dir)
    return removed


__all__ = ["DbCompactor", "apply_plan", "collect_garbage", "Reason"]
