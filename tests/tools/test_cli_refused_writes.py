"""A write command refused for bad input fences nobody (issue 32 defect 3).

Opening a store writable fences the process writing to it. `lsm put DB "" v`, `lsm delete DB ""`, a TTL
whose expiry does not fit, a reserved key (and every other write command given input it refuses) used to
print the right one-line error only after that open, so the running writer's next write raised
FencedError. Each case here runs the real `lsm` beside a live writer: one line, a non-zero exit, the
writer's next write goes through, and nothing else was written.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

import lsm
from lsm.sources import LogWriter
from lsm.syskeys import SYSTEM_PREFIX
from tests._java import env_without_java
from tests.lsm.test_clock import FixedClock
from tests.tools._cli import T0, one_line_error, run_lsm

RESERVED = (SYSTEM_PREFIX + b"\x01").hex()


def _dump(path: Path, *records: bytes) -> Path:
    """A dump file of the record lines `records`, its trailer's count and SHA-256 made to match."""
    header = json.dumps({"format": "lsm-dump", "version": 1, "source": "x", "seq": 1, "dumped_at": 0})
    body = b"".join(line + b"\n" for line in (header.encode(), *records))
    trailer = {"end": "lsm-dump", "records": len(records), "sha256": hashlib.sha256(body).hexdigest()}
    path.write_bytes(body + json.dumps(trailer).encode() + b"\n")
    return path


def _inputs(tmp: Path) -> dict[str, str]:
    log = tmp / "log"
    with LogWriter(log) as w:
        w.append(0, b"from-log", b"v")
    rec = '{{"key": "{k}", "key_hex": true, "value": "00", "value_hex": true, "expire_ts": null}}'
    return {
        "log": str(log),
        "reserved_dump": str(_dump(tmp / "reserved.dump", rec.format(k=RESERVED).encode())),
        "long_key_dump": str(_dump(tmp / "long.dump", rec.format(k="61" * 65_536).encode())),
        "nested_dump": str(_dump(tmp / "nested.dump", b'{"key": ' + b"[" * 50_000 + b"]" * 50_000 + b"}")),
        "cut_dump": str(tmp / "cut.dump"),
        "long_key": "k" * 65_536,
    }


