"""One ingest call as a job with a plan, a run and a commit phase (RocksDB's `ExternalSstFileIngestionJob`
prepares, runs and commits the same way): what streaming ingest (lsm.ingest.StreamIngest) and a bulk load
(lsm.bulk.BulkLoad) share, so that each says only how it reads and how it commits.

``IngestJob.execute`` holds the source's lock for the whole call (one ingester of a name per handle) and:

1. starts from the durable frontier: the latest binding of the source's remap, and rule 1 of lsm.ingest
   (every partition still reaches its offset, else `SourceRegressedError`, nothing written);
2. plans the units of work (`plan`): a stream's batches, taken as the source is read; a bulk load's one
   set of slices under a seq reservation;
3. runs each unit (`run`): records resolved to rows (TTL, the last record of a key wins), the source's
   transactions applied (`transactions`): what completes becomes rows, what does not waits in TEMP;
4. commits each unit (`commit`): its rows, or its SSTs, with the unit's binding ``(ts, seq, frontier)``
   in ONE commit; then the handle's cached head moves to that binding.

A unit that fails commits nothing: the frontier, the remap and TEMP are as they were (the in-memory
TEMP is dropped and read again), and the job says how to clean up what the unit wrote (`failed`).

`ingest(db, source, name, engine=..., ...)` is `DB.ingest`: it checks the arguments of the engine asked
for and runs the job.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from lsm.errors import SourceRegressedError
from lsm.ingest_state import SourceState, durable_head, source_state
from lsm.ingest_tx import TX_ORDERS, TxOutcome, TxState
from lsm.remap import Binding, IngestStats
from lsm.remap_store import check_name, host

if TYPE_CHECKING:
    from lsm.db import DB
    from lsm.sources import Source

TTL_BASES = ("commit", "event")
ENGINES = ("stream", "local", "spark")


@dataclasses.dataclass
class Unit:
    """One unit of an ingest's work: what it reads up to (`frontier`, the binding it commits), how many
    source records it holds, and whatever its job's run and commit need."""

    frontier: dict[int, int]
    records: int = 0
    at: tuple[str, int] | None = None  # (source, ts): commit at the source's time (times="source")
    data: Any = None  # the job's own: a stream's records, a bulk load's slice plan


class IngestJob:
    """One ingest call of `source` into remap `name` (module docstring); subclasses plan, run and commit."""

    def __init__(self, db: DB, source: Source, name: str, *, ttl_base: str = "commit",
                 tx_order: str = "arrival") -> None:
        check_name(name)
        if ttl_base not in TTL_BASES:
            raise ValueError(f"ttl_base must be one of {TTL_BASES}, got {ttl_base!r}")
        if tx_order not in TX_ORDERS:
            raise ValueError(f"tx_order must be one of {TX_ORDERS}, got {tx_order!r}")
        self.db = db
        self.source = source
        self.name = name
        self.ttl_base = ttl_base
        self.tx_order = tx_order
        o = db.options
        self.default_ttl = o.default_ttl
        self.v0 = o.sst_format_version == 0
        self.state: SourceState = source_state(db, name)
        self.head: Binding | None = None  # the durable binding the call starts from
        self.frontier: dict[int, int] = {}  # the frontier committed so far
        self.records = 0
        self.batches = 0

    # -- the phases a job defines --------------------------------------------------------------------
    def end_of(self, partition: int) -> int:
        """Where `partition` ends now, for rule 1 and the plan (the source's `end`)."""
        return self.source.end(partition)

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        """What the whole call runs inside, under the source's lock (a bulk load's seq reservation)."""
        return contextlib.nullcontext()

    def plan(self) -> Iterator[Unit]:
        """The units of work, from `self.frontier` (rule 1 already checked)."""
        raise NotImplementedError

    def run(self, unit: Unit) -> Any:
        """Read and resolve what `unit` covers; returns what `commit` writes."""
        raise NotImplementedError

    def commit(self, unit: Unit, work: Any) -> tuple[int, int]:
        """Commit `work` with `unit`'s binding in one commit; returns its (seq, ts)."""
        raise NotImplementedError

    def failed(self, unit: Unit, error: BaseException) -> BaseException | None:
        """Clean up after `unit` failed with `error`; an exception to raise instead, or None."""
        return None

    def committed(self, unit: Unit) -> None:
        """After `unit` committed (the head already moved to its binding)."""

    # -- what every job shares -----------------------------------------------------------------------
    def transactions(self) -> TxState:
        """The source's pending transactions (the TEMP collection, loaded once per handle)."""
        st = self.state
        if st.tx is None:
            st.tx = TxState.load(self.db, self.name)
        return st.tx

    def apply_transactions(self, tx_records: list[tuple]) -> TxOutcome:
        """Pass the records carrying a ``tx`` (`SourceRecord` field tuples, in (partition, offset) order)
        through the source's transactions: what completes is emitted, the rest goes to TEMP."""
        from lsm.ingest import split_tx

        checked = split_tx(self.source, tx_records, self.ttl_base, self.default_ttl, self.v0)
        return self.transactions().apply(checked, self.tx_order)

    def execute(self) -> IngestStats:
        """Run the job: plan, then run and commit each unit (module docstring)."""
        from lsm.ingest import check_frontier

        host(self.db).check_writable()
        st = self.state
        with st.lock, self.scope():
            self.head = durable_head(self.db, self.name)
            self.frontier = dict(self.head.frontier) if self.head is not None else {}
            check_frontier(self.source, self.name, self.frontier, self.end_of)  # rule 1: before any write
            for unit in self.plan():
                try:
                    seq, ts = self.commit(unit, self.run(unit))
                except BaseException as e:
                    st.tx = None  # it may have moved past a binding that did not commit: read TEMP again
                    instead = self.failed(unit, e)
                    if instead is not None:
                        raise instead from e
                    raise
                self.frontier = unit.frontier
                st.head = Binding(ts, seq, unit.frontier)
                self.records += unit.records
                self.batches += 1
                self.committed(unit)
            return IngestStats(self.records, self.batches, dict(self.frontier))


