"""PNG plots of a simulation, policies side by side (matplotlib, the optional extra ``sim``).

* ``disk.png``: disk bytes by du class over simulated days, one panel per simulation (stacked areas);
* ``amplification.png``: space amplification and cumulative write amplification over time;
* ``purge_lag.png``: the purge-lag distribution (share of purged rows purged within x, from the
  histogram) and the age of the oldest expired row still on disk over time, with each policy's bound
  ``periodic_compaction_interval + compact_every`` drawn in;
* ``comparison.png``: one bar per simulation: write amplification, final space amplification and purge
  lag p99 (the sweep's comparison plot).

`available()` says whether matplotlib imports; without it nothing here is called.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

DAY_MS = 86_400_000
HOUR_MS = 3_600_000
CLASSES = ("live", "expired", "tombstone", "shadowed")
COLORS = {"live": "#4c9a2a", "expired": "#d95f02", "tombstone": "#7570b3", "shadowed": "#a6a6a6"}
INSTALL_HINT = "plots need matplotlib: pip install 'lsm-sim[sim]'"


def available() -> bool:
    """True when matplotlib imports (the ``sim`` extra)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_plots(out_dir: str, results: Sequence[dict[str, Any]], compact_every_ms: int) -> list[str]:
    """Write the four PNGs into `out_dir`; return their file names."""
    plt = _plt()
    names = []
    for fn in (_disk, _amplification, _purge_lag, _comparison):
        name, fig = fn(plt, results, compact_every_ms)
        fig.savefig(os.path.join(out_dir, name), dpi=110, bbox_inches="tight")
        plt.close(fig)
        names.append(name)
    return names


def _days(samples: list[dict[str, Any]]) -> list[float]:
    return [s["day"] for s in samples]


def _disk(plt: Any, results: Sequence[dict[str, Any]], _c: int) -> tuple[str, Any]:
    n = len(results)
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), sharey=True, squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax, r in zip(axes.flat, results, strict=False):
        s = r["samples"]
        ys = [[x[f"{c}_bytes"] / 2**20 for x in s] for c in CLASSES]
        ax.stackplot(_days(s), *ys, labels=CLASSES, colors=[COLORS[c] for c in CLASSES], alpha=0.85)
        ax.set_title(r["summary"]["name"], fontsize=9)
        ax.set_xlabel("simulated days")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("MiB (row bytes)")
    axes[0][0].legend(loc="upper left", fontsize=8)
    fig.suptitle("Disk bytes by class")
    return "disk.png", fig


def _amplification(plt: Any, results: Sequence[dict[str, Any]], _c: int) -> tuple[str, Any]:
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
    for r in results:
        s = r["samples"]
        name = r["summary"]["name"]
        a1.plot(_days(s), [x["space_amplification"] for x in s], label=name)
        a2.plot(_days(s), [x["write_amplification"] for x in s], label=name)
    a1.set_title("space amplification (disk / live bytes)")
    a2.set_title("cumulative write amplification (engine)")
    for a in (a1, a2):
        a.set_xlabel("simulated days")
        a.grid(alpha=0.3)
    a1.set_yscale("log")
    a2.legend(fontsize=8)
    return "amplification.png", fig


def _bound(r: dict[str, Any], compact_every_ms: int) -> float | None:
    p = r["summary"].get("periodic_compaction_interval_ms")
    return None if p is None else (p + compact_every_ms) / HOUR_MS


def _purge_lag(plt: Any, results: Sequence[dict[str, Any]], compact_every_ms: int) -> tuple[str, Any]:
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
    for i, r in enumerate(results):
        color = f"C{i % 10}"
        summ = r["summary"]
        hist = {int(k): v for k, v in summ["purge_lag_histogram"].items()}
        total = sum(hist.values())
        if total:
            xs, ys, acc = [], [], 0
            for lower in sorted(hist):
                acc += hist[lower]
                xs.append(max(lower, 1) / HOUR_MS)
                ys.append(acc / total)
            a1.step(xs, ys, where="post", color=color, label=summ["name"])
        s = r["samples"]
        ages = [
            None if x["oldest_unpurged_expired_ms"] is None else x["oldest_unpurged_expired_ms"] / HOUR_MS
            for x in s
        ]
        a2.plot(_days(s), [0 if a is None else a for a in ages], color=color, label=summ["name"])
        b = _bound(r, compact_every_ms)
        if b is not None:
            a1.axvline(b, color=color, linestyle="--", linewidth=1)
            a2.axhline(b, color=color, linestyle="--", linewidth=1)
    a1.set_xscale("log")
    a1.set_xlabel("purge lag (hours after expiry or delete, log)")
    a1.set_ylabel("share of purged rows")
    a1.set_title("purge-lag distribution (dashed: bound P + compact_every)")
    a2.set_xlabel("simulated days")
    a2.set_ylabel("hours")
    a2.set_title("oldest expired row still on disk, age since expiry")
    for a in (a1, a2):
        a.grid(alpha=0.3)
    a2.legend(fontsize=8)
    return "purge_lag.png", fig


def _comparison(plt: Any, results: Sequence[dict[str, Any]], _c: int) -> tuple[str, Any]:
    names = [r["summary"]["name"] for r in results]
    fig, axes = plt.subplots(1, 3, figsize=(max(11, 0.9 * len(names) * 3), 4.2))
    metrics = (
        ("write amplification", [r["summary"]["write_amplification"] for r in results]),
        ("space amplification (final)", [r["summary"]["space_amplification_final"] or 0 for r in results]),
        ("purge lag p99 (hours)", [(r["summary"]["purge_lag_ms"]["p99"] or 0) / HOUR_MS for r in results]),
    )
    for ax, (title, vals) in zip(axes, metrics, strict=True):
        ax.bar(range(len(names)), vals, color=[f"C{i % 10}" for i in range(len(names))])
        ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    return "comparison.png", fig


__all__ = ["available", "write_plots", "INSTALL_HINT"]
