"""The DB's side of compaction: turn the policy's plans into jobs, run them, commit the result.

The policy (`compaction.policy`, ``DbOptions.compaction_policy``) says what to compact and how the
result changes the shape; this module carries a plan out as a merge on an executor, a trivial move, or
a drop of whole SSTs (no merge), and commits ``policy.apply``.

`compaction` knows nothing of the DB: it takes a `CompactionJob` and returns output SSTs. This module
turns a plan into a job, chooses the executor, and hands the result to the version set
(`lsm.versions.VersionSet`), which commits one manifest edit under the DB's epochs (compare-and-swap),
points the read path at the new shape, and deletes the inputs once no iterator still reads them. It sees
the DB only through `CompactionHost` (implemented by `lsm.db.Engine`), never through DB privates. A job that fails (a filter raising, an executor error, a fenced commit)
removes its outputs and leaves the manifest as it was. An I/O error puts the DB into the failed state
(`lsm.errors.DbFailedError`); when it struck while publishing the manifest, the outputs are kept.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

from compaction import scheduler
from compaction.drop import drop_stats
from compaction.filter import Reason
from compaction.local import BackgroundCompactor, run_in_worker, run_local
from compaction.merge import CompactionJob, CompactionStats, MergeResult
from compaction.policy import CompactionPolicy, make_policy
from compaction.purge_lag import accumulate
from compaction.scheduler import apply_plan
from compaction.trivial_move import DistinctKeys, movable
from formats.manifest import Manifest, SstEntry
from lsm.events import CompactionInfo, notify
from lsm.syskeys import SYSTEM_PREFIX

if TYPE_CHECKING:
    from lsm.errors import DbFailedError
    from lsm.options import DbOptions
    from lsm.versions import VersionSet

Executor = Callable[[CompactionJob], MergeResult]


class CompactionHost(Protocol):
    """What compaction needs from the DB (`lsm.db.Engine` implements it)."""

    options: DbOptions
    versions: VersionSet

    @property
    def closed(self) -> bool:
        """Is the DB closed?"""

    @property
    def failure(self) -> BaseException | None:
        """The error refusing writes (failed state, flush error), or None."""

    def now(self) -> int:
        """The DB clock's time (ms), the compaction tick."""

    def check_writable(self) -> None:
        """Raise if writes (and so compactions) are refused."""

    def fail(self, error: BaseException, published: bool | None = False) -> DbFailedError:
        """Enter the failed state for an I/O error; return the error to raise."""

    def retention_cutoff(self, tick: int) -> int | None:
        """Expired rows older than this may be dropped (history retention, as-of snapshots)."""

    def snapshot_seqs(self) -> tuple[int, ...]:
        """Seqs of live snapshots, ascending."""

    def flush_if_idle(self) -> bool:
        """Flush a memtable whose oldest row is periodic_compaction_interval old; True if it flushed."""

    def history_advanced(self) -> None:
        """A flush or compaction advanced the history floor: compact what lives beside the data (the remaps)."""


