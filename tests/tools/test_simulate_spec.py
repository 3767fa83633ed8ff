"""The simulation spec parser and the workload generator: every bad field named, determinism, shapes."""

from __future__ import annotations

import copy
import math
from collections import Counter

import pytest

from tools.simulate import SpecError, grid, parse_duration, parse_spec
from tools.simulate.workload import DELETE, GET, NO_TTL, PUT, SCAN, Zipfian, generate


def base() -> dict:
    return {
        "seed": 7,
        "sample_every": "1h",
        "workload": {
            "keys": 1000,
            "key_distribution": "uniform",
            "value_bytes": 100,
            "phases": [
                {
                    "duration": "2d",
                    "ops_per_sec": 0.05,
                    "mix": {"put": 0.9, "delete": 0.05, "get": 0.05},
                    "ttl": [{"fraction": 0.6, "ttl": "6h"}, {"fraction": 0.4, "ttl": "none"}],
                },
                {"duration": "1d", "ops_per_sec": 0},
            ],
        },
        "policy": [{"name": "tiered"}, {"name": "periodic", "periodic_compaction_interval": "1d"}],
    }


def with_change(path: list, value, delete: bool = False) -> dict:
    d = copy.deepcopy(base())
    cur = d
    for p in path[:-1]:
        cur = cur[p]
    if delete:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return d


def test_good_spec_parses() -> None:
    s = parse_spec(base())
    assert s.seed == 7 and s.sample_every_ms == 3_600_000 and s.compact_every_ms == 300_000
    assert s.duration_ms == 3 * 86_400_000
    assert [p.name for p in s.policies] == ["tiered", "periodic"]
    assert dict(s.policies[1].options) == {"periodic_compaction_interval": 86_400_000}
    assert s.phases[0].ttl == ((0.6, 6 * 3_600_000), (0.4, None))
    assert s.phases[1].ops_per_sec == 0


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        (250, 250),
        ("250ms", 250),
        ("90s", 90_000),
        ("15m", 900_000),
        ("6h", 21_600_000),
        ("1.5d", 129_600_000),
    ],
)
def test_durations(text, ms) -> None:
    assert parse_duration(text, "x") == ms


BAD = [
    # (change, expected field in the message, words of the reason)
    ((["colour"], "red"), "colour: unknown field", None),
    ((["workload", "keyz"], 5), "workload.keyz: unknown field", None),
    ((["workload", "phases", 0, "rate"], 5), "workload.phases[0].rate: unknown field", None),
    ((["workload", "phases", 0, "ops_per_sec"], -1), "workload.phases[0].ops_per_sec: must be >= 0", None),
    (
        (["workload", "phases", 0, "duration"], "3 weeks"),
        "workload.phases[0].duration: expected a duration",
        None,
    ),
    ((["workload", "phases", 0, "duration"], 0), "workload.phases[0].duration: must be > 0", None),
    (
        (["workload", "phases", 0, "mix"], {"put": 0.5, "get": 0.4}),
        "workload.phases[0].mix: fractions must sum to 1",
        None,
    ),
    (
        (["workload", "phases", 0, "mix"], {"put": 0.5, "upsert": 0.5}),
        "workload.phases[0].mix.upsert: unknown field",
        None,
    ),
    ((["workload", "phases", 0, "mix"], {}), "workload.phases[0].mix: empty", None),
    (
        (["workload", "phases", 0, "ttl"], [{"fraction": 0.5, "ttl": "1d"}]),
        "workload.phases[0].ttl: fractions must sum to 1",
        None,
    ),
    (
        (["workload", "phases", 0, "ttl"], [{"fraction": 1, "ttl": "soon"}]),
        "workload.phases[0].ttl[0].ttl: expected a duration",
        None,
    ),
    (
        (["workload", "key_distribution"], "pareto"),
        "workload.key_distribution: unknown distribution 'pareto'",
        None,
    ),
    (
        (["workload", "phases", 1, "key_distribution"], "gauss"),
        "workload.phases[1].key_distribution: unknown distribution",
        None,
    ),
    (
        (["workload", "value_bytes"], {"distribution": "weibull"}),
        "workload.value_bytes.distribution: unknown distribution",
        None,
    ),
    ((["workload", "value_bytes"], -3), "workload.value_bytes: must be >= 0", None),
    ((["workload", "keys"], 0), "workload.keys: must be >= 1", None),
    ((["workload", "phases"], []), "workload.phases: expected a non-empty list", None),
    ((["policy"], []), "policy: expected a non-empty list", None),
    ((["policy", 1, "l0_threshold"], 4), "policy[1].l0_threshold: unknown field", None),
    ((["policy", 1, "clock"], 4), "policy[1].clock: unknown field", None),
    (
        (["policy", 1, "l0_compaction_threshold"], 1),
        "policy[1]: DbOptions.l0_compaction_threshold must be an int >= 2",
        None,
    ),
    (
        (["policy", 1, "periodic_compaction_interval"], "often"),
        "policy[1].periodic_compaction_interval: expected a duration",
        None,
    ),
    (
        (["policy", 1, "compaction_filters"], ["no.such.module:Factory"]),
        "policy[1].compaction_filters[0]: cannot import",
        None,
    ),
    (
        (["policy", 1, "compaction_filters"], ["compaction.filter:NoSuchName"]),
        "policy[1].compaction_filters[0]: cannot import",
        None,
    ),
    ((["policy", 1, "name"], "tiered"), "policy[1].name: duplicate policy name", None),
    ((["policy", 0, "name"], ""), "policy[0].name: missing or empty", None),
    ((["sample_every"], "0s"), "sample_every: must be > 0", None),
    ((["seed"], 1.5), "seed: expected an integer", None),
]


