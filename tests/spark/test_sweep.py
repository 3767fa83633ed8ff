"""The simulation sweep as a Spark batch: one task per simulation, results identical to the serial grid."""

from __future__ import annotations

import copy
import json

from tools import simulate
from tools.simulate.sweep import grid, run_cells, run_cells_spark


def sweep_spec() -> dict:
    return {
        "seed": 3,
        "sample_every": "3h",
        "compact_every": "15m",
        "workload": {
            "keys": 300,
            "value_bytes": 60,
            "phases": [
                {
                    "duration": "1d",
                    "ops_per_sec": 0.02,
                    "mix": {"put": 0.85, "delete": 0.05, "get": 0.1},
                    "ttl": [{"fraction": 0.7, "ttl": "8h"}, {"fraction": 0.3, "ttl": "none"}],
                },
                {"duration": "1d", "ops_per_sec": 0},
            ],
        },
        "policy": [
            {"name": "tiered", "memtable_bytes": 4096},
            {"name": "periodic", "memtable_bytes": 4096, "periodic_compaction_interval": "4h"},
        ],
        "sweep": {"workload.key_distribution": ["uniform", "zipfian"]},
    }


def _without_wall(results: list[dict]) -> list[dict]:
    out = copy.deepcopy(results)
    for r in out:
        r["summary"].pop("wall_s")
        r["summary"].pop("cpu_s")
        r["summary"].pop("sample_cpu_s")
    return out


def test_spark_sweep_equals_serial_grid(spark, tmp_path) -> None:
    _spec, cells = grid(sweep_spec())
    assert [c.name for c in cells] == [
        "tiered workload.key_distribution=uniform",
        "periodic workload.key_distribution=uniform",
        "tiered workload.key_distribution=zipfian",
        "periodic workload.key_distribution=zipfian",
    ]
    serial = run_cells(cells)
    on_spark = run_cells_spark(cells, session=spark)
    assert _without_wall(on_spark) == _without_wall(serial)
    assert (
        len(
            {
                json.dumps(r["summary"]["compactions"]) + str(r["summary"]["write_amplification"])
                for r in serial
            }
        )
        == 4
    )
    # the whole command path: summary.json, the comparison plot
    summary = simulate.run(sweep_spec(), tmp_path / "out", engine="spark", session=spark)
    assert summary["engine"] == "spark"
    assert [p["name"] for p in summary["policies"]] == [c.name for c in cells]
    assert [p["params"] for p in summary["policies"]][2] == {"workload.key_distribution": "zipfian"}
    assert [
        {k: v for k, v in p.items() if k not in ("wall_s", "cpu_s", "sample_cpu_s")}
        for p in summary["policies"]
    ] == [r["summary"] for r in _without_wall(serial)]
    assert "comparison.png" in summary["plots"] and (tmp_path / "out" / "comparison.png").exists()
