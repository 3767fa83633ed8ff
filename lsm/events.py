"""Event hooks: observe flushes and compactions without reaching into the engine.

Like Pebble's ``EventListener`` and RocksDB's ``EventListener`` (OnFlushBegin/OnFlushCompleted,
OnCompactionBegin/OnCompactionCompleted): give ``DbOptions(event_listeners=[...])`` objects that subclass
`EventListener` and override the methods they need. Each begin is followed by exactly one end, with
``error`` set when the flush or job failed (the error is raised to the engine's caller as before).

Listeners run synchronously, in the thread that does the work (the writer with
``background_flush=False``, the flush thread, the background compactor thread or the caller of
``db.compact()``), in the order given, and must be quick: the work waits for them. They must not call back
into the DB's write path (``put``, ``flush``, ``compact``, ``close``): the thread may hold the DB's locks.
Reads are fine.

A listener that raises does not break the engine: like RocksDB (whose listeners have no way to fail an
operation) the exception is logged on the ``lsm.events`` logger with its traceback and ignored; the other
listeners still run and the flush or compaction goes on. An observer must not be able to lose a write.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from compaction.merge import CompactionStats

log = logging.getLogger("lsm.events")


@dataclasses.dataclass(frozen=True)
class FlushInfo:
    """One memtable flush. At begin: ``rows``/``bytes`` of the memtable, no outputs, seconds 0.

    At end: the L0 SST names written (empty if every row was shadowed, or on error), the wall time, and
    the error that stopped the flush, if any."""

    rows: int
    bytes: int
    outputs: tuple[str, ...] = ()
    seconds: float = 0.0
    error: BaseException | None = None


@dataclasses.dataclass(frozen=True)
class CompactionInfo:
    """One compaction job. ``reason``: the policy's reason ("size_tiered", "periodic", "manual", "leveled",
    "fifo"); ``executor``: "local", "worker", "spark", "move" (a trivial move: the inputs, unchanged, are
    the outputs; compaction/trivial_move.py) or "drop" (whole SSTs removed by a manifest edit, no
    outputs; compaction/drop.py); ``inputs``: the SST names it reads (or drops).

    At end: the SST names it committed, its `CompactionStats` (with the plan/execute/commit phases), or
    the error that stopped it (then nothing was committed and stats is None). When a listener sets
    `EventListener.wants_changed_rows`, ``stats.changed_rows`` lists what became of each key whose
    newest version among the inputs did not come out unchanged: ``(key, seq, new row or None)``, where
    the new row is the filter's rewrite (a tombstone, a changed value) and None means the row was dropped
    (a filter's DROP, or the oldest run purging an expired row or a tombstone). Every other row of the
    inputs was copied to the outputs as it was, or was an older version. An executor that does not
    report (a custom one) leaves it None."""

    reason: str
    executor: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...] = ()
    stats: CompactionStats | None = None
    error: BaseException | None = None


class EventListener:
    """Subclass and override what you need; every method is a no-op by default.

    ``wants_changed_rows``: set it (class attribute) on a listener that keeps its own account of the
    stored rows, such as the simulator's (tools/simulate/accounting.py): every compaction job then
    notes the rows it dropped or rewrote in ``CompactionInfo.stats.changed_rows``, counted in the merge
    as the rows pass (a list entry per such row, none for the rows copied unchanged), so the listener
    never has to read the job's outputs. Off by default: the list costs memory for a job that purges
    many rows."""

    wants_changed_rows: bool = False

    def on_flush_begin(self, info: FlushInfo) -> None:
        """A frozen memtable is about to be written to L0."""

    def on_flush_end(self, info: FlushInfo) -> None:
        """The flush committed (or failed: ``info.error``)."""

    def on_compaction_begin(self, info: CompactionInfo) -> None:
        """A compaction job was planned and is about to run on its executor."""

    def on_compaction_end(self, info: CompactionInfo) -> None:
        """The job committed (or failed: ``info.error``)."""


def notify(listeners: Sequence[EventListener], method: str, info: FlushInfo | CompactionInfo) -> None:
    """Call ``listener.<method>(info)`` on each listener; log and ignore what one raises."""
    for listener in listeners:
        try:
            getattr(listener, method)(info)
        except Exception:  # noqa: BLE001 - an observer must never fail the engine's work
            log.exception("event listener %r raised in %s; ignored", listener, method)


def check_listeners(listeners: Sequence[object]) -> tuple[EventListener, ...]:
    """The listeners as a tuple; TypeError for an object that is not an `EventListener`."""
    out = []
    for x in listeners:
        if not isinstance(x, EventListener):
            raise TypeError(f"event listener {x!r} must subclass lsm.events.EventListener")
        out.append(x)
    return tuple(out)


__all__ = ["CompactionInfo", "EventListener", "FlushInfo", "check_listeners", "notify"]
