"""``lsm bench compact``'s runs in fresh processes: the local compaction against a full scan and RocksDB's
``compact_range`` (`isolated_runs`), and the same database compacted on S3 against the local copy
(`s3_runs`), each compaction in a process of its own (`tools.bench.compact_rss`), so that its peak memory
is its own."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

from tools.bench.harness import medians


def say(a: argparse.Namespace, text: str) -> None:
    if not a.json:
        print(text, flush=True)


def child(mode: str, path: str, tick: int) -> dict[str, Any]:
    """``python -m tools.bench.compact_rss MODE PATH TICK`` in a fresh process; its JSON."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    out = subprocess.run(
        [sys.executable, "-m", "tools.bench.compact_rss", mode, path, str(tick)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return json.loads(out.stdout)


def _rocksdb_base(a: argparse.Namespace, root: str, base: str, report: dict[str, Any]) -> str | None:
    """The same rows in a RocksDB database (`compact_db.build_rocksdb`), unless --no-rocksdb or rocksdict
    is not installed (then None, and a line says so)."""
    if not a.rocksdb:
        return None
    try:
        import rocksdict  # noqa: F401
    except ImportError:
        say(a, "rocksdb:    skipped (rocksdict is not installed: pip install -e '.[bench]')")
        return None
    from tools.bench.compact_db import build_rocksdb

    path = os.path.join(root, "rocks-base")
    t0 = time.perf_counter()
    built = build_rocksdb(base, path)
    built["build_seconds"] = time.perf_counter() - t0
    report["rocksdb_database"] = built
    say(
        a,
        f"rocksdb:    the same {built['rows']} rows in {built['files']} L0 files ({built['runs']} runs, oldest "
        f"first; raw mode, no compression, no automatic compaction; built in {built['build_seconds']:.1f} s)",
    )
    return path


def mib(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def isolated_runs(a: argparse.Namespace, root: str, base: str, tick: int, report: dict[str, Any]) -> None:
    """--repeat local compactions, each of a fresh copy in a fresh process after a full scan of the copy in
    another: the compaction's cost against the scan, its peak RSS and peak anonymous memory (RssAnon,
    sampled every 5 ms) and, with rocksdict, RocksDB's ``compact_range`` of the same rows in a fresh
    process right after it (the ratio of the two in one repeat is the figure: the load is alike)."""
    runs = []
    work = os.path.join(root, "work-isolated")
    rocks = _rocksdb_base(a, root, base, report)
    rwork = os.path.join(root, "work-rocksdb")
    for _ in range(a.repeat):
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(base, work)
        r = child("scan", work, tick)
        r.update(child("job", work, tick))  # leaves its outputs unreferenced: no effect on what follows
        r.update(child("compact", work, tick))
        r["ratio"] = r["compact_seconds"] / r["scan_seconds"] if r["scan_seconds"] else 0.0
        say(
            a,
            f"isolated:   scan {r['scan_seconds']:.2f} s ({r['scan_rows']} rows), compact {r['compact_seconds']:.2f} s "
            f"(cpu {r['compact_cpu_seconds']:.2f} s) = {r['ratio']:.2f}x the scan; peak RSS {r['peak_rss_mib']:.0f} MiB "
            f"(before {r['base_rss_mib']:.0f} MiB), peak RssAnon {mib(r.get('peak_anon_mib'))} MiB (before "
            f"{mib(r.get('base_anon_mib'))} MiB); the merge alone (as in the worker) {r['job_seconds']:.2f} s, "
            f"peak RSS {r['job_peak_rss_mib']:.0f} MiB, RssAnon {mib(r.get('job_peak_anon_mib'))} MiB (before "
            f"{mib(r.get('job_base_anon_mib'))} MiB)",
        )
        if rocks is not None:
            shutil.rmtree(rwork, ignore_errors=True)
            shutil.copytree(rocks, rwork)
            r.update(child("rocksdb", rwork, tick))
            r["vs_rocksdb"] = r["compact_seconds"] / r["rocksdb_seconds"] if r["rocksdb_seconds"] else 0.0
            r["vs_rocksdb_cpu"] = (
                r["compact_cpu_seconds"] / r["rocksdb_cpu_seconds"] if r["rocksdb_cpu_seconds"] else 0.0
            )
            say(
                a,
                f"rocksdb:    compact_range {r['rocksdb_seconds']:.2f} s (cpu {r['rocksdb_cpu_seconds']:.2f} s, "
                f"{r['rocksdb_files_before']} -> {r['rocksdb_files_after']} files), peak RssAnon "
                f"{mib(r.get('rocksdb_peak_anon_mib'))} MiB; lsm / rocksdb {r['vs_rocksdb']:.2f}x "
                f"(cpu {r['vs_rocksdb_cpu']:.2f}x)",
            )
        runs.append(r)
    for d in (work, rwork, rocks):
        if d is not None:
            shutil.rmtree(d, ignore_errors=True)
    keys = ["scan_seconds", "compact_seconds", "ratio", "peak_rss_mib", "base_rss_mib", "job_peak_rss_mib"]
    if all(r.get("anon_growth_mib") is not None for r in runs):
        keys += ["peak_anon_mib", "base_anon_mib", "anon_growth_mib"]
    if rocks is not None:
        keys += ["rocksdb_seconds", "rocksdb_cpu_seconds", "vs_rocksdb", "vs_rocksdb_cpu", "compact_cpu_seconds"]
    med = medians(runs, tuple(keys))
    report["isolated"] = {"runs": runs, "median": med}
    say(
        a,
        f"isolated median: compaction {med['ratio']:.2f}x a full scan ({med['compact_seconds']:.2f} s vs "
        f"{med['scan_seconds']:.2f} s), peak RSS {med['peak_rss_mib']:.0f} MiB, of the merge alone "
        f"{med['job_peak_rss_mib']:.0f} MiB (median of {len(runs)})",
    )
    if "anon_growth_mib" in med:
        say(
            a,
            f"memory:     peak RssAnon of the compaction {med['peak_anon_mib']:.0f} MiB, "
            f"{med['anon_growth_mib']:.0f} MiB above the open database's {med['base_anon_mib']:.0f} MiB (median)",
        )
    if rocks is not None:
        say(
            a,
            f"vs rocksdb: lsm {med['compact_seconds']:.2f} s / rocksdb compact_range {med['rocksdb_seconds']:.2f} s "
            f"= {med['vs_rocksdb']:.2f}x (cpu {med['compact_cpu_seconds']:.2f} s / {med['rocksdb_cpu_seconds']:.2f} s "
            f"= {med['vs_rocksdb_cpu']:.2f}x; medians of {len(runs)} per-repeat ratios)",
        )


def upload(base: str, url: str) -> int:
    """Copy the local database `base` to the object-store URL `url` (its manifest, WAL and SST files; not
    the local-only WRITER_EPOCH token); return the bytes copied."""
    from storage import storage_for
    from storage.paths import DbPaths

    src, dst = DbPaths(base), DbPaths(url)
    st = storage_for(url)
    n = 0
    for d in ("manifest_dir", "wal_dir", "sst_dir"):
        for name in sorted(os.listdir(getattr(src, d))):
            if name.startswith(".") or name == "WRITER_EPOCH":
                continue
            with open(os.path.join(getattr(src, d), name), "rb") as f:
                data = f.read()
            st.write_file(f"{getattr(dst, d)}/{name}", (data,))
            n += len(data)
    return n


def s3_runs(a: argparse.Namespace, root: str, base: str, tick: int, report: dict[str, Any]) -> None:
    """--repeat pairs of full compactions, each in a fresh process (`compact_rss compact`): a fresh local
    copy of `base`, then the same database uploaded to a fresh S3 prefix; the ratio of their wall times
    per pair, the peak anonymous memory of each, and the S3 compaction's requests."""
    from tools.bench import s3

    why = s3.unavailable()
    if why:
        raise SystemExit(f"lsm: error: --store s3: {why}")
    runs = []
    work = os.path.join(root, "work-s3-local")
    with s3.endpoint() as bucket:
        rate = server_rate(bucket)
        say(a, f"s3 server: {rate:.0f} MiB/s for 8 MiB PUTs and 1 MiB ranged GETs, one at a time (measured now)")
        for _ in range(a.repeat):
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(base, work)
            lo = child("compact", work, tick)
            url = s3.fresh_prefix(bucket, "compact")
            upload(base, url)
            cpu0 = s3.server_cpu_seconds()
            so = child("compact", url, tick)
            cpu1 = s3.server_cpu_seconds()
            r = {
                "local_seconds": lo["compact_seconds"],
                "s3_seconds": so["compact_seconds"],
                "ratio": so["compact_seconds"] / lo["compact_seconds"] if lo["compact_seconds"] else 0.0,
                "local_peak_anon_mib": lo.get("peak_anon_mib"),
                "s3_peak_anon_mib": so.get("peak_anon_mib"),
                "requests": so.get("requests", {}),
            }
            # the compaction's own share: its peak minus what the process held with the database open
            # (on S3 that includes the HTTP client's runtime and the filters fetched at open, which a
            # local database reads from the page cache)
            for side, got in (("local", lo), ("s3", so)):
                r[f"{side}_base_anon_mib"] = got.get("base_anon_mib")
                r[f"{side}_anon_growth_mib"] = got.get("anon_growth_mib")
            moved = (r["requests"].get("put_bytes", 0) + r["requests"].get("get_bytes", 0)) / 1048576
            # the server alone needs this long for the bytes the compaction moved (requests one at a time)
            r["server_floor_seconds"] = moved / rate if rate else 0.0
            r["floor_ratio"] = r["server_floor_seconds"] / r["local_seconds"] if r["local_seconds"] else 0.0
            # the local server's own CPU time for those requests: on a machine of two cores, what it and
            # the compaction burn together bounds the wall time from below
            r["server_cpu_seconds"] = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
            runs.append(r)
            q = r["requests"]
            say(
                a,
                f"s3:         full compaction local {r['local_seconds']:.2f} s, s3 {r['s3_seconds']:.2f} s = "
                f"{r['ratio']:.2f}x; peak RssAnon local {mib(r['local_peak_anon_mib'])} MiB "
                f"({_share(r['local_anon_growth_mib'])}), s3 {mib(r['s3_peak_anon_mib'])} MiB "
                f"({_share(r['s3_anon_growth_mib'])}); s3 requests {q.get('put', 0)} PUT, {q.get('get', 0)} GET, "
                f"{q.get('list', 0)} LIST, {q.get('delete', 0)} DELETE; the server's floor for its "
                f"{moved:.0f} MiB {r['server_floor_seconds']:.2f} s = {r['floor_ratio']:.2f}x local"
                + (f"; server CPU {r['server_cpu_seconds']:.2f} s" if r["server_cpu_seconds"] is not None else ""),
            )
    shutil.rmtree(work, ignore_errors=True)
    keys = ["local_seconds", "s3_seconds", "ratio", "server_floor_seconds", "floor_ratio"]
    if all(r["server_cpu_seconds"] is not None for r in runs):
        keys.append("server_cpu_seconds")
    if all(r["s3_peak_anon_mib"] is not None and r["local_peak_anon_mib"] is not None for r in runs):
        keys += ["local_peak_anon_mib", "s3_peak_anon_mib"]
    if all(r["s3_anon_growth_mib"] is not None and r["local_anon_growth_mib"] is not None for r in runs):
        keys += ["local_anon_growth_mib", "s3_anon_growth_mib"]
    med = medians(runs, tuple(keys))
    report["s3"] = {"runs": runs, "median": med}
    mem = (
        f"; peak RssAnon local {med['local_peak_anon_mib']:.0f} MiB, s3 {med['s3_peak_anon_mib']:.0f} MiB"
        if "s3_peak_anon_mib" in med
        else ""
    )
    if "s3_anon_growth_mib" in med:
        mem += (
            f" (the compaction's own share above the open database: local "
            f"{med['local_anon_growth_mib']:+.0f} MiB, s3 {med['s3_anon_growth_mib']:+.0f} MiB)"
        )
    say(
        a,
        f"s3 median:  full compaction on S3 {med['s3_seconds']:.2f} s vs local {med['local_seconds']:.2f} s = "
        f"{med['ratio']:.2f}x{mem}; the server's floor {med['server_floor_seconds']:.2f} s = "
        f"{med['floor_ratio']:.2f}x local"
        + (f", its CPU {med['server_cpu_seconds']:.2f} s" if "server_cpu_seconds" in med else "")
        + f" (medians of {len(runs)})",
    )


def _share(growth: float | None) -> str:
    """A compaction's own share of its peak, for the s3 lines: "+44 over the open DB"."""
    return "?" if growth is None else f"{growth:+.0f} over the open DB"


def server_rate(bucket: str) -> float:
    """MiB/s the S3 server moves for requests like a compaction's, one at a time: four 8 MiB PUTs and
    32 ranged GETs of 1 MiB (the figure that bounds a compaction on it from below)."""
    from storage import storage_for
    from tools.bench import s3

    url = s3.fresh_prefix(bucket, "rate")
    st = storage_for(url)
    data = os.urandom(8 << 20)
    t0 = time.perf_counter()
    for i in range(4):
        st.write_file(f"{url}/{i}", (data,))
    for i in range(32):
        st.read_range(f"{url}/{i % 4}", (i % 8) << 20, ((i % 8) + 1) << 20)
    seconds = time.perf_counter() - t0
    for i in range(4):
        st.delete(f"{url}/{i}")
    return 64 / seconds if seconds > 0 else 0.0


__all__ = ["child", "isolated_runs", "mib", "s3_runs", "say", "server_rate", "upload"]
