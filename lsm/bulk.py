"""Bulk load: ``db.ingest(source, name, engine="local" | "spark")`` — a plan of slice tasks, SSTs written
by the tasks, one manifest edit committing them with the source's binding.

Driver, in order:

1. The durable frontier of `name` (the same latest binding streaming ingest resumes from) and, once, each
   partition's current end; every partition must still reach its frontier (`SourceRegressedError`).
   A `BatchSource` (a `PartitionedLog`) is counted by `plan_end`: a walk of the record headers (each header's checksum
   checked, so the lengths it follows are sound), not a pass over the payloads: the task that reads a
   record verifies its payload, so a damaged record still fails the job (nothing is committed), and the
   driver's serial part stays small.
2. The plan: each partition's new offsets [frontier, end) cut into slices of at most
   ``ceil(total / tasks)`` (and `MAX_SLICE_RECORDS`) offsets, ordered by (partition, offset). A slice
   holds whole offsets, so records sharing an offset stay together. For a `PartitionedLog` the slices
   carry byte ranges from the driver's index of the files (positions, never records).
3. A seq range reserved from the DB (`DB.reserve_seqs`): task i writes every row with seq ``base + i``,
   the binding takes ``last = base + len(tasks)``; all of them carry the load's ts, read from the DB's
   clock at the reservation. Seqs are a function of the plan, so a retried task writes the same rows.
4. The tasks (lsm.bulk_task), on Spark executors or in threads of this process: each reads its slice from
   the files, resolves it and writes sorted SSTs under attempt-unique names, returning metadata only.
   On an object-store database they write by URL, and a `PartitionedLog` or a `DatabaseLog` on an object
   store they read by URL, with the stores registered on the executor from the task closure, which holds
   no credential (`compaction.spark_stores`): the executors share no directory with the driver. A
   `DatabaseLog` on an object store is read at the manifest version of a checkpoint the driver holds on
   it for the load (lsm.sources.database_hold), so the upstream's gc removes no input under a task.
5. Transactions. The tasks do not write records that carry a ``tx``; they return them, and the driver
   passes them, in (partition, offset) order, through the source's transactions exactly as streaming
   ingest does with one batch (lsm.ingest_tx): what completes is written at the binding's seq, what
   does not goes to the TEMP collection in the same commit. Every partition's frontier is its end: an
   incomplete transaction at the end of a load waits in TEMP, it does not hold the frontier back.
6. One tiny SST with the binding row, the completed transactions' rows and the TEMP rows (seq ``last``), then ONE manifest edit (`DB.commit_bulk`) adds the
   new SSTs to L0 in seq order together with that binding. A job that fails, or a driver that dies,
   commits nothing: the manifest, the remap and the frontier are as before, the reserved seqs stay
   unused (the failed load gives them up, `DB.abandon_seqs`; after a dead driver, the next writable open
   does), and the files it wrote carry names no manifest references (`lsm gc` removes them).

Equivalence with streaming ingest. ``db.ingest(src, name, engine="local"|"spark")`` leaves the store
exactly as ``db.ingest(src, name, batch_records=<at least every new record>)`` (one batch) does, when
both commit at the same clock reading: the same visible state (every get and scan), the same
key -> (value, expire_ts), the same tombstones, and one new binding with the same frontier and ts. Two
things differ, by design: streaming gives every row of its batch one seq, a bulk load gives the rows of
task i seq ``base + i`` and the binding ``base + len(tasks)``; and the bulk rows sit in L0 files
rather than the memtable. A key written by several slices resolves as in the one streaming batch, where
the records are taken partition by partition in ascending order: the slice later in the plan
(higher partition, or higher offsets of the same partition) has the higher seq and wins.

Concurrent writes. The reservation freezes the memtable (and waits for its flush), so every L0 file
holds seqs either all below the range or all above it; writes made during the load take seqs above
the range and keep their order. The commit places the load's SSTs in L0 below the files flushed since
the reservation and above every older one; if a compaction merged across the range meanwhile, the
commit fails with `BulkLoadConflictError` (nothing changes; run the load again). The load's rows are
ordered at the reservation and become visible at the commit. The reservation is in the manifest
(`seq_reservations`) until then and holds `DB.stable_seq` below the range, so readers that take "every
seq up to N is final" (``changes()``, a `DatabaseLog` replica) wait for the load instead of moving past
it; the commit records the range (`bulk_loads`) so that they take the load as ONE commit, at ``last``.
A `DB.snapshot` taken while the load runs pins a seq above the range and sees the load appear.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from compaction.output import SstOutput
from formats.fileio import FileOpError
from formats.manifest import SstEntry
from formats.sst import SsTableInfo
from lsm.bulk_task import BulkTask, run_task
from lsm.errors import LsmError
from lsm.ingest_job import IngestJob, Unit
from lsm.ingest_rows import emitted_records, resolve_tuples
from lsm.remap import IngestStats
from lsm.remap_store import binding_key, check_name, encode_binding
from lsm.sources.protocol import BatchSource
from lsm.sources.slices import Slice, SourceSlice
from lsm.versions import may_be_published

if TYPE_CHECKING:
    from compaction.output import OutputSpec
    from lsm.db import DB
    from lsm.engine import Engine
    from lsm.sources import Source

ENGINES = ("local", "spark")
MAX_SLICE_RECORDS = 1_000_000  # offsets per slice at most: bounds a task's memory
Runner = Callable[[list[BulkTask]], list[dict]]


def cut_slices(source: Any, partition: int, start: int, stop: int, max_records: int) -> list[Slice]:
    """Slices covering offsets [start, stop) of `partition`, each spanning at most `max_records` offsets.

    A `BatchSource` (a `PartitionedLog`: byte ranges from its index, read on the driver) makes its own;
    for another source they carry the source itself."""
    if stop <= start:
        return []
    if isinstance(source, BatchSource):  # its own slices (a PartitionedLog: byte ranges of its files)
        return source.slices(partition, start, stop, max_records)
    bounds = list(range(start, stop, max(1, max_records))) + [stop]
    return [SourceSlice(source, partition, a, b) for a, b in zip(bounds, bounds[1:], strict=False)]


def plan_slices(source: Source, frontier: dict[int, int], ends: dict[int, int], tasks: int) -> list[Any]:
    """Slices over [frontier[p], ends[p]) of every partition, in (partition, offset) order."""
    total = sum(max(0, ends[p] - frontier.get(p, 0)) for p in ends)
    per = min(MAX_SLICE_RECORDS, max(1, math.ceil(total / max(1, tasks))))
    out: list[Any] = []
    for p in sorted(ends):
        out += cut_slices(source, p, frontier.get(p, 0), ends[p], per)
    return out


def local_runner(workers: int | None, discard: Callable[[list[str]], object] | None = None) -> Runner:
    """Runs tasks in a pool of `workers` threads of this process (default: one per CPU, at most 8).

    A task over a generic source gets its own copy of it (sources are not thread-safe), as a Spark task
    gets its own unpickled one."""

    def own(task: BulkTask) -> dict:
        if isinstance(task.slice, SourceSlice):
            task = dataclasses.replace(task, slice=copy.deepcopy(task.slice))
        return run_task(task)

    def run(tasks: list[BulkTask]) -> list[dict]:
        n = workers or min(8, os.cpu_count() or 1)
        finished: list[dict] = []

        def tracked(task: BulkTask) -> dict:
            res = own(task)
            finished.append(res)
            return res

        try:
            with ThreadPoolExecutor(max_workers=max(1, n), thread_name_prefix="lsm-bulk") as pool:
                return list(pool.map(tracked, tasks))
        except BaseException:
            # a task failed (it removed what it wrote); the pool waited for the others, whose SSTs no
            # manifest will name: `discard` deletes them (the version set's deletion rule)
            if discard is not None:
                discard([os.path.join(tasks[0].output.directory, name) for res in finished for name, _ in res["outputs"]])
            raise

    return run


def spark_task(task: BulkTask, stores: list[Any]) -> dict[str, Any]:
    """Executor side: register the job's object stores (`compaction.spark_stores.on_executor`), run the task."""
    from compaction.spark_stores import on_executor

    on_executor(stores)
    return run_task(task)


