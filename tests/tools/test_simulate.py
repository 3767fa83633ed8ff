"""`lsm simulate` end to end on the real engine: determinism, the accounting against `lsm du`, write
amplification against the engine's own, the purge bound with and without periodic compaction."""

from __future__ import annotations

import copy
import json
import os
import subprocess

import pytest

from lsm.inspect import space_usage
from tests.tools._cli import LSM_CMD, NO_PLOTS, lsm_env, one_line_error, run_lsm, without_matplotlib
from tools import simulate
from tools.simulate.runner import Simulation
from tools.simulate.spec import parse_spec
from tools.simulate.workload import generate

HOUR = 3_600_000
PINNED = {
    "name",
    "ops",
    "simulated_ms",
    "wall_s",
    "write_amplification",
    "space_amplification_final",
    "disk_bytes_final",
    "live_bytes_final",
    "expired_bytes_final",
    "tombstone_bytes_final",
    "shadowed_bytes_final",
    "purge_lag_ms",
    "unpurged_expired_rows_final",
    "compactions",
}


def small_spec(**policy) -> dict:
    """Two days of writes (TTLs from 1 h to 2 d, deletes, reads, scans) then two quiet days; small
    memtables so that flushes and compactions happen every few simulated hours."""
    return {
        "seed": 11,
        "sample_every": "2h",
        "compact_every": "10m",
        "workload": {
            "keys": 400,
            "key_distribution": "zipfian",
            "value_bytes": {"distribution": "uniform", "min": 20, "max": 120},
            "phases": [
                {
                    "duration": "2d",
                    "ops_per_sec": 0.02,
                    "mix": {"put": 0.8, "delete": 0.08, "get": 0.08, "scan": 0.04},
                    "ttl": [
                        {"fraction": 0.3, "ttl": "1h"},
                        {"fraction": 0.3, "ttl": "12h"},
                        {"fraction": 0.2, "ttl": "2d"},
                        {"fraction": 0.2, "ttl": "none"},
                    ],
                },
                {"duration": "2d", "ops_per_sec": 0},
            ],
        },
        "policy": [{"name": "p", "memtable_bytes": 4096, "l0_compaction_threshold": 3, **policy}],
    }


def _strip(summary: dict) -> dict:
    s = copy.deepcopy(summary)
    for p in s["policies"]:
        p.pop("wall_s")
        p.pop("cpu_s")
        p.pop("sample_cpu_s")
    return s


def test_same_seed_identical_summary_other_seed_differs(tmp_path) -> None:
    spec = small_spec(periodic_compaction_interval="6h")
    spec["workload"]["phases"][1]["duration"] = "1d"
    a = simulate.run(spec, tmp_path / "a", plots=False)
    b = simulate.run(spec, tmp_path / "b", plots=False)
    assert _strip(a) == _strip(b)
    assert (tmp_path / "a" / "timeseries.csv").read_text() == (tmp_path / "b" / "timeseries.csv").read_text()
    assert PINNED <= set(a["policies"][0])
    p = a["policies"][0]
    assert (
        p["ops"] > 3000
        and p["samples"] == 36
        and p["compactions"]["size_tiered"] > 0
        and p["compactions"]["periodic"] > 0
    )
    spec["seed"] = 12
    c = simulate.run(spec, tmp_path / "c", plots=False)
    assert _strip(c)["policies"] != _strip(a)["policies"]


def _du_classes(rep) -> dict:
    t = rep["total"] if isinstance(rep, dict) else rep.total.to_dict()  # `lsm du --json` or SpaceReport
    out = {
        f"{c}_{u}": t[f"{c}_{u}"]
        for c in ("live", "expired", "tombstone", "shadowed")
        for u in ("bytes", "rows")
    }
    out["size"] = t["size"]
    return out


def test_accounting_equals_du_at_every_sample_and_at_the_end(tmp_path) -> None:
    spec = parse_spec(small_spec(periodic_compaction_interval="8h"))
    d = str(tmp_path / "db")
    checked = []

    def check(_sim_ms: int, _ops: int) -> None:
        now = sim.clock.now()
        mine = sim.account.classes()
        mine["size"] = sim.account.disk_bytes
        assert mine == _du_classes(space_usage(d, now)), now
        checked.append(now)

    sim = Simulation(spec, spec.policies[0], generate(spec), d, check)
    try:
        res = sim.run()
        assert len(checked) == res.summary["samples"] == 4 * 24 // 2
        assert res.summary["ssts_read_for_accounting"] > 0
        # the real command on the same directory, at the simulated end
        now = sim.clock.now()
        r = run_lsm("du", d, "--json", "--at", str(now))
        assert r.code == 0, r.err
        du = _du_classes(r.json())
        s = res.summary
        assert (
            s["live_bytes_final"],
            s["expired_bytes_final"],
            s["tombstone_bytes_final"],
            s["shadowed_bytes_final"],
        ) == (
            du["live_bytes"],
            du["expired_bytes"],
            du["tombstone_bytes"],
            du["shadowed_bytes"],
        )
        assert s["disk_bytes_final"] == du["size"]
        # write amplification is the engine's own figure
        db = sim.db
        assert s["write_amplification"] == round(db.write_amplification(), 6)
        expected = (db.flush_bytes_written + db.compaction_stats.bytes_out) / db.user_bytes_written
        assert s["write_amplification"] == pytest.approx(expected, abs=1e-6)
        assert s["write_amplification"] > 1
        assert s["purge_lag_ms"]["count"] == db.compaction_stats.purge_lag.count > 0
    finally:
        sim.close()


