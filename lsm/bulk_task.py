"""One bulk-load task: a slice of a source -> resolved, sorted rows -> SSTs. Runs on a Spark executor or in
a thread of the local engine; the same code either way (lsm.bulk plans and commits).

A task reads its slice straight from the source (lsm.sources.slices), checks every record as streaming
ingest does, resolves it with streaming ingest's own code (`lsm.ingest_rows.resolve_records`: the last record
of a key within the slice wins, a delete becomes a tombstone, TTLs count from the load's ts or the
record's event_ts), and writes the rows, sorted by key, through THE SST writer (`compaction.merge.SstOutput`)
under names unique to the attempt: ``<job prefix>-t<task>-<random>-<n>.sst``. Every row of the task gets
the task's seq (the plan's base seq + the task's position in the plan) and the load's ts, so a retried
attempt writes exactly the same rows. It returns metadata only: its SsTableInfo and its record count, and
the slice's records that carry a ``tx``, which it does not write: the driver passes them through the
source's transactions (lsm.ingest_tx), as streaming ingest does.
"""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from collections.abc import Iterator
from typing import Any

from compaction.output import OutputSpec, SstOutput
from formats.log import byte_windows
from lsm.clock import I64_MAX, I64_MIN
from lsm.ingest_rows import resolve_tuples
from lsm.options import NO_TTL
from lsm.sources.object_log import SegmentSlice
from lsm.sources.slices import LogSlice
from lsm.syskeys import SYSTEM_PREFIX


@dataclasses.dataclass(frozen=True)
class BulkTask:
    """Everything one task needs, and nothing of the DB: picklable for Spark."""

    index: int  # position in the plan
    slice: Any  # lsm.sources.slices.LogSlice | SourceSlice
    seq: int  # every row of the task carries it
    ts: int  # the load's ts (every row's ts; TTLs count from it with ttl_base="commit")
    ttl_base: str
    default_ttl: int | None
    v0: bool  # sst_format_version 0: no TTLs
    output: OutputSpec


class _Watch:
    """Counts the slice's records and sets its transactional ones apart (the driver handles them)."""

    def __init__(self, sl: Any) -> None:
        self.slice = sl
        self.count = 0
        self.tx: list[tuple] = []

    def runs(self) -> Iterator[list[tuple]]:
        """The slice's records without a tx, as runs of tuples of the `SourceRecord` fields (`runs()`);
        only a run that has a transaction is looked at record by record."""
        n = 0
        for run, has_tx in self.slice.runs():
            n += len(run)
            if has_tx:
                self.tx += [r for r in run if r[6] is not None]
                run = [r for r in run if r[6] is None]
            yield run
        self.count = n


def _plain_columns(task: BulkTask) -> tuple[tuple[list[bytes], Any, Any], int, int] | None:
    """The output rows of a slice whose records are all plain (`LogSlice.plain`), as columns: ((keys,
    expire_ts, values) sorted by key, records read, user bytes); every row has the task's seq and the
    load's ts, and `expire_ts` is one value for every row or, when some rows are deletes and the load has
    a TTL, a list (None for a delete). `values` is a list of bytes (None for a delete) or, when every
    surviving value has one length (no delete), a numpy array of them (dtype ``V<length>``). None when
    the slice is not plain or a record needs one of `resolve_tuples`' checks or errors (a key in the
    reserved space, a TTL the format cannot hold): the caller then takes the general path, which raises
    them.

    The same rows as the general path: the last record of a key wins, a delete is a tombstone, a value
    gets `default_ttl` from the load's ts. Keys and values are copied out of the slice's bytes once,
    the survivors only, in key order; no tuple is made per row (`SstOutput.write_columns` takes them)."""
    sl = task.slice
    # a LogSlice (a file) or a SegmentSlice (objects of a log on an object store) can give columns
    cols = sl.plain() if isinstance(sl, LogSlice | SegmentSlice) else None
    if cols is None:
        return None
    buf, kstarts, kends, vstarts, vends = cols
    ts = task.ts
    exp = None
    ttl = task.default_ttl
    if ttl is not None and ttl is not NO_TTL:
        exp = ts + ttl
        if task.v0 or not I64_MIN <= exp <= I64_MAX:
            return None
    n = len(kstarts)
    klens = kends - kstarts
    dele = vstarts < 0
    nbytes = int(klens.sum()) + int((vends - vstarts).sum())  # a delete's span (-1, -1) adds 0
    at, keys = _last_per_key(buf, kstarts, kends, klens)
    if keys[-1] >= SYSTEM_PREFIX:
        return None
    exps: Any = exp
    gone = dele[at]
    vs = vstarts[at]
    vlens = vends[at] - vs
    width = int(vlens[0])
    if 0 < width and not gone.any() and bool((vlens == width).all()):
        # values of one length: gathered into one array of `width`-byte items (SstWriter.extend_columns
        # takes it), through a view of `buf` as overlapping windows: no bytes object per value
        return (keys, exps, byte_windows(buf, width)[vs]), n, nbytes
    values: list = list(map(buf.__getitem__, map(slice, vs.tolist(), vends[at].tolist())))
    if gone.any():
        values = [None if d else v for d, v in zip(gone.tolist(), values, strict=True)]
        if exp is not None:
            exps = [None if d else exp for d in gone.tolist()]
    return (keys, exps, values), n, nbytes


