"""``lsm log show --follow``: a real subprocess tails a log while this test appends to it with `LogWriter`,
then is stopped by a real SIGINT (and SIGTERM)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time

from lsm.sources import LogWriter
from tests.tools._cli import LSM_CMD, ROOT, one_line_error, run_lsm


class Follower:
    """`lsm log show DIR --follow ARGS` running, its stdout lines readable with a timeout."""

    def __init__(self, *args: object) -> None:
        env = {k: v for k, v in os.environ.items() if k != "LSM_TRACEBACK"}
        env["PYTHONPATH"] = str(ROOT)
        self.p = subprocess.Popen(
            [*LSM_CMD, "log", "show", *map(str, args), "--follow", "--interval", "20"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))

    def read(self, n: int, timeout: float = 60.0) -> list[str]:
        """The next `n` lines of its stdout (fails if they do not come within `timeout` seconds)."""
        deadline = time.monotonic() + timeout
        out = []
        while len(out) < n:
            try:
                out.append(self.lines.get(timeout=max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                raise AssertionError(
                    f"got {out} of {n} lines; still running: {self.p.poll() is None}"
                ) from None
        return out

    def stop(self, sig: int = signal.SIGINT) -> tuple[int, str]:
        """Send `sig`; return (exit status, stderr)."""
        self.p.send_signal(sig)
        try:
            code = self.p.wait(timeout=60)
        finally:
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait()
        return code, self.p.stderr.read()


def test_follow_prints_records_as_they_are_appended_until_sigint(tmp_path) -> None:
    log = tmp_path / "log"
    with LogWriter(log) as w:
        w.append(0, b"a", b"1")
    f = Follower(log)
    try:
        assert f.read(2) == [
            "partition\toffset\top\tkey\tvalue\tttl\tevent_ts\ttx",
            "0\t0\tput\ta\t1\t-\t-\t-",
        ]
        with LogWriter(log) as w:
            w.append(0, b"b", None)
        assert f.read(1) == ["0\t1\tdelete\tb\t-\t-\t-\t-"]
        with LogWriter(log) as w:  # a partition that did not exist when the follow started
            w.append(5, b"c", b"3", ttl=60_000, tx="t1", tx_end=True)
            w.append(0, b"d", b"4")
        got = f.read(2)
        assert sorted(got) == ["0\t2\tput\td\t4\t-\t-\t-", "5\t0\tput\tc\t3\t60000\t-\tt1 (end)"]
        with open(log / "0.log", "ab") as raw:  # a producer mid-append: a torn record is not shown
            raw.write(b"\x00\x00\x00\x09")
        time.sleep(0.3)
        assert f.lines.empty()
        assert f.p.poll() is None  # still following
    finally:
        code, err = f.stop(signal.SIGINT)
    assert code == 0, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert err.splitlines() == [f"followed {log}: 4 records shown"]


def test_follow_json_lines_from_an_offset_of_one_partition_until_sigterm(tmp_path) -> None:
    log = tmp_path / "log"
    log.mkdir()  # empty: the partition appears after the follow started
    f = Follower(log, "--partition", "1", "--from", "1", "--json")
    try:
        with LogWriter(log) as w:
            for i in range(3):
                w.append(1, b"k%d" % i, b"v%d" % i)
            w.append(0, b"other", b"x")  # another partition: not shown
        got = [json.loads(line) for line in f.read(2)]
        assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in got] == [
            (1, 1, "k1", "v1"),
            (1, 2, "k2", "v2"),
        ]
        assert got[0] == {
            "partition": 1,
            "offset": 1,
            "key": "k1",
            "value": "v1",
            "ttl": None,
            "event_ts": None,
            "tx": None,
            "tx_end": False,
        }
    finally:
        code, err = f.stop(signal.SIGTERM)
    assert code == 0 and err.splitlines() == [f"followed {log}: 2 records shown"]


def test_follow_stops_with_an_error_when_a_partition_is_cut_or_turns_into_a_fifo(tmp_path) -> None:
    log = tmp_path / "log"
    with LogWriter(log) as w:
        w.append(0, b"a", b"1")
        w.append(0, b"b", b"2")
    f = Follower(log)
    try:
        assert len(f.read(3)) == 3
        with LogWriter(log / "new") as w:  # the file replaced by a shorter one
            w.append(0, b"a", b"1")
        os.replace(log / "new" / "0.log", log / "0.log")
        code = f.p.wait(timeout=60)
    finally:
        if f.p.poll() is None:
            f.p.kill()
            f.p.wait()
    err = f.p.stderr.read()
    assert code == 2 and err.splitlines() == [
        f"lsm: error: {log}: partition 0 now ends at offset 1, but offsets up to 1 were shown: the file was "
        "truncated or replaced"
    ]
    os.mkfifo(log / "7.log")
    assert "7.log: a FIFO" in one_line_error(run_lsm("log", "show", log, "--follow"), 2)


def test_follow_bad_arguments(tmp_path) -> None:
    log = tmp_path / "log"
    log.mkdir()
    assert "--limit does not apply to --follow" in one_line_error(
        run_lsm("log", "show", log, "--follow", "--limit", "3"), 2
    )
    assert "above 3600000" in one_line_error(
        run_lsm("log", "show", log, "--follow", "--interval", "1000000000"), 2
    )
    one_line_error(run_lsm("log", "show", tmp_path / "none", "--follow"), 2)
