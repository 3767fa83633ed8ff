"""One simulation: the real engine, one policy, the spec's operations on a ManualClock.

Nothing is mocked: the DB writes its WAL, flushes real L0 SSTs, compacts and commits manifests in
`directory`. What makes it deterministic is that nothing runs on a thread of its own:

* ``background_compaction=False`` and ``background_flush=False``: a full memtable is flushed inside the
  put that filled it, and compaction runs only when the driver calls ``db.compact()``;
* the driver calls ``db.compact()`` right after every flush (what the background compactor does when a
  flush wakes it: size-tiered jobs run as soon as L0 fills), and at a fixed simulated cadence,
  ``compact_every`` (default 5 min), which is when periodic compaction and the idle-memtable flush get
  their chance, as the background compactor's poll would give them;
* the clock is a `lsm.ManualClock` set to each operation's time before it runs; between operations
  the driver steps it to the next compaction tick or sample, in time order (a tick and a sample at the
  same time: compaction first).

Samples (every ``sample_every``) record the disk by du class (`DiskAccount`), space amplification
(disk bytes / live row bytes), the engine's own cumulative write amplification
(``db.write_amplification()``), SST and L0 counts, compactions by reason (from the engine's event
listener) and the purge-lag histogram so far (``db.compaction_stats.purge_lag``).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

import lsm
from compaction.drop import is_expired
from compaction.filter import Reason
from lsm.events import CompactionInfo, EventListener, FlushInfo
from lsm.options import NO_TTL
from tools.simulate.accounting import DiskAccount
from tools.simulate.spec import Policy, Spec
from tools.simulate.workload import DELETE, GET, PUT, Ops, iter_ops, key_bytes
from tools.simulate.workload import NO_TTL as NO_TTL_OP

REASONS = tuple(r.value for r in Reason)
DAY_MS = 86_400_000
# columns of timeseries.csv, in order (the policy name comes first)
SAMPLE_FIELDS = (
    "t_ms",
    "day",
    "ops",
    "disk_bytes",
    "live_bytes",
    "expired_bytes",
    "tombstone_bytes",
    "shadowed_bytes",
    "space_amplification",
    "write_amplification",
    "ssts",
    "l0",
    *(f"compactions_{r}" for r in REASONS),
    "flushes",
    "purge_lag_count",
    "purge_lag_p50_ms",
    "purge_lag_p99_ms",
    "purge_lag_max_ms",
    "unpurged_expired_rows",
    "oldest_unpurged_expired_ms",
    "unpurged_deleted_rows",
    "oldest_unpurged_delete_ms",
)


class Observer(EventListener):
    """Counts flushes and finished compactions by reason; notes that a flush happened; for drops (whole
    SSTs removed, compaction/drop.py), how long after its last row expired each expired SST went."""

    def __init__(self, clock: lsm.ManualClock | None = None) -> None:
        self.flushed = False
        self.flushes = 0
        self.compactions: Counter[str] = Counter()
        self.clock = clock
        self.manifest: Callable[[], Any] | None = None  # set by the simulation once the DB is open
        self.drop_lags: list[int] = []  # ms from a dropped SST's largest expire_ts to its drop

    def on_compaction_begin(self, info: CompactionInfo) -> None:
        """A drop: note each expired SST's lag (its largest expire_ts is in the manifest, not read)."""
        if info.executor != "drop" or self.manifest is None or self.clock is None:
            return
        now, gone = self.clock.now(), set(info.inputs)
        for e in self.manifest().all_ssts():
            if e.name in gone and is_expired(e, now):  # not one a size cap evicted
                self.drop_lags.append(now - e.info.max_expire_ts)

    def on_flush_end(self, info: FlushInfo) -> None:
        """A flush finished: count it, and note that the driver should call db.compact()."""
        if info.error is None:
            self.flushed = True
            self.flushes += 1

    def on_compaction_end(self, info: CompactionInfo) -> None:
        """A compaction job finished: count it under its reason."""
        if info.error is None:
            self.compactions[str(info.reason)] += 1


@dataclasses.dataclass
class Result:
    """What one simulation produced: its summary (summary.json's object) and its samples."""

    summary: dict[str, Any]
    samples: list[dict[str, Any]]


Progress = Callable[[int, int], None]  # (simulated ms done, operations done)


