"""``lsm bench --store s3`` and ``lsm bench compact --store s3``: lsm on S3 beside lsm in a directory."""

from __future__ import annotations

import re

from tests.tools._cli import run_lsm


def test_db_suite_runs_lsm_on_s3_beside_the_local_directory(s3_server) -> None:
    # enough writes for the fill to span a few WAL intervals (100 ms) even on a fast machine
    r = run_lsm("bench", "--store", "s3", "--num", "60000", "--reads", "30000", "--benchmarks", "fillrandom,readrandom",
                "--no-progress", env={**s3_server.env, "LSM_BENCH_BUCKET": "lsm-test"})
    assert r.code == 0, r.err
    out = r.out
    fill = re.search(
        r"fillrandom\s+:\s+([\d.]+) micros/op.*\[lsm-s3\].*requests: (\d+) PUT \((\d+) WAL, ([\d.]+)/s\), (\d+) GET",
        out,
    )
    assert fill, out
    assert int(fill.group(2)) >= int(fill.group(3)) >= 1  # the WAL was written as objects
    # group commit: one WAL object per 100 ms interval the benchmark spanned (one more where it began
    # mid-interval, one more where its buffer reached wal_flush_bytes), not one per write
    seconds = 60000 * float(fill.group(1)) / 1e6
    assert int(fill.group(3)) <= seconds / 0.1 + 3, (fill.group(3), seconds)
    assert re.search(r"fillrandom .*\[lsm\] ", out)
    assert re.search(r"fillrandom\s+: ratio lsm-s3/lsm [\d.]+x", out)
    read = re.search(r"readrandom .*\[lsm-s3\] \((\d+) of 30000 found.*requests: 0 PUT .* (\d+) GET", out)
    local = re.search(r"readrandom .*\[lsm\] \((\d+) of 30000 found", out)
    assert read and local and read.group(1) == local.group(1)  # the same answers on both stores


def test_compact_suite_compares_a_full_compaction_on_s3(s3_server) -> None:
    r = run_lsm("bench", "compact", "--num", "4000", "--executors", "local", "--no-isolated", "--no-rocksdb",
                "--store", "s3", "--repeat", "1", env={**s3_server.env, "LSM_BENCH_BUCKET": "lsm-test"})
    assert r.code == 0, r.err
    m = re.search(r"s3:\s+full compaction local ([\d.]+) s, s3 ([\d.]+) s = ([\d.]+)x.*s3 requests (\d+) PUT, "
                  r"(\d+) GET", r.out)
    assert m, r.out
    assert int(m.group(4)) >= 1 and int(m.group(5)) >= 1
    assert "s3 median:" in r.out
