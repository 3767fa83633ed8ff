"""Regenerate docs/simulate.md's figures: ``python -m tools.simulate.docs_figures`` (``make docs-figures``).

Each study of docs/simulate.md is one spec of examples/. For each, this runs the command the doc shows
(``lsm simulate examples/<spec>.toml --out <dir> ...``, in a scratch directory, as a subprocess: the
console block is the command's own output) and computes the study's tables from what it wrote
(``summary.json``, ``timeseries.csv``). Each figure sits in the doc between two marker lines::

    <!-- figures: quiet_ttl.run -->
    ...
    <!-- /figures: quiet_ttl.run -->

and is replaced whole; the prose around them is not touched (the script prints which figures changed,
so the sentences that quote them can be checked). The simulations are deterministic: two runs give the
same figures except the wall times in the console tables (docs/simulate.md, "The same spec gives the
same bytes"). The studies take minutes each; ``--only`` picks some, ``--keep DIR`` keeps their outputs.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from statistics import fmean
from typing import Any

from tools.render import human_bytes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "simulate.md")
HOUR, DAY = 3_600_000, 86_400_000
MIB = 1 << 20

Samples = dict[str, list[dict[str, Any]]]  # policy name -> its timeseries rows, in order
Table = Callable[[dict[str, Any], Samples], str]


@dataclasses.dataclass(frozen=True)
class Study:
    """One study of the doc: its spec, the command's arguments, and the tables computed from its run."""

    name: str  # the markers' prefix
    spec: str  # under examples/
    out: str  # the --out directory the doc shows
    args: tuple[str, ...]  # more arguments of the command
    skip: str  # why the docs test does not run the command (the docs-test marker's reason)
    tables: dict[str, Table]  # marker suffix -> the table's markdown

    def command(self) -> list[str]:
        """The command as the doc shows it (after ``$ ``)."""
        return ["lsm", "simulate", f"examples/{self.spec}", "--out", self.out, *self.args]


# -- reading a run ----------------------------------------------------------------------------------
def read_samples(path: str) -> Samples:
    """timeseries.csv, numbers parsed (an empty cell: None), grouped by policy."""
    out: Samples = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            name = row.pop("policy")
            out.setdefault(name, []).append({k: _number(v) for k, v in row.items()})
    return out


def _number(v: str) -> float | int | None:
    if v == "":
        return None
    return float(v) if any(c in v for c in ".eE") else int(v)


def window(rows: Sequence[dict[str, Any]], lo: float, hi: float) -> list[dict[str, Any]]:
    """The samples taken from day `lo` to day `hi`, both included."""
    return [r for r in rows if lo <= r["day"] <= hi]


def mean_of(rows: Sequence[dict[str, Any]], key: str) -> float:
    """The mean of a column over `rows`, its empty cells left out."""
    return fmean(r[key] for r in rows if r[key] is not None)


def max_of(rows: Sequence[dict[str, Any]], key: str) -> float:
    """The largest value of a column over `rows` (0 when every cell is empty)."""
    return max((r[key] for r in rows if r[key] is not None), default=0)


def policy(summary: dict[str, Any], name: str) -> dict[str, Any]:
    """The summary object of the simulation `name`."""
    return next(p for p in summary["policies"] if p["name"] == name)


def jobs(p: dict[str, Any]) -> str:
    """``22 size-tiered, 6 periodic``: the jobs by reason, drops (fifo) by their own name."""
    names = {"size_tiered": "size-tiered", "fifo": "drop"}
    parts = []
    for reason, n in sorted(p["compactions"].items(), key=lambda kv: -kv[1]):  # the most first
        if n:
            word = names.get(reason, reason)
            parts.append(f"{n} {word}{'s' if word == 'drop' and n != 1 else ''}")
    return ", ".join(parts) or "none"


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _h(ms: float | None, digits: int = 1) -> str:
    return "-" if ms is None else f"{ms / HOUR:.{digits}f} h"


def _interval(ms: int) -> str:
    return f"{ms // DAY} d" if ms % DAY == 0 else f"{ms // HOUR} h"


