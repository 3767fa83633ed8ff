"""What a simulation leaves in its output directory, and the terminal table.

* ``summary.json``: ``{"spec": <the spec as given>, "engine": ..., "policies": [one object per
  simulation], "plots": [PNG file names]}``; each policy object has the fixed fields that docs/simulate.md
  lists under "summary.json", and a few more.
* ``timeseries.csv``: one row per sample per simulation: ``policy`` then `runner.SAMPLE_FIELDS`.
* ``policies.csv``: the key of the short labels the plots and the table use (``P1``.. in a sweep):
  one row per simulation, ``label``, ``name``, ``policy``, one column per ``[sweep]`` path with the
  simulation's value, and ``options`` (its DbOptions overrides as JSON).
"""

from __future__ import annotations

import csv
import json
import os
from collections import Counter
from collections.abc import Sequence
from typing import Any

from tools import render
from tools.simulate.runner import REQUEST_FIELDS, SAMPLE_FIELDS

DAY_MS = 86_400_000


def write_timeseries(path: str, results: Sequence[dict[str, Any]]) -> None:
    """timeseries.csv: a header, then one row per sample of each simulation, in order (on an object
    store, with the requests so far by kind: `runner.REQUEST_FIELDS`)."""
    objects = any("object_store" in r["summary"] for r in results)
    fields = SAMPLE_FIELDS + REQUEST_FIELDS if objects else SAMPLE_FIELDS
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("policy", *fields))
        for r in results:
            name = r["summary"]["name"]
            for s in r["samples"]:
                w.writerow((name, *("" if s.get(k) is None else s[k] for k in fields)))


def sweep_paths(policies: Sequence[dict[str, Any]]) -> list[str]:
    """The ``[sweep]`` paths of the simulations, in the spec's order (empty without a sweep)."""
    return list(dict.fromkeys(k for p in policies for k in p.get("params", {})))


def short_paths(paths: Sequence[str]) -> dict[str, str]:
    """Each path's last step (``workload.phases[0].ops_per_sec`` -> ``ops_per_sec``), or the whole path
    where two paths share their last step."""
    last = {p: p.rsplit(".", 1)[-1] for p in paths}
    taken = Counter(last.values())
    return {p: (s if taken[s] == 1 else p) for p, s in last.items()}


def label(p: dict[str, Any]) -> str:
    """The simulation's short label (summaries written before labels existed: its name)."""
    return p.get("label") or p["name"]


def legend_entry(p: dict[str, Any], paths: Sequence[str]) -> str:
    """``P3: tiered, zipfian, 4``: the label, the policy and the sweep's values in `paths` order; the
    name alone without a sweep. `legend_title` names the parts."""
    if not paths:
        return label(p)
    return f"{label(p)}: " + ", ".join([p["policy"], *(str(p["params"].get(k, "-")) for k in paths)])


def legend_title(paths: Sequence[str]) -> str | None:
    """What the parts of a `legend_entry` are: ``label: policy, key_distribution, ...`` (None: no sweep)."""
    if not paths:
        return None
    short = short_paths(paths)
    return "label: " + ", ".join(["policy", *(short[k] for k in paths)])


def _options_text(p: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in p.get("options", {}).items()) or "-"


def write_key(path: str, policies: Sequence[dict[str, Any]]) -> None:
    """policies.csv: each simulation's label, name, policy, sweep values and DbOptions overrides."""
    paths = sweep_paths(policies)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("label", "name", "policy", *paths, "options"))
        for p in policies:
            values = [p["params"].get(k, "") for k in paths]
            w.writerow((label(p), p["name"], p["policy"], *values, json.dumps(p.get("options", {}))))


def key_table(policies: Sequence[dict[str, Any]]) -> str | None:
    """The labels' key for the terminal (a sweep's ``P1``.. with their policy and values); None when
    every label is the simulation's own name."""
    if all(label(p) == p["name"] for p in policies):
        return None
    paths = sweep_paths(policies)
    rows = [
        (label(p), p["policy"], *(p["params"].get(k, "-") for k in paths), _options_text(p)) for p in policies
    ]
    return render.table(("label", "policy", *paths, "options"), rows)


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


def _name_header(policies: Sequence[dict[str, Any]]) -> str:
    """The first column's name: "policy", or "label" when a sweep's short labels stand for the names."""
    return "policy" if all(label(p) == p["name"] for p in policies) else "label"


# What the tables leave out first to fit `TABLE_WIDTH` (``lsm simulate --wide`` keeps every column): the
# run's wall time, then the detail behind space amp (the classes it sums), then the rest of the detail
SUMMARY_DROP = ("wall s", "purge p50", "shadowed", "tombstone", "ops", "live", "purge max")
REQUESTS_DROP = ("got/day", "put/day", "stored", "requests $/month", "storage $/month")
TABLE_WIDTH = 120


def fitted(text: str, left_out: list[str]) -> str:
    """`text` and, when columns were left out to fit, a line naming them."""
    if not left_out:
        return text
    return text + f"\n({', '.join(left_out)} left out to fit {TABLE_WIDTH} columns: --wide shows them)"


def summary_table(policies: Sequence[dict[str, Any]], width: int | None = None) -> str:
    """One row per simulation: space, write amplification, purge lag and what was left unpurged. With
    `width`, the columns of `SUMMARY_DROP` are left out in turn until it fits (a line says which)."""
    headers = (
        _name_header(policies),
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
                label(p),
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
    table = fitted(*render.fit_table(headers, rows, width, SUMMARY_DROP))
    if any("object_store" in p for p in policies):
        table += "\n\n" + requests_table(policies, width)
    return table


def _usd(v: float) -> str:
    return f"${v:.4f}" if v < 1 else f"${v:,.2f}"


def requests_table(policies: Sequence[dict[str, Any]], width: int | None = None) -> str:
    """One row per simulation on an object store: requests per simulated day by kind, the bytes moved,
    the mean stored bytes and the monthly cost estimate (tools.simulate.costs); `width` as in
    `summary_table`."""
    headers = (
        _name_header(policies),
        "PUT/day",
        "GET/day",
        "LIST/day",
        "DELETE/day",
        "HEAD/day",
        "put/day",
        "got/day",
        "stored",
        "requests $/month",
        "storage $/month",
        "total $/month",
    )
    hb = render.human_bytes
    rows = []
    for p in policies:
        o = p.get("object_store")
        if o is None:
            continue
        d = o["requests_per_day"]
        rows.append(
            (
                label(p),
                f"{d['put']:,.0f}",
                f"{d['get']:,.0f}",
                f"{d['list']:,.0f}",
                f"{d['delete']:,.0f}",
                f"{d['head']:,.0f}",
                hb(round(d["put_bytes"])),
                hb(round(d["get_bytes"])),
                hb(o["mean_stored_bytes"]),
                _usd(o["monthly_request_cost_usd"]),
                _usd(o["monthly_storage_cost_usd"]),
                _usd(o["monthly_cost_usd"]),
            )
        )
    return fitted(*render.fit_table(headers, rows, width, REQUESTS_DROP))


__all__ = [
    "write_timeseries",
    "write_summary",
    "write_key",
    "summary_table",
    "requests_table",
    "key_table",
    "legend_entry",
    "legend_title",
    "sweep_paths",
]
