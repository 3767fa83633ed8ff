"""The columnar merge: a round of `RowArray`s of one layout resolved in numpy, by the rules of
`compaction.merge` (snapshot stripes, history retention, the built-in TTL filter, the oldest-run purge),
and its kept rows handed to the output as records (`compaction.output.SstOutput.write_stream`), which the
SST writer encodes as they are (`formats.sst_records`).

Why: a full compaction of millions of rows spends most of its time making, comparing and unpacking one
tuple per row. The inputs this engine writes are mostly groups of blocks whose rows are all alike (one
key length, one value length, no tombstone: `formats.row.RowCodec.rows_array`), which the forward scan
already resolves in numpy (`lsm.readpath`). A round made only of such arrays is resolved here the same
way, with every step of `Resolver.resolve` (and its counts in `CompactionStats`) done a column at a time.
Any other round (row lists, several layouts), and any job with a user compaction filter or one that
reports changed rows, takes the row path: the output files are the same bytes either way (a hypothesis
test holds the two paths to each other).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from compaction.filter import TtlFilter
from compaction.stream import records, round_array
from formats.row_array import RowArray
from formats.sst_records import key_words

# RowFlags bits (formats.row): a tombstone (only in a ragged RowArray), has expire_ts
_TOMBSTONE = 1
_HAS_EXP = 2


def columnar_resolver(resolver: Any) -> bool:
    """Whether a resolver's rules can run column-wise: only the built-in TTL filter (no user filter,
    whose decisions are per row) and no change report (`ChangeReporter` notes rows one by one)."""
    f = resolver.filters
    return not resolver.reports_changes and len(f) == 1 and type(f[0]) is TtlFilter


def resolve_round(pieces: list[RowArray], resolver: Any) -> tuple | None:
    """Resolve one round of `RowArray`s of one layout (newest source first, whole keys) as
    `Resolver.resolve` does key by key, counting into ``resolver.stats``; return the kept rows as
    records for `SstOutput.write_stream` (`formats.sst_records`: the layout the round was read in, a
    tombstone flagged) — or None when no row is kept."""
    stats = resolver.stats
    a = round_array(pieces)
    dtype = a.dtype
    n = len(a)
    seq = a["seq"]
    words = key_words(a["key"])  # the keys as 64-bit words: compared and sorted far faster than bytes
    # the rows are resolved in `order` (None: as they are), and only the kept ones are gathered, once,
    # at the end; until then the steps below read the few fields they need in that order
    order = None
    # the order of `versions_of` over `round_rows`: key ascending, seq descending, a repeated seq in
    # source order (lexsort is stable); a single sorted source is already in it unless a seq repeats
    same = _repeats(words)
    if len(pieces) > 1 or (same & (seq[1:] >= seq[:-1])).any():
        order = np.lexsort((~seq.astype(np.uint64), *reversed(words)))
        seq = seq[order]
        words = [w[order] for w in words]
        same = _repeats(words)
    first = np.empty(n, np.bool_)
    first[0] = True
    np.logical_not(same, out=first[1:])
    if not first.all():
        dup = np.zeros(n, np.bool_)
        dup[1:] = same & (seq[1:] == seq[:-1])  # a repeated seq: the first row (newest source) stands
        if dup.any():
            rest = np.flatnonzero(~dup)
            order = rest if order is None else order[rest]
            n = len(order)
            seq = seq[rest]
            first = np.empty(n, np.bool_)
            first[0] = True
            np.logical_not(_repeats([w[rest] for w in words]), out=first[1:])
    stats.rows_in += n

    def field(name: str) -> Any:  # a field of the rows in resolution order
        return a[name] if order is None else a[name][order]

    ts = field("ts")
    flags = field("flags")
    has_exp = (flags & _HAS_EXP) != 0 if "exp" in dtype.names else None
    exp = field("exp") if has_exp is not None else None
    deletes = (flags & _TOMBSTONE) != 0 if any(p.ragged for p in pieces) else None  # only ragged arrays hold any
    if deletes is not None and not deletes.any():
        deletes = None

    # step 1: v0 of each key stays; an older version stays when its stripe differs from its successor's
    keep = first.copy()
    if not first.all():
        older = ~first
        if resolver.snapshots:
            stripe = np.searchsorted(np.array(resolver.snapshots, np.uint64), seq.astype(np.uint64), "left")
            keep[1:] |= older[1:] & (stripe[1:] != stripe[:-1])
        # step 2: ... or when its successor was written after the history cutoff
        if resolver.cutoff is not None:
            keep[1:] |= older[1:] & (ts[:-1] > resolver.cutoff)
        dropped = ~keep
        count = int(np.count_nonzero(dropped))
        if count:
            stats.versions_dropped += count
            _raise_floor(stats, seq[dropped])

    # step 3: the built-in TTL filter on each v0 that is no tombstone and that no snapshot sees
    ttl = resolver.filters[0]
    tomb = deletes
    if has_exp is not None:
        cand = first & has_exp & (exp < ttl.tick)  # expired: tick > expire_ts
        if deletes is not None:
            cand &= ~deletes
        if resolver.snapshots:
            cand &= seq > resolver.top_snapshot
        if resolver.protected is not None and cand.any():
            at = np.flatnonzero(cand)  # only the candidates' keys are looked at
            cand[at[_starts_with(a["key"][at if order is None else order[at]], resolver.protected)]] = False
        removed = int(np.count_nonzero(cand))
        if removed:
            stats.filters[ttl.name].removed += removed
            _raise_floor(stats, seq[cand])
            tomb = cand if deletes is None else cand | deletes

    # step 4: in the oldest run, drop each key's bottom kept versions while tombstones or expired
    if resolver.is_last_run and (tomb is not None or has_exp is not None):
        removable = np.zeros(n, np.bool_) if tomb is None else tomb.copy()
        if has_exp is not None:
            removable |= has_exp & (exp < resolver.expired_before)
        removable &= keep
        if removable.any():
            purge = _bottom_suffix(keep, first, removable)
            if purge.any():
                t = purge & tomb if tomb is not None else None
                tombs = 0 if t is None else int(np.count_nonzero(t))
                stats.tombstones_dropped += tombs
                stats.expired_dropped += int(np.count_nonzero(purge)) - tombs
                # the lag counts from the expiry (an expired row, a TTL tombstone), or from a delete's ts
                since = ts.astype(np.int64)
                if has_exp is not None:
                    since = np.where(has_exp, exp, since)
                lags = resolver.tick - since[purge]
                values, counts = np.unique(np.maximum(lags, 0), return_counts=True)
                for lag, c in zip(values.tolist(), counts.tolist(), strict=True):
                    stats.purge_lag.record(lag, c)
                _raise_floor(stats, seq[purge])
                keep &= ~purge
    if not keep.all():
        if not keep.any():
            return None
        kept = np.flatnonzero(keep)
        order = kept if order is None else order[kept]
        if tomb is not None:
            tomb = tomb[kept]
            flags = flags[kept]
    return _chunk(a, order, flags, tomb)


def _chunk(a: Any, order: Any, flags: Any, tomb: Any) -> Any:
    """The kept rows (`a` in `order`, None: all of `a` as it is; `flags` theirs) as the output's records
    (`formats.sst_records`), gathered once: a row the TTL filter turned into a tombstone gets its
    tombstone flag (it keeps its expire_ts, as in the row path). Without a gather or a flag to set, the
    round's array itself (a view of its input blocks when the round had one piece)."""
    add = None
    if tomb is not None:
        add = tomb & ((flags & _TOMBSTONE) == 0)
        if not add.any():
            add = None
    if order is None and add is None:
        return a
    void = np.dtype((np.void, a.dtype.itemsize))
    out = records(records(a, void)[order] if order is not None else records(a, void).copy(), a.dtype)
    if add is not None:
        out["flags"] = np.where(add, flags | _TOMBSTONE, flags)
    return out


