"""``lsm bench time`` (or ``python -m tools.bench time``): what the seq<->time maps cost.

Three figures, each for the maps the manifest carries (lsm/seq_tracker.py, lsm/time_seq.py):

1. Encode and decode time of a full seq tracker (8192 pairs; target: under 10 ms each), the median of
   ``--runs`` runs after one warm-up, as wall time and as this process's CPU time; the target is judged
   on CPU time, which does not count waiting for a core on a shared machine.
2. Bits per entry, separately for the seq stream and the timestamp stream, for commit streams that make
   the tracker record a pair every 30 s: a Poisson stream of commits at several rates (the first commit
   at or after each 30-second mark is recorded, as the engine does), and a perfectly regular one. The
   SlateDB seq-tracker RFC expects about 7 bits each for real workloads. The last row is a tracker that
   has halved its history several times (older tiers 60 s, 120 s, ... apart).
3. The size of an encoded manifest (formats.manifest) holding a full tracker and 60 time bins, next to
   the maps' own sizes and the same manifest without them (no SSTs: the maps' share at its largest).

No timing here depends on the disk. The workload is generated from ``--seed``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from typing import Any

from formats import gorilla
from formats import manifest as manifest_codec
from formats.manifest import Manifest
from lsm.seq_tracker import SeqTracker
from lsm.time_seq import MAX_BINS, TimeSeq
from tools.bench.harness import DEFAULT_SEED, median_ms
from tools.render import int_arg

CAPACITY = 8192
INTERVAL_S = 30
START_MS = 1_760_000_000_000  # 2025-10-09
TARGET_MS = 10.0
RATES = (0.05, 1.0, 100.0, 10_000.0)  # commits per second


def _poisson(rng: random.Random, mean: float) -> int:
    if mean <= 0:
        return 0
    if mean > 50:
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, k, p = math.exp(-mean), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


def poisson_tracker(rate: float, pairs: int, rng: random.Random) -> SeqTracker:
    """A tracker fed by commits arriving at `rate` per second (Poisson) until `pairs` were recorded.

    Only the recorded commits are generated: by memorylessness the first commit at or after the next
    30-second mark comes an exponential time after the mark, and the commits in between are a Poisson
    count. The engine records exactly these commits (lsm.timeline)."""
    t = SeqTracker(CAPACITY, INTERVAL_S)
    seq, at = 1, START_MS
    t.insert(seq, at // 1000)
    recorded = 1
    while recorded < pairs:
        mark = (at // 1000 + INTERVAL_S) * 1000
        arrival = mark + math.ceil(rng.expovariate(rate) * 1000)
        seq += 1 + _poisson(rng, rate * (arrival - at) / 1000)
        at = arrival
        if t.insert(seq, at // 1000):
            recorded += 1
    return t


def regular_tracker(pairs: int) -> SeqTracker:
    """One commit exactly every 30 s."""
    t = SeqTracker(CAPACITY, INTERVAL_S)
    for i in range(pairs):
        t.insert(i + 1, START_MS // 1000 + INTERVAL_S * i)
    return t


def stream_bits(values: list[int], signed: bool) -> float:
    """Bits per value after the first of a Gorilla stream (without its 12-byte count+first header)."""
    if len(values) < 2:
        return 0.0
    return (len(gorilla.encode(values, signed=signed)) - 12) * 8 / (len(values) - 1)


def full_bins(rate: float) -> TimeSeq:
    """60 bins: `rate` commits/s for 10 years, the bins updated every 3 hours (once per 3-hour bin, which
    is what hourly or per-commit updates amount to)."""
    bins = TimeSeq(min_time=0)
    step = 3 * 3600
    seq, t = 0, START_MS // 1000 - 10 * 365 * 86400
    per_step = max(1, round(rate * step))
    for _ in range(10 * 365 * 86400 // step):
        bins.update(t, seq)
        seq += per_step
        t += step
    assert len(bins) == MAX_BINS
    return bins


def run(runs: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    out: dict[str, Any] = {"capacity": CAPACITY, "interval_s": INTERVAL_S, "runs": runs}

    # 1. encode / decode of a full tracker
    full = poisson_tracker(100.0, CAPACITY, rng)
    assert len(full) == CAPACITY
    blob = full.to_bytes()
    enc, enc_cpu, enc_all = median_ms(full.to_bytes, runs)
    dec, dec_cpu, dec_all = median_ms(lambda: SeqTracker.from_bytes(blob), runs)
    assert SeqTracker.from_bytes(blob) == full
    out["codec"] = {
        "workload": "Poisson 100 commits/s",
        "entries": len(full),
        "bytes": len(blob),
        "encode_ms_median": enc,
        "decode_ms_median": dec,
        "encode_cpu_ms_median": enc_cpu,
        "decode_cpu_ms_median": dec_cpu,
        "encode_ms_all": enc_all,
        "decode_ms_all": dec_all,
        "target_ms": TARGET_MS,
    }

    # 2. bits per entry
    rows = []
    cases: list[tuple[str, SeqTracker]] = [("regular: 1 commit every 30 s", regular_tracker(CAPACITY))]
    cases += [(f"Poisson {r:g} commits/s", poisson_tracker(r, CAPACITY, rng)) for r in RATES]
    halved = poisson_tracker(100.0, 5 * CAPACITY, rng)
    cases.append(
        (f"Poisson 100 commits/s, {5 * CAPACITY} pairs recorded (halved {_halvings(5 * CAPACITY)}x)", halved)
    )
    for name, t in cases:
        b = t.to_bytes()
        rows.append(
            {
                "workload": name,
                "entries": len(t),
                "seq_bits": stream_bits(t.seqs, False),
                "ts_bits": stream_bits(t.timestamps, True),
                "tracker_bytes": len(b),
                "bits_per_pair": len(b) * 8 / len(t),
            }
        )
    out["bits_per_entry"] = rows

    # 3. manifest size with both maps full
    bins = full_bins(100.0)
    bins_blob = bins.to_bytes()
    base = Manifest(
        writer_epoch=12,
        compactor_epoch=12,
        next_sst_id=10_000,
        next_run_id=100,
        last_seq=full.seqs[-1],
        wal_replay_from=5_000,
        clock_watermark=full.timestamps[-1] * 1000,
    )
    with_maps = base.replace(seq_tracker=blob, time_seq=bins_blob)
    out["manifest"] = {
        "seq_tracker_bytes": len(blob),
        "time_seq_bytes": len(bins_blob),
        "time_seq_bins": len(bins),
        "manifest_bytes_with_maps": len(manifest_codec.encode(with_maps)),
        "manifest_bytes_without_maps": len(manifest_codec.encode(base)),
    }
    return out


def _halvings(pairs: int) -> int:
    n, h = 0, 0
    for _ in range(pairs):
        n += 1
        if n > CAPACITY:
            n = (n + 1) // 2
            h += 1
    return h


def _verdict(ms: float, target: float) -> str:
    return "ok" if ms < target else "OVER"


def report(r: dict[str, Any]) -> str:
    c = r["codec"]
    lines = [
        f"seq tracker: capacity {r['capacity']} pairs, a pair at most every {r['interval_s']} s",
        "",
        f"codec        full tracker ({c['entries']} pairs, {c['workload']}, {c['bytes']} B), "
        f"median of {r['runs']} runs:",
        f"  encode     {c['encode_ms_median']:8.3f} ms wall  {c['encode_cpu_ms_median']:8.3f} ms CPU   "
        f"(target < {c['target_ms']:g} ms, on CPU: {_verdict(c['encode_cpu_ms_median'], c['target_ms'])})",
        f"  decode     {c['decode_ms_median']:8.3f} ms wall  {c['decode_cpu_ms_median']:8.3f} ms CPU   "
        f"(target < {c['target_ms']:g} ms, on CPU: {_verdict(c['decode_cpu_ms_median'], c['target_ms'])})",
        "",
        "bits per entry (Gorilla delta-of-delta; the seq-tracker RFC expects ~7 each):",
        f"  {'workload':<58} {'pairs':>6} {'seq':>6} {'ts':>6} {'bytes':>7} {'bits/pair':>9}",
    ]
    for row in r["bits_per_entry"]:
        lines.append(
            f"  {row['workload']:<58} {row['entries']:>6} {row['seq_bits']:>6.2f} {row['ts_bits']:>6.2f} "
            f"{row['tracker_bytes']:>7} {row['bits_per_pair']:>9.2f}"
        )
    m = r["manifest"]
    lines += [
        "",
        "manifest with both maps full (formats.manifest.encode, no SSTs):",
        f"  seq_tracker         {m['seq_tracker_bytes']:>7} B",
        f"  time_seq            {m['time_seq_bytes']:>7} B ({m['time_seq_bins']} bins)",
        f"  manifest            {m['manifest_bytes_with_maps']:>7} B "
        f"(without the maps: {m['manifest_bytes_without_maps']} B)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="lsm bench time",
        description="Encode/decode time of a full seq tracker, bits per entry for steady commit streams, "
        "and the manifest's size with both seq<->time maps full.",
    )
    p.add_argument(
        "--runs", type=int_arg(1), default=9, help="timed runs per figure; the median is reported (default 9)"
    )
    p.add_argument("--seed", type=int_arg(None), default=DEFAULT_SEED)
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    r = run(a.runs, a.seed)
    if a.json:
        print(json.dumps(r, indent=1))
    else:
        print(report(r))
    return 0