class Simulation:
    """The spec's operations on one policy, in `directory` (which must not hold a database yet).

    ``run()`` drives it to the end and returns the `Result`; the DB stays open (``db``, ``account``) so
    callers may inspect the directory as it was at the last sample, until ``close()``."""

    def __init__(
        self, spec: Spec, policy: Policy, ops: Ops, directory: str, progress: Progress | None = None
    ) -> None:
        self.spec, self.policy, self.ops, self.directory = spec, policy, ops, directory
        self.progress = progress
        self.clock = lsm.ManualClock(spec.start_ms)
        self.observer = Observer(self.clock)
        # an event listener too: flushes and compactions move rows
        self.account = DiskAccount(directory)
        overrides = dict(policy.options)
        self.default_ttl = overrides.get("default_ttl")
        self.options = lsm.DbOptions(
            clock=self.clock,
            background_compaction=False,
            background_flush=False,
            compaction_process=False,
            event_listeners=(self.observer, self.account),
            **overrides,
        )
        self.db: lsm.DB | None = None
        self.samples: list[dict[str, Any]] = []
        self.ops_done = 0
        self.wall_s = 0.0
        self.cpu_s = 0.0
        self.sample_cpu_s = 0.0  # CPU time of the samples (accounting sync included)

    def run(self) -> Result:
        """Replay every operation, compacting and sampling on the simulated cadences. O(operations)."""
        t_wall, t_cpu = time.perf_counter(), time.process_time()
        spec, ops, clock = self.spec, self.ops, self.clock
        db = self.db = lsm.DB.open(self.directory, self.options)
        self.account.bind(lambda: db.manifest)
        self.observer.manifest = lambda: db.manifest
        account, observer = self.account, self.observer
        c0 = time.process_time()
        account.bind_writes(*write_columns(ops, self.default_ttl))
        self.sample_cpu_s += time.process_time() - c0
        note = account.seqs.append  # each write's seq, in commit order
        sample_every, compact_every = spec.sample_every_ms, spec.compact_every_ms
        next_sample = spec.start_ms + sample_every
        next_compact = spec.start_ms + compact_every
        next_event = min(next_sample, next_compact)
        default_ttl = self.default_ttl
        scan_rows = spec.scan_rows
        put, delete, get, value = db.put, db.delete, db.get, ops.value
        i = 0
        for i, (t, op, k, vlen, ttl) in enumerate(iter_ops(ops)):
            if t >= next_event:
                self.ops_done = i
                next_sample, next_compact = self._events_until(t, next_sample, next_compact)
                next_event = min(next_sample, next_compact)
            clock.set(t)
            key = key_bytes(k)
            if op == PUT:
                if ttl == NO_TTL_OP:
                    ttl = default_ttl
                note(put(key, value(i, vlen), NO_TTL if ttl is None else ttl))
            elif op == DELETE:
                note(delete(key))
            elif op == GET:
                get(key)
            else:
                for _ in itertools.islice(db.scan(start=key), scan_rows):
                    pass
            if observer.flushed:
                observer.flushed = False
                db.compact()
        self.ops_done = len(ops)
        end = ops.end_ms
        self._events_until(end, next_sample, next_compact)
        if not self.samples or self.samples[-1]["t_ms"] != end:
            clock.set(max(end, clock.now()))
            self._sample(end)
        c0 = time.process_time()
        self.account.verify(db.manifest, end)  # one recount of the files: the account did not drift
        self.sample_cpu_s += time.process_time() - c0
        self.wall_s = time.perf_counter() - t_wall
        self.cpu_s = time.process_time() - t_cpu
        return Result(self.summary(), self.samples)

    def _events_until(self, t: int, next_sample: int, next_compact: int) -> tuple[int, int]:
        """Run the compaction ticks and samples due at or before `t`, in time order."""
        while min(next_sample, next_compact) <= t:
            if next_compact <= next_sample:
                self.clock.set(next_compact)
                self.db.compact()
                self.observer.flushed = False
                next_compact += self.spec.compact_every_ms
            else:
                self.clock.set(next_sample)
                self._sample(next_sample)
                next_sample += self.spec.sample_every_ms
        return next_sample, next_compact

    def _sample(self, now: int) -> None:
        c0 = time.process_time()
        db, acct = self.db, self.account
        m = db.manifest
        acct.sync(m, now)
        c = acct.classes()
        lag = db.compaction_stats.purge_lag
        wa = db.write_amplification()
        live = c["live_bytes"]
        row: dict[str, Any] = {
            "t_ms": now,
            "day": round((now - self.spec.start_ms) / DAY_MS, 6),
            "ops": self.ops_done,
            "disk_bytes": acct.disk_bytes,
            "live_bytes": live,
            "expired_bytes": c["expired_bytes"],
            "tombstone_bytes": c["tombstone_bytes"],
            "shadowed_bytes": c["shadowed_bytes"],
            "space_amplification": round(acct.disk_bytes / live, 6) if live else None,
            "write_amplification": round(wa, 6),
            "ssts": len(m.l0) + sum(len(r.ssts) for r in m.runs),
            "l0": len(m.l0),
            **{f"compactions_{r}": self.observer.compactions[r] for r in REASONS},
            "flushes": self.observer.flushes,
            "purge_lag_count": lag.count,
            "purge_lag_p50_ms": lag.quantile(0.5),
            "purge_lag_p99_ms": lag.quantile(0.99),
            "purge_lag_max_ms": lag.max if lag.count else None,
            **acct.unpurged(now),
        }
        self.samples.append(row)
        self.sample_cpu_s += time.process_time() - c0
        if self.progress is not None:
            self.progress(now - self.spec.start_ms, self.ops_done)

    def summary(self) -> dict[str, Any]:
        """summary.json's object for this policy (the pinned fields first)."""
        last = self.samples[-1]
        lag = self.db.compaction_stats.purge_lag
        c = self.account.classes()
        overdue = [
            s["oldest_unpurged_expired_ms"]
            for s in self.samples
            if s["oldest_unpurged_expired_ms"] is not None
        ]
        interval = dict(self.policy.options).get("periodic_compaction_interval")
        return {
            "name": self.policy.name,
            "ops": len(self.ops),
            "simulated_ms": self.ops.end_ms - self.spec.start_ms,
            "wall_s": round(self.wall_s, 3),
            "cpu_s": round(self.cpu_s, 3),  # this process's CPU time (steadier than wall on a busy machine)
            # of which the accounting: taking the samples, applying the writes, following the flushes and
            # compactions (all that the simulation adds to the engine's work, bar one list append per write)
            "sample_cpu_s": round(self.sample_cpu_s + self.account.event_cpu_s, 3),
            "write_amplification": last["write_amplification"],
            "space_amplification_final": last["space_amplification"],
            "disk_bytes_final": last["disk_bytes"],
            "live_bytes_final": last["live_bytes"],
            "expired_bytes_final": last["expired_bytes"],
            "tombstone_bytes_final": last["tombstone_bytes"],
            "shadowed_bytes_final": last["shadowed_bytes"],
            "purge_lag_ms": {
                "count": lag.count,
                "p50": lag.quantile(0.5),
                "p99": lag.quantile(0.99),
                "max": lag.max,
            },
            "unpurged_expired_rows_final": last["unpurged_expired_rows"],
            "compactions": {r: self.observer.compactions[r] for r in REASONS},
            # beyond the pinned fields
            "rows_final": {k: v for k, v in c.items() if k.endswith("_rows")},
            "oldest_unpurged_expired_ms_final": last["oldest_unpurged_expired_ms"],
            "max_unpurged_expired_ms": max(overdue) if overdue else None,
            "unpurged_deleted_rows_final": last["unpurged_deleted_rows"],
            "periodic_compaction_interval_ms": interval,
            "flushes": self.observer.flushes,
            "ssts_final": last["ssts"],
            "l0_final": last["l0"],
            "samples": len(self.samples),
            "ops_by_kind": self.ops.counts(),
            "purge_lag_histogram": lag.to_dict()["buckets"],
            "ssts_read_for_accounting": self.account.ssts_read,
            # drops (fifo): from each expired SST's last expiry (its largest expire_ts) to its removal
            "sst_drop_lag_ms": {
                "count": len(self.observer.drop_lags),
                "max": max(self.observer.drop_lags, default=None),
            },
        }

    def close(self) -> None:
        """Close the DB (this flushes its memtable: the directory then no longer matches the last sample)."""
        if self.db is not None:
            self.db.close()
            self.db = None