def check_frontier(
    source: Source, name: str, frontier: dict[int, int], end_of: Callable[[int], int] | None = None
) -> None:
    """Rule 1: `SourceRegressedError` unless every partition of `frontier` still reaches its offset
    (read with `end_of`, default ``source.end``)."""
    for p, off in sorted(frontier.items()):
        end = (end_of or source.end)(p)
        if end < off:
            raise SourceRegressedError(
                f"{source.name}: partition {p} went backwards: ingest {name!r} durably read it up to "
                f"offset {off}, the source now ends at {end} (truncated or replaced?)"
            )


def ingest(db: DB, source: Any, name: str, *, engine: str = "stream", max_records: int | None = None,
           batch_records: int = 10_000, ttl_base: str = "commit", spark: Any = None, master: str | None = None,
           tasks: int | None = None, sync: bool = True, progress: Callable[[IngestStats], None] | None = None,
           should_stop: Callable[[], bool] | None = None, tx_order: str = "arrival",
           times: str = "store") -> IngestStats:
    """`DB.ingest`: the job `engine` names ("stream": lsm.ingest; "local" or "spark": lsm.bulk), its
    arguments checked (ValueError for one that does not apply to it), run."""
    if engine not in ENGINES:
        raise ValueError(f"unknown ingest engine {engine!r}: use 'stream', 'local' or 'spark'")
    if engine == "stream":
        from lsm.ingest import StreamIngest

        if tasks is not None:
            raise ValueError("tasks= applies to engine='local' or 'spark' only")
        if spark is not None or master is not None:
            raise ValueError("spark= and master= apply to engine='spark' only")
        job: IngestJob = StreamIngest(
            db, source, name, max_records=max_records, batch_records=batch_records, ttl_base=ttl_base,
            sync=sync, progress=progress, should_stop=should_stop, tx_order=tx_order, times=times,
        )
    else:
        from lsm.bulk import BulkLoad

        if max_records is not None:
            raise ValueError("max_records applies to engine='stream' only: a bulk load takes everything")
        if times != "store":
            raise ValueError("times='source' applies to engine='stream' only: a bulk load commits at one time")
        job = BulkLoad(db, source, name, engine=engine, spark=spark, master=master, tasks=tasks,
                       ttl_base=ttl_base, tx_order=tx_order)
    return job.execute()


__all__ = ["ENGINES", "TTL_BASES", "IngestJob", "Unit", "ingest"]
