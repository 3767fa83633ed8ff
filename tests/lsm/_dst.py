"""Deterministic simulation of the whole engine on a simulated object store (storage.simstore), from one seed.

One seed is one run: a sequence of writer sessions (each a writable open, which fences the one before it
without telling it), a read-only reader and their operations (puts, deletes, batches, sync and plain
writes, WAL flushes, flushes, compactions, gc with short graces, streaming ingest of a partitioned log,
closes and abandoned handles) against one database on a `SimClient` whose latencies, failures, lost
responses and held (late-landing) requests come from the same seed. Every write gets a unique value, so
what a read returns names the write it came from. At the end the store is opened once more with no
faults and checked against the model:

* no acknowledged write lost: every write acknowledged as durable (`sync=True`, or followed by a durable
  point of its handle: a sync write, `flush_wal`, `flush`, `close`) is visible, or overwritten by a write
  with a higher seq;
* no fenced write visible: a write that raised `FencedError` is never returned by a read, then or later;
* no value that was never written, and a visible row carries its write's seq;
* the store opens and `lsm check` finds nothing wrong; every ingest acknowledged is there (frontier at
  least what it returned, every record below the frontier visible, none above).

`run_seed(seed)` returns a `SeedResult`; a violation is a line in its `problems`. The seed reproduces the
run exactly (`trace_digest` is the same on every run of it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import tempfile

import lsm
from lsm.errors import DbFailedError, FencedError, LsmError
from lsm.sources import LogWriter, PartitionedLog
from storage import attach, detach
from storage.objstore import ObjectStorage
from storage.simstore import Faults, SimClient, SimTime, SimWorld
from tests.lsm._dst_checkpoints import Checkpointing

# what the simulated network does to requests (storage.simstore.Faults): a few percent fail or lose
# their response, and one in fifty is held in flight for seconds, landing after later requests
FAULTS = Faults(fail=0.03, lost=0.02, hold=0.02, hold_s=(5.0, 25.0), latency_s=(0.002, 0.030), timeout_s=30.0)
# the client side of the same network: retries within 5 s, a request may take up to 30 s
STORE_OPTIONS = {"max_retries": 4, "retry_timeout_ms": 5000, "timeout": "30s"}
KEYS = [b"k%02d" % i for i in range(40)]
OPS = ["put", "delete", "batch", "flush_wal", "flush", "compact", "gc", "ingest", "read"]
WEIGHTS = [40, 8, 10, 6, 8, 6, 6, 6, 10]
LOG_PARTITIONS, LOG_RECORDS = 2, 60
SOURCE = "src"
# the share of seeds that also take checkpoints, clone and follow (tests/lsm/_dst_checkpoints.py); drawn
# from a generator of its own, so the other seeds run exactly as before
CHECKPOINT_SEEDS = 0.25


@dataclasses.dataclass
class Write:
    """One write the workload attempted, and what it was told."""

    actor: str
    n: int
    key: bytes
    value: bytes | None  # None: a delete
    sync: bool
    status: str = "pending"  # acked | failed | fenced
    seq: int | None = None
    durable: bool = False


@dataclasses.dataclass
class SeedResult:
    seed: int
    ops: int
    requests: int
    sim_seconds: float
    trace_digest: str
    problems: list[str]
    events: dict[str, int]
    injected: dict[str, int]
    log: list[str]
    trace: list[tuple[float, str, str, str]]


class SimClock:
    """The DB clock on simulated time (ms)."""

    def __init__(self, world: SimWorld) -> None:
        self.world = world

    def now(self) -> int:
        return int(self.world.now() * 1000)


class Run:
    """One seed's simulation: the world, the store, the model, the actors."""

    def __init__(self, seed: int, ops: int, faults: Faults, log_dir: str) -> None:
        self.seed, self.target_ops = seed, ops
        self.world = SimWorld(seed, faults)
        self.rng = random.Random(seed * 1_000_003 + 17)  # the workload's choices
        self.root = f"sim://dst-{seed}/db"
        self.client = SimClient(self.world)
        self.storage = attach(self.root, ObjectStorage(self.root, STORE_OPTIONS, client=self.client,
                                                       clock=SimTime(self.world)))
        self.writes: list[Write] = []
        self.by_value: dict[bytes, Write] = {}
        self.ops = 0
        self.problems: list[str] = []
        self.events: dict[str, int] = {}
        self.seen: list[tuple[str, bytes, bytes]] = []  # (reader, key, value) every read returned
        self.ingests: list[dict[int, int]] = []  # frontiers acknowledged by ingests
        self.handles: list[lsm.DB] = []
        self.log: list[str] = []
        self.owner, self.owner_epoch = "", 0
        self.log_dir = log_dir
        self.cpx = Checkpointing(self) if random.Random(seed * 31 + 7).random() < CHECKPOINT_SEEDS else None
        self.opts = lsm.DbOptions(
            clock=SimClock(self.world), max_clock_skew_ms=None, memtable_bytes=1024, background_flush=False,
            background_compaction=False, compaction_process=False, flush_process=False,
            l0_compaction_threshold=self.rng.choice([2, 3, 4]),
            compaction_policy=self.rng.choice(["tiered", "leveled"]), wal_flush_interval_ms=None,
            gc_grace_ms=1000, object_store_options=dict(STORE_OPTIONS), block_cache_bytes=1 << 20,
        )

    def count(self, what: str) -> None:
        self.events[what] = self.events.get(what, 0) + 1

    def clock_ms(self) -> int:
        return int(self.world.now() * 1000)

    def note(self, actor: str, what: str) -> None:
        """A line of the run's log (what each actor did and was told), for reading a failing seed."""
        self.log.append(f"{self.world.now() - self.world.start:9.3f} {actor}: {what}")

    # -- the workload ----------------------------------------------------------------------------------
    def writer(self, name: str, nops: int) -> None:
        rng = self.rng
        try:
            db = lsm.DB.open(self.root, self.opts)
        except (LsmError, OSError) as e:
            self.count(f"open failed: {type(e).__name__}")
            return
        self.handles.append(db)
        epoch = db.engine.versions.writer_epoch
        if epoch > self.owner_epoch:  # the newest writable open (by its epoch): its files are the live ones
            self.owner, self.owner_epoch = name, epoch
        acked: list[Write] = []  # this handle's acknowledged writes, in order
        ops, weights = OPS, WEIGHTS
        if self.cpx is not None:
            ops, weights = OPS + ["checkpoint", "delete_checkpoint"], WEIGHTS + [5, 2]
        for _ in range(nops):
            self.world.sleep(rng.uniform(0.0, 1.5))
            self.ops += 1
            op = rng.choices(ops, weights)[0]
            self.count(op)
            self.note(name, op)
            try:
                if op in ("put", "delete", "batch"):
                    self._write(db, name, op, acked)
                elif op == "flush_wal":
                    db.flush_wal()
                    self._durable(acked)
                elif op == "flush":
                    db.flush()
                    self._durable(acked)
                elif op == "compact":
                    db.compact(full=rng.random() < 0.3)
                elif op == "gc":
                    db.gc(grace_ms=rng.choice([0, 500, 1000, 5000]))
                elif op == "ingest":
                    stats = db.ingest(PartitionedLog(self.log_dir), name=SOURCE, max_records=rng.randint(1, 12),
                                      batch_records=rng.randint(1, 5))
                    self.ingests.append(dict(stats.frontier))
                elif op == "checkpoint":
                    self.cpx.take(db, name, acked)
                elif op == "delete_checkpoint":
                    self.cpx.delete(db, name)
                else:
                    self._read(db, name)
            except FencedError as e:
                self.note(name, f"{op}: FencedError {e}")
                self.count("fenced")
                break
            except (DbFailedError, lsm.ClosedError) as e:
                self.note(name, f"{op}: {type(e).__name__} {e}")
                if missing_file(e) and self.owner == name:  # a fenced handle reads what the owner retired
                    self.problems.append(f"{name} {op}: a live file is gone: {e}")
                self.count("failed")
                break
            except LsmError as e:
                self.count(f"refused: {type(e).__name__}")
            except Exception as e:  # noqa: BLE001 - anything else is a finding (of the owner's)
                if not (missing_file(e) and self.owner != name):
                    self.problems.append(f"{name} {op}: {type(e).__name__}: {e}")
                break
        if rng.random() < 0.5:
            try:
                db.close()
                self._durable(acked)
                self.note(name, "closed")
            except (LsmError, OSError) as e:
                self.note(name, f"close: {type(e).__name__} {e}")
        else:
            abandon(db)
            self.note(name, "abandoned")
            self.count("abandoned")

    def _write(self, db: lsm.DB, name: str, op: str, acked: list[Write]) -> None:
        rng = self.rng
        sync = rng.random() < 0.5
        n = len(self.writes)
        keys = rng.sample(KEYS, rng.randint(2, 4)) if op == "batch" else [rng.choice(KEYS)]
        batch = []
        for i, key in enumerate(keys):
            value = None if op == "delete" else f"{name}:{n}:{i}".encode()
            w = Write(name, n, key, value, sync)
            self.writes.append(w)
            if value is not None:
                self.by_value[value] = w
            batch.append(w)
        wo = lsm.WriteOptions(sync=sync)
        try:
            if op == "put":
                seq = db.put(keys[0], batch[0].value, options=wo)
            elif op == "delete":
                seq = db.delete(keys[0], options=wo)
            else:
                b = lsm.WriteBatch()
                for w in batch:
                    b.put(w.key, w.value)
                seq = db.write(b, wo)
        except FencedError:
            for w in batch:
                w.status = "fenced"
            raise
        except BaseException:
            for w in batch:
                w.status = "failed"
            raise
        for w in batch:
            w.status, w.seq = "acked", seq
            acked.append(w)
        self.note(name, f"  {op} {[w.key for w in batch]} sync={sync} -> seq {seq}")
        if sync:
            self._durable(acked)

    @staticmethod
    def _durable(acked: list[Write]) -> None:
        """A durable point of a handle: every write it acknowledged so far survives (a prefix)."""
        for w in acked:
            w.durable = True

    def _read(self, db: lsm.DB, name: str) -> None:
        for key in self.rng.sample(KEYS, 5):
            e = db.get_entry(key)
            if e is not None:
                self.seen.append((name, key, e.value))

    def reader(self, name: str) -> None:
        try:
            db = lsm.DB.open(self.root, self.opts, read_only=True)
        except (LsmError, OSError) as e:
            self.count(f"reader open failed: {type(e).__name__}")
            return
        try:
            for _ in range(3):
                self.world.sleep(self.rng.uniform(0.0, 2.0))
                self.ops += 1
                self._read(db, name)
        except LsmError:
            pass
        except Exception as e:  # noqa: BLE001 - a read that fails is a finding
            if missing_file(e):
                # a read-only handle is a snapshot taken at its open that nothing protects: the writer's
                # compactions retire its files (a reader that follows the writer is another matter)
                self.count("reader outlived its files")
            else:
                self.problems.append(f"{name} read: {type(e).__name__}: {e}")
        finally:
            db.close()

    # -- the run and the final check -------------------------------------------------------------------
    def run(self) -> None:
        rng = self.rng
        sessions = rng.randint(2, 3)
        per = max(1, (self.target_ops - 3) // sessions)
        starts = sorted([0.0] + [rng.uniform(2.0, 40.0) for _ in range(sessions - 1)])
        for i, at in enumerate(starts):
            self.world.spawn(f"w{i + 1}", lambda i=i: self.writer(f"w{i + 1}", per), at=at)
        self.world.spawn("r1", lambda: self.reader("r1"), at=rng.uniform(1.0, 40.0))
        if self.cpx is not None:
            cpx, more = self.cpx, random.Random(self.seed * 31 + 8)
            self.world.spawn("c1", lambda: cpx.reader("c1"), at=more.uniform(5.0, 30.0))
            self.world.spawn("k1", lambda: cpx.cloner("k1"), at=more.uniform(5.0, 30.0))
            self.world.spawn("f1", lambda: cpx.following("f1"), at=more.uniform(0.0, 30.0))
        self.world.run()
        stuck = self.world.stuck()
        if stuck:
            self.problems.append(f"actors never finished: {stuck}")

    def check(self) -> None:
        for reader, key, value in self.seen:
            w = self.by_value.get(value)
            if w is None:
                self.problems.append(f"{reader} read {key!r} = {value!r}, which no write wrote")
            elif w.status == "fenced":
                self.problems.append(f"{reader} read {key!r} = {value!r} from a fenced write of {w.actor}")
        try:
            db = lsm.DB.open(self.root, self.opts)
        except Exception as e:  # noqa: BLE001 - the finding
            self.problems.append(f"the store does not open: {type(e).__name__}: {e}")
            return
        try:
            self._check_rows(db)
            self._check_ingest(db)
            if self.cpx is not None:
                self.cpx.check(db)
            try:
                lsm.inspect.check_database(self.root)
            except Exception as e:  # noqa: BLE001
                self.problems.append(f"lsm check: {type(e).__name__}: {e}")
        finally:
            db.close()

    def _check_rows(self, db: lsm.DB) -> None:
        for key in KEYS:
            try:
                e = db.get_entry(key)
            except Exception as ex:  # noqa: BLE001
                self.problems.append(f"get {key!r} after reopen: {type(ex).__name__}: {ex}")
                continue
            mine = [w for w in self.writes if w.key == key]
            must = [w for w in mine if w.durable and w.status == "acked"]
            floor = max((w.seq for w in must), default=None)
            if e is None:
                newest = max(must, key=lambda w: w.seq, default=None)
                if newest is not None and newest.value is not None:
                    # a delete that may have committed above it (acknowledged with a higher seq, or failed
                    # with its seq unknown) explains the absence
                    if not any(w.value is None and w.status != "fenced" and (w.seq is None or w.seq > newest.seq)
                               for w in mine):
                        self.problems.append(f"acknowledged write lost: {key!r} = {newest.value!r} (seq "
                                             f"{newest.seq}, {newest.actor}) is gone after reopen")
                continue
            w = self.by_value.get(e.value)
            if w is None:
                self.problems.append(f"{key!r} = {e.value!r} after reopen: no write wrote it")
            elif w.status == "fenced":
                self.problems.append(f"fenced write visible: {key!r} = {e.value!r} ({w.actor})")
            elif w.seq is not None and w.seq != e.seq:
                self.problems.append(f"{key!r} = {e.value!r} has seq {e.seq}, its write was given {w.seq}")
            if floor is not None and e.seq < floor:
                lost = max(must, key=lambda w: w.seq)
                self.problems.append(f"acknowledged write lost: {key!r} = {lost.value!r} (seq {floor}, "
                                     f"{lost.actor}) is older than what is visible (seq {e.seq})")

    def _check_ingest(self, db: lsm.DB) -> None:
        frontier: dict[int, int] = {}
        if SOURCE in db.sources():
            frontier = dict(db.remap(SOURCE).frontier)
        for acked in self.ingests:
            for p, off in acked.items():
                if frontier.get(p, 0) < off:
                    self.problems.append(f"ingest lost: partition {p} frontier {frontier.get(p, 0)} < acknowledged {off}")
        for p in range(LOG_PARTITIONS):
            for off in range(LOG_RECORDS):
                got = db.get(log_key(p, off))
                if off < frontier.get(p, 0) and got != log_value(p, off):
                    self.problems.append(f"ingest: record {p}/{off} below the frontier is {got!r}")
                if off >= frontier.get(p, 0) and got is not None:
                    self.problems.append(f"ingest: record {p}/{off} at or above the frontier is visible")

    def close(self) -> None:
        for db in self.handles:
            abandon(db)
        if self.cpx is not None:
            self.cpx.close()
        detach(self.root)


def abandon(db: lsm.DB) -> None:
    """Drop a handle as a killed process would: its buffered WAL records are never written (not at exit
    either), its files are released."""
    if not db.closed:
        db.engine.crash()


def missing_file(e: BaseException | None) -> bool:
    """Whether `e` or an exception it chains is a missing file (a live file deleted)."""
    while e is not None:
        if isinstance(e, FileNotFoundError):
            return True
        e = e.__cause__ or e.__context__
    return False


def log_key(p: int, off: int) -> bytes:
    return b"src:%d:%05d" % (p, off)


def log_value(p: int, off: int) -> bytes:
    return b"v%d.%d" % (p, off)


def make_log(directory: str) -> None:
    w = LogWriter(directory)
    try:
        for off in range(LOG_RECORDS):
            for p in range(LOG_PARTITIONS):
                w.append(p, log_key(p, off), log_value(p, off))
    finally:
        w.close()


def run_seed(seed: int, ops: int = 70, faults: Faults = FAULTS) -> SeedResult:
    """Simulate seed `seed` with about `ops` operations; the result lists every violation found."""
    with tempfile.TemporaryDirectory(prefix=f"dst-{seed}-") as d:
        log_dir = os.path.join(d, "log")
        make_log(log_dir)
        run = Run(seed, ops, faults, log_dir)
        try:
            run.run()
            run.check()
        finally:
            run.close()
    digest = hashlib.sha256(repr(run.world.trace).encode()).hexdigest()[:16]
    return SeedResult(seed, run.ops, run.world.requests, run.world.now() - run.world.start, digest,
                      run.problems, run.events, dict(run.world.injected), run.log, run.world.trace)
