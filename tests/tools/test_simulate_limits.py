"""`lsm simulate` refuses specs past what one simulation can do, and spec paths it cannot read as a file.

Each spec here ran away (memory growing, no output) or ended in exit 3 "internal error"
(OverflowError) before the limits of tools/simulate/spec.py: now one line naming the field, exit 2,
before any work (nothing is written to the output directory)."""

from __future__ import annotations

import os

import pytest

from tests.tools._cli import one_line_error, run_lsm

BASE = """seed = 1
{top}
[workload]
keys = {keys}
value_bytes = {value_bytes}
{workload}
[[workload.phases]]
duration = "{duration}"
ops_per_sec = {rate}
{phase}
[[policy]]
name = "a"
"""
DEFAULTS = {
    "top": "",
    "keys": 100,
    "value_bytes": 10,
    "workload": "",
    "duration": "1h",
    "rate": 0.1,
    "phase": "",
}

CASES = [
    ({"rate": "1e300"}, "workload.phases: the phases ask for 3.6e+303 operations", "100000000"),
    ({"duration": "100000000000000000000d"}, "workload.phases[0].duration: must be <= 253402300799999", None),
    ({"keys": 2**63 - 1}, "workload.keys: must be <= 100000000", None),
    (
        {"value_bytes": '{ distribution = "uniform", min = 1, max = 100000000000000000000 }'},
        "workload.value_bytes.max: must be <= 16777216",
        None,
    ),
    (
        {"value_bytes": '{ distribution = "normal", mean = 1e300, stddev = 1 }'},
        "workload.value_bytes: mean + 8 stddev must be <= 16777216",
        None,
    ),
    ({"top": f"start = {2**63 - 1}"}, "start: must be <= 253402300799999", None),
    (
        {"phase": 'ttl = [{ fraction = 1, ttl = "10000000000000000000d" }]'},
        "workload.phases[0].ttl[0].ttl: must be <= 253402300799999",
        None,
    ),
    ({"top": "sample_every = 1"}, "sample_every: 3.6e+06 samples", "1000000"),
    (
        {"top": 'compact_every = 1\nsample_every = "1d"', "duration": "10000d", "rate": 0},
        "compact_every: 8.64e+11 compaction ticks",
        "100000000",
    ),
    (
        {"workload": 'zipf_theta = 1e300\nkey_distribution = "zipfian"'},
        "workload.zipf_theta: must be <= 30",
        None,
    ),
    ({"workload": f"scan_rows = {2**63}"}, "workload.scan_rows: must be <= 100000000", None),
]


@pytest.mark.parametrize(("change", "message", "limit"), CASES, ids=[c[1].split(":")[0] for c in CASES])
def test_a_spec_past_a_limit_is_one_line_naming_the_field(tmp_path, change, message, limit) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(BASE.format(**{**DEFAULTS, **change}))
    out = tmp_path / "out"
    line = one_line_error(run_lsm("simulate", spec, "--out", out, "--no-progress"), 2)
    assert line.startswith(f"lsm: error: {spec}: {message}"), line
    if limit is not None:
        assert limit in line, line
    assert not out.exists()  # refused before any work


def test_a_spec_at_the_limits_still_checks(tmp_path) -> None:
    import tomllib

    from tools.simulate import parse_spec
    from tools.simulate.spec import MAX_KEYS, MAX_VALUE_BYTES

    text = BASE.format(**{**DEFAULTS, "keys": MAX_KEYS, "value_bytes": MAX_VALUE_BYTES, "rate": 10000})
    spec = parse_spec(tomllib.loads(text))
    assert spec.keys == MAX_KEYS and spec.expected_ops == 36_000_000


def test_a_fifo_or_a_directory_as_the_spec_is_refused_without_blocking(tmp_path) -> None:
    fifo = tmp_path / "spec.toml"
    os.mkfifo(fifo)
    line = one_line_error(run_lsm("simulate", fifo, "--out", tmp_path / "o"), 2)
    assert line == f"lsm: error: {fifo}: not a regular file"
    line = one_line_error(run_lsm("simulate", tmp_path, "--out", tmp_path / "o"), 2)
    assert line == f"lsm: error: {tmp_path}: not a regular file"


def test_toml_nested_too_deeply_is_one_line(tmp_path) -> None:
    spec = tmp_path / "deep.toml"
    spec.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    line = one_line_error(run_lsm("simulate", spec, "--out", tmp_path / "o"), 2)
    assert line == f"lsm: error: {spec}: not valid TOML: nested too deeply"
