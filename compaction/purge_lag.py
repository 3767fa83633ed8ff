"""Purge lag: how long expired rows and deleted keys stay on disk after they stop being visible.

For every expired row and tombstone a compaction physically drops (`compaction.merge`, the oldest-run
step), the lag is ``tick - expire_ts`` (an expired row, or the tombstone the TTL filter left for one) or
``tick - ts`` (a delete's tombstone), in ms. `PurgeLag` keeps those lags in a small, mergeable
histogram, so each Spark task, worker process and job counts its own and the totals add up exactly:
`CompactionStats.add` merges them, and the DB keeps the cumulative one in the manifest.

Buckets are log-scaled, as in HdrHistogram with two significant bits: a lag ``v`` falls in the bucket
whose lower edge is ``v`` with all but its three leading bits cleared. Values below 8 ms have a bucket
each; above that every power of two is split into four buckets, so a bucket's width is at most a quarter
of its lower edge. A month in ms (2^31.3) needs at most ~120 buckets; only non-empty ones are stored.

``count``, ``max`` and ``total`` are exact; quantiles are the upper edge of the bucket holding the rank
(clamped to the exact max), so they are never below the exact quantile and at most one bucket above it.

Serialized (`to_dict`, also what the manifest stores under ``purge_lag``)::

    {"count": int, "p50": int | None, "p99": int | None, "max": int,
     "buckets": {"<lower edge in ms>": count, ...}}        # keys ascending; p50/p99 derived, informative

Delete persistence as a measured latency follows Lethe (Sarkar et al., SIGMOD 2020), which argues for a
bound on it; periodic compaction (`DbOptions.periodic_compaction_interval`) is what gives one here.
"""

from __future__ import annotations

import math
from typing import Any

SIGNIFICANT_BITS = 3  # the leading 1 and two more: four sub-buckets per power of two


def bucket_lower(v: int) -> int:
    """The lower edge of the bucket holding lag `v` (ms, >= 0)."""
    shift = v.bit_length() - SIGNIFICANT_BITS
    if shift <= 0:
        return v
    return (v >> shift) << shift


def bucket_upper(lower: int) -> int:
    """The largest lag in the bucket whose lower edge is `lower` (inclusive)."""
    shift = lower.bit_length() - SIGNIFICANT_BITS
    if shift <= 0:
        return lower
    return lower + (1 << shift) - 1


