"""`lsm simulate` on an object store: requests per simulated day, and their cost from the spec's prices."""

from __future__ import annotations

import copy
import math
import os

import obstore
import pytest

from storage import STAT_KEYS, key_of, storage_for
from tests.tools._cli import ROOT, one_line_error, run_lsm
from tests.tools.test_simulate import _write_spec, small_spec
from tools import simulate
from tools.simulate.costs import GB, Prices
from tools.simulate.spec import SpecError, parse_spec

KINDS = ("put", "get", "list", "delete", "head")
PRICES = {"put_per_1000": 0.01, "get_per_1000": 0.002, "list_per_1000": 0.007, "head_per_1000": 0.003,
          "delete_per_1000": 0.0005, "storage_gb_month": 0.5}


def _spec(store: str = "memory", **policy) -> dict:
    spec = small_spec(**policy)
    spec["workload"]["phases"][0]["duration"] = "1d"
    spec["workload"]["phases"][1]["duration"] = "1.5d"  # the last day is half a day
    spec["store"] = store
    spec["prices"] = dict(PRICES)
    return spec


def _cost(counts: dict, prices: dict) -> float:
    return sum(counts[k] / 1000 * prices[f"{k}_per_1000"] for k in KINDS)


def test_requests_per_simulated_day_and_their_cost(tmp_path) -> None:
    summary = simulate.run(_spec(periodic_compaction_interval="6h"), tmp_path / "a", plots=False)
    o = summary["policies"][0]["object_store"]
    days = o["days"]
    assert [d["day"] for d in days] == [0, 1, 2] and [d["days"] for d in days] == [1, 1, 0.5]
    first = days[0]
    # a day of writes: WAL objects and SSTs put, manifests listed; reads and compactions get blocks
    assert first["put"] > 100 and first["get"] > 0 and first["list"] > 0 and first["put_bytes"] > 0
    for d in days:
        assert math.isclose(d["request_cost_usd"], _cost(d, PRICES))
        assert math.isclose(d["storage_cost_usd"], d["stored_bytes"] / GB * 0.5 * d["days"] / 30)
    totals = {k: sum(d[k] for d in days) for k in STAT_KEYS}
    assert o["requests"] == totals
    assert math.isclose(o["request_cost_usd"], _cost(totals, PRICES))
    mean_stored = sum(d["stored_bytes"] * d["days"] for d in days) / 2.5
    assert math.isclose(o["monthly_request_cost_usd"], _cost(totals, PRICES) * 30 / 2.5)
    assert math.isclose(o["monthly_storage_cost_usd"], mean_stored / GB * 0.5)
    assert math.isclose(o["monthly_cost_usd"], o["monthly_request_cost_usd"] + o["monthly_storage_cost_usd"])
    assert o["prices"] == PRICES and o["store"] == "memory"
    # the samples carry the requests so far; the simulator's own reads are not among them
    header = (tmp_path / "a" / "timeseries.csv").read_text().splitlines()[0].split(",")
    assert header[-5:] == [f"requests_{k}" for k in KINDS]
    assert o["accounting_requests"]["list"] > 0  # it listed the WAL at every sample


def test_the_counts_are_the_same_run_to_run_and_the_rows_as_on_a_local_disk(tmp_path) -> None:
    spec = _spec()
    a = simulate.run(spec, tmp_path / "a", plots=False)["policies"][0]
    b = simulate.run(spec, tmp_path / "b", plots=False)["policies"][0]
    # WAL objects are committed, aged and deleted on the simulated clock: every counter of every day
    assert a["object_store"]["days"] == b["object_store"]["days"]
    local = simulate.run({k: v for k, v in spec.items() if k != "store"}, tmp_path / "c", plots=False)
    loc = local["policies"][0]
    assert "object_store" not in loc
    for k in ("live_bytes_final", "expired_bytes_final", "tombstone_bytes_final", "rows_final", "compactions"):
        assert a[k] == loc[k], k


def test_default_prices_are_s3_standard_list_prices() -> None:
    spec = _spec()
    del spec["prices"]
    p = parse_spec(spec).prices
    assert p == Prices(0.005, 0.005, 0.0004, 0.0004, 0.0, 0.023)
    assert parse_spec({k: v for k, v in spec.items() if k != "store"}).store == "local"


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"store": "disk"}, "store: expected 'local', 'memory' or an s3://bucket/prefix URL"),
        ({"store": "s3://"}, "store: expected"),
        ({"prices": {"get": 1}}, "prices.get: unknown field"),
        ({"prices": {"get_per_1000": -1}}, "prices.get_per_1000: must be >= 0"),
        ({"prices": {"storage_gb_month": "cheap"}}, "prices.storage_gb_month: expected a number"),
    ],
)
def test_bad_store_or_prices_name_the_field(patch, message) -> None:
    spec = copy.deepcopy(_spec())
    spec.update(patch)
    with pytest.raises(SpecError, match=message.replace(".", r"\.").replace("'", ".")):
        parse_spec(spec)


