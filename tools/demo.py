"""`make demo`: the whole system on a throw-away database, step by step, with what each step shows.

Every inspection step runs the real `lsm` command (in-process, through `tools.commands.run`) and prints
the command line first, so a reader can repeat it by hand. The demo works in a new temporary directory and
removes it at the end; `--keep` (or `make demo KEEP=1`) leaves it for that, and `--dir DIR` works in DIR
and never removes it.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shlex
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator

import lsm
from formats.sst import write_sst
from lsm.seq_tracker import Round
from tools.commands import run as lsm_command

START = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MINUTE = 60_000


# Sections are numbered as they are printed, so a skipped one (--no-spark) or a new one leaves no gap
# and no repeat.
_section = itertools.count(1)


def heading(text: str) -> None:
    print(f"\n== {next(_section)}. {text}", flush=True)


def say(text: str) -> None:
    print(f"   {text}", flush=True)


def cli(*argv: str) -> None:
    print(f"   $ lsm {shlex.join(argv)}", flush=True)
    status = lsm_command(list(argv))
    sys.stdout.flush()
    if status != 0:
        raise SystemExit(f"demo: 'lsm {shlex.join(argv)}' exited with {status}")


# The demo's JVM logs at ERROR: its WARN start-up lines (no native Hadoop library, and so on) say
# nothing to a reader of the demo; errors still reach the terminal. Spark prints its "default log4j
# profile" banner only when no configuration is given, and its "Setting default log level" lines only
# when the level of the logger of the class PySpark starts (PythonGatewayServer, which Spark treats as
# an interactive shell) differs from the root's.
LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""
# Printed by the JVM itself, not log4j, when Spark 4 adds the vector incubator module: a notice, never an
# error, so the demo drops exactly this line from the JVM's stderr and passes every other line on.
JVM_NOTICES = ("WARNING: Using incubator modules:",)


def quiet_spark_session(master: str, workdir: str) -> object:
    """The demo's SparkSession for `master` (the one `compaction.spark.get_session` keeps, so the
    engine's Spark executor uses it), started with its JVM logging at ERROR (`LOG4J2`, written into
    `workdir`) and with the JVM's `JVM_NOTICES` lines dropped from stderr. The JVM keeps the filtered
    stderr for its life, so an error it logs later still shows."""
    from compaction.spark import get_session

    conf = os.path.join(workdir, "log4j2-demo.properties")
    with open(conf, "w") as f:
        f.write(LOG4J2)
    saved = os.environ.get("SPARK_SUBMIT_OPTS")
    # spark-submit's launcher adds SPARK_SUBMIT_OPTS to the driver JVM's options (in local mode the
    # driver is the whole of Spark)
    os.environ["SPARK_SUBMIT_OPTS"] = f"{saved or ''} -Dlog4j2.configurationFile=file:{conf}".strip()
    try:
        with _filtered_stderr(JVM_NOTICES):
            return get_session(master)
    finally:
        if saved is None:
            os.environ.pop("SPARK_SUBMIT_OPTS", None)
        else:
            os.environ["SPARK_SUBMIT_OPTS"] = saved


@contextlib.contextmanager
def _filtered_stderr(drop: tuple[str, ...]) -> Iterator[None]:
    """Meanwhile, file descriptor 2 is a pipe that a thread copies to the real stderr, leaving out the
    lines that start with one of `drop`. A process started meanwhile (the JVM) keeps writing into the
    pipe after the block, and the thread keeps copying for as long as it does."""
    sys.stderr.flush()
    real = os.dup(2)
    read_end, write_end = os.pipe()

    def copy() -> None:
        with os.fdopen(read_end, "rb") as src, os.fdopen(real, "wb", buffering=0) as dst:
            for line in src:
                if not line.decode(errors="replace").startswith(drop):
                    dst.write(line)

    threading.Thread(target=copy, name="demo-jvm-stderr", daemon=True).start()
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(real, 2)  # this process writes to the terminal again; the JVM keeps the pipe


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.demo", description=__doc__)
    ap.add_argument("--no-spark", action="store_true", help="skip the Spark compaction step")
    ap.add_argument("--dir", help="where to create the demo files, kept (default: a temp directory, removed)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory and say where it is")
    args = ap.parse_args(argv)
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
        return run_demo(args.dir, args.no_spark)
    root = tempfile.mkdtemp(prefix="lsm-demo-")
    try:
        return run_demo(root, args.no_spark)
    finally:
        if args.keep:
            print(f"\nkept the demo's files in {root}", flush=True)
        else:
            shutil.rmtree(root, ignore_errors=True)


def run_demo(root: str, no_spark: bool) -> int:
    global _section
    _section = itertools.count(1)
    t_start = time.perf_counter()

    heading("Row formats: the same rows as an SST in format version 0 and in version 1")
    rows = [
        (b"apple", 3, START, None, b"red"),
        (b"banana", 2, START, START + 60_000, b"yellow"),
        (b"cherry", 1, START, None, None),
    ]
    v0 = os.path.join(root, "v0.sst")
    v1 = os.path.join(root, "v1.sst")
    write_sst(v0, [(k, s, t, None, v) for k, s, t, _e, v in rows], format_version=0, creation_timestamp=START)
    write_sst(v1, rows, format_version=1, creation_timestamp=START)
    cli("sst", "scan", v0, "--all-versions")
    cli("sst", "scan", v1, "--all-versions")
    say("v0 rows carry no ts, TTL or seq (they report the file's max_seq); v1 rows carry all four.")

    heading("An embedded store on a manual clock: rows with and without TTL")
    clock = lsm.ManualClock(START)
    path = os.path.join(root, "db")
    opts = lsm.DbOptions(
        clock=clock,
        memtable_bytes=64 << 10,
        background_compaction=False,
        periodic_compaction_interval=60 * MINUTE,
        history_retention=60 * MINUTE,
        time_seq_min_time=0,
        spark_master="local[2]",
    )
    db = lsm.DB.open(path, opts)
    for i in range(2_000):
        db.put(b"user:%05d" % i, b"profile-%d" % i)
        db.put(b"session:%05d" % i, b"token-%d" % i, ttl=30 * MINUTE)
        if i % 100 == 99:
            clock.advance(MINUTE)
    db.write(lsm.WriteBatch().put(b"config", b"v1").delete(b"user:00000"))
    say(f"wrote 4,001 rows in 20 simulated minutes; db.seq = {db.seq}")
    say(f"get(session:00000) -> {db.get(b'session:00000')!r}; its entry: {db.get_entry(b'session:00000')}")

    heading("Time passes: expired rows vanish from reads before compaction removes them")
    clock.advance(15 * MINUTE)
    live = sum(1 for _ in db.scan(prefix=b"session:"))
    say(f"+15 min: {live} of 2,000 sessions are still visible (they expire 30 min after their write)")
    clock.advance(20 * MINUTE)
    live = sum(1 for _ in db.scan(prefix=b"session:"))
    hidden = sum(1 for _ in db.scan(prefix=b"session:", options=lsm.ReadOptions(include_expired=True)))
    say(f"+35 min: {live} visible; ReadOptions(include_expired=True) still finds {hidden} on disk")

    heading("Flush, then look at the LSM and the files")
    db.flush()
    say(
        f"write amplification of this handle so far: {db.write_amplification():.2f} (SST bytes per user byte)"
    )
    cli("manifest", "show", path)
    cli("du", path, "--expiry-at", str(clock.now()))

    heading("Sequence numbers and time: the seq tracker, the decaying time bins, as-of reads")
    t = START + 10 * MINUTE
    seq = db.seq_for_timestamp(t, Round.DOWN)
    say(f"db.seq_for_timestamp(2026-01-01T00:10:00Z, DOWN) -> {seq}")
    say(f"db.timestamp_for_seq({seq}, UP) -> {db.timestamp_for_seq(seq, Round.UP)} ms")
    with db.snapshot_at(t) as snap:
        n = sum(1 for _ in snap.scan(prefix=b"user:"))
    say(f"as of 00:10 the database held {n} users (history_retention = 1 h keeps that state readable)")
    db.put(b"user:99999", b"late arrival")
    db.close()
    cli("seq-to-ts", path, str(seq))
    cli("ts-to-seq", path, "2026-01-01T00:10:00Z")
    cli("time-seq", path)
    cli("changes", path, "--seq", str(seq + 1995))

    heading("Compaction (local): expired rows become tombstones, and the oldest run drops them")
    clock.advance(60 * MINUTE)
    say("an hour later every session expired before the history window (1 h) began")
    db = lsm.DB.open(path, opts)
    stats = db.compact(full=True, executor="local")
    ttl = stats.filters["ttl"].removed if "ttl" in stats.filters else 0
    say(
        f"local full compaction: {stats.rows_in} rows in -> {stats.rows_out} rows out; the TTL filter "
        f"expired {ttl}, the oldest run dropped {stats.tombstones_dropped} tombstones, {stats.seconds:.2f} s"
    )
    db.close()
    cli("du", path, "--expiry-at", str(clock.now()))

    if not no_spark:
        heading("The same compaction as an Apache Spark batch (local[2]): one task per key range")
        db = lsm.DB.open(path, opts)
        for i in range(2_000):
            db.put(b"user:%05d" % i, b"profile-v2-%d" % i, ttl=5 * MINUTE)
        db.flush()
        say("rewrote all 2,000 profiles with a 5-minute TTL, then let 70 minutes pass")
        clock.advance(70 * MINUTE)
        t0 = time.perf_counter()
        quiet_spark_session("local[2]", root)
        say(f"Spark session started in {time.perf_counter() - t0:.1f} s")
        stats = db.compact(full=True, executor="spark")
        say(
            f"spark full compaction: {stats.rows_in} rows in -> {stats.rows_out} out; "
            f"{stats.tombstones_dropped} tombstones dropped in the oldest run, {stats.seconds:.2f} s "
            f"(reading {stats.read_seconds:.2f} s, writing {stats.write_seconds:.2f} s)"
        )
        db.close()
        cli("manifest", "show", path)

    ingest_step(root)

    heading("Check every file of the database")
    cli("check", path)
    cli("sst", "verify", path)

    heading("lsm simulate: three simulated days of TTL traffic, size-tiered vs periodic compaction")
    sim_out = os.path.join(root, "simulate")
    spec = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "demo.toml")
    cli("simulate", spec, "--out", sim_out, "--no-progress")
    png = os.path.join(sim_out, "purge_lag.png")
    if os.path.exists(png):
        say(f"plots: {png} (and disk.png, amplification.png, comparison.png next to it)")
    say(f"demo finished in {time.perf_counter() - t_start:.1f} s")
    return 0


def ingest_step(root: str) -> None:
    """A producer appends to a partitioned log while `lsm ingest --follow` loads it; the ingest process is
    killed (SIGKILL) mid-way, a second run resumes from the durable frontier, and the remap is shown."""
    import signal
    import subprocess

    from lsm.sources import LogWriter, PartitionedLog

    heading("Reclocked ingest: exactly once from a partitioned log, through a kill -9")
    log_dir, db_path = os.path.join(root, "events"), os.path.join(root, "ingest-db")
    os.makedirs(log_dir, exist_ok=True)
    argv = [
        "ingest",
        db_path,
        log_dir,
        "--name",
        "events",
        "--batch-records",
        "300",
        "--history-retention",
        "3600000",
    ]
    say(f"$ lsm {shlex.join(argv)} --follow &     (a producer appends to 3 partitions meanwhile)")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tools.cli", *argv, "--follow"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    killed_at = None
    with LogWriter(log_dir) as w:
        for i in range(3_000):
            p = i % 3
            k = i // 3  # the record's index in its partition
            tx = f"order-{k // 4}" if p == 1 else None  # partition 1 writes orders of 4 records, atomically
            w.append(
                p, b"event:%d:%05d" % (p, k), b"payload-%d" % i, tx=tx, tx_end=tx is not None and k % 4 == 3
            )
            if i % 50 == 49:
                time.sleep(0.02)
            if i == 1_500:
                deadline = time.monotonic() + 30
                while killed_at is None and time.monotonic() < deadline:
                    try:
                        with lsm.DB.open(db_path, read_only=True) as d:
                            killed_at = d.remap("events").frontier
                    except lsm.LsmError:
                        time.sleep(0.05)
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                with lsm.DB.open(db_path, read_only=True) as d:
                    killed_at = d.remap("events").frontier
                say(
                    f"killed the ingest process (SIGKILL) at producer record {i}; its durable frontier: {killed_at}"
                )
    cli("remap", db_path, "events", "--offset", "0:0")
    say("the producer finished; a second run resumes from the durable frontier, nothing lost or doubled:")
    cli(*argv)
    cli("remap", db_path, "events", "--limit", "3")  # the newest bindings; the full relation is long
    with lsm.DB.open(db_path, read_only=True) as d:
        n = sum(1 for _ in d.scan())
        log = PartitionedLog(log_dir)
        ends = {p: log.end(p) for p in log.partitions()}
    say(f"the store holds {n} rows = the 3,000 records of the log; log ends {ends} = the remap's frontier")


if __name__ == "__main__":
    sys.exit(main())
