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
   On an object-store database they write by URL, and a `PartitionedLog` on an object store they read by
   URL, with the stores registered on the executor from the task closure, which holds no credential
   (`compaction.spark_stores`): the executors share no directory with the driver.
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
from formats.manifest import Manifest, SstEntry
from formats.sst import SsTableInfo
from lsm.bulk_task import BulkTask, run_task
from lsm.errors import BulkLoadConflictError, LsmError
from lsm.ingest import (
    TTL_BASES,
    check_frontier,
    emitted_records,
    resolve_tuples,
    split_tx,
    tx_state,
)
from lsm.ingest_state import durable_head, source_state
from lsm.ingest_tx import TX_ORDERS
from lsm.remap import Binding, IngestStats
from lsm.remap_store import binding_key, check_name, encode_binding
from lsm.sources.protocol import BatchSource
from lsm.sources.slices import Slice, SourceSlice
from lsm.versions import may_be_published

if TYPE_CHECKING:
    from lsm.db import DB
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


def place_bulk(m: Manifest, entries: list[SstEntry], base: int, last: int) -> tuple:
    """The L0 of manifest `m` with `entries` (seqs in [base, last], newest first) placed in seq order:
    below the files flushed since the reservation, above every older file. BulkLoadConflictError if a
    file or run holds seqs on both sides of the range."""
    newer = [e for e in m.l0 if e.info.min_seq > last]
    older = [e for e in m.l0 if e.info.max_seq < base]
    if len(newer) + len(older) != len(m.l0) or any(e.info.max_seq >= base for r in m.runs for e in r.ssts):
        raise BulkLoadConflictError(
            "a compaction merged SSTs from before and after the bulk load's seq range while it ran; "
            "nothing was committed: run the load again"
        )
    if newer and m.l0[: len(newer)] != tuple(newer):
        raise BulkLoadConflictError("L0 is not in seq order; nothing was committed")
    return tuple(newer) + tuple(entries) + tuple(older)


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
    (its segments), none for a local one or another source (which reads wherever it reads)."""
    from lsm.sources.object_log import ObjectLog
    from storage import storage_for

    is_remote = isinstance(source, ObjectLog) and storage_for(source.directory).root is not None
    return [source.directory] if is_remote else []


@contextlib.contextmanager
def _reservation(db: DB) -> Iterator[Callable[[int], tuple[int, int]]]:
    """`DB.reserve_seqs` for one load, whose range is abandoned (`DB.abandon_seqs`) when the load ends
    without committing it, however it ends: readers then stop waiting for it (`DB.stable_seq`)."""
    held: list[tuple[int, int]] = []

    def reserve(n: int) -> tuple[int, int]:
        base, ts = db.reserve_seqs(n)
        held.append((base, base + n - 1))
        return base, ts

    try:
        yield reserve
    except BaseException:
        for base, last in held:
            try:
                db.abandon_seqs(base, last)
            except LsmError:  # the handle cannot commit: it holds the range until the reopen abandons it
                pass
        raise
    for base, last in held:
        db.abandon_seqs(base, last)  # nothing when the load committed the range


def _unlink_outputs(db: DB, results: list[dict]) -> None:
    db.engine.versions.delete_files([db.sst_path(name) for res in results for name, _ in res["outputs"]])


def bulk_ingest(
    db: DB,
    source: Source,
    name: str,
    *,
    engine: str,
    spark: Any = None,
    master: str | None = None,
    tasks: int | None = None,
    ttl_base: str = "commit",
    tx_order: str = "arrival",
) -> IngestStats:
    """Load what `source` holds beyond the durable frontier of `name` as one bulk commit (module docstring).

    engine "spark" runs on `spark`, else on a session for `master`, else on DbOptions.spark_session (or
    one for DbOptions.spark_master); `tasks` defaults to DbOptions.spark_tasks, then Spark's parallelism."""
    check_name(name)
    if engine not in ENGINES:
        raise ValueError(f"unknown bulk engine {engine!r}: use one of {ENGINES}")
    if ttl_base not in TTL_BASES:
        raise ValueError(f"ttl_base must be one of {TTL_BASES}, got {ttl_base!r}")
    if tx_order not in TX_ORDERS:
        raise ValueError(f"tx_order must be one of {TX_ORDERS}, got {tx_order!r}")
    if tasks is not None and (type(tasks) is not int or tasks < 1):
        raise ValueError(f"tasks must be None or an int >= 1, got {tasks!r}")
    if engine == "local" and (spark is not None or master is not None):
        raise ValueError("spark= and master= apply to engine='spark' only")
    if engine == "spark":
        from compaction.spark_stores import executor_stores

        # the tasks write into the database's sst/ by path or URL, and read a log on an object store by
        # URL (SparkStoreError for memory://, before any Spark work); like compaction: the given session,
        # else DbOptions.spark_session, else one for the master
        stores = executor_stores([db.path, *source_locations(source)])
        o = db.options
        if spark is None and master is None:
            spark, master = o.spark_session, o.spark_master
        tasks = tasks if tasks is not None else o.spark_tasks
        runner = spark_runner(spark, master, stores)
        if tasks is None:
            from compaction.spark import get_session

            tasks = (
                spark if spark is not None else get_session(master or "local[*]")
            ).sparkContext.defaultParallelism
    else:
        runner = local_runner(tasks, db.engine.versions.delete_files)
    st = source_state(db, name)
    with st.lock, _reservation(db) as reserve_seqs:
        head = durable_head(db, name)
        frontier = dict(head.frontier) if head is not None else {}
        # a PartitionedLog is planned from its record headers; the tasks verify the payloads they read
        end_of = source.plan_end if isinstance(source, BatchSource) else source.end
        check_frontier(source, name, frontier, end_of)
        ends = {p: end_of(p) for p in sorted(set(source.partitions()) | set(frontier))}
        slices = plan_slices(source, frontier, ends, tasks or min(8, os.cpu_count() or 1))
        if not slices:
            return IngestStats(0, 0, frontier)
        base, ts = reserve_seqs(len(slices) + 1)
        last = base + len(slices)
        spec = db.bulk_output_spec()
        o = db.options
        plan = [
            BulkTask(i, s, base + i, ts, ttl_base, o.default_ttl, o.sst_format_version == 0, spec)
            for i, s in enumerate(slices)
        ]
        results: list[dict] = []
        try:
            results = runner(plan)
            new_frontier = dict(frontier)
            for p, end in ends.items():
                if end > 0 or p in frontier:
                    new_frontier[p] = end
            txs = tx_state(db, name, st)
            extra: list[tuple] = []
            tx_recs = [r for res in sorted(results, key=lambda r: r["index"]) for r in res["tx"]]
            if tx_recs or txs.markers:
                v0 = o.sst_format_version == 0
                outcome = txs.apply(split_tx(source, tx_recs, ttl_base, o.default_ttl, v0), tx_order)
                rows, _ = resolve_tuples(source, emitted_records(outcome), ts, ttl_base, o.default_ttl, v0)
                extra = [(k, last, ts, exp, value) for k, (_k, exp, value) in rows.items()]
                extra += [(k, last, ts, None, value) for k, value in outcome.temp_ops]
            binding = (binding_key(name, last), last, ts, None, encode_binding(ts, new_frontier))
            outs = SstOutput(dataclasses.replace(spec, prefix=f"{spec.prefix}-binding"), ts).write(
                sorted([binding, *extra], key=lambda r: r[0])
            )
            results.append({"index": len(plan), "outputs": [(n, i.to_dict()) for n, i in outs], "records": 0})
            entries = [
                SstEntry(n, SsTableInfo.from_dict(d))
                for res in sorted(results, key=lambda r: r["index"], reverse=True)
                for n, d in res["outputs"]
            ]
            db.commit_bulk(entries, base, last, ts)
        except BaseException as e:
            st.tx = None  # it may have moved past a load that did not commit: read TEMP again
            if not may_be_published(e):  # else a manifest on disk may name them: the next open decides
                _unlink_outputs(db, results)
            if isinstance(e, FileOpError):  # a task's or the binding's SST write: the failed state
                raise db.engine.fail(e) from e
            raise
        st.head = Binding(ts, last, new_frontier)
        return IngestStats(sum(r["records"] for r in results), 1, new_frontier)


__all__ = ["ENGINES", "MAX_SLICE_RECORDS", "bulk_ingest", "cut_slices", "place_bulk", "plan_slices"]
