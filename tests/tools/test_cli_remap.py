"""``lsm remap DB`` (the sources) and ``lsm remap DB NAME --limit/--partition`` (rows of the relation),
run as real subprocesses against a store ingested in-process (on a clock that moves per batch)."""

from __future__ import annotations

import time

import lsm
from lsm.sources import LogWriter, PartitionedLog
from tests.tools._cli import one_line_error, run_lsm


def _ingested(tmp_path):
    """A store with two sources: "ev" (3 bindings over partitions 0 and 1) and "late" (partition 2 only
    from its second binding on). Ingested in-process on a clock that moves 1 ms per batch: batches of
    one millisecond would merge into one binding."""
    log, db = tmp_path / "log", tmp_path / "db"
    with LogWriter(log) as w:
        for i in range(25):
            w.append(i % 2, b"k%04d" % i, b"v")
    late = tmp_path / "late"
    with LogWriter(late) as w:
        w.append(0, b"x", b"1")
    clock = lsm.ManualClock(time.time_ns() // 1_000_000)
    tick = lambda _s: clock.advance(1)  # noqa: E731
    with lsm.DB.open(db, lsm.DbOptions(clock=clock)) as d:
        assert d.ingest(PartitionedLog(log), name="ev", batch_records=10, progress=tick).batches == 3
        d.ingest(PartitionedLog(late), name="late", progress=tick)
        with LogWriter(late) as w:
            w.append(2, b"y", b"2")
            w.append(2, b"z", b"3")
        d.ingest(PartitionedLog(late), name="late", progress=tick)
    return db


def test_remap_without_a_name_lists_the_sources(tmp_path) -> None:
    db = _ingested(tmp_path)
    with lsm.DB.open(db, read_only=True) as d:
        ev, late = d.remap("ev"), d.remap("late")
    j = run_lsm("remap", db, "--json").json()
    assert [s["name"] for s in j["sources"]] == ["ev", "late"]
    first = j["sources"][0]
    assert first["bindings"] == 3 and first["frontier"] == {"0": 13, "1": 12} and first["since"] is None
    assert first["latest"]["seq"] == ev.latest.seq and first["latest"]["ts"] == ev.latest.ts
    assert j["sources"][1]["frontier"] == {"0": 1, "2": 2} and j["sources"][1]["bindings"] == len(late)
    r = run_lsm("remap", db)
    assert r.code == 0
    lines = r.out.splitlines()
    assert lines[0].split() == ["name", "bindings", "frontier", "since", "latest"]
    assert lines[1].split()[:5] == ["ev", "3", "0:13", "1:12", "-"]
    assert lines[2].split()[:4] == ["late", "2", "0:1", "2:2"]


def test_remap_listing_of_a_store_without_sources_and_bad_combinations(tmp_path) -> None:
    db = tmp_path / "db"
    with lsm.DB.open(db) as d:
        d.put(b"a", b"1")
    r = run_lsm("remap", db)
    assert r.code == 0 and r.out == f"no ingested sources in {db}\n"
    assert run_lsm("remap", db, "--json").json() == {"sources": []}
    for extra in (["--limit", "2"], ["--partition", "0"], ["--as-of", "0"], ["--offset", "0:1"]):
        assert "need a source NAME" in one_line_error(run_lsm("remap", db, *extra), 2)
    db2 = _ingested(tmp_path / "x")
    assert "not with --as-of or --offset" in one_line_error(
        run_lsm("remap", db2, "ev", "--limit", "1", "--offset", "0:1"), 2
    )
    one_line_error(run_lsm("remap", db2, "ev", "--limit", "0"), 2)
    one_line_error(run_lsm("remap", db2, "ev", "--partition", "-1"), 2)


def test_limit_and_partition_select_rows_newest_first(tmp_path) -> None:
    db = _ingested(tmp_path)
    full = run_lsm("remap", db, "ev", "--json").json()
    assert [(x["seq"], x["partition"], x["next_offset"]) for x in full["rows"]] == [
        (1, 0, 10),
        (2, 0, 10),
        (2, 1, 10),
        (3, 0, 13),
        (3, 1, 12),
    ]
    assert full["limit"] is None and full["partition"] is None
    two = run_lsm("remap", db, "ev", "--limit", "2", "--json").json()
    assert [(x["seq"], x["partition"]) for x in two["rows"]] == [(3, 0), (3, 1), (2, 0), (2, 1)]
    assert two["bindings"] == 3 and two["limit"] == 2
    p1 = run_lsm("remap", db, "ev", "--partition", "1", "--json").json()
    assert [(x["seq"], x["next_offset"]) for x in p1["rows"]] == [(2, 10), (3, 12)]
    newest = run_lsm("remap", db, "ev", "--partition", "0", "--limit", "1", "--json").json()
    assert [(x["seq"], x["partition"], x["next_offset"]) for x in newest["rows"]] == [(3, 0, 13)]
    late = run_lsm("remap", db, "late", "--partition", "2", "--limit", "5", "--json").json()
    assert [x["next_offset"] for x in late["rows"]] == [2]  # the first binding had no partition 2
    none = run_lsm("remap", db, "ev", "--partition", "7", "--json")
    assert none.code == 0 and none.json()["rows"] == []

    t = run_lsm("remap", db, "ev", "--limit", "1")
    assert t.code == 0
    lines = t.out.splitlines()
    assert "bindings  3 (1 shown: the newest, newest first)" in lines
    head = next(i for i, line in enumerate(lines) if line.startswith("time"))
    assert lines[head].split() == ["time", "ts_ms", "seq", "partition", "next_offset"]
    assert [line.split()[2:] for line in lines[head + 1 :]] == [["3", "0", "13"], ["3", "1", "12"]]
    t = run_lsm("remap", db, "ev", "--partition", "7")
    assert t.code == 0 and "bindings  3 (0 shown: those with partition 7)" in t.out and "time" not in t.out


def test_consumer_lag_against_the_log(tmp_path) -> None:
    """``--log DIR``: per partition the log's end, the frontier's next offset and the lag, and a total,
    as kafka-consumer-groups --describe; the log grows after the ingest, the lag with it."""
    db = _ingested(tmp_path)
    log = tmp_path / "log"
    with LogWriter(log) as w:  # 3 more in partition 1, and a partition the ingest never saw
        for _ in range(3):
            w.append(1, b"more", b"v")
        w.append(4, b"new", b"v")
    j = run_lsm("remap", db, "ev", "--log", log, "--json").json()
    assert [(x["partition"], x["log_end"], x["next_offset"], x["lag"]) for x in j["partitions"]] == [
        (0, 13, 13, 0),
        (1, 15, 12, 3),
        (4, 1, 0, 1),
    ]
    assert j["total"] == {"log_end": 29, "next_offset": 25, "lag": 4} and j["log"] == str(log)
    one = run_lsm("remap", db, "ev", "--log", log, "--partition", "1", "--json").json()
    assert one["total"]["lag"] == 3 and len(one["partitions"]) == 1
    t = run_lsm("remap", db, "ev", "--log", log)
    assert t.code == 0, t.err
    lines = t.out.splitlines()
    assert "lag       4 records not read yet" in lines
    head = lines.index(next(line for line in lines if line.startswith("partition")))
    assert lines[head].split() == ["partition", "log_end", "next_offset", "lag"]
    assert [line.split() for line in lines[head + 1 :]] == [
        ["0", "13", "13", "0"],
        ["1", "15", "12", "3"],
        ["4", "1", "0", "1"],
        ["total", "29", "25", "4"],
    ]
    # the wrong log: it ends before what the remap read
    other = tmp_path / "late"
    assert "partition 0 ends at offset 1, before the remap's next offset 13" in one_line_error(
        run_lsm("remap", db, "ev", "--log", other), 2
    )
    assert "not with --as-of, --offset or --limit" in one_line_error(
        run_lsm("remap", db, "ev", "--log", log, "--limit", "1"), 2
    )
    assert "--source says what --log is" in one_line_error(
        run_lsm("remap", db, "ev", "--source", "database-log"), 2
    )
