"""What a simulation leaves in its output directory, and the terminal table.

* ``summary.json``: ``{"spec": <the spec as given>, "engine": ..., "policies": [one object per
  simulation], "plots": [PNG file names]}``; each policy object has the fixed fields that docs/simulate.md
  lists under "summary.json", and a few more.
* ``timeseries.csv``: one row per sample per simulation: ``policy`` then `runner.SAMPLE_FIELDS`.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from typing import Any

from tools import render
from tools.simulate.runner import SAMPLE_FIELDS

DAY_MS = 86_400_000


def write_timeseries(path: str, results: Sequence[dict[str, Any]]) -> None:
    """timeseries.csv: a header, then one row per sample of each simulation, in order."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("policy", *SAMPLE_FIELDS))
        for r in results:
            name = r["summary"]["name"]
            for s in r["samples"]:
                w.writerow((name, *("" if s[k] is None else s[k] for k in SAMPLE_FIELDS)))


def write_summary(path: str, summary: dict[str, Any]) -> None:
    """summary.json, written to a temporary name and renamed into place."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(summary, f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def _ms(v: int | None) -> str:
    """A duration for the table: 0, 750ms, 42s, 3.5h, 2.1d."""
    if v is None:
        return "-"
    if v < 1000:
        return f"{v}ms"
    if v < 3_600_000:
        return f"{v / 1000:.0f}s"
    if v < DAY_MS:
        return f"{v / 3_600_000:.1f}h"
    return f"{v / DAY_MS:.2f}d"


def summary_table(policies: Sequence[dict[str, Any]]) -> str:
    """One row per simulation: space, write amplification, purge lag and what was left unpurged."""
    headers = (
        "policy",
        "ops",
        "wall s",
        "disk",
        "live",
        "expired",
        "tombstone",
        "shadowed",
        "space amp",
        "write amp",
        "purge p50",
        "purge p99",
        "purge max",
        "unpurged expired",
        "compactions",
    )
    hb = render.human_bytes
    rows = []
    for p in policies:
        lag = p["purge_lag_ms"]
        comp = ",".join(f"{k}:{v}" for k, v in p["compactions"].items() if v) or "0"
        sa = p["space_amplification_final"]
        rows.append(
            (
                p["name"],
                p["ops"],
                f"{p['wall_s']:.1f}",
                hb(p["disk_bytes_final"]),
                hb(p["live_bytes_final"]),
                hb(p["expired_bytes_final"]),
                hb(p["tombstone_bytes_final"]),
                hb(p["shadowed_bytes_final"]),
                "-" if sa is None else f"{sa:.2f}",
                f"{p['write_amplification']:.2f}",
                _ms(lag["p50"]),
                _ms(lag["p99"]),
                _ms(lag["max"] if lag["count"] else None),
                p["unpurged_expired_rows_final"],
                comp,
            )
        )
    return render.table(headers, rows)


__all__ = ["write_timeseries", "write_summary", "summary_table"]
