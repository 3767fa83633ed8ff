"""Per-source ingest state, owned by the DB handle: what streaming ingest and bulk loads of one remap share.

One `SourceState` per source name per handle (``db.engine.source_state(name)``): the lock that makes
the handle the only ingester of that name at a time, the latest binding (read once by a reverse seek,
then kept up to date by the handle's own commits: the handle is the remap's only writer), the count
of bindings since the last remap compaction attempt, and the source's pending transactions (the TEMP
collection, lsm.ingest_tx) once loaded.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING

from lsm.remap import Binding
from lsm.remap_store import load_head

if TYPE_CHECKING:
    from lsm.db import DB
    from lsm.ingest_tx import TxState

NOT_READ = object()


@dataclasses.dataclass
class SourceState:
    """The ingest state of one source on one DB handle."""

    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    head: Binding | None | object = NOT_READ  # the latest binding, cached (the handle is the only writer)
    batches: int | None = None  # bindings since the last compaction attempt (None: not counted yet)
    tx: TxState | None = None  # the TEMP collection, in memory (None: not loaded yet, or dropped)
    compact_due: bool = False  # the store's compaction asked while an ingest held the lock (rule 7)


def source_state(db: DB, name: str) -> SourceState:
    """The `SourceState` of source `name` on `db` (created on first use)."""
    return db.engine.source_state(name)


def durable_head(db: DB, name: str) -> Binding | None:
    """The latest binding of `name`, from memory after the first reverse seek of this handle."""
    st = source_state(db, name)
    if st.head is NOT_READ:
        st.head = load_head(db, name)
    return st.head  # type: ignore[return-value]


__all__ = ["SourceState", "durable_head", "source_state"]
