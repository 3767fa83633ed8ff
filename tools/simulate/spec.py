"""The simulation spec: a TOML file (or the same shape as a dict) checked in full before any work.

Shape (docs/simulate.md has every field; durations are ms integers or strings "250ms", "90s", "15m",
"6h", "30d")::

    seed = 7                       # the workload generator's seed (default 0)
    sample_every = "1h"            # a sample of the disk every this much simulated time
    compact_every = "5m"           # db.compact() cadence in simulated time (periodic jobs, idle flush)
    start = 1767225600000          # simulated epoch ms of the first operation (default 2026-01-01)
    [workload]
    keys = 100000
    key_distribution = "uniform"   # | "zipfian" | "latest"
    zipf_theta = 0.99              # skew of zipfian and latest
    value_bytes = 100              # or { distribution = "uniform", min = 50, max = 150 }
                                   #    { distribution = "normal", mean = 100, stddev = 20 }
    scan_rows = 10                 # rows read by one scan
    [[workload.phases]]
    duration = "20d"
    ops_per_sec = 0.5              # 0: a quiet phase, only time passes
    mix = { put = 0.9, delete = 0.05, get = 0.05 }     # fractions of put/delete/get/scan, sum 1
    ttl = [{ fraction = 0.6, ttl = "2d" }, { fraction = 0.4, ttl = "none" }]
    [[policy]]
    name = "periodic-1d"
    periodic_compaction_interval = "1d"    # any DbOptions field; compaction_filters as import paths

A phase may also override ``key_distribution`` and ``value_bytes``. `parse_spec` returns a `Spec`; any
problem raises `SpecError` whose one-line message names the field (``workload.phases[1].mix``).

A spec must also fit what one simulation can do in memory and time (the ``MAX_*`` limits below): a spec
past one is refused up front, naming the field and the limit, instead of generating operations for
hours. The limits are far beyond the studies in docs/simulate.md (52k operations, 240 samples).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import os
import re
import stat
import tomllib
from collections.abc import Mapping
from typing import Any

from lsm.errors import LsmError
from lsm.options import DbOptions
from tools.simulate.costs import PRICE_FIELDS, STORES, Prices

DEFAULT_START = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DISTRIBUTIONS = ("uniform", "zipfian", "latest")
VALUE_DISTRIBUTIONS = ("constant", "uniform", "normal")
OPS = ("put", "delete", "get", "scan")
_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
# DbOptions fields a policy may not set: the simulator owns the clock and the determinism switches
_RESERVED = frozenset(
    {
        "clock",
        "background_compaction",
        "background_flush",
        "event_listeners",
        "spark_session",
        "compaction_process",
    }
)
# Limits of one simulation. The operations are generated up front into arrays of ~33 bytes each, so
# 10^8 of them take ~3.3 GB and hours to replay at the engine's ~10-50k operations per second.
MAX_OPS = 10**8
# zipfian and latest sum 1/i**theta over every key before the first operation (~8 s at 10^8 keys)
MAX_KEYS = 10**8
# values are cut from one random buffer twice the largest value, and every put copies one
MAX_VALUE_BYTES = 16 * 2**20
# every sample keeps a row of ~30 fields in memory and in timeseries.csv, and is a point of every plot
MAX_SAMPLES = 10**6
# each compaction tick is a db.compact() call (~2 us when there is nothing to do)
MAX_COMPACT_TICKS = 10**8
# simulated time (start, durations, TTLs) stays within what RFC 3339 can write: 9999-12-31T23:59:59.999Z,
# and an expiry (a time plus a TTL) then stays far inside the engine's signed 64-bit milliseconds
MAX_TIME_MS = 253_402_300_799_999
# zipf_theta past this overflows the float i**theta of the generator's zeta sum
MAX_ZIPF_THETA = 30.0
_DURATION_OPTIONS = frozenset(
    {"periodic_compaction_interval", "default_ttl", "history_retention", "gc_grace_ms"}
)


class SpecError(LsmError, ValueError):
    """A simulation spec that cannot run; the message is one line naming the field."""


@dataclasses.dataclass(frozen=True)
class ValueSize:
    """How many bytes a value has: constant `mean`, uniform in [lo, hi], or normal(mean, stddev) >= 0."""

    distribution: str = "constant"
    mean: float = 100
    lo: int = 0
    hi: int = 0
    stddev: float = 0.0


@dataclasses.dataclass(frozen=True)
class Phase:
    """A stretch of simulated time with one operation rate, mix and TTL mix."""

    duration_ms: int
    ops_per_sec: float
    mix: tuple[tuple[str, float], ...]  # (op, fraction), fractions sum to 1
    ttl: tuple[tuple[float, int | None], ...]  # (fraction, ttl ms or None)
    key_distribution: str
    value_size: ValueSize


@dataclasses.dataclass(frozen=True)
class Policy:
    """A named set of DbOptions overrides, applied to every simulation of the spec."""

    name: str
    options: tuple[tuple[str, Any], ...]  # (DbOptions field, value); filters already imported


@dataclasses.dataclass(frozen=True)
class Spec:
    """A checked spec. `raw` is the dict it came from (summary.json repeats it)."""

    seed: int
    sample_every_ms: int
    compact_every_ms: int
    start_ms: int
    keys: int
    zipf_theta: float
    scan_rows: int
    phases: tuple[Phase, ...]
    policies: tuple[Policy, ...]
    raw: Mapping[str, Any]
    store: str = "local"  # "local", "memory", or an s3:// URL prefix (tools.simulate.costs)
    prices: Prices = Prices()

    @property
    def duration_ms(self) -> int:
        """Simulated ms from the start to the end of the last phase."""
        return sum(p.duration_ms for p in self.phases)

    @property
    def expected_ops(self) -> int:
        """Operations the phases ask for on average (the generator draws a Poisson number)."""
        return sum(round(p.duration_ms / 1000 * p.ops_per_sec) for p in self.phases)


def parse_duration(value: object, field: str, *, allow_zero: bool = True) -> int:
    """ms from an int (ms) or a string like "90s", "6h", "30d"."""
    if isinstance(value, bool):
        raise SpecError(f"{field}: expected a duration (ms or '90s', '6h', '30d'), got {value!r}")
    if isinstance(value, int):
        ms = value
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        ms = round(float(m.group(1)) * _UNITS[m.group(2)])
    else:
        raise SpecError(f"{field}: expected a duration (ms or '90s', '6h', '30d'), got {value!r}")
    if ms < 0 or (ms == 0 and not allow_zero):
        raise SpecError(f"{field}: must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    if ms > MAX_TIME_MS:
        raise SpecError(f"{field}: must be <= {MAX_TIME_MS} ms (about 8000 years), got {value!r}")
    return ms


def load_spec(path: str) -> dict[str, Any]:
    """Read a TOML spec file into its dict (SpecError on a TOML syntax error or a path that is not a
    regular file: a FIFO or a device would block the read, or never end)."""
    # O_NONBLOCK: opening a FIFO without a writer would block; the fstat below then refuses it
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SpecError(f"{path}: not a regular file")
    with os.fdopen(fd, "rb") as f:
        try:
            return tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise SpecError(f"{path}: not valid TOML: {e}") from None
        except RecursionError:
            raise SpecError(f"{path}: not valid TOML: nested too deeply") from None


def _check_keys(d: Mapping[str, Any], allowed: set[str] | frozenset[str], where: str) -> None:
    if not isinstance(d, Mapping):
        raise SpecError(f"{where}: expected a table, got {type(d).__name__}")
    for k in d:
        if k not in allowed:
            prefix = f"{where}." if where else ""
            raise SpecError(f"{prefix}{k}: unknown field (expected one of: {', '.join(sorted(allowed))})")


def _number(
    v: object,
    field: str,
    *,
    minimum: float = 0.0,
    integer: bool = False,
    strict: bool = False,
    maximum: float | None = None,
) -> Any:
    ok = isinstance(v, int) if integer else isinstance(v, int | float)
    if isinstance(v, bool) or not ok or (isinstance(v, float) and not math.isfinite(v)):
        raise SpecError(f"{field}: expected {'an integer' if integer else 'a number'}, got {v!r}")
    if v < minimum or (strict and v == minimum):
        raise SpecError(f"{field}: must be {'>' if strict else '>='} {minimum:g}, got {v!r}")
    if maximum is not None and v > maximum:
        limit = int(maximum) if float(maximum).is_integer() else maximum
        raise SpecError(f"{field}: must be <= {limit}, got {v!r}")
    return v


def _fractions(items: list[tuple[Any, object]], field: str) -> None:
    for name, f in items:
        _number(f, f"{field}.{name}")
    total = sum(f for _, f in items)  # type: ignore[misc]
    if not math.isclose(total, 1.0, abs_tol=1e-9):
        raise SpecError(f"{field}: fractions must sum to 1, they sum to {total:g}")


def _value_size(v: object, field: str) -> ValueSize:
    if isinstance(v, int) and not isinstance(v, bool):
        return ValueSize("constant", _value_bytes(v, field))
    if not isinstance(v, Mapping):
        raise SpecError(f"{field}: expected bytes (int) or a table with a distribution, got {v!r}")
    dist = v.get("distribution", "constant")
    if dist not in VALUE_DISTRIBUTIONS:
        raise SpecError(
            f"{field}.distribution: unknown distribution {dist!r} (one of {', '.join(VALUE_DISTRIBUTIONS)})"
        )
    if dist == "constant":
        _check_keys(v, {"distribution", "mean"}, field)
        return ValueSize("constant", _value_bytes(v.get("mean", 100), f"{field}.mean"))
    if dist == "uniform":
        _check_keys(v, {"distribution", "min", "max"}, field)
        lo = _number(v.get("min", 0), f"{field}.min", integer=True)
        hi = _value_bytes(v.get("max", 0), f"{field}.max")
        if hi < lo:
            raise SpecError(f"{field}.max: must be >= min ({lo}), got {hi}")
        return ValueSize("uniform", (lo + hi) / 2, lo, hi)
    _check_keys(v, {"distribution", "mean", "stddev"}, field)
    mean = _number(v.get("mean", 100), f"{field}.mean")
    stddev = _number(v.get("stddev", 0), f"{field}.stddev")
    if mean + 8 * stddev > MAX_VALUE_BYTES:  # the generator sizes its buffer for mean + 8 stddev
        raise SpecError(
            f"{field}: mean + 8 stddev must be <= {MAX_VALUE_BYTES} bytes (16 MiB), got {mean + 8 * stddev:g}"
        )
    return ValueSize("normal", mean, 0, 0, stddev)


def _value_bytes(v: object, field: str) -> int:
    return _number(v, field, integer=True, maximum=MAX_VALUE_BYTES)


def _phase(d: object, i: int, wl: Mapping[str, Any]) -> Phase:
    where = f"workload.phases[{i}]"
    _check_keys(d, {"duration", "ops_per_sec", "mix", "ttl", "key_distribution", "value_bytes"}, where)
    assert isinstance(d, Mapping)
    if "duration" not in d:
        raise SpecError(f"{where}.duration: missing")
    duration = parse_duration(d["duration"], f"{where}.duration", allow_zero=False)
    rate = _number(d.get("ops_per_sec", 0), f"{where}.ops_per_sec")
    mix_d = d.get("mix", {"put": 1.0})
    _check_keys(mix_d, set(OPS), f"{where}.mix")
    mix = [(op, mix_d[op]) for op in OPS if op in mix_d]
    if not mix:
        raise SpecError(f"{where}.mix: empty: give fractions of put, delete, get, scan")
    _fractions(mix, f"{where}.mix")
    ttl_l = d.get("ttl", wl.get("ttl", [{"fraction": 1.0, "ttl": "none"}]))
    if not isinstance(ttl_l, list) or not ttl_l:
        raise SpecError(f"{where}.ttl: expected a non-empty list of {{ fraction, ttl }} tables")
    ttl: list[tuple[float, int | None]] = []
    for j, t in enumerate(ttl_l):
        tw = f"{where}.ttl[{j}]"
        _check_keys(t, {"fraction", "ttl"}, tw)
        if "fraction" not in t or "ttl" not in t:
            raise SpecError(f"{tw}: needs both fraction and ttl")
        ms = None if t["ttl"] == "none" else parse_duration(t["ttl"], f"{tw}.ttl")
        ttl.append((t["fraction"], ms))
    _fractions([(f"[{j}].fraction", f) for j, (f, _) in enumerate(ttl)], f"{where}.ttl")
    dist = d.get("key_distribution", wl.get("key_distribution", "uniform"))
    if dist not in DISTRIBUTIONS:
        field = f"{where}.key_distribution" if "key_distribution" in d else "workload.key_distribution"
        raise SpecError(f"{field}: unknown distribution {dist!r} (one of {', '.join(DISTRIBUTIONS)})")
    vfield = f"{where}.value_bytes" if "value_bytes" in d else "workload.value_bytes"
    vs = _value_size(d.get("value_bytes", wl.get("value_bytes", 100)), vfield)
    return Phase(duration, float(rate), tuple((k, float(v)) for k, v in mix), tuple(ttl), dist, vs)


def import_path(path: object, field: str) -> Any:
    """The object named by "package.module:Name" or "package.module.Name" (SpecError if it does not import)."""
    if not isinstance(path, str) or not path:
        raise SpecError(f"{field}: expected an import path like 'pkg.module:Factory', got {path!r}")
    mod, sep, name = path.partition(":")
    if not sep:
        mod, _, name = path.rpartition(".")
    try:
        obj = getattr(importlib.import_module(mod), name)
    except (ImportError, AttributeError, ValueError) as e:
        raise SpecError(f"{field}: cannot import {path!r}: {e}") from None
    return obj() if isinstance(obj, type) else obj


def _policy(d: object, i: int) -> Policy:
    where = f"policy[{i}]"
    fields = {f.name: f for f in dataclasses.fields(DbOptions)}
    _check_keys(d, (set(fields) - _RESERVED) | {"name"}, where)
    assert isinstance(d, Mapping)
    name = d.get("name")
    if not isinstance(name, str) or not name:
        raise SpecError(f"{where}.name: missing or empty")
    opts: list[tuple[str, Any]] = []
    for k, v in d.items():
        if k == "name":
            continue
        field = f"{where}.{k}"
        if k in _DURATION_OPTIONS and v is not None:
            v = parse_duration(v, field)
        elif k == "compaction_filters":
            if not isinstance(v, list):
                raise SpecError(f"{field}: expected a list of import paths")
            v = tuple(import_path(p, f"{field}[{j}]") for j, p in enumerate(v))
        opts.append((k, v))
    try:  # DbOptions checks its own values: report them under the policy's field
        DbOptions(**dict(opts))
    except (ValueError, TypeError) as e:
        raise SpecError(f"{where}: {' '.join(str(e).split())}") from None
    return Policy(name, tuple(opts))


def _check_size(start: int, phases: tuple[Phase, ...], sample_every: int, compact_every: int) -> None:
    """Refuse a spec past the MAX_* limits of one simulation, naming the field and the figure."""
    duration = sum(p.duration_ms for p in phases)
    if start + duration > MAX_TIME_MS:
        raise SpecError(
            f"workload.phases: start + the phases' duration = {start + duration} ms, past the latest "
            f"simulated time {MAX_TIME_MS} (9999-12-31T23:59:59.999Z)"
        )
    ops = sum(p.duration_ms / 1000 * p.ops_per_sec for p in phases)  # floats: 1e300 stays a number
    if ops > MAX_OPS:
        raise SpecError(
            f"workload.phases: the phases ask for {ops:.3g} operations (duration x ops_per_sec), more than "
            f"the simulator's limit of {MAX_OPS}: lower ops_per_sec or shorten the phases"
        )
    if duration / sample_every > MAX_SAMPLES:
        raise SpecError(
            f"sample_every: {duration / sample_every:.3g} samples over the phases' duration, more than the "
            f"limit of {MAX_SAMPLES}: raise sample_every or shorten the phases"
        )
    if duration / compact_every > MAX_COMPACT_TICKS:
        raise SpecError(
            f"compact_every: {duration / compact_every:.3g} compaction ticks over the phases' duration, more "
            f"than the limit of {MAX_COMPACT_TICKS}: raise compact_every or shorten the phases"
        )


def parse_spec(raw: Mapping[str, Any]) -> Spec:
    """Check a whole spec dict; SpecError naming the first bad field. No simulation work is done."""
    _check_keys(
        raw,
        {"seed", "sample_every", "compact_every", "start", "store", "prices", "workload", "policy", "sweep"},
        "",
    )
    store = _store(raw.get("store", "local"))
    prices = _prices(raw.get("prices", {}))
    seed = _number(raw.get("seed", 0), "seed", integer=True)
    sample_every = parse_duration(raw.get("sample_every", "1h"), "sample_every", allow_zero=False)
    compact_every = parse_duration(raw.get("compact_every", "5m"), "compact_every", allow_zero=False)
    start = _number(raw.get("start", DEFAULT_START), "start", integer=True, maximum=MAX_TIME_MS)
    if "workload" not in raw:
        raise SpecError("workload: missing")
    wl = raw["workload"]
    _check_keys(
        wl,
        {"keys", "key_distribution", "zipf_theta", "value_bytes", "scan_rows", "ttl", "phases"},
        "workload",
    )
    keys = _number(wl.get("keys", 100_000), "workload.keys", minimum=1, integer=True, maximum=MAX_KEYS)
    theta = _number(wl.get("zipf_theta", 0.99), "workload.zipf_theta", strict=True, maximum=MAX_ZIPF_THETA)
    if theta == 1.0:
        raise SpecError("workload.zipf_theta: must not be 1 (the generator needs theta != 1)")
    scan_rows = _number(
        wl.get("scan_rows", 10), "workload.scan_rows", minimum=1, integer=True, maximum=MAX_KEYS
    )
    phases_l = wl.get("phases")
    if not isinstance(phases_l, list) or not phases_l:
        raise SpecError("workload.phases: expected a non-empty list of [[workload.phases]] tables")
    phases = tuple(_phase(p, i, wl) for i, p in enumerate(phases_l))
    _check_size(start, phases, sample_every, compact_every)
    pol_l = raw.get("policy")
    if not isinstance(pol_l, list) or not pol_l:
        raise SpecError("policy: expected a non-empty list of [[policy]] tables")
    policies = tuple(_policy(p, i) for i, p in enumerate(pol_l))
    names = [p.name for p in policies]
    for i, n in enumerate(names):
        if n in names[:i]:
            raise SpecError(f"policy[{i}].name: duplicate policy name {n!r}")
    return Spec(
        seed, sample_every, compact_every, start, keys, float(theta), scan_rows, phases, policies, raw,
        store, prices,
    )


def _store(v: object) -> str:
    """Where the simulations' databases live: "local" (a temporary directory), "memory" (an in-process
    object store) or an ``s3://bucket/prefix`` under which each simulation gets its own prefix."""
    if isinstance(v, str) and (v in STORES or (v.startswith("s3://") and len(v.rstrip("/")) > len("s3://"))):
        return v.rstrip("/")
    raise SpecError(f"store: expected 'local', 'memory' or an s3://bucket/prefix URL, got {v!r}")


def _prices(d: object) -> Prices:
    _check_keys(d, set(PRICE_FIELDS), "prices")
    assert isinstance(d, Mapping)
    return Prices(**{k: float(_number(v, f"prices.{k}")) for k, v in d.items()})


__all__ = [
    "Spec",
    "Phase",
    "Policy",
    "ValueSize",
    "SpecError",
    "parse_spec",
    "parse_duration",
    "load_spec",
    "import_path",
]
