"""The FIFO policy (``compaction_policy="fifo"``), after RocksDB's FIFO compaction with ``ttl``.

For data that only ages out: flushed SSTs stay in L0 and are never merged, and whole SSTs leave by a
manifest edit (compaction/drop.py), with nothing read or rewritten:

* an SST whose every row has expired (its largest expire_ts, in the manifest, is before the tick) goes
  at the first scheduler pass after that, provided no SST kept beneath it overlaps its keys (an
  expired row hides older versions of its key, so they must go first or with it);
* with ``fifo_max_bytes`` set, the oldest SSTs go while the SSTs add up to more than that, expired or
  not (RocksDB's ``max_table_files_size``): a cap on space, paid for with the oldest data.

A TTL-only workload thus writes every byte once (its flush: write amplification 1.0), and an SST is
gone within one compaction pass after its last row expires. Rows without a TTL and deletes are kept
until the size cap takes them; periodic compaction, when configured, still merges due SSTs (those with
TTL rows or tombstones) down to the oldest run, where the TTL filter purges them. Runs a store brought
from another policy are dropped SST by SST under the same rules, the oldest run first.
"""

from __future__ import annotations

from compaction.drop import droppable
from compaction.filter import Reason
from compaction.policy import BasePolicy
from compaction.scheduler import Plan, pick_periodic
from formats.manifest import Manifest

# how often background compaction looks for expired SSTs when no flush wakes it (s): a TTL is rarely
# finer than seconds, and a pass over the manifest's metadata costs microseconds
FIFO_POLL_SECONDS = 1.0


class FifoPolicy(BasePolicy):
    """Drop expired SSTs (and the oldest beyond ``fifo_max_bytes``), else a periodic job."""

    name = "fifo"

    def __init__(self, options: object) -> None:
        super().__init__(options)
        self.max_bytes: int | None = getattr(options, "fifo_max_bytes", None)

    def pick(self, m: Manifest, tick: int, expired_before: int | None = None) -> Plan | None:
        """A drop of every SST that may go now, else a periodic job, else None."""
        gone = droppable(m, tick if expired_before is None else expired_before, self.max_bytes)
        if gone:
            return Plan(Reason.FIFO, drop=tuple(e.name for e in gone))
        return pick_periodic(m.l0, m.runs, tick, self.options)

    def poll_seconds(self) -> float | None:
        """Every second (or the periodic poll, when shorter): expiry comes with time, not with flushes."""
        periodic = super().poll_seconds()
        return FIFO_POLL_SECONDS if periodic is None else min(periodic, FIFO_POLL_SECONDS)


__all__ = ["FifoPolicy"]
