"""Checkpoints: durable states of a store that nothing deletes while they live (SlateDB's checkpoints,
RFC 0004; RocksDB's Checkpoint::CreateCheckpoint). docs/checkpoints.md has the whole story.

A checkpoint is a record in the manifest (`formats.manifest.Checkpoint`: id, the manifest version it
names, seq, ts, name, expiry). `db.checkpoint()` flushes the memtable first, so every write acknowledged
before the call is in an SST, and then publishes the checkpoint with the version it names, the base of
its own commit (the same files: adding a checkpoint changes no file). Opening the checkpoint
(`DB.open(path, read_only=True, checkpoint=id)`) reads that version and replays no WAL: its SSTs, its
seq, its clock watermark, its seq<->time maps and the remaps stored in its SSTs are the state named.

What a live checkpoint keeps is decided in one place, the version set's deletion rule
(`lsm.versions.VersionSet.delete_files`, through `kept_paths` here): the manifest version it names and
every SST that version references. Retired SSTs, gc and the pruning of old manifest versions all ask it.
A checkpoint lives until `delete_checkpoint`, or until the store's clock passes its `expires_at`; what it
kept is then deleted by the next gc (a deleted checkpoint's files that nothing else names are retired at
once, as a compaction's inputs are).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from formats.manifest import Checkpoint, Manifest
from lsm.errors import CheckpointError, UnknownCheckpointError
from storage.paths import DbPaths, DbStore

if TYPE_CHECKING:
    from lsm.clock import MonotonicClock
    from lsm.manifest import ManifestStore
    from lsm.versions import VersionSet
    from lsm.write_path import WritePath


def check_request(lifetime_ms: object, name: object) -> None:
    """CheckpointError unless `lifetime_ms` is None or a positive int and `name` None or a str."""
    if lifetime_ms is not None and (type(lifetime_ms) is not int or lifetime_ms <= 0):
        raise CheckpointError(f"a checkpoint's lifetime_ms must be a positive int of ms or None, not {lifetime_ms!r}")
    if name is not None and type(name) is not str:
        raise CheckpointError(f"a checkpoint's name must be a str or None, not {type(name).__name__}")


def live(m: Manifest, now: int) -> tuple[Checkpoint, ...]:
    """The checkpoints of `m` still alive at `now` (ms of the store's clock), oldest first."""
    return tuple(cp for cp in m.checkpoints if cp.live(now))


def find(m: Manifest, cp_id: object, now: int, root: str) -> Checkpoint:
    """The live checkpoint `cp_id` of `m`; UnknownCheckpointError naming the store if there is none."""
    for cp in live(m, now):
        if cp.id == cp_id:
            return cp
    raise UnknownCheckpointError(f"{root}: no live checkpoint {cp_id!r} (never taken, deleted or expired)")


def external_roots(m: Manifest) -> dict[str, str]:
    """SST name -> the root of the store it lives in, for a clone's SSTs that are not its own."""
    return {name: ext.root for ext in m.external for name in ext.names}


def sst_path(paths: DbPaths, m: Manifest, name: str) -> str:
    """Where SST `name` of manifest `m` is: in the store of `paths`, or a clone's source store."""
    root = external_roots(m).get(name) if m.external else None
    return paths.sst(name) if root is None else DbPaths(root).sst(name)


def kept_paths(store: ManifestStore, m: Manifest, now: int, versions: dict[int, Manifest]) -> set[str]:
    """Every path the live checkpoints of `m` keep: the manifest version each names and the SSTs that
    version references (a clone's external SSTs included, which this store never deletes anyway).
    `versions` caches the versions read (they never change). An error reading one is raised."""
    out: set[str] = set()
    for cp in live(m, now):
        out.add(store.path(cp.manifest_id))
        v = versions.get(cp.manifest_id)
        if v is None:
            v = versions[cp.manifest_id] = store.read(cp.manifest_id)
        out.update(sst_path(store.db.paths, v, e.name) for e in v.all_ssts())
    return out


def edit_store(store: DbStore, edit: Callable[[Manifest, int], Manifest]) -> tuple[int, Manifest]:
    """Publish edit(newest version) as the next version of a store this process does not own, without
    fencing its writer: a compare-and-swap that reads again and retries when the writer commits first.
    Only edits that change no file of the store's shape may go this way (dropping a checkpoint a clone
    held): the owner's next commit conflicts, reads this version and applies its own edit on top, and
    the files it deletes before that are the same either way.

    `edit(m, mid)` is given the newest version and its id, and must return `m` itself when its change is
    there already: a publication of unknown outcome (or a temporary file a writer's open removed) is
    retried on the newest version, which may be ours. Returns (id, manifest) of the version the edit
    was applied to (the base: the same files as the one published)."""
    import errno

    from lsm.manifest import ManifestStore, PublishUnknownError  # the storage seam; keep this module light

    ms = ManifestStore(store)
    for _ in range(100):
        mid, m = ms.latest()
        if m is None:
            raise UnknownCheckpointError(f"{store.root}: no manifest: not an lsm-sim database")
        new = edit(m, mid)
        if new is m:
            return mid, m
        try:
            if ms.try_create(mid + 1, new):
                return mid, m
        except PublishUnknownError:
            continue
        except OSError as e:  # fileio's FileOpError carries ENOENT without being a FileNotFoundError
            if e.errno != errno.ENOENT:
                raise
            continue
    raise CheckpointError(f"{store.root}: the manifest kept changing under the checkpoint edit")


def checkpoint_usage(store: DbStore, m: Manifest, now: int) -> dict[str, int]:
    """What the live checkpoints of manifest `m` (the newest) hold beyond it: their count, and the files
    and bytes of the store's own SSTs that only checkpoints keep (named by some checkpoint's version and
    not by `m`), which `lsm du` reports. One GET per checkpoint version."""
    from lsm.manifest import ManifestStore

    ms = ManifestStore(store)
    current = {e.name for e in m.all_ssts()}
    only: dict[str, int] = {}
    cps = live(m, now)
    for cp in cps:
        v = ms.read(cp.manifest_id)
        own = set(external_roots(v))
        for e in v.all_ssts():
            if e.name not in current and e.name not in own:
                only[e.name] = e.size
    return {"checkpoints": len(cps), "files": len(only), "bytes": sum(only.values())}


class Checkpoints:
    """The checkpoints of one open handle: create, list, delete (module docstring)."""

    def __init__(self, versions: VersionSet, writer: WritePath, clock: MonotonicClock) -> None:
        self.versions = versions
        self.writer = writer
        self.clock = clock

    def create(self, lifetime_ms: int | None = None, name: str | None = None) -> Checkpoint:
        """Flush, then publish a checkpoint of the flushed state (module docstring)."""
        check_request(lifetime_ms, name)
        self.writer.check_writable()
        self.writer.rotate_and_wait()
        vs = self.versions
        made: list[Checkpoint] = []

        def edit(base: Manifest) -> Manifest:
            # under the commit lock: vs.manifest_id is the id of `base`, the version the checkpoint names
            ts = self.clock.read()
            cp = Checkpoint(str(uuid.uuid4()), vs.manifest_id, base.last_seq, ts, name,
                            None if lifetime_ms is None else ts + lifetime_ms)
            made[:] = [cp]
            return base.replace(checkpoints=live(base, ts) + (cp,))

        vs.commit(edit, vs.install)
        return made[0]

    def list(self) -> list[Checkpoint]:
        """The live checkpoints, oldest first (a follower's or a checkpoint reader's: as its manifest says)."""
        return list(live(self.versions.manifest, self.clock.read()))

    def delete(self, cp_id: str) -> None:
        """Drop checkpoint `cp_id` (UnknownCheckpointError if it is not live); the SSTs only it kept are
        retired at once (deleted when no iterator of this handle reads them), its manifest version goes
        with the next pruning."""
        self.writer.check_writable()
        vs = self.versions
        dropped: list[Checkpoint] = []

        def edit(base: Manifest) -> Manifest:
            now = self.clock.read()
            dropped[:] = [find(base, cp_id, now, vs.path)]
            return base.replace(checkpoints=tuple(c for c in live(base, now) if c.id != cp_id))

        new = vs.commit(edit, vs.install)
        self.release(new, dropped[0])

    def drop_expired(self) -> None:
        """Publish the manifest without the checkpoints the clock has expired (gc calls it), if any."""
        now = self.clock.read()
        vs = self.versions
        if len(live(vs.manifest, now)) != len(vs.manifest.checkpoints):
            vs.commit(lambda base: base.replace(checkpoints=live(base, self.clock.read())), vs.install)

    def release(self, m: Manifest, cp: Checkpoint) -> None:
        """Retire the SSTs only checkpoint `cp` kept, now that manifest `m` no longer holds it."""
        vs = self.versions
        try:
            old = vs.store.read(cp.manifest_id)
            kept = vs.kept_paths()
        except OSError:
            return  # the next gc collects them
        current = {e.name for e in m.all_ssts()}
        own = {e.name for e in old.all_ssts() if e.name not in current}
        names = [n for n in sorted(own) if sst_path(vs.db.paths, old, n) not in kept]
        if names:
            vs.retire_files(names)


__all__ = ["Checkpoints", "check_request", "checkpoint_usage", "edit_store", "external_roots", "find", "kept_paths", "live", "sst_path"]
