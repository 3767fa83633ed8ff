"""A reader that follows a writer in another process: ``DB.open(path, read_only=True, follow=True)``
(SlateDB's DbReader; docs/checkpoints.md, "Readers that follow").

Every `DbOptions.reader_poll_interval_ms` (and at once on `db.refresh()`) it moves to the writer's newest
state: the newest manifest version, then the WAL records past that version's `last_seq`. It never fences
the writer and writes no data.

What it reads is protected as SlateDB's reader protects it: by a checkpoint of its own. Before it reads a
manifest version it publishes a checkpoint naming that version (replacing its previous one) with a
compare-and-swap that keeps the writer's epochs (`lsm.checkpoints.edit_store`), so the writer's
compactions, gc and manifest pruning keep every SST of the version it reads, whatever the writer does
next. The checkpoint expires after `lifetime_ms` of the store's clock (10 poll intervals, at least a
minute) and is renewed before that, so a follower that dies holds nothing for long; `close()` drops it.
A version whose shape is unchanged (only other checkpoints moved) needs no new checkpoint.

The WAL is read after the version: segments (objects) from the version's `wal_replay_from` on. A flush
of the writer may retire a segment meanwhile, once a newer version covers it; so after reading, the
newest version is asked again, and if its replay point moved the whole refresh starts over on it (the
rows are then in its SSTs). A WAL that did not change since the last poll (one listing of names and
sizes) is not read again. The new state is installed whole (`VersionSet.follow`): a read sees the old
state or the new one, each a state the writer had.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from typing import TYPE_CHECKING

from formats.manifest import Checkpoint, Manifest
from lsm.checkpoints import edit_store, live
from lsm.manifest import ManifestStore
from lsm.memtable import Memtable
from lsm.wal_replay import live_segments, read_segments

if TYPE_CHECKING:
    from lsm.clock import MonotonicClock
    from lsm.engine import Engine
    from lsm.options import DbOptions
    from lsm.timeline import Timeline
    from lsm.versions import VersionSet
    from lsm.write_path import WritePath
    from storage.paths import DbStore

ATTEMPTS = 20  # refreshes started over because the writer flushed meanwhile, before giving up this poll


def _shape(m: Manifest) -> Manifest:
    """`m` without what changes when only checkpoints move (a follower's own edits among them)."""
    return m.replace(checkpoints=(), writer_nonce=0)


class Follower:
    """The following of one read-only handle (module docstring)."""

    def __init__(self, store: DbStore, options: DbOptions, versions: VersionSet, writer: WritePath,
                 timeline: Timeline, clock: MonotonicClock, engine: Engine) -> None:
        self.store = store
        self.options = options
        self.versions = versions
        self.writer = writer
        self.timeline = timeline
        self.clock = clock
        self.engine = engine
        self.interval_ms = options.reader_poll_interval_ms
        self.lifetime_ms = max(60_000, 10 * self.interval_ms)
        self.manifests = ManifestStore(store)
        self.checkpoint: Checkpoint | None = None  # the newest of ours: it names `held`
        self.held: tuple[int, Manifest] | None = None  # the version our checkpoint names
        # our checkpoints by id -> the state generation that began reading their version (None: not
        # installed yet); an older one stays while an iterator still reads a state of its version
        self.holds: dict[str, int | None] = {}
        self.wal_listing: dict[str, int] | None = None  # the WAL read into the current state
        self.refreshes = 0  # states installed (for tests and tools)
        self.error: BaseException | None = None  # the last poll's failure, if it failed
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- polling -----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Poll in a daemon thread until `stop`."""
        self._thread = threading.Thread(target=self._run, name="lsm-follower", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_ms / 1000):
            try:
                self.refresh()
                self.error = None
            except Exception as e:  # an unreachable store: the state stays as it was, the next poll retries
                self.error = e

    def stop(self) -> None:
        """Stop polling, and drop this reader's checkpoint (best effort: it expires anyway)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            ours, self.holds, self.checkpoint = set(self.holds), {}, None
        if ours:
            try:
                edit_store(self.store, lambda m, _mid: _without(m, ours))
            except Exception:  # noqa: BLE001 - the store may be gone; the checkpoint expires by itself
                pass

    # -- one refresh -------------------------------------------------------------------------------------
    def refresh(self) -> bool:
        """Move to the writer's newest state; True if a new state was installed."""
        with self._lock:
            for _ in range(ATTEMPTS):
                done = self._attempt()
                if done is not None:
                    return done
            return False

    def _attempt(self) -> bool | None:
        """One try: True/False as `refresh`, None to start over (the writer flushed meanwhile)."""
        now = self.clock.read()
        mid, latest = self.manifests.latest()
        held = before = self.held
        renew = self.checkpoint is None or now >= self.checkpoint.expires_at - self.lifetime_ms // 2
        if held is None or renew or _shape(latest) != _shape(held[1]):
            held = self._hold(now)
        listing = self.store.storage.list_sizes(self.store.paths.wal_dir)
        if held is before and listing == self.wal_listing:
            return False  # nothing new: no WAL appended, no version published
        base = held[1]
        mem = Memtable(base.wal_replay_from - 1)
        records = []
        segments = live_segments(self.store, base.wal_replay_from)
        try:
            for seg in read_segments(self.store, segments, self.options.wal_recovery_mode):
                records += [r for r in seg.records if r.seq > base.last_seq]
        except FileNotFoundError:
            return None  # retired by a flush: a newer version holds its rows
        if self.manifests.latest()[1].wal_replay_from != base.wal_replay_from:
            return None  # a flush moved the replay point while we read: start over on its version
        max_ts = 0
        for rec in records:
            max_ts = max(max_ts, rec.ts)
            for row in rec.rows:
                mem.add(row)
        self._install(held, mem, records, max_ts)
        self.wal_listing = listing
        return True

    def _still_read(self) -> set[str]:
        """Our checkpoints whose version a state some open iterator pins still reads."""
        pinned = self.versions.pinned_gens()
        starts = sorted((g, cid) for cid, g in self.holds.items() if g is not None)
        out = set()
        for i, (g, cid) in enumerate(starts):
            end = starts[i + 1][0] if i + 1 < len(starts) else None
            if any(p >= g and (end is None or p < end) for p in pinned):
                out.add(cid)
        return out

    def _hold(self, now: int) -> tuple[int, Manifest]:
        """Publish a checkpoint of the newest version, dropping those of ours no state still reads (and
        renewing those some iterator still reads); return (id, version) it names."""
        new_id = str(uuid.uuid4())
        keep = self._still_read()
        expires = now + self.lifetime_ms
        made: list[Checkpoint] = []

        def edit(m: Manifest, mid: int) -> Manifest:
            if any(c.id == new_id for c in m.checkpoints):
                return m  # ours, published by a try whose outcome was unknown
            made[:] = [Checkpoint(new_id, mid, m.last_seq, now, "follower", expires)]
            others = tuple(c if c.id not in keep else dataclasses.replace(c, expires_at=expires)
                           for c in live(m, now) if c.id not in self.holds or c.id in keep)
            return m.replace(checkpoints=others + tuple(made))

        mid, m = edit_store(self.store, edit)
        mine = next((c for c in m.checkpoints if c.id == new_id), None) or made[0]
        self.holds = {cid: g for cid, g in self.holds.items() if cid in keep}
        self.holds[new_id] = None
        self.checkpoint = mine
        # the version named is the edit's base: the one returned, unless that already holds our record
        self.held = (mine.manifest_id, m if mine.manifest_id == mid else self.manifests.read(mine.manifest_id))
        return self.held

    def _install(self, held: tuple[int, Manifest], mem: Memtable, records: list, max_ts: int) -> None:
        """Make (version, memtable) the handle's state: the read path, seq, time maps and clock."""
        mid, m = held
        o = self.options
        self.timeline.reload(m.seq_tracker, m.time_seq, o.time_seq_min_time)
        for rec in records:
            if rec.ts >= self.timeline.next_ms:
                self.timeline.on_commit(rec.seq, rec.ts)
        w = self.writer
        self.versions.follow(mid, m, mem, lambda: _advance(w, m, mem, max_ts))
        self.holds[self.checkpoint.id] = self.versions.state.gen
        floor = max(m.clock_watermark, max_ts)
        if floor > self.clock.last:  # expiry is judged no earlier than the writer's newest time
            self.clock.lower_to(floor)
        self.engine.forget_source_heads()
        self.refreshes += 1


def _advance(w: WritePath, m: Manifest, mem: Memtable, max_ts: int) -> None:
    """The write path's view of the followed state (set under the state lock with the new state)."""
    w.seq = max(m.last_seq, mem.max_seq)
    w.last_commit_ts = max(m.clock_watermark, max_ts)
    w.reserved = m.seq_reservations


def _without(m: Manifest, ids: set[str]) -> Manifest:
    kept = tuple(c for c in m.checkpoints if c.id not in ids)
    return m if len(kept) == len(m.checkpoints) else m.replace(checkpoints=kept)


__all__ = ["Follower"]