# -- the studies' tables ----------------------------------------------------------------------------
def quiet_ttl_means(summary: dict[str, Any], samples: Samples) -> str:
    """Study (a): means over the writing days (from day 2, once the first 2-day TTLs have come due) and
    over the quiet ones, per policy."""
    cols = [(name, lo, hi) for lo, hi in ((2, 20), (20, 30)) for name in ("tiered", "periodic-1d")]
    ws = [window(samples[name], lo, hi) for name, lo, hi in cols]

    def mib(w: list[dict[str, Any]], key: str) -> str:
        return f"{mean_of(w, key) / MIB:.2f}"

    rows = [
        ("disk (MiB)", *(mib(w, "disk_bytes") for w in ws)),
        (
            "live / expired / shadowed (MiB)",
            *(" / ".join(mib(w, k) for k in ("live_bytes", "expired_bytes", "shadowed_bytes")) for w in ws),
        ),
        (
            "space amplification (mean, max)",
            *(f"{mean_of(w, 'space_amplification'):.2f}, {max_of(w, 'space_amplification'):.2f}" for w in ws),
        ),
        ("oldest expired row still on disk (max)", *(_h(max_of(w, "oldest_unpurged_expired_ms")) for w in ws)),
    ]
    return md_table(["", *(f"{name}, days {lo}–{hi}" for name, lo, hi in cols)], rows)


def intervals_table(summary: dict[str, Any], samples: Samples) -> str:
    """Study (b): per interval, what its bound costs and buys."""
    rows = []
    for p in summary["policies"]:
        s = samples[p["name"]]
        rows.append(
            (
                _interval(p["periodic_compaction_interval_ms"]),
                f"**{p['write_amplification']:.2f}**",
                _h(p["purge_lag_ms"]["max"], 2),
                _h(p["max_unpurged_expired_ms"]),
                f"{mean_of(window(s, 1, 10), 'space_amplification'):.2f}",  # once the first 1-day TTLs are due
                f"{mean_of(window(s, 10, 15), 'space_amplification'):.2f}",
                jobs(p),
            )
        )
    headers = [
        "interval P",
        "write amplification",
        "purge lag max (bound P + 5 min)",
        "oldest expired row on disk, max",
        "mean space amp., writing (days 1–10)",
        "mean space amp., quiet (days 10–15)",
        "jobs",
    ]
    return md_table(headers, rows)


def policies_table(summary: dict[str, Any], samples: Samples) -> str:
    """Study (c): the six policies while writing (days 1-4, once the first TTLs have come due) and at
    the end."""
    rows = []
    for p in summary["policies"]:
        w = window(samples[p["name"]], 1, 4)
        drops = p["sst_drop_lag_ms"]
        n = drops["count"]
        drop = f"{drops['max'] / 60_000:.2f} min ({n} drop{'s' * (n != 1)})" if n else "-"
        rows.append(
            (
                p["name"],
                f"{p['write_amplification']:.2f}",
                f"{mean_of(w, 'space_amplification'):.2f}, {max_of(w, 'space_amplification'):.2f}",
                _h(max_of(w, "oldest_unpurged_expired_ms"), 2),
                _h(p["purge_lag_ms"]["max"], 2),
                drop,
                human_bytes(p["disk_bytes_final"]) if p["disk_bytes_final"] else "0",
                jobs(p),
            )
        )
    headers = [
        "policy",
        "write amp.",
        "space amp. while writing (mean, max)",
        "oldest expired row on disk while writing (max)",
        "purge lag max (rows)",
        "expired SST dropped after its last expiry (max)",
        "disk at the end",
        "jobs",
    ]
    return md_table(headers, rows)


def s3_writing_days(summary: dict[str, Any], samples: Samples) -> str:
    """Study (d): requests and their cost per day over the writing days 1-5, and the quiet days' cost."""
    rows = []
    for p in summary["policies"]:
        days = p["object_store"]["days"]
        writing = [d for d in days if 1 <= d["day"] <= 5]
        quiet = [d for d in days if 6 <= d["day"] <= 9]
        rows.append(
            (
                p["name"],
                f"{fmean(d['put'] for d in writing):,.0f}",
                f"{fmean(d['get'] for d in writing):,.0f}",
                f"{fmean(d['list'] for d in writing):,.0f}",
                f"{fmean(d['delete'] for d in writing):,.0f}",
                f"{fmean(d['head'] for d in writing):,.0f}",
                human_bytes(round(fmean(d["put_bytes"] for d in writing))),
                human_bytes(round(fmean(d["get_bytes"] for d in writing))),
                f"${fmean(d['request_cost_usd'] for d in writing):.5f}",
                f"${fmean(d['request_cost_usd'] for d in quiet):.5f}",
            )
        )
    headers = ["policy", "PUT/day", "GET/day", "LIST/day", "DELETE/day", "HEAD/day", "bytes put/day", "bytes got/day", "requests $/day",
               "quiet days 6–9: $/day"]
    return md_table(headers, rows)


