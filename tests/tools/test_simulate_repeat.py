"""`lsm simulate` of one spec, twice, in two processes: the same bytes in every output but the times.

Each run is its own interpreter with its own hash seed (``PYTHONHASHSEED`` 1 and 2, so set and dict orders
of strings differ between them), its own pids, temporary names and wall clock; what the runs leave must
not depend on any of them.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from tests.tools._cli import run_lsm
from tools.simulate import WALL_CLOCK_FIELDS

# every policy the simulator has, periodic compaction, a default TTL, all four operations, a quiet phase
SPEC = """
seed = 5
sample_every = "2h"
compact_every = "10m"

[workload]
keys = 600
key_distribution = "zipfian"
value_bytes = { distribution = "uniform", min = 20, max = 160 }
scan_rows = 5

[[workload.phases]]
duration = "1d"
ops_per_sec = 0.04
mix = { put = 0.8, delete = 0.08, get = 0.08, scan = 0.04 }
ttl = [{ fraction = 0.4, ttl = "3h" }, { fraction = 0.3, ttl = "20h" }, { fraction = 0.3, ttl = "none" }]

[[workload.phases]]
duration = "1d"
ops_per_sec = 0

[[policy]]
name = "tiered"
memtable_bytes = 16384
l0_compaction_threshold = 3

[[policy]]
name = "leveled-p6h"
compaction_policy = "leveled"
memtable_bytes = 16384
periodic_compaction_interval = "6h"
default_ttl = "1d"

[[policy]]
name = "fifo"
compaction_policy = "fifo"
memtable_bytes = 16384
fifo_max_bytes = 65536
"""


def test_the_same_spec_twice_writes_the_same_bytes(tmp_path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    runs = [tmp_path / "a", tmp_path / "b"]
    with ThreadPoolExecutor(max_workers=2) as pool:  # two processes at once: two cores
        results = list(pool.map(
            lambda out, seed: run_lsm("simulate", spec, "--out", out, "--no-progress", env={"PYTHONHASHSEED": seed}),
            runs, ("1", "2"),
        ))
    for r in results:
        assert r.code == 0, r.err
    a, b = runs
    files = sorted(p.name for p in a.iterdir())
    assert files == sorted(p.name for p in b.iterdir())
    assert {"timeseries.csv", "policies.csv", "summary.json"} <= set(files), files
    for name in files:
        if name != "summary.json":  # the CSVs and the plots, byte for byte
            assert (a / name).read_bytes() == (b / name).read_bytes(), name
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in runs)
    assert len(sa["policies"]) == 3 and sa["policies"][0]["ops"] > 2000
    for p in sa["policies"] + sb["policies"]:
        assert all(p.pop(k) >= 0 for k in WALL_CLOCK_FIELDS), p  # the times: there, and popped
    assert sa == sb