class DbCompactor:
    """The DB's compaction driver: picks plans (the policy), builds jobs, runs them on an executor,
    commits their result, and owns the background compaction thread. Jobs run one at a time."""

    def __init__(self, db: CompactionHost) -> None:
        self.db = db
        self.versions = db.versions
        o = db.options
        # what to compact next and how a result changes the shape (compaction/policy.py)
        self.policy: CompactionPolicy = make_policy(o)
        self.stats = CompactionStats()
        self.distinct_keys = DistinctKeys()  # which SSTs hold one version per key (trivial moves)
        # one job at a time (plan, run, commit); taken before the version set's commit and state locks,
        # never while holding the DB's write lock (docs/architecture.md, "Owners, callers and locks")
        self._lock = threading.Lock()
        # the history floor the remaps were last compacted at (`_after_jobs`): a flush raises the floor
        # too, and the next compaction must see that rise, not only one of its own jobs
        self._remaps_floor = self.versions.manifest.history_floor
        self.background: BackgroundCompactor | None = None
        if o.background_compaction:
            self.background = BackgroundCompactor(self.step, self.policy.poll_seconds())

    # -- executors ---------------------------------------------------------------------------------
    def _executor(self, job: CompactionJob, requested: str | None, background: bool = False) -> Executor:
        o = self.db.options
        if requested is None:
            offload = o.spark_offload_min_bytes
            requested = "spark" if offload is not None and job.input_bytes >= offload else "local"
        if requested == "local":
            shared = self.versions.storage.shared  # a memory:// store is not seen by another process
            return run_in_worker if background and o.compaction_process and shared else run_local
        if requested == "spark":
            from compaction.spark import SparkExecutor

            return SparkExecutor(o.spark_session, master=o.spark_master, tasks=o.spark_tasks)
        raise ValueError(f"unknown executor {requested!r}: use 'local' or 'spark'")

    # -- picking -----------------------------------------------------------------------------------
    def step(self) -> bool:
        """Run one scheduled job if one is due; True if a job ran (for the background thread)."""
        db = self.db
        if db.closed or db.failure is not None:
            return False
        db.flush_if_idle()  # the poll that checks periodic compaction also flushes an old memtable
        with self._lock:
            t0 = time.perf_counter()
            m = self.versions.manifest
            plan = self._pick(m, db.now())
            if plan is not None:
                self._run(plan, None, background=True, planned=time.perf_counter() - t0)
        self._after_jobs()  # also without a job: a flush may have raised the floor (it wakes this thread)
        return plan is not None

    def compact(
        self,
        full: bool = False,
        executor: str | None = None,
        row_map: Callable[[list[tuple]], list[tuple]] | None = None,
        key_range: tuple[bytes | None, bytes | None] | None = None,
    ) -> CompactionStats:
        """Run what the scheduler picks until nothing is due (or, with full=True, merge everything; with
        `key_range` (start, end), merge the SSTs overlapping [start, end): `scheduler.pick_range`).
        `row_map` (full only, never a trivial move): see CompactionJob.row_map."""
        if executor not in (None, "local", "spark"):
            raise ValueError(f"unknown executor {executor!r}: use 'local' or 'spark'")
        total = CompactionStats()
        if not full:
            self.db.flush_if_idle()
        with self._lock:
            if full or key_range is not None:
                t0 = time.perf_counter()
                m = self.versions.manifest
                if key_range is not None:
                    plan = scheduler.pick_range(m.l0, m.runs, *key_range)
                else:
                    plan = scheduler.pick_full(m.l0, m.runs)
                if plan is not None:
                    total.add(self._run(plan, executor, planned=time.perf_counter() - t0, row_map=row_map))
            else:
                for _ in range(10_000):
                    t0 = time.perf_counter()
                    m = self.versions.manifest
                    plan = self._pick(m, self.db.now())
                    if plan is None:
                        break
                    total.add(self._run(plan, executor, planned=time.perf_counter() - t0))
        self._after_jobs()
        return total

    def _after_jobs(self) -> None:
        """After the job lock is released (the DB's hook commits rows and takes other locks): tell the DB
        when the history floor rose since its remaps were last compacted (a merge, a drop, or a flush
        raised it), so its remaps compact whenever its data does."""
        floor = self.versions.manifest.history_floor
        if floor > self._remaps_floor:
            self._remaps_floor = floor
            self.db.history_advanced()

    def _expired_before(self, tick: int) -> int:
        """Rows with an expire_ts before this are expired for every reader (as in the merge)."""
        cutoff = self.db.retention_cutoff(tick)
        return tick if cutoff is None else min(tick, cutoff)

    def _pick(self, m: Manifest, tick: int) -> scheduler.Plan | None:
        return self.policy.pick(m, tick, self._expired_before(tick))

    # -- running -----------------------------------------------------------------------------------
    def make_job(self, plan: scheduler.Plan, m: Manifest, tick: int) -> CompactionJob:
        """The `CompactionJob` for `plan` on manifest `m` at compaction tick `tick`: input paths and
        SsTableInfos, a fresh output name prefix, the filters, live snapshots and the retention cutoff."""
        db, vs = self.db, self.versions
        src = plan.input_entries(m.l0, m.runs)
        return CompactionJob(
            sources=tuple(tuple(vs.sst_path(e.name) for e in s) for s in src),
            inputs=tuple(e.info for s in src for e in s),
            is_last_run=plan.is_last_run,
            tick=tick,
            reason=plan.reason,
            output=vs.new_output(db.options.target_sst_bytes),
            filters=tuple(db.options.compaction_filters),
            snapshots=db.snapshot_seqs(),
            retention_cutoff=db.retention_cutoff(tick),
            protected_prefix=SYSTEM_PREFIX,
            report_changes=any(x.wants_changed_rows for x in db.options.event_listeners),
        )

    def _run(
        self,
        plan: scheduler.Plan,
        executor: str | None,
        background: bool = False,
        planned: float = 0.0,
        row_map: Callable[[list[tuple]], list[tuple]] | None = None,
    ) -> CompactionStats:
        """Run one job and commit it, with the compaction events around it (lsm.events)."""
        listeners = self.db.options.event_listeners
        if not listeners:
            return self._run_job(plan, executor, background, planned, None, row_map)[0]
        begun: list[CompactionInfo] = []  # the begin event's info, once the job is planned

        def on_begin(info: CompactionInfo) -> None:
            begun.append(info)
            notify(listeners, "on_compaction_begin", info)

        try:
            stats, outputs = self._run_job(plan, executor, background, planned, on_begin, row_map)
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
        row_map: Callable[[list[tuple]], list[tuple]] | None = None,
    ) -> tuple[CompactionStats, tuple[str, ...]]:
        db, vs = self.db, self.versions
        db.check_writable()
        t0 = time.perf_counter()
        tick = db.now()
        m = vs.manifest
        if plan.drop:
            return self._drop(plan, m, tick, planned, t0, on_begin)
        if executor is None and row_map is None:
            moved = self._move(plan, m, tick, planned, t0, on_begin)
            if moved is not None:
                return moved
        job = self.make_job(plan, m, tick)
        if row_map is not None:
            job = dataclasses.replace(job, row_map=row_map)
        run = self._executor(job, executor, background)
        input_names = [e.name for s in plan.input_entries(m.l0, m.runs) for e in s]
        if on_begin is not None:
            on_begin(CompactionInfo(str(plan.reason), executor_name(run), tuple(input_names)))
        t1 = time.perf_counter()
        try:
            result = run(job)
        except OSError as e:  # the merge removed what it wrote; the DB's files are as they were
            raise db.fail(e) from e
        except Exception as e:
            vs.delete_files(getattr(e, "outputs", []))  # what a failed job wrote and left (a Spark job's)
            raise
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
                vs.storage.fsync_dir(vs.sst_dir)
            except OSError as e:
                raise db.fail(e) from e
            vs.commit(
                lambda cur: with_purge_lag(self.policy.apply(cur, plan, outputs, tick, stats.history_floor), stats),
                vs.install,
            )
        except BaseException as e:
            self.stats = before
            # a commit that may have been published keeps its outputs: a manifest on disk may reference
            # them, and the next open decides
            vs.discard_outputs(outputs, e)
            raise
        vs.retire_files(input_names)
        self.distinct_keys.forget(input_names)
        stats.commit_seconds = time.perf_counter() - t2
        self.stats.commit_seconds += stats.commit_seconds  # known only now; the rest was added above
        return stats, tuple(e.name for e in outputs)

    def _move(
        self,
        plan: scheduler.Plan,
        m: Manifest,
        tick: int,
        planned: float,
        t0: float,
        on_begin: Callable[[CompactionInfo], None] | None,
    ) -> tuple[CompactionStats, tuple[str, ...]] | None:
        """Carry `plan` out as a trivial move (compaction/trivial_move.py) when merging its inputs would
        change no row: one manifest edit lists the inputs, unchanged, as the new run. None otherwise."""
        o, vs = self.db.options, self.versions
        entries = movable(
            plan,
            plan.input_entries(m.l0, m.runs),
            tick,
            has_filters=bool(o.compaction_filters),
            format_version=o.sst_format_version,
            compression=o.compression,
            min_bytes=o.trivial_move_min_bytes,
            distinct=lambda e: self.distinct_keys(e.name, vs.sst_path(e.name)),
        )
        if entries is None:
            return None
        names = tuple(e.name for e in entries)
        if on_begin is not None:
            on_begin(CompactionInfo(str(plan.reason), "move", names))
        t1 = time.perf_counter()
        stats = CompactionStats(jobs=1, moved_files=len(entries), moved_bytes=sum(e.size for e in entries))
        stats.plan_seconds = planned + (t1 - t0)
        self._commit_edit(stats, lambda cur: self.policy.apply(cur, plan, entries, tick))
        self._timed(stats, t0, t1)
        return stats, names

    def _drop(
        self,
        plan: scheduler.Plan,
        m: Manifest,
        tick: int,
        planned: float,
        t0: float,
        on_begin: Callable[[CompactionInfo], None] | None,
    ) -> tuple[CompactionStats, tuple[str, ...]]:
        """Carry out a drop plan (compaction/drop.py): one manifest edit without its SSTs, then retire
        their files. Nothing is read or written, whatever executor was asked for."""
        vs = self.versions
        wanted = set(plan.drop)
        entries = [e for e in m.all_ssts() if e.name in wanted]
        if on_begin is not None:
            on_begin(CompactionInfo(str(plan.reason), "drop", plan.drop))
        t1 = time.perf_counter()
        stats = drop_stats(entries, tick, self._expired_before(tick))
        stats.plan_seconds = planned + (t1 - t0)
        self._commit_edit(
            stats, lambda cur: with_purge_lag(self.policy.apply(cur, plan, (), tick, stats.history_floor), stats)
        )
        vs.retire_files(list(plan.drop))
        self.distinct_keys.forget(plan.drop)
        self._timed(stats, t0, t1)
        return stats, ()

    def _commit_edit(self, stats: CompactionStats, edit: Callable[[Manifest], Manifest]) -> None:
        """Publish a job that writes no SST (a move, a drop) as the one manifest edit `edit`, its `stats`
        counted; a commit that fails takes them back (nothing was written, so nothing to remove)."""
        vs = self.versions
        before = copy.deepcopy(self.stats)
        self.stats.add(stats)
        try:
            vs.commit(edit, vs.install)
        except BaseException:
            self.stats = before
            raise

    def _timed(self, stats: CompactionStats, t0: float, t1: float) -> None:
        """The job's commit time (since `t1`) and its whole time (since `t0`), also in the totals."""
        t2 = time.perf_counter()
        stats.commit_seconds = t2 - t1
        stats.seconds = t2 - t0
        self.stats.commit_seconds += stats.commit_seconds
        self.stats.seconds += stats.seconds

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the job lock: no compaction plans, runs or commits until the block ends (a bulk load's
        commit uses it so that no job commits across it)."""
        with self._lock:
            yield

    def stop(self) -> None:
        """Stop the background compaction thread (waits for a running job); idempotent."""
        if self.background is not None:
            self.background.stop()
            self.background = None

    # -- garbage ---------------------------------------------------------------------------------
    def gc(self, grace_ms: int | None = None) -> list[str]:
        """Delete SSTs the manifest does not reference, older than the grace period (wall time)."""
        grace = self.db.options.gc_grace_ms if grace_ms is None else grace_ms
        return self.versions.collect_garbage(grace)


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


__all__ = ["CompactionHost", "DbCompactor", "apply_plan", "Reason"]
