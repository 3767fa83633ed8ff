"""``lsm log write|show`` (tools/cmd_log.py), run as a real subprocess with stdin."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from lsm.sources import LogWriter, PartitionedLog, SourceRecord
from lsm.sources.partitioned_log import partition_path
from tests.tools._cli import LSM_CMD, ROOT, Result, lsm_env, one_line_error, run_lsm


def lsm_in(stdin: str, *args: object) -> Result:
    """`run_lsm` with `stdin` fed to the command."""
    env = lsm_env()
    p = subprocess.run(
        [*LSM_CMD, *map(str, args)],
        input=stdin,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in p.stderr, p.stderr
    return Result(p.returncode, p.stdout, p.stderr)


LINES = [
    {"key": "a", "value": "1"},
    {"partition": 2, "key": "ff00", "key_hex": True, "value": None, "tx": "t1"},
    {"partition": 2, "key": "b", "value": "00ff", "value_hex": True, "tx": "t1", "tx_end": True, "ttl": 500},
    {"key": "c", "value": "3", "event_ts": "2024-01-01T00:00:00Z"},
    {"key": "d", "value": "4", "event_ts": 1_700_000_000_000, "tx": 7},
]


def jsonl(objs: list[dict]) -> str:
    return "".join(json.dumps(o) + "\n" for o in objs)


def test_write_then_show(tmp_path: Path) -> None:
    d = tmp_path / "log"
    r = lsm_in(jsonl(LINES) + "\n", "log", "write", d)  # a blank line is skipped
    assert r.code == 0, r.err
    assert r.out == f"wrote 5 records to {d} (partition 0: offsets 0..2; partition 2: offsets 0..1)\n"
    log = PartitionedLog(d)
    assert list(log.read(0, 0)) == [
        SourceRecord(0, 0, b"a", b"1"),
        SourceRecord(0, 1, b"c", b"3", event_ts=1_704_067_200_000),
        SourceRecord(0, 2, b"d", b"4", event_ts=1_700_000_000_000, tx=7),
    ]
    assert list(log.read(2, 0)) == [
        SourceRecord(2, 0, b"\xff\x00", None, tx="t1"),
        SourceRecord(2, 1, b"b", b"\x00\xff", ttl=500, tx="t1", tx_end=True),
    ]
    show = run_lsm("log", "show", d)
    assert show.code == 0, show.err
    lines = show.out.splitlines()
    assert lines[0].split() == ["partition", "offset", "op", "key", "value", "ttl", "event_ts", "tx"]
    assert lines[1].split() == ["0", "0", "put", "a", "1", "-", "-", "-"]
    assert lines[2].split() == ["0", "1", "put", "c", "3", "-", "2024-01-01T00:00:00.000Z", "-"]
    assert lines[4].split() == ["2", "0", "delete", "0xff00", "-", "-", "-", "t1"]
    assert lines[5].split() == ["2", "1", "put", "b", "0x00ff", "500", "-", "t1", "(end)"]
    assert lines[6] == "2 partitions, 5 records (0: 3, 2: 2)"
    # a key and a value that are not UTF-8: JSON needs an encoding that writes any bytes
    j = run_lsm("log", "show", d, "--json", "--key-encoding", "hex", "--value-encoding", "base64").json()
    assert [(o["partition"], o["offset"]) for o in j] == [(0, 0), (0, 1), (0, 2), (2, 0), (2, 1)]
    assert j[3] == {
        "partition": 2,
        "offset": 0,
        "key": "ff00",
        "key_hex": True,
        "value": None,
        "ttl": None,
        "event_ts": None,
        "tx": "t1",
        "tx_end": False,
    }


def test_show_json_writes_back_to_an_equal_log(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert lsm_in(jsonl(LINES), "log", "write", a).code == 0
    objs = run_lsm("log", "show", a, "--json", "--hex").json()
    r = lsm_in(jsonl(objs), "log", "write", b, "--json")
    assert r.code == 0, r.err
    assert r.json() == {
        "dir": str(b),
        "records": 5,
        "partitions": {"0": {"first": 0, "next": 3}, "2": {"first": 0, "next": 2}},
    }
    la, lb = PartitionedLog(a), PartitionedLog(b)
    assert lb.partitions() == la.partitions() == [0, 2]
    for p in (0, 2):
        assert list(lb.read(p, 0)) == list(la.read(p, 0))
    # the offsets in the lines are checked: writing the same lines again would misplace them
    again = lsm_in(jsonl(objs), "log", "write", b)
    assert "says offset 0, but the next offset of partition 0 is 3" in one_line_error(again, 2)
    assert PartitionedLog(b).end(0) == 3


def test_show_options_and_a_torn_tail(tmp_path: Path) -> None:
    d = tmp_path / "log"
    with LogWriter(d) as w:
        for i in range(6):
            w.append(i % 2, b"k%d" % i, b"v%d" % i)
    with open(partition_path(str(d), 1), "ab") as f:
        f.write(b"\x00\x00\x00\x09")  # the start of a record a producer is still appending
    r = run_lsm("log", "show", d, "--partition", "1", "--from", "1", "--limit", "1")
    assert r.code == 0, r.err
    out = r.out.splitlines()
    assert out[1].split() == ["1", "1", "put", "k3", "v3", "-", "-", "-"] and len(out) == 4
    # the count describes what is shown, and the partition's total beside it
    assert out[2] == "1 partition, 1 of 3 records shown (1: 1 of 3)"
    assert out[3].startswith("partition 1: torn tail of 4 bytes after offset 2")
    assert [o["key"] for o in run_lsm("log", "show", d, "--json", "--from", "2").json()] == ["k4", "k5"]
    both = run_lsm("log", "show", d, "--from", "1", "--limit", "1").out.splitlines()
    assert len(both) == 1 + 2 + 2 and both[3] == "2 partitions, 2 of 6 records shown (0: 1 of 3, 1: 1 of 3)"


def test_bad_lines_stop_with_one_line_and_keep_what_was_written(tmp_path: Path) -> None:
    d = tmp_path / "log"
    good = json.dumps({"key": "a", "value": "1"}) + "\n"
    cases = [
        ("{not json", "stdin line 2: not JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"key": "a"}', '"value" is required'),
        ('{"key": "a", "value": "1", "colour": "red"}', "unknown fields ['colour']"),
        ('{"key": "zz", "key_hex": true, "value": "1"}', '"key" is not hex'),
        ('{"key": "", "value": "1"}', "key must be 1..65535 bytes"),
        ('{"key": "a", "value": 5}', '"value" must be a string'),
        ('{"partition": -1, "key": "a", "value": "1"}', '"partition" must be an integer >= 0'),
        ('{"key": "a", "value": "1", "tx_end": true}', "tx_end needs a tx"),
        ('{"key": "a", "value": "1", "tx": 1, "tx_end": {"x": 1}}', "keyed by partition ids"),
        ('{"key": "a", "value": "1", "tx": 1, "tx_end": {"1": 1}}', "must count at least 1"),
        ('{"key": "a", "value": "1", "tx": 1, "tx_end": 3}', '"tx_end" must be true, false or an object'),
        ('{"key": "a", "value": "1", "ttl": -5}', "ttl must be >= 0"),
        ('{"key": "a", "value": "1", "event_ts": "yesterday"}', "cannot read 'yesterday' as a time"),
    ]
    expected = 0
    for line, message in cases:
        r = lsm_in(good + line + "\n" + good, "log", "write", d)
        err = one_line_error(r, 2)
        assert message in err and "stdin line 2" in err and "the 1 record before it was written" in err, err
        expected += 1  # the good line before the bad one, and nothing after it
        assert PartitionedLog(d).end(0) == expected


def test_a_transaction_across_partitions_is_written_and_shown(tmp_path: Path) -> None:
    d = tmp_path / "log"
    lines = [
        {"partition": 0, "key": "a", "value": "1", "tx": "T"},
        {"partition": 1, "key": "b", "value": "2", "tx": "T", "tx_end": {"0": 1, "1": 1}},
    ]
    r = lsm_in("".join(json.dumps(x) + "\n" for x in lines), "log", "write", d)
    assert r.code == 0, r.err
    assert list(PartitionedLog(d).read(1, 0)) == [SourceRecord(1, 0, b"b", b"2", tx="T", tx_end={0: 1, 1: 1})]
    shown = run_lsm("log", "show", d, "--json").json()
    assert [x["tx_end"] for x in shown] == [False, {"0": 1, "1": 1}]
    again = tmp_path / "again"  # what show prints writes back to an equal log
    assert lsm_in("".join(json.dumps(x) + "\n" for x in shown), "log", "write", again).code == 0
    assert list(PartitionedLog(again).read(1, 0)) == list(PartitionedLog(d).read(1, 0))


def test_missing_directory_and_usage_errors(tmp_path: Path) -> None:
    assert "not a directory" in one_line_error(run_lsm("log", "show", tmp_path / "nope"), 2)
    assert "--partition" in one_line_error(run_lsm("log", "show", tmp_path, "--partition", "-1"), 2)
    one_line_error(run_lsm("log"), 2)
    r = run_lsm("log", "show", tmp_path)  # an empty directory is an empty log
    assert r.code == 0 and r.out == "0 partitions, 0 records\n"


def test_write_appends_each_line_as_it_is_read(tmp_path: Path) -> None:
    """A producer streaming into `lsm log write`: each record is readable before stdin closes."""
    import time

    d = tmp_path / "log"
    env = lsm_env()
    p = subprocess.Popen(
        [*LSM_CMD, "log", "write", str(d)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        for i in range(3):
            p.stdin.write(json.dumps({"key": f"k{i}", "value": str(i)}) + "\n")
            p.stdin.flush()
            deadline = time.monotonic() + 30
            while not (d.is_dir() and PartitionedLog(d).end(0) == i + 1):
                assert time.monotonic() < deadline, f"record {i} never became readable"
                time.sleep(0.02)
        p.stdin.close()
        assert p.wait(30) == 0
        assert "wrote 3 records" in p.stdout.read()
    finally:
        p.kill()
        p.wait()


def test_show_of_a_damaged_log_is_one_error_line(tmp_path: Path) -> None:
    d = tmp_path / "log"
    with LogWriter(d) as w:
        w.append(0, b"a", b"1")
        w.append(0, b"b", b"2")
    path = partition_path(str(d), 0)
    data = bytearray(Path(path).read_bytes())
    data[6 + 3] ^= 0x40  # the first record's length field
    Path(path).write_bytes(bytes(data))
    err = one_line_error(run_lsm("log", "show", d), 2)
    assert f"{path}: corruption at offset 6" in err
