"""What to compact next: size-tiered and periodic picking.

The LSM has L0 (overlapping SSTs, newest first) and sorted runs (non-overlapping SSTs each, newest run
first), as in SlateDB. A job always takes the oldest part of L0 and/or adjacent runs, so the seq ranges of
the structures stay ordered (newer above older) and the read path may stop at the first version it finds.

Size-tiered (checked first):
  1. L0 holds ``l0_compaction_threshold`` SSTs or more: all of L0 becomes one new run at the top. The
     newest runs join the job while each is no bigger than ``size_ratio`` x what the job holds so far
     (up to ``max_merge_inputs`` runs), so a small run does not linger above a tiny new one.
  2. Otherwise, two or more adjacent runs of similar size merge: starting from the newest run, a window
     grows while the next older run is at most ``size_ratio`` x the window's bytes; the first window of
     two or more runs wins (at most ``max_merge_inputs``). Run sizes thus grow geometrically and the
     number of runs stays logarithmic in the data size.

``min_merge_width`` (w, default 2) is the fan-in of this tiering: a window of runs merges only when it
holds at least w runs, and an L0 job takes runs along only when at least w - 1 of them fit the ratio
(else its output is a new run on top). Jobs smaller than ``wide_merge_min_bytes`` (the DB passes its
``target_sst_bytes``) merge pairwise whatever w says: rewriting them costs little, and it keeps the
number of small runs down. With w = 2 every pair of similar runs merges at once, so young
data is rewritten about log2(data / L0 job) times; a larger w lets w runs of one size gather before one
merge writes them, about log_w times: less write amplification for a few more runs to read.

Periodic (the SlateDB TTL RFC's best effort): an SST holding TTL rows or tombstones whose creation_timestamp is older
than ``periodic_compaction_interval`` (stretched by a per-SST jitter of up to
``periodic_compaction_jitter`` x the interval, derived from its name so it is stable) is due. The job
reaches from the newest structure holding a due SST down to the oldest run, so the output is the oldest
run and expired rows and tombstones are physically removed. With ``periodic_compaction_max_bytes`` set
and a reach-down job bigger than that, and when due SSTs sit in the oldest run, the job instead rewrites
in place a window of adjacent SSTs of the oldest run, starting at its first due SST, up to the cap (at
least one SST).

Above the oldest run an SST's age is that of its oldest row (``min_ts`` when older than its
creation_timestamp): a size-tiered job that rewrites a tombstone or a TTL row into a new run on top must
not restart its clock, or steady writes would keep it (and the older versions it shadows in the oldest
run) on disk forever. The oldest run is judged by creation_timestamp only: its rewrites keep rows' ts, so
judging it by row age would rewrite it again and again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import xxhash

from compaction.filter import Reason
from formats.errors import CompactionError
from formats.manifest import Manifest, SortedRun, SstEntry


@dataclasses.dataclass(frozen=True)
class SchedulerOptions:
    """The scheduler's knobs, copied from `DbOptions` (same names, same meaning)."""

    l0_compaction_threshold: int = 4
    size_ratio: float = 2.0
    max_merge_inputs: int = 8
    min_merge_width: int = 2
    wide_merge_min_bytes: int = 0  # jobs smaller than this merge pairwise whatever min_merge_width says
    periodic_compaction_interval: int | None = None
    periodic_compaction_jitter: float = 0.0
    periodic_compaction_max_bytes: int | None = None

    @classmethod
    def from_options(cls, o: Any) -> SchedulerOptions:
        """The knobs of a `lsm.DbOptions` (or anything with fields of the same names): every field this
        class has is copied by name, and ``wide_merge_min_bytes`` is the DB's ``target_sst_bytes``."""
        kw = {f.name: getattr(o, f.name) for f in dataclasses.fields(cls) if hasattr(o, f.name)}
        if hasattr(o, "target_sst_bytes"):
            kw["wide_merge_min_bytes"] = o.target_sst_bytes
        return cls(**kw)


@dataclasses.dataclass(frozen=True)
class Plan:
    """One compaction: which inputs, and where the output goes.

    ``l0`` names the L0 SSTs taken (always the oldest ones); ``runs`` the ids of the adjacent runs
    merged; ``partial`` = (run id, SST names) for an in-place rewrite of part of one run (the outputs
    go into that run; the names may be empty, when only ``l0`` or ``lifted`` feed it). ``lifted`` =
    (run id, SST names) takes SSTs out of a newer run into the job, whose outputs go to the ``partial``
    run (a leveled push, compaction/leveled.py); ``taken`` does the same for any number of runs (a range
    compaction, `pick_range`). ``drop`` names
    SSTs (anywhere) that leave the manifest with no merge and no output: a plan with ``drop`` has no
    other inputs (compaction/fifo.py).
    """

    reason: Reason
    l0: tuple[str, ...] = ()
    runs: tuple[int, ...] = ()
    partial: tuple[int, tuple[str, ...]] | None = None
    is_last_run: bool = False
    drop: tuple[str, ...] = ()
    lifted: tuple[int, tuple[str, ...]] | None = None
    taken: tuple[tuple[int, tuple[str, ...]], ...] = ()

    def input_entries(self, l0: Sequence[SstEntry], runs: Sequence[SortedRun]) -> list[list[SstEntry]]:
        """The inputs as sorted sources, newest first: each L0 SST alone, then each run."""
        names = set(self.l0)
        sources = [[e] for e in l0 if e.name in names]
        for r in runs:
            if r.id in self.runs:
                sources.append(list(r.ssts))
            for part in (*self.taken, self.lifted, self.partial):
                if part is not None and r.id == part[0] and part[1]:
                    wanted = set(part[1])
                    sources.append([e for e in r.ssts if e.name in wanted])
        return sources