STUDIES = (
    Study("quiet_ttl", "quiet_ttl.toml", "sim-quiet", (), "takes minutes: two simulations of a million operations",
          {"means": quiet_ttl_means}),
    Study("periodic_intervals", "periodic_intervals.toml", "sim-intervals", (),
          "takes minutes: three simulations of 300,000 operations", {"table": intervals_table}),
    Study("policies", "policies.toml", "sim-policies", ("--jobs", "2"),
          "takes minutes: six simulations of 172,684 operations", {"table": policies_table}),
    Study("s3_costs", "s3_costs.toml", "sim-s3", ("--jobs", "2"),
          "takes minutes: three simulations of 50,000 operations", {"writing_days": s3_writing_days}),
)


# -- running and writing ----------------------------------------------------------------------------
def run_study(study: Study, workdir: str) -> tuple[str, dict[str, Any], Samples]:
    """Run the study's command in `workdir` (which has an ``examples`` link); return (its stdout, the
    summary, the samples)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    cmd = [sys.executable, "-m", "tools.cli", *study.command()[1:], "--no-progress"]
    p = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(study.command())} failed ({p.returncode}): {p.stderr.strip()}")
    out = os.path.join(workdir, study.out)
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    return p.stdout, summary, read_samples(os.path.join(out, "timeseries.csv"))


def figures(study: Study, stdout: str, summary: dict[str, Any], samples: Samples) -> dict[str, str]:
    """Marker name -> the markdown between the markers: the console block, then each table."""
    console = (
        f"<!-- docs-test: skip ({study.skip}) -->\n```console\n$ {' '.join(study.command())}\n{stdout.rstrip()}\n```"
    )
    out = {f"{study.name}.run": console}
    for suffix, table in study.tables.items():
        out[f"{study.name}.{suffix}"] = table(summary, samples)
    return out


def replace_figure(text: str, name: str, body: str) -> tuple[str, bool]:
    """`text` with the lines between ``<!-- figures: name -->`` and ``<!-- /figures: name -->`` replaced
    by `body`; and whether that changed anything. ValueError when the markers are not there once."""
    begin, end = f"<!-- figures: {name} -->", f"<!-- /figures: {name} -->"
    pattern = re.compile(rf"^{re.escape(begin)}\n(.*?)^{re.escape(end)}$", re.S | re.M)
    found = pattern.findall(text)
    if len(found) != 1:
        raise ValueError(f"{name}: expected one pair of markers ({begin} ... {end}), found {len(found)}")
    new = f"{begin}\n{body}\n{end}"
    return pattern.sub(lambda _m: new, text), found[0] != body + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the studies (all, or ``--only``), write their figures into the doc, print what changed."""
    p = argparse.ArgumentParser(prog="python -m tools.simulate.docs_figures", description=__doc__.split("\n")[0])
    every = ", ".join(s.name for s in STUDIES)
    p.add_argument("--only", default="", help=f"comma list of studies (default all: {every})")
    p.add_argument("--doc", default=DOC, help="the markdown file to write (default docs/simulate.md)")
    p.add_argument("--keep", default=None, metavar="DIR", help="run in DIR, keep the outputs (default: a temp dir)")
    a = p.parse_args(argv)
    names = [n for n in a.only.split(",") if n] or [s.name for s in STUDIES]
    unknown = set(names) - {s.name for s in STUDIES}
    if unknown:
        p.error(f"unknown studies: {', '.join(sorted(unknown))}")
    with open(a.doc) as f:
        text = f.read()
    workdir = a.keep or tempfile.mkdtemp(prefix="docs-figures-")
    os.makedirs(workdir, exist_ok=True)
    link = os.path.join(workdir, "examples")
    if not os.path.exists(link):
        os.symlink(os.path.join(ROOT, "examples"), link)
    for study in (s for s in STUDIES if s.name in names):
        print(f"# {' '.join(study.command())}", flush=True)
        for name, body in figures(study, *run_study(study, workdir)).items():
            text, changed = replace_figure(text, name, body)
            print(f"{name}: {'changed' if changed else 'the same'}", flush=True)
        with open(a.doc, "w") as f:  # after each study: a later one that fails keeps the earlier ones
            f.write(text)
    if a.keep is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