def test_cli_prints_the_requests_table_and_plots_them(tmp_path) -> None:
    spec = _spec()
    spec["workload"]["phases"] = spec["workload"]["phases"][:1]
    path = _write_spec(tmp_path, spec)
    r = run_lsm("simulate", path, "--out", tmp_path / "out")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("policy  PUT/day"))
    row = lines[head + 1].split()
    assert row[0] == "p" and int(row[1].replace(",", "")) > 100 and row[-1].startswith("$")
    assert "requests.png" in lines[-1]
    bad = _write_spec(tmp_path, {**spec, "store": "ftp://x"})
    assert "store: expected" in one_line_error(run_lsm("simulate", bad, "--out", tmp_path / "o2"), 2)


def test_the_s3_costs_study_spec_checks() -> None:
    spec = parse_spec(simulate.load_spec(os.path.join(ROOT, "examples", "s3_costs.toml")))
    assert spec.store == "memory" and spec.prices == Prices()  # it spells out the defaults
    assert [p.name for p in spec.policies] == ["tiered", "periodic-1d", "periodic-6h"]


def test_a_spec_on_s3_counts_the_same_writes_and_leaves_nothing_behind(tmp_path, s3_server) -> None:
    prefix = s3_server.new_url("sims")
    spec = _spec(store=prefix)
    spec["workload"]["phases"] = [{**spec["workload"]["phases"][0], "duration": "6h"}]
    on_s3 = simulate.run(spec, tmp_path / "s3", plots=False)["policies"][0]["object_store"]
    in_memory = simulate.run({**spec, "store": "memory"}, tmp_path / "m", plots=False)["policies"][0]["object_store"]
    assert on_s3["store"] == prefix and on_s3["requests"]["put"] > 50
    assert on_s3["requests"] == in_memory["requests"]  # the same engine, the same requests, whatever the store
    # each simulation wrote under its own prefix below the spec's, and deleted every object at the end
    pages = obstore.list(storage_for(prefix).client.store, key_of(prefix) + "/", return_arrow=False)
    assert [m["path"] for page in pages for m in page] == []


def test_credentials_in_a_policy_stay_out_of_the_reports(tmp_path) -> None:
    """A policy's object_store_options go to the store, not to summary.json (the spec and each policy's
    options), policies.csv or the printed table (issue 32 defect 5)."""
    secret = "wJalrXUtnFEMI-EXAMPLE-SECRET"
    spec = _spec(object_store_options={"secret_access_key": secret, "region": "us-east-1"})
    spec["workload"]["phases"] = [{**spec["workload"]["phases"][0], "duration": "2h"}]
    summary = simulate.run(spec, tmp_path / "out", plots=False)
    assert summary["policies"][0]["options"]["object_store_options"] == {
        "secret_access_key": "<redacted>", "region": "us-east-1"}
    for name in os.listdir(tmp_path / "out"):
        assert secret not in (tmp_path / "out" / name).read_text(), name
    assert spec["policy"][0]["object_store_options"]["secret_access_key"] == secret  # the caller's spec kept


@pytest.mark.s3
def test_the_counts_do_not_depend_on_how_fast_the_run_goes(tmp_path, s3_server, s3_proxy) -> None:
    """The same spec on S3 twice, once with a dozen WAL PUTs held 2 s each by the proxy: the same
    requests of every kind on every simulated day. The WAL's deletion grace (here 20 s: a 3 s request
    timeout, a 1 s retry window, the 15 s the WAL adds, docs/object-store.md) is judged on the simulated
    clock: judged on the wall clock, the slow run's first flush would find its first WAL objects past
    the grace and delete them, the quick run's would not."""
    options = {**s3_server.options(endpoint=s3_proxy.endpoint), "timeout": "3s", "retry_timeout_ms": 1000}
    spec = _spec(store=s3_server.new_url("sims"), periodic_compaction_interval="6h", gc_grace_ms=1000,
                 object_store_options=options)
    spec["workload"]["phases"][0]["duration"] = "8h"
    spec["workload"]["phases"][1]["duration"] = "20h"  # day 1: 4 quiet hours of periodic compaction
    quick = simulate.run(spec, tmp_path / "quick", plots=False)["policies"][0]
    # the first memtable's WAL objects take 24 s of wall time to write, all before its flush
    s3_proxy.slow(2.0, method="PUT", key="/wal/", count=12)
    slow = simulate.run(spec, tmp_path / "slow", plots=False)["policies"][0]
    assert len(s3_proxy.requests("PUT", "/wal/", action="slow")) == 12
    assert slow["wall_s"] > quick["wall_s"] + 20
    assert [d["day"] for d in slow["object_store"]["days"]] == [0, 1]
    assert slow["object_store"]["days"] == quick["object_store"]["days"]
    assert quick["object_store"]["requests"]["delete"] > 0  # WAL objects past their grace went
