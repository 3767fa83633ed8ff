"""Object-store requests per simulated day, and what they and the stored bytes cost.

A spec may run its simulations on an object store (``store = "memory"`` or an ``s3://`` URL; the
default ``"local"`` is a temporary directory). The engine then counts every request it makes
(`storage.objstore.ObjectStorage.stats`), and the simulation reads the counters at every simulated
midnight: one `DAY_FIELDS` row per simulated day (the last one may be partial), priced with the spec's
``[prices]`` table (`Prices`, defaults: AWS S3 Standard list prices, us-east-1):

* requests: ``count / 1000 * price`` per kind (PUT, GET, LIST, DELETE, HEAD);
* storage: the bytes of the SSTs the manifest names at the day's end, in GB of 2^30 bytes (as S3
  bills), times ``storage_gb_month`` for the day's share of a 30-day month;
* the monthly estimate: the run's request cost scaled to 30 days (``cost * 30 / simulated days``) plus
  ``storage_gb_month`` times the mean stored GB over the run (each day weighted by its length).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from storage import STAT_KEYS

DAY_MS = 86_400_000
MONTH_DAYS = 30
GB = 1 << 30
REQUEST_KINDS = ("put", "get", "list", "delete", "head")
# a row of summary.json's object_store.days
DAY_FIELDS = (
    "day",
    "days",  # the day's length in days: 1, or less for a last partial day
    *STAT_KEYS,
    "stored_bytes",
    "request_cost_usd",
    "storage_cost_usd",
)
STORES = ("local", "memory")
# where the defaults come from (docs/simulate.md states them)
PRICE_SOURCE = "AWS S3 pricing (aws.amazon.com/s3/pricing), us-east-1, S3 Standard, first 50 TB; in force since 2016-12-01"


@dataclasses.dataclass(frozen=True)
class Prices:
    """USD per 1000 requests of each kind, and per GB-month stored."""

    put_per_1000: float = 0.005  # PUT, COPY, POST
    list_per_1000: float = 0.005  # LIST is billed as PUT
    get_per_1000: float = 0.0004  # GET, SELECT and all other requests
    head_per_1000: float = 0.0004  # HEAD is one of the "other requests"
    delete_per_1000: float = 0.0  # DELETE is free
    storage_gb_month: float = 0.023  # the first 50 TB

    def request_cost(self, counts: Mapping[str, int]) -> float:
        """USD for `counts` (kind -> requests)."""
        return sum(counts.get(k, 0) / 1000 * getattr(self, f"{k}_per_1000") for k in REQUEST_KINDS)

    def storage_cost(self, stored_bytes: float, days: float) -> float:
        """USD for keeping `stored_bytes` for `days` (a month is MONTH_DAYS days)."""
        return stored_bytes / GB * self.storage_gb_month * days / MONTH_DAYS


PRICE_FIELDS = tuple(f.name for f in dataclasses.fields(Prices))


def delta(now: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    """The counters of `now` minus those of `before`, kind by kind."""
    return {k: now.get(k, 0) - before.get(k, 0) for k in STAT_KEYS}


def day_row(day: int, days: float, counts: Mapping[str, int], stored_bytes: int, prices: Prices) -> dict[str, Any]:
    """One simulated day's row: its requests, its stored bytes at the end, and their cost."""
    return {
        "day": day,
        "days": round(days, 6),
        **{k: counts.get(k, 0) for k in STAT_KEYS},
        "stored_bytes": stored_bytes,
        "request_cost_usd": prices.request_cost(counts),
        "storage_cost_usd": prices.storage_cost(stored_bytes, days),
    }


def summarize(store: str, rows: Sequence[Mapping[str, Any]], prices: Prices, excluded: Mapping[str, int]) -> dict[str, Any]:
    """summary.json's ``object_store`` object of one simulation: totals, the per-day rows, the prices
    and the monthly estimate (module docstring). `excluded`: the requests the simulator's own
    accounting made (not in the counts)."""
    totals = {k: sum(r[k] for r in rows) for k in STAT_KEYS}
    days = sum(r["days"] for r in rows)
    request_cost = prices.request_cost(totals)
    mean_stored = sum(r["stored_bytes"] * r["days"] for r in rows) / days if days else 0.0
    monthly_requests = request_cost * MONTH_DAYS / days if days else 0.0
    monthly_storage = prices.storage_cost(mean_stored, MONTH_DAYS)
    return {
        "store": store,
        "requests": totals,
        "requests_per_day": {k: round(totals[k] / days, 3) if days else 0.0 for k in STAT_KEYS},
        "request_cost_usd": request_cost,
        "mean_stored_bytes": round(mean_stored),
        "monthly_request_cost_usd": monthly_requests,
        "monthly_storage_cost_usd": monthly_storage,
        "monthly_cost_usd": monthly_requests + monthly_storage,
        "prices": dataclasses.asdict(prices),
        "accounting_requests": dict(excluded),
        "days": [dict(r) for r in rows],
    }


__all__ = ["Prices", "PRICE_FIELDS", "PRICE_SOURCE", "DAY_FIELDS", "REQUEST_KINDS", "day_row", "delta", "summarize"]