class PurgeLag:
    """Mergeable histogram of ms from expiry (expire_ts) or delete (tombstone ts) to physical removal.

    >>> h = PurgeLag()
    >>> h.record(1000); h.record(5, n=3)
    >>> h.count, h.max, h.quantile(0.5), h.quantile(1.0)
    (4, 1000, 5, 1000)
    """

    __slots__ = ("buckets", "count", "max", "total")

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}  # lower edge -> count
        self.count = 0
        self.max = 0
        self.total = 0  # sum of all lags (exact), for a mean

    def record(self, lag_ms: int, n: int = 1) -> None:
        """Count `n` rows purged `lag_ms` after they expired or were deleted. O(1)."""
        if lag_ms < 0 or n <= 0:
            if lag_ms < 0:
                raise ValueError(f"purge lag must be >= 0 ms, got {lag_ms}")
            if n == 0:
                return
            raise ValueError(f"purge lag count must be >= 0, got {n}")
        # bucket_lower, inlined: the merge calls this once per dropped row
        shift = lag_ms.bit_length() - SIGNIFICANT_BITS
        b = (lag_ms >> shift) << shift if shift > 0 else lag_ms
        buckets = self.buckets
        buckets[b] = buckets.get(b, 0) + n
        self.count += n
        self.total += lag_ms * n
        if lag_ms > self.max:
            self.max = lag_ms

    def merge(self, other: PurgeLag) -> PurgeLag:
        """Add `other`'s counts into this histogram (in place) and return self. O(buckets)."""
        mine = self.buckets
        for b, n in other.buckets.items():
            mine[b] = mine.get(b, 0) + n
        self.count += other.count
        self.total += other.total
        if other.max > self.max:
            self.max = other.max
        return self

    def copy(self) -> PurgeLag:
        """An independent copy."""
        return PurgeLag().merge(self)

    def quantile(self, q: float) -> int | None:
        """Upper edge of the bucket holding the nearest-rank `q` quantile (0 <= q <= 1), clamped to the
        exact max; None when nothing was recorded. O(buckets)."""
        if not 0 <= q <= 1:
            raise ValueError(f"quantile must be in [0, 1], got {q}")
        if not self.count:
            return None
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for b in sorted(self.buckets):
            seen += self.buckets[b]
            if seen >= rank:
                return min(bucket_upper(b), self.max)
        return self.max  # unreachable while count == sum(buckets)

    @property
    def mean(self) -> float | None:
        """The exact mean lag in ms (None while empty)."""
        return self.total / self.count if self.count else None

    def __bool__(self) -> bool:
        return self.count > 0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PurgeLag):
            return NotImplemented
        return (self.count, self.max, self.total, self.buckets) == (other.count, other.max, other.total, other.buckets)

    def __repr__(self) -> str:
        return f"PurgeLag(count={self.count}, p50={self.quantile(0.5)}, p99={self.quantile(0.99)}, max={self.max})"

    def __getstate__(self) -> dict[str, Any]:
        return {"buckets": self.buckets, "count": self.count, "max": self.max, "total": self.total}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.buckets = state["buckets"]
        self.count = state["count"]
        self.max = state["max"]
        self.total = state["total"]

    def to_dict(self) -> dict[str, Any]:
        """JSON- and msgpack-friendly form (see the module docstring); `from_dict` is its inverse."""
        return {
            "count": self.count,
            "p50": self.quantile(0.5),
            "p99": self.quantile(0.99),
            "max": self.max,
            "total": self.total,
            "buckets": {str(b): self.buckets[b] for b in sorted(self.buckets)},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PurgeLag:
        """Rebuild from `to_dict` output; ValueError if it is not consistent (p50/p99 are not trusted)."""
        if not isinstance(d, dict):
            raise ValueError(f"purge lag must be a map, not {type(d).__name__}")
        try:
            count, mx, total, raw = d["count"], d["max"], d.get("total", 0), d["buckets"]
        except KeyError as e:
            raise ValueError(f"purge lag map lacks {e.args[0]!r}") from None
        h = cls()
        if not isinstance(raw, dict):
            raise ValueError("purge lag buckets must be a map")
        for k, n in raw.items():
            try:
                b = int(k)
            except (TypeError, ValueError):
                raise ValueError(f"purge lag bucket {k!r} is not an integer") from None
            if b < 0 or bucket_lower(b) != b or type(n) is not int or n <= 0:
                raise ValueError(f"purge lag bucket {k!r}: {n!r} is not a valid bucket")
            h.buckets[b] = h.buckets.get(b, 0) + n
        for name, v in (("count", count), ("max", mx), ("total", total)):
            if type(v) is not int or v < 0:
                raise ValueError(f"purge lag {name} must be an int >= 0, got {v!r}")
        if count != sum(h.buckets.values()):
            raise ValueError(f"purge lag count {count} does not match its buckets ({sum(h.buckets.values())})")
        if count and bucket_lower(mx) != max(h.buckets):
            raise ValueError(f"purge lag max {mx} is not in its highest bucket")
        h.count, h.max, h.total = count, mx, total
        return h


def accumulate(stored: dict[str, Any] | None, lag: PurgeLag) -> dict[str, Any] | None:
    """`stored` (a `to_dict` map, or None for nothing yet, as in the manifest) plus `lag`, as a map;
    None while both are empty, so a manifest gains the field only once something was purged."""
    if not lag.count:
        return stored
    total = PurgeLag.from_dict(stored) if stored is not None else PurgeLag()
    return total.merge(lag).to_dict()


__all__ = ["PurgeLag", "accumulate", "bucket_lower", "bucket_upper"]
