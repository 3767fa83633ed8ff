"""One bulk-load task: a slice of a source -> resolved, sorted rows -> SSTs. Runs on a Spark executor or in
a thread of the local engine; the same code either way (lsm.bulk plans and commits).

A task reads its slice straight from the source (lsm.sources.slices), checks every record as streaming
ingest does, resolves it with streaming ingest's own code (`lsm.ingest.resolve_records`: the last record
of a key within the slice wins, a delete becomes a tombstone, TTLs count from the load's ts or the
record's event_ts), and writes the rows, sorted by key, through THE SST writer (`compaction.merge.SstOutput`)
under names unique to the attempt: ``<job prefix>-t<task>-<random>-<n>.sst``. Every row of the task gets
the task's seq (the plan's base seq + the task's position in the plan) and the load's ts, so a retried
attempt writes exactly the same rows. It returns metadata only: its SsTableInfo, its record count and the
transactions it saw (which the driver needs to find each partition's last cut).
"""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from collections.abc import Iterator
from typing import Any

from compaction.merge import OutputSpec, SstOutput
from lsm.ingest import resolve_tuples


@dataclasses.dataclass(frozen=True)
class BulkTask:
    """Everything one task needs, and nothing of the DB: picklable for Spark."""

    index: int  # position in the plan
    slice: Any  # lsm.sources.slices.LogSlice | SourceSlice
    seq: int  # every row of the task carries it
    ts: int  # the load's ts (every row's ts; TTLs count from it with ttl_base="commit")
    ttl_base: str
    default_ttl: int | None
    v0: bool  # sst_format_version 0: no TTLs
    output: OutputSpec


class _Watch:
    """Counts the slice's records and records its transaction episodes: [tx, first, last, ended]."""

    def __init__(self, sl: Any) -> None:
        self.slice = sl
        self.count = 0
        self.open: dict[Any, list] = {}
        self.episodes: list[list] = []

    def runs(self) -> Iterator[list[tuple]]:
        """The slice's records as runs of tuples of the `SourceRecord` fields (`runs()`); only a run that
        has a transaction is looked at record by record."""
        n = 0
        for run, has_tx in self.slice.runs():
            n += len(run)
            if has_tx:
                self._episodes(run)
            yield run
        self.count = n

    def _episodes(self, run: list[tuple]) -> None:
        open_, episodes = self.open, self.episodes
        for rec in run:
            tx = rec[6]
            if tx is not None:
                offset = rec[1]
                ep = open_.get(tx)
                if ep is None:
                    ep = open_[tx] = [tx, offset, offset, False]
                    episodes.append(ep)
                ep[2] = offset
                if rec[7]:
                    ep[3] = True
                    del open_[tx]


def run_task(task: BulkTask) -> dict[str, Any]:
    """Executor side: write the task's slice into uniquely named SSTs; return their metadata."""
    spec = dataclasses.replace(
        task.output, prefix=f"{task.output.prefix}-t{task.index:04d}-{uuid.uuid4().hex[:8]}"
    )
    watch = _Watch(task.slice)
    rows, nbytes = resolve_tuples(
        task.slice, itertools.chain.from_iterable(watch.runs()), task.ts, task.ttl_base, task.default_ttl, task.v0
    )
    seq, ts = task.seq, task.ts
    # sorted by key (keys are unique): one list of output rows, built without a call per row
    out = [(key, seq, ts, exp, value) for key, (_k, exp, value) in sorted(rows.items())]
    del rows
    outputs = SstOutput(spec, ts).write(out)
    return {
        "index": task.index,
        "outputs": [(name, info.to_dict()) for name, info in outputs],
        "records": watch.count,
        "bytes": nbytes,
        "episodes": watch.episodes,
    }


__all__ = ["BulkTask", "run_task"]