# (command line, text the error line holds); {db} is the store a writer holds open, {x} an input above
CASES = {
    "put empty key": (("put", "{db}", "", "v"), "key must be 1..65535 bytes long"),
    "put long key": (("put", "{db}", "{long_key}", "v"), "key must be 1..65535 bytes long, got 65536"),
    "put reserved key": (("put", "--hex", "{db}", RESERVED, "00"), "reserved key space"),
    "put ttl i64 max": (("put", "{db}", "k", "v", "--ttl", str(2**63 - 1)), "does not fit a signed 64-bit"),
    "put ttl 2**63": (("put", "{db}", "k", "v", "--ttl", str(2**63)), "does not fit a signed 64-bit"),
    "put negative ttl": (("put", "{db}", "k", "v", "--ttl", "-5"), "is negative"),
    "put bad hex": (("put", "--hex", "{db}", "zz", "00"), "is not hex"),
    "delete empty key": (("delete", "{db}", ""), "key must be 1..65535 bytes long"),
    "delete reserved key": (("delete", "--hex", "{db}", RESERVED), "reserved key space"),
    "delete long key": (("delete", "{db}", "{long_key}"), "key must be 1..65535 bytes long"),
    "load reserved key": (("load", "{db}", "{reserved_dump}"), "reserved key space"),
    "load long key": (("load", "{db}", "{long_key_dump}"), "key must be 1..65535 bytes"),
    "load nested": (("load", "{db}", "{nested_dump}"), "nested too deeply"),
    "load missing file": (("load", "{db}", "{cut_dump}"), "No such file or directory"),
    "repair-clock before the rows": (("repair-clock", "{db}", "--to", "0"), "committed within the skew guard"),
    "repair-clock before 1970": (("repair-clock", "{db}", "--to", "-1", "--force"), "before 1970"),
    "gc negative grace": (("gc", "{db}", "--grace-ms", "-1"), "is negative"),
    "compact no tasks": (("compact", "{db}", "--tasks", "0"), "below 1"),
    "ingest bad name": (("ingest", "{db}", "{log}", "--name", ""), "name"),
    "ingest missing log": (("ingest", "{db}", "{cut_dump}", "--name", "s"), "no such log directory"),
    "ingest tasks on a stream": (("ingest", "{db}", "{log}", "--name", "s", "--tasks", "2"), "--master and --tasks"),
    "ingest source times in bulk": (
        ("ingest", "{db}", "{log}", "--name", "s", "--engine", "local", "--times", "source"),
        "--times source applies to --engine stream only",
    ),
    "ingest source times without progress": (
        ("ingest", "{db}", "{db}", "--source", "database-log", "--name", "s", "--times", "source"),
        "needs a source that reports its progress",
    ),
    "ingest spark without java": (("ingest", "{db}", "{log}", "--name", "s", "--engine", "spark"), "Java"),
    "compact spark without java": (("compact", "{db}", "--engine", "spark"), "Java"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_write_fences_nobody(tmp_path: Path, case: str) -> None:
    args, message = CASES[case]
    db = tmp_path / "db"
    values = {"db": str(db), **_inputs(tmp_path)}
    env = env_without_java(tmp_path) if "without java" in case else None
    writer = lsm.DB.open(db, lsm.DbOptions(clock=lsm.ManualClock(T0), background_compaction=False))
    try:
        writer.put(b"a", b"1")
        writer.flush()
        line = one_line_error(run_lsm(*(a.format(**values) for a in args), env=env), 2)
        assert message in line, line
        writer.put(b"b", b"2")  # still the owner: no FencedError
    finally:
        writer.close()
    with lsm.DB.open(db, read_only=True) as ro:
        assert list(ro.scan()) == [(b"a", b"1"), (b"b", b"2")] and ro.seq == 2  # nothing else written
        assert ro.sources() == []


def test_a_write_this_hosts_clock_cannot_stamp_fences_nobody(tmp_path: Path) -> None:
    """A store whose watermark lies after this host's clock (its writer's clock is an hour ahead): every
    write from here would raise 'clock went back' once the open had fenced the writer; it is refused
    before, from the manifest."""
    db = tmp_path / "db"
    values = {"db": str(db), **_inputs(tmp_path)}
    good = str(_dump(tmp_path / "good.dump", b'{"key": "k", "value": "v", "expire_ts": null}'))
    ahead = FixedClock(time.time_ns() // 1_000_000 + 3_600_000)
    writer = lsm.DB.open(db, lsm.DbOptions(clock=ahead, background_compaction=False))
    try:
        writer.put(b"a", b"1")
        writer.flush()  # the watermark, an hour ahead, is in the manifest
        for args in (("put", db, "k", "v"), ("delete", db, "a"), ("load", db, good),
                     ("ingest", db, values["log"], "--name", "s")):
            line = one_line_error(run_lsm(*args), 2)
            assert "lies after this host's clock" in line and "nothing was written" in line, line
            ahead.ms += 1
            writer.put(b"b", b"2")
    finally:
        writer.close()
    with lsm.DB.open(db, read_only=True) as ro:
        assert dict(ro.scan()) == {b"a": b"1", b"b": b"2"} and ro.sources() == []


def test_an_empty_dump_opens_nothing_of_an_existing_store(tmp_path: Path) -> None:
    db = tmp_path / "db"
    empty = str(_dump(tmp_path / "empty.dump"))
    writer = lsm.DB.open(db, lsm.DbOptions(clock=lsm.ManualClock(T0), background_compaction=False))
    try:
        writer.put(b"a", b"1")
        r = run_lsm("load", db, empty)
        assert r.code == 0 and "nothing was written" in r.out
        writer.put(b"b", b"2")  # a load with nothing to commit did not open the store writable
    finally:
        writer.close()
    fresh = tmp_path / "fresh"
    assert run_lsm("load", fresh, empty).code == 2 and not fresh.exists()
    assert run_lsm("load", "--create", fresh, empty).code == 0
    with lsm.DB.open(fresh, read_only=True) as ro:
        assert list(ro.scan()) == []