def _repeats(words: list[Any]) -> Any:
    """From `key_words`: whether each key equals the one before it (for rows 1..n-1)."""
    same = words[0][1:] == words[0][:-1]
    for w in words[1:]:
        same &= w[1:] == w[:-1]
    return same


def _bottom_suffix(keep: Any, first: Any, removable: Any) -> Any:
    """The kept rows of each key (rows of a key are contiguous, `first` marks each key's first row) that
    lie below the key's last kept row that is not `removable`: what step 4 removes, bottom up."""
    n = len(keep)
    pos = np.arange(n)
    stays = np.where(keep & ~removable, pos, -1)
    starts = np.flatnonzero(first)
    last = np.maximum.reduceat(stays, starts)  # per key: the last kept row that must stay (-1: none)
    group = np.cumsum(first) - 1
    return keep & (pos > last[group])


def _starts_with(keys: Any, prefix: bytes) -> Any:
    """Which of `keys` (a ``V<w>`` array) start with `prefix` (compared as bytes: trailing NULs count)."""
    width = keys.dtype.itemsize
    if len(prefix) > width:
        return np.zeros(len(keys), np.bool_)
    if not prefix:
        return np.ones(len(keys), np.bool_)
    raw = np.ascontiguousarray(keys).view(np.uint8).reshape(len(keys), width)
    return (raw[:, : len(prefix)] == np.frombuffer(prefix, np.uint8)).all(axis=1)


def _raise_floor(stats: Any, seqs: Any) -> None:
    """history_floor = max(history_floor, the largest of `seqs`)."""
    if len(seqs):
        top = int(seqs.max())
        if top > stats.history_floor:
            stats.history_floor = top


__all__ = ["columnar_resolver", "resolve_round"]
