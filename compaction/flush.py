"""Memtable flushes in a worker process, rebuilt from the frozen memtable's WAL segment.

A memtable flush is pure Python (resolve, encode, bloom, checksum): run in a thread of the writing
process it takes the GIL from the writers for 10+ us per row. `FlushJob` moves it to a worker process
(`compaction.worker`, a process of its own so a flush never waits behind a long compaction) without
sending a row across: a frozen memtable's WAL segment holds exactly its commits, so the worker reads
the segment back (from the page cache), orders its rows as `Memtable.iter` does (keys ascending, each
key's versions newest first), and writes the L0 SST through the one merge (`flush_rows`) and the one
SST writer. It returns the outputs' SsTableInfo; the DB commits them as after an in-thread flush.

The job carries the memtable's row count and last seq: a segment that does not hold exactly those rows
(`SegmentMismatch`, raised before anything is written) sends the DB back to the in-thread flush.
"""

from __future__ import annotations

import atexit
import dataclasses
from operator import itemgetter

from compaction.merge import CompactionStats, OutputSpec, flush_rows
from compaction.worker import Worker
from formats.sst import SsTableInfo
from formats.wal import segment_rows


class SegmentMismatch(RuntimeError):
    """The WAL segment does not hold exactly the frozen memtable's rows (nothing was written)."""


@dataclasses.dataclass(frozen=True)
class FlushJob:
    """One memtable flush, described by its WAL segment; picklable (it travels to the worker)."""

    wal_path: str
    rows: int  # rows the memtable holds: the segment must decode to exactly these
    max_seq: int
    output: OutputSpec
    tick: int
    snapshots: tuple[int, ...] = ()
    retention_cutoff: int | None = None

    def run(self) -> tuple[list[tuple[str, SsTableInfo]], CompactionStats]:
        """Write the segment's rows to L0 SSTs; return (outputs, stats of what the flush dropped)."""
        try:
            with open(self.wal_path, "rb") as f:
                buf = f.read()
        except OSError as e:  # gone: a handle that fenced this one replayed and retired it
            raise SegmentMismatch(f"{self.wal_path}: cannot read the segment: {e}") from None
        rows = segment_rows(buf, self.wal_path)
        if len(rows) != self.rows or (rows[-1][1] if rows else 0) != self.max_seq:
            raise SegmentMismatch(
                f"{self.wal_path}: {len(rows)} rows up to seq {rows[-1][1] if rows else 0}, "
                f"the memtable holds {self.rows} up to seq {self.max_seq}"
            )
        # commit order reversed, then a stable sort by key: keys ascending, each key newest first
        rows.reverse()
        rows.sort(key=itemgetter(0))
        stats = CompactionStats()
        outputs = flush_rows(
            rows,
            self.output,
            tick=self.tick,
            snapshots=self.snapshots,
            retention_cutoff=self.retention_cutoff,
            stats=stats,
        )
        return outputs, stats


_worker = Worker()
atexit.register(_worker.close)


def run_flush_in_worker(job: FlushJob) -> tuple[list[tuple[str, SsTableInfo]], CompactionStats]:
    """Run `job` in the flush worker process (one per Python process, started on first use, apart
    from the compaction worker). Raises what the flush raised there; `compaction.worker.WorkerDied`
    if the process exited; `SegmentMismatch` if the segment is not the memtable's."""
    return _worker.run(job)
