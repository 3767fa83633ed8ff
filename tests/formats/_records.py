"""Records (`formats.sst_records`) made from row tuples, for the tests of the SST writer's record path."""

from __future__ import annotations

from typing import Any

import numpy as np

from formats.row_array import array_dtype


def records_of(rows: list[tuple], *, ttl: bool | None = None, vlen: int | None = None, junk: int = 0) -> Any:
    """`rows` (keys of one width, values of one length `vlen` or tombstones) as one record array, in the
    layout with the expire_ts slot when `ttl` (default: when some row has an expire_ts). With `junk`,
    the bytes a writer must ignore are that byte instead of zeros: a tombstone's value and value_len,
    the expire_ts slot of a row without one, every key_len and value_len field."""
    n = len(rows)
    klen = len(rows[0][0])
    if vlen is None:
        vlen = next((len(r[4]) for r in rows if r[4] is not None), 0)
    if ttl is None:
        ttl = any(r[3] is not None for r in rows)
    a = np.zeros(n, array_dtype(klen, vlen, ttl))
    if junk:
        np.frombuffer(a, np.uint8)[:] = junk  # (a new array: its buffer is writable)
    keys, seqs, tss, exps, values = zip(*rows, strict=True)
    a["key"] = np.frombuffer(b"".join(keys), f"V{klen}")
    tomb = np.array([v is None for v in values])
    has_exp = np.array([e is not None for e in exps])
    a["flags"] = tomb | (has_exp << 1)
    a["ts"] = tss
    a["seq"] = seqs
    if ttl:
        a["exp"][has_exp] = [e for e in exps if e is not None]
    if not junk:
        a["kl"] = klen
        a["vl"] = np.where(tomb, 0, vlen)
    if vlen:
        live = b"".join(v if v is not None else bytes([junk]) * vlen for v in values)
        a["val"] = np.frombuffer(live, f"V{vlen}")
    return a