def write_columns(ops: Ops, default_ttl: int | None) -> tuple[np.ndarray, ...]:
    """The puts and deletes of `ops` in order, as `DiskAccount.bind_writes` takes them: key index, ts,
    expire_ts (-1: none; a put without a TTL of its own gets `default_ttl`) and value length (-1: a
    delete). O(operations), on whole columns."""
    op = np.asarray(ops.op)
    at = np.flatnonzero((op == PUT) | (op == DELETE))
    dele = op[at] == DELETE
    t = np.asarray(ops.t)[at]
    ttl = np.asarray(ops.ttl)[at]
    ttl = np.where(ttl == NO_TTL_OP, -1 if default_ttl is None else default_ttl, ttl)
    expire = np.where(dele | (ttl < 0), -1, t + ttl)
    vlen = np.where(dele, -1, np.asarray(ops.vlen)[at])
    return np.asarray(ops.key)[at].astype(np.int64), t.astype(np.int64), expire, vlen.astype(np.int64)


def options_summary(policy: Policy) -> dict[str, Any]:
    """The policy's DbOptions overrides as JSON-able values (filters by their class path)."""
    out: dict[str, Any] = {}
    for k, v in policy.options:
        if k == "compaction_filters":
            v = [f"{type(f).__module__}:{type(f).__qualname__}" for f in v]
        out[k] = v
    return out


__all__ = ["Simulation", "Result", "Observer", "SAMPLE_FIELDS", "REASONS", "options_summary"]