def _size(entries: Sequence[SstEntry]) -> int:
    return sum(e.info.file_size for e in entries)


def pick_full(l0: Sequence[SstEntry], runs: Sequence[SortedRun]) -> Plan | None:
    """Everything into one run (a manual full compaction)."""
    if not l0 and not runs:
        return None
    return Plan(Reason.MANUAL, tuple(e.name for e in l0), tuple(r.id for r in runs), None, True)


def _overlaps(e: SstEntry, lo: bytes | None, hi: bytes | None, hi_inclusive: bool) -> bool:
    first, last = e.info.first_key, e.info.last_key
    below_hi = hi is None or (first <= hi if hi_inclusive else first < hi)
    return below_hi and (lo is None or last >= lo)


def pick_range(
    l0: Sequence[SstEntry], runs: Sequence[SortedRun], start: bytes | None, end: bytes | None
) -> Plan | None:
    """A manual compaction of the keys in [start, end) (None: unbounded), RocksDB's CompactRange: every
    SST whose key range overlaps it is merged, from L0 and from every run, and the outputs replace the
    oldest run's SSTs among them in the oldest run (tombstones and expired rows are dropped there). None
    when no SST overlaps.

    The inputs are closed under overlap: the range grows to the union of the chosen SSTs' key ranges, and
    any SST overlapping that joins, until none does. So no SST left out overlaps an output: the outputs'
    SSTs sit beside the oldest run's others without overlapping them, and the read order (newer sources
    first, for keys they share) holds, since no newer source shares a key with an output."""
    entries = [(None, e) for e in l0] + [(r.id, e) for r in runs for e in r.ssts]
    chosen = [_overlaps(e, start, end, False) for _, e in entries]
    while any(chosen):
        lo = min(e.info.first_key for (_, e), c in zip(entries, chosen, strict=True) if c)
        hi = max(e.info.last_key for (_, e), c in zip(entries, chosen, strict=True) if c)
        grown = [c or _overlaps(e, lo, hi, True) for (_, e), c in zip(entries, chosen, strict=True)]
        if grown == chosen:
            break
        chosen = grown
    if not any(chosen):
        return None
    names = {e.name for (_, e), c in zip(entries, chosen, strict=True) if c}
    take_l0 = tuple(e.name for e in l0 if e.name in names)
    if not runs:
        return Plan(Reason.MANUAL, take_l0, (), None, is_last_run=True)
    taken = tuple(
        (r.id, tuple(e.name for e in r.ssts if e.name in names))
        for r in runs[:-1]
        if any(e.name in names for e in r.ssts)
    )
    bottom = runs[-1]
    partial = (bottom.id, tuple(e.name for e in bottom.ssts if e.name in names))
    return Plan(Reason.MANUAL, take_l0, (), partial, is_last_run=True, taken=taken)


def pick_size_tiered(l0: Sequence[SstEntry], runs: Sequence[SortedRun], o: SchedulerOptions) -> Plan | None:
    """A size-tiered job: when L0 holds `l0_compaction_threshold` SSTs, all of L0 plus the newest runs
    while each is at most `size_ratio` times what is merged above it; otherwise the first group of two
    or more adjacent runs that fits the same ratio (at most `max_merge_inputs`); else None."""
    if len(l0) >= o.l0_compaction_threshold:
        acc = _size(l0)
        take: list[int] = []
        for r in runs:
            if len(take) >= o.max_merge_inputs or r.size > o.size_ratio * acc:
                break
            take.append(r.id)
            acc += r.size
        if len(take) < o.min_merge_width - 1 and acc >= o.wide_merge_min_bytes:
            take = []  # too few runs of its size yet: the new run waits on top, nothing is rewritten twice
        return Plan(
            Reason.SIZE_TIERED,
            tuple(e.name for e in l0),
            tuple(take),
            None,
            is_last_run=len(take) == len(runs),
        )
    for i in range(len(runs) - 1):
        acc = runs[i].size
        j = i + 1
        while j < len(runs) and j - i < o.max_merge_inputs and runs[j].size <= o.size_ratio * acc:
            acc += runs[j].size
            j += 1
        width = o.min_merge_width if acc >= o.wide_merge_min_bytes else 2
        if j - i >= max(2, width):
            return Plan(
                Reason.SIZE_TIERED, (), tuple(r.id for r in runs[i:j]), None, is_last_run=j == len(runs)
            )
    return None