def spark_runner(session: Any, master: str | None, stores: list[Any] | None = None) -> Runner:
    """Runs tasks as one Spark job, one Spark task per bulk task (see compaction.spark for the session).

    `stores`: the object stores of the database and of the source, as
    `compaction.spark_stores.executor_stores` gives them (no credential), shipped in the task closure and
    registered on each executor before its task; on a local master with the driver's credentials handed
    over in a private file (`compaction.spark_stores.handed_off`)."""
    from compaction.spark import SparkJobError, _short, get_session
    from compaction.spark_stores import handed_off

    def run(tasks: list[BulkTask]) -> list[dict]:
        s = session if session is not None else get_session(master or "local[*]")
        sc = s.sparkContext
        sc.setJobDescription(f"lsm bulk load: {len(tasks)} slices")
        shipped = list(tasks)
        with handed_off(list(stores or ()), sc.master) as shipped_stores:
            try:
                return (
                    sc.parallelize(range(len(shipped)), len(shipped))
                    .map(lambda i: spark_task(shipped[i], shipped_stores))
                    .collect()
                )
            except Exception as e:
                raise SparkJobError(f"Spark bulk load failed: {_short(e)}") from e

    return run


def source_locations(source: Any) -> list[str]:
    """The object-store URLs a bulk load's tasks read `source` from: a `PartitionedLog` on an object store
    (its segments), a `DatabaseLog` of a database on one (its manifest and SSTs), none for a local one or
    another source (which reads wherever it reads)."""
    from lsm.sources import DatabaseLog
    from lsm.sources.object_log import ObjectLog
    from storage import storage_for

    if isinstance(source, DatabaseLog):
        return [source.path] if storage_for(source.path).root is not None else []
    is_remote = isinstance(source, ObjectLog) and storage_for(source.directory).root is not None
    return [source.directory] if is_remote else []