def _bound_spec(**policy) -> dict:
    """Writes for a day, every put with a 12 h TTL (>= the interval), then three quiet days."""
    spec = small_spec(**policy)
    spec["sample_every"] = "30m"
    ph = spec["workload"]["phases"]
    ph[0]["duration"] = "1d"
    ph[0]["mix"] = {"put": 0.9, "get": 0.1}
    ph[0]["ttl"] = [{"fraction": 1, "ttl": "12h"}]
    ph[1]["duration"] = "3d"
    return spec


def test_periodic_compaction_bounds_purge_lag_after_writes_stop(tmp_path) -> None:
    period = 6 * HOUR
    spec = _bound_spec(periodic_compaction_interval=period)
    res = simulate.run(spec, tmp_path / "out", plots=False)
    p = res["policies"][0]
    step = res["compact_every_ms"]
    rows = list(_samples(tmp_path / "out"))
    writes_end = parse_spec(spec).start_ms + 86_400_000
    after = [r for r in rows if int(r["t_ms"]) >= writes_end]
    assert after
    for r in after:  # every expired row is gone by expire_ts + P + one compaction step
        if r["oldest_unpurged_expired_ms"]:
            assert int(r["oldest_unpurged_expired_ms"]) <= period + step, r
    assert p["unpurged_expired_rows_final"] == 0 and p["expired_bytes_final"] == 0
    assert p["purge_lag_ms"]["max"] <= period + step
    assert p["purge_lag_ms"]["count"] > 100


def test_without_periodic_compaction_expired_rows_stay(tmp_path) -> None:
    res = simulate.run(_bound_spec(), tmp_path / "out", plots=False)
    p = res["policies"][0]
    assert p["unpurged_expired_rows_final"] > 0
    assert p["expired_bytes_final"] + p["tombstone_bytes_final"] > 0
    assert p["oldest_unpurged_expired_ms_final"] > 2 * 24 * HOUR  # long past any periodic bound
    assert p["compactions"]["periodic"] == 0


def _samples(out):
    import csv

    with open(os.path.join(out, "timeseries.csv")) as f:
        yield from csv.DictReader(f)


# -- the command ------------------------------------------------------------------------------------
def _write_spec(path, spec: dict) -> str:
    """A TOML file for `spec` (tiny writer: tables, arrays of tables, inline values)."""

    def val(v):
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {val(x)}" for k, x in v.items()) + " }"
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        return repr(v)

    lines = [f"{k} = {val(v)}" for k, v in spec.items() if not isinstance(v, dict | list)]
    wl = spec["workload"]
    lines.append("[workload]")
    lines += [f"{k} = {val(v)}" for k, v in wl.items() if k != "phases"]
    for ph in wl["phases"]:
        lines.append("[[workload.phases]]")
        lines += [f"{k} = {val(v)}" for k, v in ph.items()]
    for pol in spec["policy"]:
        lines.append("[[policy]]")
        lines += [f"{k} = {val(v)}" for k, v in pol.items()]
    if "sweep" in spec:
        lines.append("[sweep]")
        lines += [f"{json.dumps(k)} = {val(v)}" for k, v in spec["sweep"].items()]
    p = os.path.join(path, "spec.toml")
    with open(p, "w") as f:
        f.write("\n".join(lines) + "\n")
    return p


def _cli_spec() -> dict:
    spec = small_spec(periodic_compaction_interval="6h")
    spec["workload"]["phases"][0]["duration"] = "12h"
    spec["workload"]["phases"][1]["duration"] = "12h"
    spec["policy"].append({"name": "tiered", "memtable_bytes": 4096})
    return spec


def test_cli_writes_summary_timeseries_and_plots(tmp_path) -> None:
    spec_path = _write_spec(tmp_path, _cli_spec())
    out = tmp_path / "out"
    r = run_lsm("simulate", spec_path, "--out", out, "--json")
    assert r.code == 0, r.err
    summary = r.json()
    assert [p["name"] for p in summary["policies"]] == ["p", "tiered"]
    assert PINNED <= set(summary["policies"][0])
    assert json.loads((out / "summary.json").read_text()) == summary
    assert sorted(summary["plots"]) == ["amplification.png", "comparison.png", "disk.png", "purge_lag.png"]
    for name in summary["plots"]:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    header = (out / "timeseries.csv").read_text().splitlines()[0]
    assert header.startswith(
        "policy,t_ms,day,ops,disk_bytes,live_bytes,expired_bytes,tombstone_bytes,shadowed_bytes"
    )
    r = run_lsm("simulate", spec_path, "--out", tmp_path / "out2")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].split()[:2] == ["policy", "disk"] and "--wide shows them" in r.out  # fitted to 120 columns
    assert lines[1].startswith("p ") and lines[2].startswith("tiered ")
    assert lines[-1].startswith("wrote summary.json, timeseries.csv, policies.csv, disk.png")


