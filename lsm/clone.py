"""Clones: a new writable store that starts from another store's checkpoint (SlateDB's clones, RFC 0004;
docs/checkpoints.md, "Clones").

`clone(src, dst, checkpoint=None)` takes the state a checkpoint of `src` names (taking one, held for the
clone, when none is given) and publishes it as the first manifest version of `dst`:

* between two local directories the SSTs are hard-linked into ``dst/sst/`` (copied if a link cannot be
  made, another file system), and a checkpoint taken for the clone is deleted again: the clone's links
  keep the bytes, whatever the source deletes;
* anywhere else (an object store on either side) no SST byte is copied: the clone's manifest lists the
  source's SSTs as external (`formats.manifest.ExternalDb`: the source root, the checkpoint that keeps
  them there, their names). The clone reads them from the source's store, its compactions write their
  outputs in its own root, and the deletion rule never deletes a file outside that root. A clone of a
  clone holds a checkpoint of its own on every store its SSTs come from.

A clone of a checkpoint the caller names holds one of its own naming the same version (the caller may
delete theirs, or let it expire, while the clone reads on). A checkpoint held for a clone is released by the clone's `gc()` once none of the SSTs it keeps is named
by the clone's manifest or the clone's own checkpoints (`release_sources`): a compare-and-swap edit of
the source's manifest that fences nobody (`lsm.checkpoints.edit_store`). Neither store sees the other's
later writes: they share only files that neither ever changes.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import uuid
from typing import TYPE_CHECKING

from formats.manifest import Checkpoint, ExternalDb, Manifest
from lsm.checkpoints import edit_store, external_roots, find, live
from lsm.errors import CloneError, NotADatabaseError
from lsm.manifest import ManifestStore
from lsm.options import DbOptions
from storage import is_attached
from storage.objstore_config import check_location
from storage.paths import DbStore, open_store

if TYPE_CHECKING:
    from lsm.db import DB
    from lsm.versions import VersionSet


def clone(src: str | os.PathLike[str] | DB, dst: str | os.PathLike[str], checkpoint: str | None = None,
          options: DbOptions | None = None) -> DB:
    """Create the store at `dst` from `src` (a path or an open writable `DB`) as of its checkpoint
    `checkpoint`, or of a checkpoint taken now for the clone; return the clone, opened writable with
    `options`. A path `src` with no checkpoint given is opened writable to take one (it fences a writer
    there: pass the writer's handle, or a checkpoint it took, to avoid that). CloneError if `dst` holds a
    database or is `src`; UnknownCheckpointError for a checkpoint `src` does not hold."""
    from lsm.db import DB

    options = options or DbOptions()
    handle = src if isinstance(src, DB) else None
    src_root = handle.path if handle is not None else _location(src)
    dst_root = _location(dst)
    if os.path.normpath(src_root) == os.path.normpath(dst_root):
        raise CloneError(f"{dst_root}: a store cannot be cloned onto itself")
    dst_store = open_store(dst_root, options.object_store_options)
    if ManifestStore(dst_store).ids():
        raise CloneError(f"{dst_root}: already holds a database; a clone needs an empty place")
    from lsm.versions import prepare_store

    prepare_store(dst_store, create=True)  # a place that holds something else is refused before the source is touched
    src_store = handle.store if handle is not None else open_store(src_root, options.object_store_options)
    taken = checkpoint is None
    link = src_store.storage.hard_links and dst_store.storage.hard_links
    held = None  # a checkpoint of the clone's own, naming the caller's checkpoint's version
    if checkpoint is None:
        cp = _take(handle, src_root, options, f"clone {dst_root}")
    else:
        latest = ManifestStore(src_store).latest()[1]
        if latest is None:
            raise NotADatabaseError(f"{src_root}: no manifest: not an lsm-sim database")
        cp = find(latest, checkpoint, options.clock.now(), src_root)
        if not link:
            # the caller's checkpoint is the caller's to delete (or to let expire), and the clone's gc
            # releases the hold it references: so the clone references a hold of its own
            held = _hold_again(src_store, cp.id, options.clock.now(), f"clone {dst_root}")
            cp = dataclasses.replace(cp, id=held)
    published = False
    try:
        base = ManifestStore(src_store).read(cp.manifest_id)
        first = _linked(base, src_store, dst_store) if link else _external(base, src_root, cp, options, dst_root)
        if not ManifestStore(dst_store).try_create(1, first):
            raise CloneError(f"{dst_root}: another clone or writer created a database there meanwhile")
        published = True
    finally:
        # the links keep the bytes (the checkpoint was only for a consistent state); a clone that failed
        # holds nothing
        if taken and (link or not published):
            _drop(handle, src_store, cp.id)
        elif held is not None and not published:
            _drop(None, src_store, held)
    return DB.open(dst_root, options)


def _location(p: str | os.PathLike[str]) -> str:
    p = os.fspath(p)
    return p if is_attached(p) else check_location(p)


def _take(handle: DB | None, root: str, options: DbOptions, name: str) -> Checkpoint:
    """A checkpoint of the source for the clone, through its handle or a writable open of `root`."""
    if handle is not None:
        return handle.checkpoint(name=name)
    from lsm.db import DB

    opts = dataclasses.replace(options, background_compaction=False, event_listeners=())
    with DB.open(root, opts) as db:
        return db.checkpoint(name=name)


def _drop(handle: DB | None, store: DbStore, cp_id: str) -> None:
    if handle is not None:
        handle.delete_checkpoint(cp_id)
    else:
        edit_store(store, lambda m, _mid: _without(m, cp_id))


def _without(m: Manifest, cp_id: str) -> Manifest:
    """`m` without checkpoint `cp_id` (`m` itself if it has none of that id)."""
    kept = tuple(c for c in m.checkpoints if c.id != cp_id)
    return m if len(kept) == len(m.checkpoints) else m.replace(checkpoints=kept)


def _fresh(base: Manifest, external: tuple[ExternalDb, ...]) -> Manifest:
    """The clone's first version: the checkpoint's state, none of the source's own bookkeeping."""
    return base.replace(checkpoints=(), external=external, seq_reservations=(), writer_nonce=0)


def _linked(base: Manifest, src: DbStore, dst: DbStore) -> Manifest:
    """Hard-link (or copy) the checkpoint's own SSTs into the clone's directory."""
    os.makedirs(dst.paths.sst_dir, exist_ok=True)
    outside = external_roots(base)
    for e in base.all_ssts():
        if e.name in outside:
            continue
        a, b = src.paths.sst(e.name), dst.paths.sst(e.name)
        try:
            os.link(a, b)
        except OSError as err:
            if err.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                raise
            shutil.copyfile(a, b)
    return _fresh(base, base.external)


def _external(base: Manifest, src_root: str, cp: Checkpoint, options: DbOptions, dst_root: str) -> Manifest:
    """The clone's SSTs as external references: the source's own under `cp`, and those the source reads
    from further stores (a clone of a clone) under checkpoints taken there for this clone."""
    outside = external_roots(base)
    own = tuple(e.name for e in base.all_ssts() if e.name not in outside)
    refs = [ExternalDb(src_root, cp.id, own)] if own else []
    used = set(outside)
    for ext in base.external:
        names = tuple(n for n in ext.names if n in used)
        if names:
            held = _hold_again(open_store(ext.root, options.object_store_options), ext.checkpoint_id,
                               options.clock.now(), f"clone {dst_root}")
            refs.append(ExternalDb(ext.root, held, names))
    return _fresh(base, tuple(refs))


def _hold_again(store: DbStore, cp_id: str, now: int, name: str) -> str:
    """A new checkpoint in `store` naming the same version as its live checkpoint `cp_id`, for a clone of
    a clone (the first clone may release its own hold while the second still reads those SSTs)."""
    new_id = str(uuid.uuid4())

    def edit(m: Manifest, _mid: int) -> Manifest:
        if any(c.id == new_id for c in m.checkpoints):
            return m
        old = find(m, cp_id, now, store.root)
        mine = Checkpoint(new_id, old.manifest_id, old.seq, now, name, None)
        return m.replace(checkpoints=live(m, now) + (mine,))

    edit_store(store, edit)
    return new_id


def release_sources(vs: VersionSet, now: int, store_options: dict | None) -> list[str]:
    """Release the checkpoints this clone (version set `vs`) holds on its sources that keep nothing it
    still reads (its manifest and its checkpoints live at `now` name none of their SSTs): drop each from
    its source (fencing no one there), then the reference from this store's manifest. Returns the
    checkpoint ids released."""
    m = vs.manifest
    if not m.external:
        return []
    needed = {e.name for e in m.all_ssts()}
    for cp in live(m, now):
        needed |= {e.name for e in vs.store.read(cp.manifest_id).all_ssts()}
    done = [x for x in m.external if not needed & set(x.names)]
    for x in done:
        store = open_store(x.root, store_options)
        edit_store(store, lambda s, _mid, cid=x.checkpoint_id: _without(s, cid))
    if done:
        ids = {x.checkpoint_id for x in done}
        vs.commit(lambda b: b.replace(external=tuple(x for x in b.external if x.checkpoint_id not in ids)), vs.install)
    return [x.checkpoint_id for x in done]


__all__ = ["clone", "release_sources"]
