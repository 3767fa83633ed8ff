"""The simulation's checkpoints, clones and following readers (tests/lsm/_dst.py runs them in some seeds).

* A writer session takes checkpoints (some with a lifetime, so they expire on the simulated clock) and
  deletes some. What a checkpoint must read is the state its writer had when it was acknowledged: every
  key as the handle read it right after, checked against the model (each value a write that was not
  fenced, with its seq, at most the checkpoint's seq, and no acknowledged write of that handle newer
  than what is shown).
* A checkpoint reader opens live checkpoints (`read_only=True, checkpoint=id`) while the writers go on,
  and must read exactly that state; one that is deleted or expired must refuse to open, not read another
  state.
* A clone actor clones the store from a checkpoint into another root of the same simulated store, reads
  its start state, writes, compacts and collects (grace 0) on its own, and reads its own model back,
  while the source's writers compact and collect with grace 0.
* A following reader (`follow=True`, polled with `refresh()`) must never show a state the writer did
  not have: every value one a write wrote and not fenced, no key going back to an older write, and no
  acknowledged write of a session older than the newest write of that session it shows (a torn state).
  At the end it must converge: after a refresh it reads what the reopened store reads.

At the end (no faults) every checkpoint acknowledged and neither deleted nor expired is listed and reads
its state, before and after a `gc(grace_ms=0)` of the source; a deleted or expired one does not open;
every clone reads its model and passes `lsm check`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import lsm
from lsm.errors import LsmError, UnknownCheckpointError
from storage import attach, detach
from storage.objstore import ObjectStorage
from storage.simstore import SimTime

if TYPE_CHECKING:
    from tests.lsm._dst import Run

MARGIN_MS = 2000  # clocks of two handles may differ this much about whether a checkpoint has expired
FOLLOW_POLL_MS = 3_600_000  # the follower's own thread never polls in a run: it runs outside the world


@dataclasses.dataclass
class Cp:
    """A checkpoint a writer was told it took, and the state it must read."""

    actor: str
    id: str
    seq: int
    expires_at: int | None
    state: dict[bytes, tuple[bytes, int] | None]  # key -> (value, seq) or None (absent)
    deleted: bool = False  # its delete was acknowledged
    maybe_deleted: bool = False  # a delete of unknown outcome was sent


@dataclasses.dataclass
class Clone:
    """A clone that was made, and what each key may read (more than one value after a failed write)."""

    root: str
    cp: Cp
    model: dict[bytes, set[bytes | None]]


def entries(db: lsm.DB, keys: list[bytes]) -> dict[bytes, tuple[bytes, int] | None]:
    """key -> (value, seq) as `db` reads it, or None."""
    out: dict[bytes, tuple[bytes, int] | None] = {}
    for k in keys:
        e = db.get_entry(k)
        out[k] = None if e is None else (e.value, e.seq)
    return out


class Checkpointing:
    """The checkpoint, clone and follower actors of one run (`run` is the `tests.lsm._dst.Run`)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.cps: list[Cp] = []
        self.clones: list[Clone] = []
        self.roots: list[str] = []
        self.follower: lsm.DB | None = None

    def expired(self, cp: Cp, now: int) -> bool:
        return cp.expires_at is not None and now >= cp.expires_at - MARGIN_MS

    def gone(self, cp: Cp, now: int) -> bool:
        """Whether `cp` may be gone at `now`: deleted (maybe), or expired (maybe)."""
        return cp.deleted or cp.maybe_deleted or self.expired(cp, now)

    # -- the writers' operations -----------------------------------------------------------------------
    def take(self, db: lsm.DB, name: str, acked: list) -> None:
        """A writer takes a checkpoint (with a lifetime in some), recording the state it must read."""
        from tests.lsm._dst import KEYS

        run = self.run
        lifetime = run.rng.choice([None, None, 5_000, 20_000, 60_000])
        cp = db.checkpoint(lifetime_ms=lifetime)
        state = entries(db, KEYS)
        # the state it must read is the handle's, checked against the model of the writes
        for key, e in state.items():
            mine = [w for w in acked if w.key == key and w.seq <= cp.seq]
            newest = max(mine, key=lambda w: w.seq, default=None)
            if e is None:
                if newest is not None and newest.value is not None:
                    run.problems.append(f"{name} checkpoint {cp.id}: {key!r} absent, {newest.value!r} acknowledged")
                continue
            w = run.by_value.get(e[0])
            if w is None or w.status == "fenced" or (w.seq is not None and w.seq != e[1]) or e[1] > cp.seq:
                run.problems.append(f"{name} checkpoint {cp.id} (seq {cp.seq}): {key!r} = {e} is no write of it")
            elif newest is not None and newest.seq > e[1]:
                run.problems.append(f"{name} checkpoint {cp.id}: {key!r} = {e}, older than acknowledged {newest.value!r}")
        self.cps.append(Cp(name, cp.id, cp.seq, cp.expires_at, state))
        run.note(name, f"  checkpoint {cp.id[:8]} seq {cp.seq} expires {cp.expires_at}")
        run.count("checkpoint")

    def delete(self, db: lsm.DB, name: str) -> None:
        """A writer deletes one of the checkpoints taken so far."""
        run = self.run
        live = [c for c in self.cps if not c.deleted]
        if not live:
            return
        cp = run.rng.choice(live)
        was_gone = self.gone(cp, run.clock_ms())
        cp.maybe_deleted = True  # from the moment the delete is sent: it may land before its answer comes
        try:
            db.delete_checkpoint(cp.id)
        except UnknownCheckpointError:
            if not was_gone and not self.expired(cp, run.clock_ms()):
                run.problems.append(f"{name} delete_checkpoint {cp.id}: unknown, but it was live")
            return
        cp.deleted = True
        run.note(name, f"  deleted checkpoint {cp.id[:8]}")
        run.count("checkpoint deleted")

    # -- the actors ------------------------------------------------------------------------------------
    def reader(self, name: str) -> None:
        """Open live checkpoints read-only while the writers go on: each reads exactly its state."""
        from tests.lsm._dst import KEYS, missing_file

        run = self.run
        for _ in range(4):
            run.world.sleep(run.rng.uniform(2.0, 12.0))
            if not self.cps:
                continue
            cp = run.rng.choice(self.cps)
            run.ops += 1
            try:
                with lsm.DB.open(run.root, run.opts, read_only=True, checkpoint=cp.id) as db:
                    got = entries(db, KEYS)
            except UnknownCheckpointError:
                if not self.gone(cp, run.clock_ms()):
                    run.problems.append(f"{name}: checkpoint {cp.id} of {cp.actor} does not open, but it is live")
                continue
            except (LsmError, OSError) as e:
                if missing_file(e) and not self.gone(cp, run.clock_ms()):
                    run.problems.append(f"{name}: checkpoint {cp.id} of {cp.actor} lost a file: {e}")
                run.count(f"checkpoint read failed: {type(e).__name__}")
                continue
            run.count("checkpoint read")
            if got != cp.state:
                run.problems.append(f"{name}: checkpoint {cp.id} of {cp.actor} reads {diff(cp.state, got)}")

    def cloner(self, name: str) -> None:
        """Clone from a checkpoint into another root, then work on the clone while the source goes on."""
        from tests.lsm._dst import STORE_OPTIONS, missing_file

        run = self.run
        for attempt in range(6):
            run.world.sleep(run.rng.uniform(3.0, 10.0))
            live = [c for c in self.cps if not self.gone(c, run.clock_ms())]
            if not live:
                continue
            cp = run.rng.choice(live)
            root = f"{run.root}-clone{attempt}"
            attach(root, ObjectStorage(root, STORE_OPTIONS, client=run.client, clock=SimTime(run.world)))
            self.roots.append(root)
            run.ops += 1
            try:
                db = lsm.DB.clone(run.root, root, checkpoint=cp.id, options=run.opts)
            except (LsmError, OSError) as e:
                run.note(name, f"clone of {cp.id[:8]}: {type(e).__name__} {e}")
                run.count(f"clone failed: {type(e).__name__}")
                continue
            run.note(name, f"cloned {cp.id[:8]} into {root}")
            run.count("clone")
            c = Clone(root, cp, {k: {None if e is None else e[0]} for k, e in cp.state.items()})
            self.clones.append(c)
            try:
                self._work(db, name, c)
            except Exception as e:  # noqa: BLE001 - a clone that loses a file is a finding
                if missing_file(e):
                    run.problems.append(f"{name}: the clone {root} lost a file: {type(e).__name__}: {e}")
                run.note(name, f"clone work: {type(e).__name__} {e}")
            finally:
                if not db.closed:
                    try:
                        db.close()
                    except (LsmError, OSError):
                        pass
            return

    def _work(self, db: lsm.DB, name: str, c: Clone) -> None:
        from tests.lsm._dst import KEYS

        run = self.run
        if {k: {None if e is None else e[0]} for k, e in entries(db, KEYS).items()} != c.model:
            run.problems.append(f"{name}: the clone {c.root} does not start from checkpoint {c.cp.id}")
        for i in range(8):
            run.world.sleep(run.rng.uniform(0.5, 4.0))
            run.ops += 1
            op = run.rng.choice(["put", "put", "delete", "compact", "gc", "flush", "read"])
            run.count(f"clone {op}")
            key = run.rng.choice(KEYS)
            if op in ("put", "delete"):
                value = f"{name}:{c.root[-1]}:{i}".encode() if op == "put" else None
                try:
                    if value is None:
                        db.delete(key, options=lsm.WriteOptions(sync=True))
                    else:
                        db.put(key, value, options=lsm.WriteOptions(sync=True))
                except BaseException:
                    c.model[key] = c.model[key] | {value}  # it may have committed
                    raise
                c.model[key] = {value}
            elif op == "compact":
                db.compact(full=True)
            elif op == "gc":
                db.gc(grace_ms=0)
            elif op == "flush":
                db.flush()
            else:
                for k, e in entries(db, KEYS).items():
                    if (None if e is None else e[0]) not in c.model[k]:
                        run.problems.append(f"{name}: the clone {c.root} reads {k!r} = {e}, expected {c.model[k]}")

    def following(self, name: str) -> None:
        """A reader that follows the writers; it stays open for the convergence check at the end."""
        from tests.lsm._dst import KEYS

        run = self.run
        try:
            db = lsm.DB.open(run.root, dataclasses.replace(run.opts, reader_poll_interval_ms=FOLLOW_POLL_MS),
                             read_only=True, follow=True)
        except (LsmError, OSError) as e:
            run.count(f"follower open failed: {type(e).__name__}")
            return
        self.follower = db
        shown: dict[bytes, int] = {}  # key -> the newest seq shown
        for _ in range(run.rng.randint(3, 8)):
            run.world.sleep(run.rng.uniform(1.0, 8.0))
            run.ops += 1
            try:
                moved = db.refresh()
                state = entries(db, KEYS)
            except (LsmError, OSError) as e:
                run.count(f"follower refresh failed: {type(e).__name__}")
                continue
            run.count("follower moved" if moved else "follower refresh")
            for k, e in state.items():
                if e is None:
                    continue
                run.seen.append((name, k, e[0]))
                if e[1] < shown.get(k, 0):
                    run.problems.append(f"{name}: {k!r} went back to seq {e[1]} after seq {shown[k]}")
                shown[k] = e[1]
            torn = self.torn(state)
            if torn:
                run.problems.append(f"{name} shows a state the writer never had: {torn}")

    def torn(self, state: dict[bytes, tuple[bytes, int] | None]) -> str | None:
        """What in `state` no writer state had: the session that wrote its newest row acknowledged a
        write below that row's seq that it does not show (an older row on that key, or none and no
        delete that could be newer)."""
        run = self.run
        top = max((e for e in state.values() if e is not None), key=lambda e: e[1], default=None)
        if top is None or top[0] not in run.by_value:
            return None
        actor = run.by_value[top[0]].actor
        for k, e in state.items():
            mine = [w for w in run.writes if w.actor == actor and w.key == k and w.status == "acked" and w.seq <= top[1]]
            w = max(mine, key=lambda w: w.seq, default=None)
            if w is None:
                continue
            # an absent key may be deleted above `top` (a delete shows no row to be the newest)
            if e is None and w.value is not None and not any(
                    d.key == k and d.value is None and d.status != "fenced" and (d.seq is None or d.seq > w.seq)
                    for d in run.writes):
                return f"{k!r} absent, but {w.actor} acknowledged {w.value!r} at seq {w.seq} <= {top[1]}"
            if e is not None and e[1] < w.seq:
                return f"{k!r} = {e}, but {w.actor} acknowledged {w.value!r} at seq {w.seq} <= {top[1]}"
        return None

    # -- the final check (no faults) -------------------------------------------------------------------
    def check(self, db: lsm.DB) -> None:
        """With the store reopened as `db` (writable): the follower converges, checkpoints read their
        states before and after a gc with no grace, clones read their models."""
        from tests.lsm._dst import KEYS

        run = self.run
        if self.follower is not None:
            try:
                self.follower.refresh()
                got, want = entries(self.follower, KEYS), entries(db, KEYS)
                if got != want:
                    run.problems.append(f"the follower does not converge: {diff(want, got)}")
            except Exception as e:  # noqa: BLE001
                run.problems.append(f"the follower's last refresh: {type(e).__name__}: {e}")
            finally:
                self.follower.close()
                self.follower = None
        self._check_cps(db, "at the end")
        try:
            db.gc(grace_ms=0)
        except Exception as e:  # noqa: BLE001
            run.problems.append(f"gc at the end: {type(e).__name__}: {e}")
        self._check_cps(db, "after gc(grace_ms=0)")
        for c in self.clones:
            self._check_clone(c)

    def _check_cps(self, db: lsm.DB, when: str) -> None:
        run = self.run
        now = run.clock_ms()
        listed = {c.id for c in db.checkpoints()}
        for cp in self.cps:
            sure = not cp.deleted and not cp.maybe_deleted and (cp.expires_at is None or now < cp.expires_at - MARGIN_MS)
            if sure and cp.id not in listed:
                run.problems.append(f"{when}: checkpoint {cp.id} of {cp.actor} is not listed, but it is live")
            if (cp.deleted or (cp.expires_at is not None and now >= cp.expires_at)) and cp.id in listed:
                run.problems.append(f"{when}: checkpoint {cp.id} of {cp.actor} is listed, deleted or expired")
            if cp.id not in listed:
                continue
            try:
                with lsm.DB.open(run.root, run.opts, read_only=True, checkpoint=cp.id) as r:
                    got = entries(r, list(cp.state))
            except Exception as e:  # noqa: BLE001
                run.problems.append(f"{when}: checkpoint {cp.id} of {cp.actor}: {type(e).__name__}: {e}")
                continue
            if got != cp.state:
                run.problems.append(f"{when}: checkpoint {cp.id} of {cp.actor} reads {diff(cp.state, got)}")

    def _check_clone(self, c: Clone) -> None:
        run = self.run
        try:
            with lsm.DB.open(c.root, run.opts) as db:
                for k, e in entries(db, list(c.model)).items():
                    if (None if e is None else e[0]) not in c.model[k]:
                        run.problems.append(f"the clone {c.root}: {k!r} = {e}, expected one of {c.model[k]}")
            lsm.inspect.check_database(c.root)
        except Exception as e:  # noqa: BLE001
            run.problems.append(f"the clone {c.root} of {c.cp.id}: {type(e).__name__}: {e}")

    def close(self) -> None:
        if self.follower is not None:
            self.follower.close()
        for root in self.roots:
            detach(root)


def diff(want: dict, got: dict) -> str:
    """The keys where `got` differs from `want`, for a finding's line."""
    return ", ".join(f"{k!r}: {got.get(k)} not {want.get(k)}" for k in want if got.get(k) != want.get(k))