def test_cli_bad_spec_is_one_line_naming_the_field(tmp_path) -> None:
    spec = _cli_spec()
    spec["workload"]["phases"][0]["ops_per_sec"] = -2
    spec_path = _write_spec(tmp_path, spec)
    line = one_line_error(run_lsm("simulate", spec_path, "--out", tmp_path / "out"), 2)
    assert "workload.phases[0].ops_per_sec: must be >= 0" in line and spec_path in line
    assert not (tmp_path / "out").exists()  # checked before any work
    spec_path = _write_spec(tmp_path, {**_cli_spec(), "policy": []})
    line = one_line_error(run_lsm("simulate", spec_path, "--out", tmp_path / "o"), 2)
    assert "policy: expected a non-empty list" in line
    line = one_line_error(run_lsm("simulate", tmp_path / "missing.toml", "--out", tmp_path / "o"), 2)
    assert "missing.toml" in line


def test_cli_without_matplotlib_still_writes_everything_else(tmp_path) -> None:
    spec_path = _write_spec(tmp_path, _cli_spec())
    env = lsm_env(without_matplotlib(tmp_path))
    out = tmp_path / "out"
    p = subprocess.run(
        [*LSM_CMD, "simulate", spec_path, "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip() == NO_PLOTS
    assert sorted(os.listdir(out)) == ["policies.csv", "summary.json", "timeseries.csv"]
    assert json.loads((out / "summary.json").read_text())["plots"] == []


def test_bench_suite_bare_run_is_the_same_engine_work(tmp_path, capsys) -> None:
    from tools.bench import simulate as bench_simulate

    spec = parse_spec(small_spec(periodic_compaction_interval="6h"))
    ops = generate(spec)
    sim = Simulation(spec, spec.policies[0], ops, str(tmp_path / "sim"))
    try:
        res = sim.run()
    finally:
        sim.close()
    _wall, _cpu, wa = bench_simulate.bare_run(spec, spec.policies[0], ops, str(tmp_path / "bare"))
    assert round(wa, 6) == res.summary["write_amplification"]  # same flushes, same compactions
    spec_path = _write_spec(tmp_path, small_spec())
    assert bench_simulate.main(["--spec", spec_path, "--skip-sweep", "--json"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out[out.index("{") :])
    (p,) = report["study"]["policies"]
    assert p["name"] == "p" and p["ops"] == len(ops) and p["sim_s"] > 0 and p["bare_s"] > 0
    assert "overhead" in p and "overhead_cpu" in p


def test_jobs_run_the_policies_in_worker_processes_with_the_serial_results(tmp_path) -> None:
    spec = small_spec(periodic_compaction_interval="6h")
    spec["workload"]["phases"][1]["duration"] = "1d"
    spec["policy"].append({"name": "q", "memtable_bytes": 8192, "l0_compaction_threshold": 4})
    serial = simulate.run(spec, tmp_path / "serial", plots=False)
    parallel = simulate.run(spec, tmp_path / "parallel", plots=False, jobs=2)
    assert [p["name"] for p in parallel["policies"]] == ["p", "q"]
    assert _strip(parallel) == _strip(serial)
    assert (tmp_path / "parallel" / "timeseries.csv").read_text() == (tmp_path / "serial" / "timeseries.csv").read_text()
    with pytest.raises(ValueError, match="jobs"):
        simulate.run(spec, tmp_path / "bad", plots=False, jobs=0)


def test_cli_jobs_gives_the_serial_summary_and_refuses_bad_counts(tmp_path) -> None:
    spec_path = _write_spec(tmp_path, _cli_spec())
    quick = without_matplotlib(tmp_path)  # the summaries are compared, not the plots
    serial = run_lsm("simulate", spec_path, "--out", tmp_path / "a", "--json", "--no-progress", env=quick)
    parallel = run_lsm("simulate", spec_path, "--out", tmp_path / "b", "--json", "--jobs", "2", env=quick)
    assert serial.code == 0 and parallel.code == 0, (serial.err, parallel.err)
    assert _strip(parallel.json()) == _strip(serial.json())
    assert "--jobs" in one_line_error(run_lsm("simulate", spec_path, "--out", tmp_path / "c", "--jobs", "0"), 2)
    line = one_line_error(run_lsm("simulate", spec_path, "--out", tmp_path / "d", "--jobs", "2", "--engine", "spark"), 2)
    assert "--jobs" in line
