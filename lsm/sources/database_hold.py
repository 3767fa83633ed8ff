"""A bulk load's hold on an upstream database on an object store: the tasks read through a checkpoint.

A `DatabaseLog` task opens a `HistoryView` and reads SST blocks by range afterwards (an object store's
SSTs are not mmapped whole, as local files are). The upstream's writer goes on meanwhile, and a full
compaction followed by ``gc(grace_ms=0)`` deletes an SST a task has yet to read: the task fails with
FileNotFoundError, and with it the job. So the driver takes a checkpoint on the upstream before it plans
(`lsm.checkpoints.edit_store`, the compare-and-swap that fences nobody, as a following reader holds its
own), plans against the manifest version it names and lets every task read that version alone
(`DatabaseLog(path, at=version)`): the writer's gc never deletes what a live checkpoint keeps. The
checkpoint is deleted when the load ends, however it ends; its lifetime (`HOLD_MS`) bounds what a
driver that died keeps.

What a held load takes is what that version holds in SSTs: the upstream's commits still only in its WAL
(not flushed yet) wait for the next load. A local upstream needs no hold: its SSTs are mmapped at open,
and a deleted file stays readable through its mapping.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator

from formats.manifest import Checkpoint, Manifest
from lsm.checkpoints import edit_store, live
from lsm.errors import LsmError
from lsm.sources.database_log import DatabaseLog
from storage import storage_for
from storage.paths import open_store

HOLD_MS = 6 * 3600 * 1000  # a load's checkpoint expires by itself after this, if its driver died
NAME = "bulk-load"


def needs_hold(source: object) -> bool:
    """Whether a bulk load of `source` reads it through a checkpoint: a `DatabaseLog` of the newest state
    of a database on an object store."""
    return isinstance(source, DatabaseLog) and source.at is None and storage_for(source.path).root is not None


@contextlib.contextmanager
def held(log: DatabaseLog, lifetime_ms: int = HOLD_MS) -> Iterator[DatabaseLog]:
    """Take a checkpoint of the upstream of `log` (its newest manifest version), yield a `DatabaseLog`
    reading that version alone, and delete the checkpoint when the block ends (module docstring)."""
    store = open_store(log.path)
    cp_id = str(uuid.uuid4())

    def hold(m: Manifest, mid: int) -> Manifest:
        if any(c.id == cp_id for c in m.checkpoints):
            return m  # published by a try whose outcome was unknown
        # the writer's clock judges expiry: no earlier than its watermark, nor than the wall clock
        now = max(int(time.time() * 1000), m.clock_watermark)
        cp = Checkpoint(cp_id, mid, m.last_seq, now, NAME, now + lifetime_ms)
        return m.replace(checkpoints=live(m, now) + (cp,))

    mid, m = edit_store(store, hold)
    ours = next((c for c in m.checkpoints if c.id == cp_id), None)
    at = ours.manifest_id if ours is not None else mid  # the base, unless it already held our record
    try:
        yield DatabaseLog(log.path, at=at)
    finally:
        try:
            edit_store(store, _release(cp_id))
        except (OSError, LsmError):  # the load's outcome stands; the checkpoint expires by itself
            pass


def _release(cp_id: str) -> Callable[[Manifest, int], Manifest]:
    """The `edit_store` edit dropping checkpoint `cp_id` (none if it is gone already)."""

    def edit(m: Manifest, _mid: int) -> Manifest:
        if all(c.id != cp_id for c in m.checkpoints):
            return m
        return m.replace(checkpoints=tuple(c for c in m.checkpoints if c.id != cp_id))

    return edit


__all__ = ["HOLD_MS", "held", "needs_hold"]