@pytest.mark.parametrize(
    ("change", "message", "_x"), BAD, ids=[b[1].split(":")[0] + "-" + str(i) for i, b in enumerate(BAD)]
)
def test_each_bad_field_is_named(change, message, _x) -> None:
    path, value = change
    with pytest.raises(SpecError) as e:
        grid(with_change(path, value))
    text = str(e.value)
    assert text.startswith(message), text
    assert "\n" not in text


def test_missing_workload_and_duration() -> None:
    with pytest.raises(SpecError, match=r"^workload: missing"):
        parse_spec(with_change(["workload"], None, delete=True))
    with pytest.raises(SpecError, match=r"^workload\.phases\[0\]\.duration: missing"):
        parse_spec(with_change(["workload", "phases", 0, "duration"], None, delete=True))


def test_filters_import_and_instantiate() -> None:
    s = parse_spec(
        with_change(["policy", 1, "compaction_filters"], ["tests.compaction.test_filters:UpperFactory"])
    )
    (f,) = dict(s.policies[1].options)["compaction_filters"]
    assert callable(f.create)


def test_sweep_grid_names_and_bad_paths() -> None:
    raw = base()
    raw["sweep"] = {"workload.keys": [100, 200], "policy.l0_compaction_threshold": [4, 8]}
    _spec, cells = grid(raw)
    assert [c.name for c in cells][:3] == [
        "tiered workload.keys=100 policy.l0_compaction_threshold=4",
        "periodic workload.keys=100 policy.l0_compaction_threshold=4",
        "tiered workload.keys=100 policy.l0_compaction_threshold=8",
    ]
    assert len(cells) == 8
    assert (
        cells[-1].raw["workload"]["keys"] == 200
        and cells[-1].raw["policy"][1]["l0_compaction_threshold"] == 8
    )
    raw["sweep"] = {"workload.phases[5].ops_per_sec": [1]}
    with pytest.raises(SpecError, match=r"^sweep\.workload\.phases\[5\]\.ops_per_sec: the spec has nothing"):
        grid(raw)
    raw["sweep"] = {"workload.keys": []}
    with pytest.raises(SpecError, match=r"^sweep\.workload\.keys: expected a non-empty list"):
        grid(raw)
    raw["sweep"] = {"workload.keys": [10, -1]}
    with pytest.raises(SpecError, match=r"^sweep \(workload\.keys=-1\): workload\.keys: must be >= 1"):
        grid(raw)