def _last_per_key(buf: bytes, kstarts: Any, kends: Any, klens: Any) -> tuple[Any, list[bytes]]:
    """(index of the last record of each key, the keys), in key order, for records whose keys lie at
    [kstarts, kends) of `buf` (offset order). Keys of one length are sorted by numpy as fixed-width
    strings (bytewise, as bytes compare: equal lengths make numpy's trailing-NUL rule moot); others
    through a dict and `sorted`."""
    import numpy as np

    n = len(kstarts)
    width = int(klens[0])
    if bool((klens == width).all()):
        k = byte_windows(buf, width)[kstarts].view(np.uint8).reshape(n, width)
        at = _last_of_equal(k)
        return at, k[at].view(f"V{width}").ravel().tolist()  # V: the exact bytes
    keys = list(map(buf.__getitem__, map(slice, kstarts.tolist(), kends.tolist())))
    last = dict(zip(keys, range(n), strict=True))  # the last record of a key wins
    order = sorted(last)
    return np.array(list(map(last.__getitem__, order)), np.int64), order


def _last_of_equal(k: Any) -> Any:
    """For keys of one length given as the rows of a 2-d uint8 array (in record order): the index of the
    last row of each distinct key, in key order. The keys are sorted as big-endian 64-bit words (zero
    padded: equal lengths keep bytewise order), a stable integer sort per word (`np.lexsort`), about
    twice as fast as sorting them as byte strings."""
    import numpy as np

    n, width = k.shape
    pad = -width % 8
    if pad:
        k = np.concatenate((k, np.zeros((n, pad), np.uint8)), axis=1)
    words = np.ascontiguousarray(k).view(">u8")
    order = np.lexsort(words.T[::-1])  # the last word given is the primary one; stable: record order kept
    s = words[order]
    last = np.empty(n, bool)  # the last of a run of equal keys
    last[-1] = True
    np.any(s[1:] != s[:-1], axis=1, out=last[:-1])
    return order[last]


def run_task(task: BulkTask) -> dict[str, Any]:
    """Executor side: write the task's slice into uniquely named SSTs; return their metadata."""
    spec = dataclasses.replace(
        task.output, prefix=f"{task.output.prefix}-t{task.index:04d}-{uuid.uuid4().hex[:8]}"
    )
    seq, ts = task.seq, task.ts
    plain = _plain_columns(task)
    if plain is not None:
        (keys, exps, values), count, nbytes = plain
        outputs = SstOutput(spec, ts).write_columns(keys, seq, ts, exps, values)
        del keys, values
        tx: list[tuple] = []
    else:
        watch = _Watch(task.slice)
        rows, nbytes = resolve_tuples(
            task.slice, itertools.chain.from_iterable(watch.runs()), ts, task.ttl_base, task.default_ttl, task.v0
        )
        # sorted by key (keys are unique): one list of output rows, built without a call per row
        out = [(key, seq, ts, exp, value) for key, (_k, exp, value) in sorted(rows.items())]
        del rows
        count, tx = watch.count, watch.tx
        outputs = SstOutput(spec, ts).write(out)
    return {
        "index": task.index,
        "outputs": [(name, info.to_dict()) for name, info in outputs],
        "records": count,
        "bytes": nbytes,
        "tx": tx,
    }


__all__ = ["BulkTask", "run_task"]