@contextlib.contextmanager
def _reservation(engine: Engine) -> Iterator[Callable[[int], tuple[int, int]]]:
    """`DB.reserve_seqs` for one load, whose range is abandoned (`DB.abandon_seqs`) when the load ends
    without committing it, however it ends: readers then stop waiting for it (`DB.stable_seq`)."""
    held: list[tuple[int, int]] = []

    def reserve(n: int) -> tuple[int, int]:
        base, ts = engine.reserve_seqs(n)
        held.append((base, base + n - 1))
        return base, ts

    try:
        yield reserve
    except BaseException:
        for base, last in held:
            try:
                engine.abandon_seqs(base, last)
            except LsmError:  # the handle cannot commit: it holds the range until the reopen abandons it
                pass
        raise
    for base, last in held:
        engine.abandon_seqs(base, last)  # nothing when the load committed the range


@dataclasses.dataclass
class LoadPlan:
    """A bulk load's one unit: its tasks over the reserved seqs [base, last], committed at `ts`."""

    tasks: list[BulkTask]
    base: int
    last: int
    ts: int
    spec: OutputSpec
    results: list[dict] = dataclasses.field(default_factory=list)  # what the tasks (and the driver) wrote


class BulkLoad(IngestJob):
    """`DB.ingest(engine="local" | "spark")`: the plan is the slices, the run writes their SSTs in tasks,
    the commit is one manifest edit with the binding (module docstring).

    engine "spark" runs on `spark`, else on a session for `master`, else on DbOptions.spark_session (or
    one for DbOptions.spark_master); `tasks` defaults to DbOptions.spark_tasks, then Spark's parallelism."""

    def __init__(self, db: DB, source: Source, name: str, *, engine: str, spark: Any = None,
                 master: str | None = None, tasks: int | None = None, ttl_base: str = "commit",
                 tx_order: str = "arrival") -> None:
        check_name(name)
        if engine not in ENGINES:
            raise ValueError(f"unknown bulk engine {engine!r}: use one of {ENGINES}")
        super().__init__(db, source, name, ttl_base=ttl_base, tx_order=tx_order)
        if tasks is not None and (type(tasks) is not int or tasks < 1):
            raise ValueError(f"tasks must be None or an int >= 1, got {tasks!r}")
        if engine == "local" and (spark is not None or master is not None):
            raise ValueError("spark= and master= apply to engine='spark' only")
        self.engine = db.engine
        if engine == "spark":
            from compaction.spark_stores import executor_stores

            # the tasks write into the database's sst/ by path or URL, and read a log on an object store
            # by URL (SparkStoreError for memory://, before any Spark work); like compaction: the given
            # session, else DbOptions.spark_session, else one for the master
            stores = executor_stores([db.path, *source_locations(source)])
            o = db.options
            if spark is None and master is None:
                spark, master = o.spark_session, o.spark_master
            tasks = tasks if tasks is not None else o.spark_tasks
            self.runner = spark_runner(spark, master, stores)
            if tasks is None:
                from compaction.spark import get_session

                session = spark if spark is not None else get_session(master or "local[*]")
                tasks = session.sparkContext.defaultParallelism
        else:
            self.runner = local_runner(tasks, self.engine.versions.delete_files)
        self.tasks = tasks
        self._reserve: Callable[[int], tuple[int, int]] | None = None
        self._unheld: Source | None = None  # the source as given, while the load reads a held copy

    def end_of(self, partition: int) -> int:
        """A `BatchSource` (a `PartitionedLog`) is planned from its record headers (`plan_end`); the
        tasks verify the payloads they read. A held `DatabaseLog` ends where its checkpoint's version
        does, unless an earlier ingest already read past that (from the upstream's WAL): then the newest
        state decides whether the source went backwards, and this load takes nothing new."""
        if isinstance(self.source, BatchSource):
            return self.source.plan_end(partition)
        end = self.source.end(partition)
        done = self.frontier.get(partition, 0)
        if self._unheld is not None and end < done:
            return min(done, self._unheld.end(partition))
        return end

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """The load's seq reservation, given up unless the load commits it; and for a `DatabaseLog` on
        an object store, a checkpoint on the upstream that its tasks read through, deleted at the end
        (`lsm.sources.database_hold`)."""
        from lsm.sources.database_hold import held, needs_hold

        with contextlib.ExitStack() as stack:
            if needs_hold(self.source):
                self._unheld = self.source
                self.source = stack.enter_context(held(self.source))
            try:
                with _reservation(self.engine) as reserve:
                    self._reserve = reserve
                    yield
            finally:
                if self._unheld is not None:
                    self.source, self._unheld = self._unheld, None

    def plan(self) -> Iterator[Unit]:
        """One unit: every partition's new offsets cut into slices, over seqs reserved for them; none
        when the source holds nothing new."""
        frontier = self.frontier
        ends = {p: self.end_of(p) for p in sorted(set(self.source.partitions()) | set(frontier))}
        slices = plan_slices(self.source, frontier, ends, self.tasks or min(8, os.cpu_count() or 1))
        if not slices:
            return
        assert self._reserve is not None
        base, ts = self._reserve(len(slices) + 1)
        last = base + len(slices)
        spec = self.engine.bulk_output_spec()
        plan = [
            BulkTask(i, s, base + i, ts, self.ttl_base, self.default_ttl, self.v0, spec)
            for i, s in enumerate(slices)
        ]
        # every partition's frontier is its end: an incomplete transaction waits in TEMP
        new_frontier = dict(frontier)
        for p, end in ends.items():
            if end > 0 or p in frontier:
                new_frontier[p] = end
        yield Unit(new_frontier, data=LoadPlan(plan, base, last, ts, spec))

    def run(self, unit: Unit) -> list[SstEntry]:
        """The tasks' SSTs, then the driver's one SST of the binding, the rows of the transactions the
        load completes and the TEMP rows (seq `last`): every SST of the load, newest first."""
        lp: LoadPlan = unit.data
        lp.results = self.runner(lp.tasks)
        unit.records = sum(r["records"] for r in lp.results)
        extra: list[tuple] = []
        tx_recs = [r for res in sorted(lp.results, key=lambda r: r["index"]) for r in res["tx"]]
        if tx_recs or self.transactions().markers:
            outcome = self.apply_transactions(tx_recs)
            rows, _ = resolve_tuples(self.source, emitted_records(outcome), lp.ts, self.ttl_base,
                                     self.default_ttl, self.v0)
            extra = [(k, lp.last, lp.ts, exp, value) for k, (_k, exp, value) in rows.items()]
            extra += [(k, lp.last, lp.ts, None, value) for k, value in outcome.temp_ops]
        binding = (binding_key(self.name, lp.last), lp.last, lp.ts, None, encode_binding(lp.ts, unit.frontier))
        outs = SstOutput(dataclasses.replace(lp.spec, prefix=f"{lp.spec.prefix}-binding"), lp.ts).write(
            sorted([binding, *extra], key=lambda r: r[0])
        )
        lp.results.append({"index": len(lp.tasks), "outputs": [(n, i.to_dict()) for n, i in outs], "records": 0})
        return [
            SstEntry(n, SsTableInfo.from_dict(d))
            for res in sorted(lp.results, key=lambda r: r["index"], reverse=True)
            for n, d in res["outputs"]
        ]

    def commit(self, unit: Unit, work: list[SstEntry]) -> tuple[int, int]:
        """ONE manifest edit adds the load's SSTs to L0 in seq order with its binding (`Engine.commit_bulk`)."""
        lp: LoadPlan = unit.data
        self.engine.commit_bulk(work, lp.base, lp.last, lp.ts)
        return lp.last, lp.ts

    def failed(self, unit: Unit, error: BaseException) -> BaseException | None:
        """The SSTs the load wrote are deleted unless a manifest may name them (the next open decides);
        an SST write that failed puts the handle in the failed state."""
        lp: LoadPlan = unit.data
        if not may_be_published(error):
            paths = [self.engine.versions.sst_path(name) for res in lp.results for name, _ in res["outputs"]]
            self.engine.versions.delete_files(paths)
        if isinstance(error, FileOpError):  # a task's or the binding's SST write: the failed state
            return self.engine.fail(error)
        return None


def bulk_ingest(db: DB, source: Source, name: str, **kw: Any) -> IngestStats:
    """Load what `source` holds beyond the durable frontier of `name` as one bulk commit (`BulkLoad`'s
    arguments; module docstring)."""
    return BulkLoad(db, source, name, **kw).execute()


__all__ = ["ENGINES", "MAX_SLICE_RECORDS", "BulkLoad", "bulk_ingest", "cut_slices", "plan_slices"]
