"""PNG plots of a simulation, policies side by side (matplotlib, the optional extra ``sim``).

Each simulation appears under its short label (``P3`` in a sweep, else its policy's name); a sweep's
legends spell out each label's policy and values (``P3: tiered, zipfian, 4``), right of the panels.

* ``disk.png``: disk bytes by du class over simulated days, one panel per simulation (stacked areas:
  live + expired + tombstone + shadowed = the disk's row bytes);
* ``amplification.png``: space amplification and cumulative write amplification over time;
* ``purge_lag.png``: the purge-lag distribution (share of purged rows purged within x, from the
  histogram) and the age of the oldest expired row still on disk over time, with each policy's bound
  ``periodic_compaction_interval + compact_every`` drawn in;
* ``comparison.png``: one bar per simulation: write amplification, final space amplification and purge
  lag p99 (the sweep's comparison plot);
* ``requests.png`` (a spec with an object ``store``): PUT and GET requests per simulated day, and each
  day's cost.

`available()` says whether matplotlib imports; without it nothing here is called.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

from tools.simulate import output

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


# readable at the default size, when a PNG is shown at its pixel width
_RC = {
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 10,
    "legend.title_fontsize": 10,
    "figure.titlesize": 13,
}
_STYLES = ("-", "--", ":", "-.")  # past 10 simulations the colours repeat with another line style
DESCRIBE = {
    "live": "live (the newest version, not expired)",
    "expired": "expired (TTL passed, not purged yet)",
    "tombstone": "tombstone (deletes)",
    "shadowed": "shadowed (older versions of a key)",
}


def write_plots(
    out_dir: str,
    results: Sequence[dict[str, Any]],
    compact_every_ms: int,
    on_plot: Callable[[int, int], None] | None = None,
) -> list[str]:
    """Write the four PNGs (five on an object store) into `out_dir`; return their file names.
    `on_plot(done, total)` is called before the first plot and after each (a progress line: drawing
    them takes seconds each)."""
    plots = [_disk, _amplification, _purge_lag, _comparison]
    if any("object_store" in r["summary"] for r in results):
        plots.append(_requests)
    if on_plot is not None:
        on_plot(0, len(plots))
    plt = _plt()
    names = []
    with plt.rc_context(_RC):
        for fn in plots:
            name, fig = fn(plt, results, compact_every_ms)
            fig.savefig(os.path.join(out_dir, name), dpi=110, bbox_inches="tight")
            plt.close(fig)
            names.append(name)
            if on_plot is not None:
                on_plot(len(names), len(plots))
    return names


def _days(samples: list[dict[str, Any]]) -> list[float]:
    return [s["day"] for s in samples]


def _style(i: int) -> dict[str, Any]:
    return {"color": f"C{i % 10}", "linestyle": _STYLES[(i // 10) % len(_STYLES)]}


def _entries(results: Sequence[dict[str, Any]]) -> tuple[list[str], str | None]:
    """Each simulation's legend entry (``P3: tiered, zipfian, 4``) and the legend's title."""
    summaries = [r["summary"] for r in results]
    paths = output.sweep_paths(summaries)
    return [output.legend_entry(p, paths) for p in summaries], output.legend_title(paths)


def _legend_right(fig: Any, handles: list[Any], entries: list[str], title: str | None) -> None:
    """One legend for the figure, right of the panels (never over the data); long lists in columns."""
    fig.legend(
        handles,
        entries,
        title=title,
        loc="center left",
        bbox_to_anchor=(1.0, 0.5),
        ncols=max(1, math.ceil(len(entries) / 24)),
        frameon=False,
        alignment="left",
    )


def _disk(plt: Any, results: Sequence[dict[str, Any]], _c: int) -> tuple[str, Any]:
    n = len(results)
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    # constrained: the layout keeps the suptitle and the legend outside clear of the panels at any size
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(3.6 * cols + 3.2, 2.9 * rows + 0.4),
        sharex=True,
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    entries, title = _entries(results)
    polys: list[Any] = []
    for ax, r, entry in zip(axes.flat, results, entries, strict=False):
        s = r["samples"]
        ys = [[x[f"{c}_bytes"] / 2**20 for x in s] for c in CLASSES]
        polys = ax.stackplot(_days(s), *ys, colors=[COLORS[c] for c in CLASSES], alpha=0.85)
        # the label and the policy on one line, the sweep's values under it
        head, _, rest = entry.partition(", ")
        ax.set_title(head if not rest else f"{head}\n{rest}", fontsize=11)
        ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("simulated days")
    for row in axes:
        row[0].set_ylabel("MiB")
    fig.suptitle("Disk bytes by class, stacked: live + expired + tombstone + shadowed = disk (row bytes)")
    fig.legend(
        polys[::-1],  # the top of the stack first, as it is drawn
        [DESCRIBE[c] for c in CLASSES][::-1],
        title="stacked, top to bottom",
        loc="outside right center",
        frameon=False,
        alignment="left",
    )
    return "disk.png", fig


def _amplification(plt: Any, results: Sequence[dict[str, Any]], _c: int) -> tuple[str, Any]:
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.4))
    entries, title = _entries(results)
    lines = []
    for i, r in enumerate(results):
        s = r["samples"]
        a1.plot(_days(s), [x["space_amplification"] for x in s], **_style(i))
        lines += a2.plot(_days(s), [x["write_amplification"] for x in s], **_style(i))
    a1.set_title("space amplification (disk / live bytes, log)")
    a2.set_title("cumulative write amplification (engine)")
    for a in (a1, a2):
        a.set_xlabel("simulated days")
        a.grid(alpha=0.3)
    a1.set_yscale("log")
    plain = plt.FuncFormatter(lambda v, _pos: f"{v:g}")  # 1.5, not 1.5 x 10^0
    a1.yaxis.set_major_formatter(plain)
    a1.yaxis.set_minor_formatter(plain)
    fig.tight_layout()
    _legend_right(fig, lines, entries, title)
    return "amplification.png", fig


def _requests(plt: Any, results: Sequence[dict[str, Any]], _c: int) -> tuple[str, Any]:
    """PUT and GET requests per simulated day (log), and each day's cost in USD."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.4))
    entries, title = _entries(results)
    lines = []
    for i, r in enumerate(results):
        days = r["summary"].get("object_store", {}).get("days", [])
        x = [d["day"] + d["days"] / 2 for d in days]  # each day's value at its middle
        style = _style(i)
        lines += a1.plot(x, [d["put"] / d["days"] for d in days], marker="o", **style)
        a1.plot(x, [d["get"] / d["days"] for d in days], marker="x", **{**style, "linestyle": ":"})
        a2.plot(x, [(d["request_cost_usd"] + d["storage_cost_usd"]) / d["days"] for d in days], marker="o", **style)
    a1.set_title("requests per simulated day: PUT (o, solid), GET (x, dotted)")
    a2.set_title("cost per simulated day, USD (requests + storage)")
    a1.set_yscale("symlog", linthresh=10)
    for a in (a1, a2):
        a.set_xlabel("simulated days")
        a.grid(alpha=0.3)
    fig.tight_layout()
    _legend_right(fig, lines, entries, title)
    return "requests.png", fig


