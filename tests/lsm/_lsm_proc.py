"""A database handle in a child process, for tests that need real process kills or a second process.

Not a test module (no ``test_`` prefix); tests run it as ``python _lsm_proc.py MODE ...``.

``writer PATH KEYS_PER_BATCH MEMTABLE_BYTES``
    Commits WriteBatches with WriteOptions(sync=True) forever. Batch ``i`` puts ``KEYS_PER_BATCH``
    keys ``b%08d-%02d`` (batch id, key index) with value ``"%d:" % i`` plus padding, and sets the key
    ``last`` to ``i``. Batch ids continue after the ``last`` already stored. After each acknowledged
    commit it prints ``A <i>`` (``A <i> F`` when a memtable flush is under way) and flushes stdout.

``writer PATH KEYS_PER_BATCH MEMTABLE_BYTES group``
    The same batches with WriteOptions(sync=False) (group-committed on an object store), every 100th
    with sync=True: its line is ``A <i> D`` (durable, and with it every batch before it). About 1000
    batches a second (a millisecond's sleep after each), so a kill finds a few group commits' worth.

``racer PATH MEMTABLE_BYTES [TAG [LIMIT]]``
    Puts keys ``<TAG>%07d`` (TAG defaults to ``r``) with WriteOptions(sync=True) as fast as it can,
    printing ``A <key>`` after each acknowledged put and ``F <key>`` after each FencedError; exits after
    the third FencedError, or after LIMIT acknowledged puts (without closing the database either way).

``forks``
    For each stdin line (the arguments of ``writer`` or ``racer``, space-separated) forks a child that
    prints ``PID <its pid>`` and then runs that mode: a process of its own, which a test can SIGKILL,
    and which exits as that mode does. Once the child is gone, prints ``END <exit status>`` (negative:
    the signal). The Python start-up and ``import lsm`` are paid once for all the children.

``serve PATH CLOCK_START``
    Opens PATH on a ManualClock(CLOCK_START) and answers one command per stdin line, one reply line
    each: ``put K V`` (sync), ``get K``, ``flush``, ``clock MS`` (set), ``close``. Replies are
    ``ok [value]`` or ``err <ExceptionName> <message>``. Prints ``ready`` once open.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import lsm

HERE = os.path.abspath(__file__)


def spawn(*args: object, text: bool = True) -> subprocess.Popen:
    """Start this script in a child; text=True: line-buffered text pipes, else unbuffered bytes."""
    return subprocess.Popen(
        [sys.executable, HERE, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=text,
        bufsize=1 if text else 0,
    )


class Served:
    """The parent's side of ``serve``: ``call("put k v")`` returns the reply line."""

    def __init__(self, path: object, clock_start: int) -> None:
        self.proc = spawn("serve", path, clock_start)
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.kill()
            raise RuntimeError(f"child did not open the database: {line!r} {self.proc.stderr.read()}")

    def call(self, command: str) -> str:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def kill(self) -> None:
        """SIGKILL: the child gets no chance to close or flush anything."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            f.close()


def writer(path: str, keys_per_batch: int, memtable_bytes: int, mode: str = "sync") -> None:
    opts = lsm.DbOptions(memtable_bytes=memtable_bytes, background_compaction=False)
    db = lsm.DB.open(path, opts)
    last = db.get(b"last")
    i = int(last) + 1 if last is not None else 1
    pad = b"x" * 40
    sync = lsm.WriteOptions(sync=True)
    nosync = lsm.WriteOptions(sync=False)
    out = sys.stdout
    while True:
        b = lsm.WriteBatch()
        value = b"%d:" % i + pad
        for j in range(keys_per_batch):
            b.put(b"%08d-%02d" % (i, j), value)
        b.put(b"last", b"%d" % i)
        if mode == "group":
            durable = i % 100 == 0
            db.write(b, sync if durable else nosync)
            out.write(f"A {i} D\n" if durable else f"A {i}\n")
            time.sleep(0.001)
        else:
            db.write(b, sync)
            flushing = db.lsm_shape()["immutable_memtables"] > 0
            out.write(f"A {i} F\n" if flushing else f"A {i}\n")
        out.flush()
        i += 1


def racer(path: str, memtable_bytes: int, tag: str = "r", limit: int | None = None) -> None:
    db = lsm.DB.open(path, lsm.DbOptions(memtable_bytes=memtable_bytes, background_compaction=False))
    sync = lsm.WriteOptions(sync=True)
    out = sys.stdout
    fenced = 0
    acked = 0
    i = 0
    while fenced < 3 and (limit is None or acked < limit):
        key = tag.encode() + b"%07d" % i
        try:
            db.put(key, b"x" * 20, options=sync)
            out.write(f"A {key.decode()}\n")
            acked += 1
        except lsm.FencedError:
            out.write(f"F {key.decode()}\n")
            fenced += 1
        out.flush()
        i += 1
    os._exit(0)  # like a crash: no close


def forks() -> None:
    # this process opens no database and starts no thread of its own (numpy's BLAS pool, started at
    # import, survives a fork as it does under multiprocessing's default start method)
    for line in sys.stdin:
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            try:
                print(f"PID {os.getpid()}", flush=True)
                run(line.split())
            finally:
                os._exit(1)  # never back into the parent's loop (writer and racer end in os._exit)
        _, status = os.waitpid(pid, 0)
        print(f"END {os.waitstatus_to_exitcode(status)}", flush=True)


class Forks:
    """The parent's side of ``forks`` (binary pipes): `start(*args)` runs one mode in a forked child and
    returns its pid; `rest()` reads what the child printed after the last read, up to its END line."""

    def __init__(self) -> None:
        self.proc = spawn("forks", text=False)
        self.stdout = self.proc.stdout
        self.err: str | None = None

    def start(self, *args: object) -> int:
        self.proc.stdin.write((" ".join(map(str, args)) + "\n").encode())
        line = self.stdout.readline()  # unbuffered: reads this line and no further
        if not line.startswith(b"PID "):
            raise RuntimeError(f"no child started: {line!r} {self.close()}")
        return int(line.split()[1])

    def readline(self) -> str:
        """One line the child printed (without its newline)."""
        return self.stdout.readline().decode().rstrip("\n")

    def rest(self, out: bytes = b"") -> tuple[list[bytes], int]:
        """(the lines the child printed after `out` (a partial line already read, its start), up to its
        END line; its exit status)."""
        while True:
            *lines, _partial = out.split(b"\n")
            for i, line in enumerate(lines):
                if line.startswith(b"END "):
                    return lines[:i], int(line.split()[1])
            chunk = os.read(self.stdout.fileno(), 65536)
            if not chunk:
                raise RuntimeError(f"the forks process exited: {self.close()}")
            out += chunk

    def close(self) -> str:
        """End the forks process (again: a no-op); what it and its children wrote on stderr."""
        if self.err is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            finally:
                if self.proc.poll() is None:
                    self.proc.kill()
                    self.proc.wait()
            self.err = self.proc.stderr.read().decode(errors="replace")
            self.stdout.close()
            self.proc.stderr.close()
        return self.err


def run(argv: list[str]) -> None:
    """Run the mode ``argv[0]`` with its arguments (see the module docstring)."""
    mode = argv[0]
    if mode == "writer":
        writer(argv[1], int(argv[2]), int(argv[3]), *argv[4:5])
    elif mode == "racer":
        racer(argv[1], int(argv[2]), *argv[3:4], *(int(n) for n in argv[4:5]))
    elif mode == "forks":
        forks()
    elif mode == "serve":
        serve(argv[1], int(argv[2]))
    else:
        raise SystemExit(f"unknown mode {mode}")


def serve(path: str, clock_start: int) -> None:
    clock = lsm.ManualClock(clock_start)
    db = lsm.DB.open(path, lsm.DbOptions(clock=clock, background_compaction=False))
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, *args = line.split()
        try:
            if cmd == "put":
                db.put(args[0].encode(), args[1].encode(), options=lsm.WriteOptions(sync=True))
                reply = "ok"
            elif cmd == "get":
                v = db.get(args[0].encode())
                reply = "ok " + (v.decode() if v is not None else "<none>")
            elif cmd == "flush":
                db.flush()
                reply = "ok"
            elif cmd == "clock":
                clock.set(int(args[0]))
                reply = "ok"
            elif cmd == "close":
                db.close()
                reply = "ok"
            else:
                reply = f"err ValueError unknown command {cmd}"
        except Exception as e:  # noqa: BLE001 - reported to the parent
            reply = f"err {type(e).__name__} {e}"
        print(reply, flush=True)


if __name__ == "__main__":
    run(sys.argv[1:])
