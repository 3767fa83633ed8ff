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

On an object store (the spec's ``store``: "memory" or an s3:// URL) the database lives under a fresh
prefix there, and the WAL's group commit follows the simulated clock too: the last write of each
``wal_flush_interval_ms`` of simulated time is written with ``sync=True`` (one WAL object per interval
with writes), and the WAL's wall-clock flusher never fires. The store's clocks (`storage.Storage.clock`)
are the simulated clock (`SimulatedTime`), so the WAL's two guards run on it as well: a WAL object is
deleted once it is `wal_grace_ms` old in simulated time, and a writer idle for longer than its recheck
window of simulated time checks the manifest before its next object. At every simulated midnight the engine's requests of the day
are recorded (`tools.simulate.costs`); none of them depends on how fast the simulation runs.

Samples (every ``sample_every``) record the disk by du class (`DiskAccount`), space amplification
(disk bytes / live row bytes), the engine's own cumulative write amplification
(``db.write_amplification()``), SST and L0 counts, compactions by reason (from the engine's event
listener) and the purge-lag histogram so far (``db.compaction_stats.purge_lag``).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

import lsm
from compaction.drop import is_expired
from compaction.filter import Reason
from lsm.events import CompactionInfo, EventListener, FlushInfo
from lsm.options import NO_TTL, redacted_store_options
from storage import detach, register
from tools.simulate import costs
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
# more columns of a simulation on an object store: its requests so far, by kind
REQUEST_FIELDS = tuple(f"requests_{k}" for k in costs.REQUEST_KINDS)
# on an object store the WAL is group-committed on the simulated clock (see Simulation); its flusher
# thread, which would commit on the wall clock, is given an interval it never reaches
WALL_NEVER_MS = 10**9
NEVER_MS = 2**62


class SimulatedTime:
    """The clocks of a simulation's object store (`storage.RealTime`'s interface), read off the
    simulation's `lsm.ManualClock`: object ages (the WAL's deletion grace) and a WAL writer's idle time
    are simulated time, and the store stamps what it writes by it (`storage.objclient.StampedClient`).

    Against other processes these guards must stay on the wall clock, which is when a slow or fenced
    writer's requests really land. A simulation is one process with no other writer, and its simulated
    clock is the only time anything in it happens on: judged by the wall clock instead, the requests a
    simulated day makes (the WAL's DELETEs, the LIST pages of what is left, the manifest checks) would
    depend on how fast the host ran the simulation. Only `sleep` is real: a retry's backoff waits for a
    real server (moto, S3), which lives on the wall clock. The retry window (``retry_timeout_ms``) is
    simulated time, which stands still during a request, so retries are bounded by ``max_retries`` alone."""

    def __init__(self, clock: lsm.ManualClock) -> None:
        self.clock = clock

    def time(self) -> float:
        """Simulated seconds since the epoch."""
        return self.clock.now() / 1000

    def monotonic(self) -> float:
        """The same simulated seconds (the simulation's clock never goes back)."""
        return self.clock.now() / 1000

    @staticmethod
    def sleep(seconds: float) -> None:
        """Wait `seconds` of real time."""
        time.sleep(seconds)


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
        overrides = dict(policy.options)
        self.default_ttl = overrides.get("default_ttl")
        # the database: in `directory`, or under a fresh prefix of the spec's object store, whose
        # requests the simulation counts per simulated day (tools.simulate.costs)
        self.objects = spec.store != "local"
        self.path = directory if not self.objects else object_url(spec.store)
        self.wal_interval_ms = overrides.get("wal_flush_interval_ms", lsm.DbOptions.wal_flush_interval_ms)
        if self.objects:
            self.storage = register(self.path, overrides.get("object_store_options"), clock=SimulatedTime(self.clock))
            overrides["wal_flush_interval_ms"] = WALL_NEVER_MS
        # an event listener too: flushes and compactions move rows
        self.account = DiskAccount(self.path)
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
        self.days: list[dict[str, Any]] = []  # object stores: one costs.day_row per simulated day
        self._next_day = spec.start_ms + DAY_MS if self.objects else NEVER_MS
        self._day_start = spec.start_ms
        self._day_base: dict[str, int] = {}

    def run(self) -> Result:
        """Replay every operation, compacting and sampling on the simulated cadences. O(operations)."""
        t_wall, t_cpu = time.perf_counter(), time.process_time()
        spec, ops, clock = self.spec, self.ops, self.clock
        if self.objects:
            self._day_base = self._engine_requests()  # the open's requests count on day 0
        db = self.db = lsm.DB.open(self.path, self.options)
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
        next_event = min(next_sample, next_compact, self._next_day)
        default_ttl = self.default_ttl
        scan_rows = spec.scan_rows
        put, delete, get, value = db.put, db.delete, db.get, ops.value
        # on an object store, the last write of each WAL flush interval of simulated time commits the
        # interval's writes as one WAL object, as the WAL's flusher does in real time
        commits = wal_commits(ops, self.wal_interval_ms) if self.objects else None
        sync = lsm.WriteOptions(sync=True)
        i = 0
        for i, (t, op, k, vlen, ttl) in enumerate(iter_ops(ops)):
            if t >= next_event:
                self.ops_done = i
                next_sample, next_compact = self._events_until(t, next_sample, next_compact)
                next_event = min(next_sample, next_compact, self._next_day)
            clock.set(t)
            key = key_bytes(k)
            if op == PUT:
                if ttl == NO_TTL_OP:
                    ttl = default_ttl
                wo = sync if commits is not None and commits[i] else None
                note(put(key, value(i, vlen), NO_TTL if ttl is None else ttl, wo))
            elif op == DELETE:
                note(delete(key, sync if commits is not None and commits[i] else None))
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
        if self.objects and end > self._day_start:
            self._close_day(end)  # the last, partial day
        c0 = time.process_time()
        self.account.verify(db.manifest, end)  # one recount of the files: the account did not drift
        self.sample_cpu_s += time.process_time() - c0
        self.wall_s = time.perf_counter() - t_wall
        self.cpu_s = time.process_time() - t_cpu
        return Result(self.summary(), self.samples)

    def _events_until(self, t: int, next_sample: int, next_compact: int) -> tuple[int, int]:
        """Run the compaction ticks, the ends of simulated days (object stores) and the samples due at
        or before `t`, in time order (at one time: compaction, then the day's end, then the sample)."""
        while min(next_sample, next_compact, self._next_day) <= t:
            if next_compact <= min(next_sample, self._next_day):
                self.clock.set(next_compact)
                self.db.compact()
                self.observer.flushed = False
                next_compact += self.spec.compact_every_ms
            elif self._next_day <= next_sample:
                self.clock.set(self._next_day)
                self._close_day(self._next_day)
                self._next_day += DAY_MS
            else:
                self.clock.set(next_sample)
                self._sample(next_sample)
                next_sample += self.spec.sample_every_ms
        return next_sample, next_compact

    def _engine_requests(self) -> dict[str, int]:
        """The engine's object-store requests so far: the store's counters less the account's own."""
        return costs.delta(self.storage.stats(), self.account.requests)

    def _close_day(self, now: int) -> None:
        """End the simulated day that ends at `now`: its requests, its stored bytes, their cost."""
        counts = self._engine_requests()
        stored = sum(e.size for e in self.db.manifest.all_ssts())
        day = (self._day_start - self.spec.start_ms) // DAY_MS
        days = (now - self._day_start) / DAY_MS
        self.days.append(costs.day_row(day, days, costs.delta(counts, self._day_base), stored, self.spec.prices))
        self._day_base = counts
        self._day_start = now

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
        if self.objects:
            got = self._engine_requests()
            row.update({f"requests_{k}": got[k] for k in costs.REQUEST_KINDS})
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
            **({"object_store": self.object_store_summary()} if self.objects else {}),
        }

    def object_store_summary(self) -> dict[str, Any]:
        """summary.json's ``object_store``: requests per day and the monthly cost (tools.simulate.costs)."""
        return costs.summarize(self.spec.store, self.days, self.spec.prices, self.account.requests)

    def close(self) -> None:
        """Close the DB (this flushes its memtable: the directory then no longer matches the last sample).
        On an object store, then delete the database's objects and forget its store (storage.registry)."""
        if self.db is not None:
            self.db.close()
            self.db = None
        if self.objects:
            st = self.storage
            for sub in ("manifest", "wal", "sst", ""):
                d = os.path.join(self.path, sub) if sub else self.path
                for name in st.list_names(d):
                    st.delete(os.path.join(d, name))
            detach(self.path)


def object_url(store: str) -> str:
    """A fresh database URL in the spec's `store`: ``memory://lsm-sim/<id>/db``, ``<s3 url>/<id>/db``."""
    base = "memory://lsm-sim" if store == "memory" else store
    return f"{base}/{uuid.uuid4().hex[:16]}/db"


def wal_commits(ops: Ops, interval_ms: int) -> np.ndarray:
    """For each operation, whether it is the last write (put or delete) of its WAL flush interval of
    simulated time (``t // interval_ms``): where the simulation commits the interval's WAL object."""
    op = np.asarray(ops.op)
    at = np.flatnonzero((op == PUT) | (op == DELETE))
    out = np.zeros(len(op), bool)
    if len(at):
        bucket = np.asarray(ops.t)[at] // interval_ms
        last = np.append(bucket[1:] != bucket[:-1], True)
        out[at[last]] = True
    return out  # a bool array, not a list: a byte per operation, at most 10^8 of them


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
        elif k == "object_store_options" and isinstance(v, dict):  # summary.json, policies.csv, the table
            v = redacted_store_options(v)
        out[k] = v
    return out


__all__ = ["Simulation", "Result", "Observer", "SAMPLE_FIELDS", "REASONS", "options_summary"]