def _bound(r: dict[str, Any], compact_every_ms: int) -> float | None:
    p = r["summary"].get("periodic_compaction_interval_ms")
    return None if p is None else (p + compact_every_ms) / HOUR_MS


def _purge_lag(plt: Any, results: Sequence[dict[str, Any]], compact_every_ms: int) -> tuple[str, Any]:
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.4))
    entries, title = _entries(results)
    lines = []
    for i, r in enumerate(results):
        style = _style(i)
        summ = r["summary"]
        hist = {int(k): v for k, v in summ["purge_lag_histogram"].items()}
        total = sum(hist.values())
        if total:
            xs, ys, acc = [], [], 0
            for lower in sorted(hist):
                acc += hist[lower]
                xs.append(max(lower, 1) / HOUR_MS)
                ys.append(acc / total)
            a1.step(xs, ys, where="post", **style)
        s = r["samples"]
        ages = [
            None if x["oldest_unpurged_expired_ms"] is None else x["oldest_unpurged_expired_ms"] / HOUR_MS
            for x in s
        ]
        lines += a2.plot(_days(s), [0 if a is None else a for a in ages], **style)
        b = _bound(r, compact_every_ms)
        if b is not None:
            a1.axvline(b, color=style["color"], linestyle=(0, (2, 3)), linewidth=1)
            a2.axhline(b, color=style["color"], linestyle=(0, (2, 3)), linewidth=1)
    a1.set_xscale("log")
    a1.set_xlabel("purge lag: hours after expiry or delete (log)")
    a1.set_ylabel("share of purged rows")
    a1.set_title("purge-lag distribution")
    a2.set_xlabel("simulated days")
    a2.set_ylabel("hours")
    a2.set_title("age of the oldest expired row on disk")
    for a in (a1, a2):
        a.grid(alpha=0.3)
    fig.text(
        0.5,
        -0.02,
        "dotted: a periodic policy's bound, periodic_compaction_interval + compact_every",
        ha="center",
    )
    fig.tight_layout()
    _legend_right(fig, lines, entries, title)
    return "purge_lag.png", fig


def _comparison(plt: Any, results: Sequence[dict[str, Any]], _c: int) -> tuple[str, Any]:
    labels = [output.label(r["summary"]) for r in results]
    entries, title = _entries(results)
    n = len(labels)
    # labels longer than a P-number (the policy names of a spec without a sweep) are turned
    rotate = 30 if max(map(len, labels)) > 4 else 0
    if n <= 12:  # the three metrics side by side
        fig, axes = plt.subplots(1, 3, figsize=(max(12, 0.45 * n * 3), 4.2))
    else:  # one under the other, each as wide as its bars need
        fig, axes = plt.subplots(3, 1, figsize=(max(10, 0.42 * n), 9.5))
    metrics = (
        ("write amplification", [r["summary"]["write_amplification"] for r in results]),
        ("space amplification (final)", [r["summary"]["space_amplification_final"] or 0 for r in results]),
        ("purge lag p99 (hours)", [(r["summary"]["purge_lag_ms"]["p99"] or 0) / HOUR_MS for r in results]),
    )
    bars = None
    for ax, (name, vals) in zip(axes, metrics, strict=True):
        bars = ax.bar(range(n), vals, color=[f"C{i % 10}" for i in range(n)])
        ax.set_xticks(range(n), labels, rotation=rotate, ha="right" if rotate else "center")
        ax.set_title(name)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    if title is not None:  # a sweep: the P-labels' key beside the bars
        _legend_right(fig, list(bars), entries, title)
    return "comparison.png", fig


__all__ = ["available", "write_plots", "INSTALL_HINT"]
