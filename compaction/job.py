"""What a compaction is given and what it gives back: the job (everything a merge needs, picklable for
a worker process or a Spark task), its stats and its result. The merge itself is compaction.merge."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from compaction.filter import Reason
from compaction.output import OutputSpec
from compaction.purge_lag import PurgeLag
from formats.sst import SsTableInfo


@dataclasses.dataclass
class FilterCounts:
    """What one compaction filter did in a job: rows changed, removed (tombstoned) and dropped."""

    changed: int = 0
    removed: int = 0
    dropped: int = 0


@dataclasses.dataclass
class CompactionStats:
    """What compactions did; `DB.compaction_stats` accumulates them."""

    jobs: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    rows_in: int = 0
    rows_out: int = 0
    versions_dropped: int = 0  # shadowed versions no snapshot needed
    tombstones_dropped: int = 0
    expired_dropped: int = 0
    # the largest seq of a version a merge dropped or rewrote: reading history by seq is exact above it
    history_floor: int = 0
    filters: dict[str, FilterCounts] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    read_seconds: float = 0.0  # decoding input blocks
    write_seconds: float = 0.0  # encoding, writing and fsyncing outputs (the rest is the merge itself)
    # ms from expiry (or delete) to physical removal of every expired row and tombstone dropped
    purge_lag: PurgeLag = dataclasses.field(default_factory=PurgeLag)
    # phases of a job as the DB runs it (lsm/compactor.py): picking and preparing the job, running it
    # on its executor, committing the manifest edit (seconds above is their sum, roughly)
    plan_seconds: float = 0.0
    execute_seconds: float = 0.0
    commit_seconds: float = 0.0
    # trivial moves (compaction/trivial_move.py): SSTs listed in a new run unchanged, not rewritten
    moved_files: int = 0
    moved_bytes: int = 0
    # whole SSTs a policy dropped by a manifest edit (compaction/drop.py), and their rows dropped for a
    # size cap rather than for expiry (every input row is still accounted for)
    dropped_files: int = 0
    dropped_bytes: int = 0
    evicted_rows: int = 0
    # with CompactionJob.report_changes: (key, seq, new row or None when dropped) of each key whose newest
    # version among the inputs was dropped or rewritten (filters, the oldest-run purge); per job, never summed
    changed_rows: list[tuple] | None = None

    def add(self, other: CompactionStats) -> CompactionStats:
        """Add `other` into this one (in place; histograms merge) and return self."""
        for f in dataclasses.fields(self):
            if f.name == "purge_lag":
                self.purge_lag.merge(other.purge_lag)
            elif f.name == "filters":
                for name, c in other.filters.items():
                    mine = self.filters.setdefault(name, FilterCounts())
                    mine.changed += c.changed
                    mine.removed += c.removed
                    mine.dropped += c.dropped
            elif f.name == "changed_rows":
                continue
            elif f.name == "history_floor":
                self.history_floor = max(self.history_floor, other.history_floor)
            else:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain types only (JSON-ready); `from_dict` is the inverse."""
        d = dataclasses.asdict(dataclasses.replace(self, purge_lag=PurgeLag()))
        d["purge_lag"] = self.purge_lag.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CompactionStats:
        """The stats `to_dict` gave (what a Spark task or the worker process sends back)."""
        d = dict(d)
        d["filters"] = {k: FilterCounts(**v) for k, v in d.get("filters", {}).items()}
        if "purge_lag" in d:
            d["purge_lag"] = PurgeLag.from_dict(d["purge_lag"])
        return cls(**d)


@dataclasses.dataclass(frozen=True)
class CompactionJob:
    """Everything a merge needs, and nothing of the DB: picklable, so Spark tasks can run it."""

    sources: tuple[tuple[str, ...], ...]  # SST paths; one inner tuple per sorted source, newest first
    inputs: tuple[SsTableInfo, ...]
    is_last_run: bool
    tick: int
    reason: Reason
    output: OutputSpec
    filters: tuple[Any, ...] = ()  # CompactionFilterFactory objects
    snapshots: tuple[int, ...] = ()  # live snapshot seqs, ascending
    retention_cutoff: int | None = None  # keep versions whose successor has ts > cutoff
    # keys starting with this prefix are the engine's own (lsm.syskeys): no filter ever sees them
    protected_prefix: bytes | None = None
    start: bytes | None = None  # key range of this job (Spark tasks); None = unbounded
    end: bytes | None = None
    # note in stats.changed_rows what became of each key's newest input version when it did not come
    # out unchanged (an accounting event listener asks for it: lsm.events.EventListener.wants_changed_rows)
    report_changes: bool = False
    # applied to every merged batch (rows (key, seq, ts, expire_ts, value)) before resolution; must keep
    # keys and seqs as they are. Used by lsm.clock_repair to move far-future timestamps back; picklable
    row_map: Callable[[list[tuple]], list[tuple]] | None = None

    @property
    def input_bytes(self) -> int:
        """The total file size of the job's inputs."""
        return sum(i.file_size for i in self.inputs)


@dataclasses.dataclass
class MergeResult:
    """What an executor returns: the output SSTs (name, SsTableInfo), in key order, and the stats."""

    outputs: list[tuple[str, SsTableInfo]]
    stats: CompactionStats


__all__ = ["CompactionJob", "CompactionStats", "FilterCounts", "MergeResult"]