# -- the workload generator --------------------------------------------------------------------------
def test_same_seed_same_operations_other_seed_others() -> None:
    a, b = generate(parse_spec(base())), generate(parse_spec(base()))
    assert (a.t, a.op, a.key, a.vlen, a.ttl) == (b.t, b.op, b.key, b.vlen, b.ttl)
    c = generate(parse_spec(with_change(["seed"], 8)))
    assert a.t != c.t


def test_rates_mix_ttl_and_quiet_phase() -> None:
    raw = with_change(["workload", "phases", 0, "ops_per_sec"], 1.0)
    s = parse_spec(raw)
    ops = generate(s)
    n = len(ops)
    expected = 2 * 86_400  # 2 days at 1 op/s
    assert abs(n - expected) < 5 * math.sqrt(expected)
    first_end = s.start_ms + 2 * 86_400_000
    assert all(s.start_ms <= t < first_end for t in ops.t)  # nothing in the quiet phase
    assert list(ops.t) == sorted(ops.t)
    assert ops.end_ms == s.start_ms + 3 * 86_400_000
    kinds = Counter(ops.op)
    assert abs(kinds[PUT] / n - 0.9) < 0.01 and abs(kinds[DELETE] / n - 0.05) < 0.01 and kinds[SCAN] == 0
    ttls = Counter(t for o, t in zip(ops.op, ops.ttl, strict=True) if o == PUT)
    puts = kinds[PUT]
    assert abs(ttls[6 * 3_600_000] / puts - 0.6) < 0.01 and abs(ttls[NO_TTL] / puts - 0.4) < 0.01
    assert all(v == 100 for o, v in zip(ops.op, ops.vlen, strict=True) if o == PUT)
    assert all(t == NO_TTL for o, t in zip(ops.op, ops.ttl, strict=True) if o in (GET, DELETE))


def test_value_size_distributions() -> None:
    raw = with_change(["workload", "value_bytes"], {"distribution": "uniform", "min": 10, "max": 20})
    ops = generate(parse_spec(raw))
    sizes = [v for o, v in zip(ops.op, ops.vlen, strict=True) if o == PUT]
    assert min(sizes) == 10 and max(sizes) == 20
    raw = with_change(["workload", "value_bytes"], {"distribution": "normal", "mean": 200, "stddev": 10})
    ops = generate(parse_spec(raw))
    sizes = [v for o, v in zip(ops.op, ops.vlen, strict=True) if o == PUT]
    assert abs(sum(sizes) / len(sizes) - 200) < 2
    assert len(ops.value(5, 37)) == 37


def test_zipfian_is_skewed_and_latest_favours_recent_keys() -> None:
    z = Zipfian(1000, 0.99)
    import random

    rng = random.Random(1)
    ranks = Counter(z.rank(rng.random()) for _ in range(20_000))
    assert ranks[0] > ranks[10] > ranks[500]
    assert all(0 <= r < 1000 for r in ranks)
    raw = with_change(["workload", "key_distribution"], "zipfian")
    ops = generate(parse_spec(raw))
    top = Counter(ops.key).most_common(10)
    assert top[0][1] > 10 * (len(ops) / 1000)  # the hottest key is far above the uniform share
    raw = with_change(["workload", "key_distribution"], "latest")
    raw["workload"]["phases"][0]["mix"] = {"put": 0.5, "get": 0.5}
    ops = generate(parse_spec(raw))
    head, near = 0, 0
    for o, k in zip(ops.op, ops.key, strict=True):
        if o == PUT:
            assert k == head % 1000  # puts insert keys in order
            head += 1
        elif (head - 1 - k) % 1000 < 20:
            near += 1
    gets = Counter(ops.op)[GET]
    assert near > 0.4 * gets  # the 20 newest keys (2% of the key space) get over 40% of the reads