def is_due(e: SstEntry, tick: int, o: SchedulerOptions, *, by_rows: bool = False) -> bool:
    """Does this SST hold TTL rows or tombstones and is it older than the (jittered) interval?

    by_rows=True (SSTs above the oldest run): its age is that of its oldest row if that is older."""
    interval = o.periodic_compaction_interval
    if interval is None:
        return False
    i = e.info
    if not (i.num_tombstones or i.num_expiring):
        return False
    jitter = 0
    if o.periodic_compaction_jitter:
        frac = xxhash.xxh3_64_intdigest(e.name.encode()) / 2**64
        jitter = int(interval * o.periodic_compaction_jitter * frac)
    born = i.creation_timestamp
    if by_rows and i.min_ts is not None and i.min_ts < born:
        born = i.min_ts
    return tick - born >= interval + jitter


def pick_periodic(
    l0: Sequence[SstEntry], runs: Sequence[SortedRun], tick: int, o: SchedulerOptions
) -> Plan | None:
    """A periodic job when an SST with TTL rows or tombstones is older than
    `periodic_compaction_interval` (plus jitter): it rewrites down to the oldest run, or, when that would
    exceed `periodic_compaction_max_bytes`, a window of the oldest run; else None."""
    if o.periodic_compaction_interval is None:
        return None
    due_l0 = [k for k, e in enumerate(l0) if is_due(e, tick, o, by_rows=True)]
    bottom = len(runs) - 1
    due_runs = [
        k for k, r in enumerate(runs) if any(is_due(e, tick, o, by_rows=k < bottom) for e in r.ssts)
    ]
    if not due_l0 and not due_runs:
        return None
    if due_l0:
        take_l0 = tuple(e.name for e in l0[due_l0[0] :])
        take_runs = tuple(r.id for r in runs)
    else:
        take_l0 = ()
        take_runs = tuple(r.id for r in runs[due_runs[0] :])
    cap = o.periodic_compaction_max_bytes
    if cap is not None and runs and due_runs and due_runs[-1] == len(runs) - 1:
        total = _size([e for e in l0 if e.name in set(take_l0)]) + sum(
            r.size for r in runs if r.id in set(take_runs)
        )
        if total > cap:
            last = runs[-1]
            first = next(k for k, e in enumerate(last.ssts) if is_due(e, tick, o))
            window = [last.ssts[first]]
            acc = window[0].size
            for e in last.ssts[first + 1 :]:
                if acc + e.size > cap:
                    break
                window.append(e)
                acc += e.size
            return Plan(Reason.PERIODIC, (), (), (last.id, tuple(e.name for e in window)), True)
    return Plan(Reason.PERIODIC, take_l0, take_runs, None, is_last_run=True)


def pick(
    l0: Sequence[SstEntry], runs: Sequence[SortedRun], tick: int, o: SchedulerOptions
) -> Plan | None:
    """The next job the scheduler wants, or None when nothing is due."""
    return pick_size_tiered(l0, runs, o) or pick_periodic(l0, runs, tick, o)


def apply_plan(
    m: Manifest, plan: Plan, outputs: tuple[SstEntry, ...], tick: int, history_floor: int = 0
) -> Manifest:
    """The manifest after `plan` produced `outputs` (raises CompactionError if its inputs are gone).

    `history_floor` is the largest seq of a version the job dropped or rewrote (`CompactionStats`)."""
    if plan.drop:
        return _apply_drop(m, plan, history_floor)
    l0_names = {e.name for e in m.l0}
    run_ssts = {r.id: {e.name for e in r.ssts} for r in m.runs}
    gone_partial = any(
        part is not None and (part[0] not in run_ssts or not set(part[1]) <= run_ssts[part[0]])
        for part in (plan.partial, plan.lifted, *plan.taken)
    )
    if not set(plan.l0) <= l0_names or not set(plan.runs) <= run_ssts.keys() or gone_partial:
        raise CompactionError("the compaction's inputs changed before it could commit")
    gone = set(plan.l0)
    new_l0 = tuple(e for e in m.l0 if e.name not in gone)
    runs = list(m.runs)
    next_run_id = m.next_run_id
    for rid, names in (*plan.taken, *(() if plan.lifted is None else (plan.lifted,))):
        # out of a newer run; the outputs go to the partial run below
        idx = next(k for k, r in enumerate(runs) if r.id == rid)
        kept = tuple(e for e in runs[idx].ssts if e.name not in set(names))
        if kept:
            runs[idx] = SortedRun(rid, kept)
        else:
            del runs[idx]
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


def _apply_drop(m: Manifest, plan: Plan, history_floor: int) -> Manifest:
    """The manifest without the SSTs `plan.drop` names (a run left with none goes)."""
    gone = set(plan.drop)
    if not gone <= {e.name for e in m.all_ssts()}:
        raise CompactionError("the compaction's inputs changed before it could commit")
    runs = tuple(
        SortedRun(r.id, kept) for r in m.runs if (kept := tuple(e for e in r.ssts if e.name not in gone))
    )
    return m.replace(
        l0=tuple(e for e in m.l0 if e.name not in gone),
        runs=runs,
        history_floor=max(m.history_floor, history_floor),
    )
