"""A compaction worker process: runs `compaction.merge.run_job` (or a job's own `run()`, as a memtable
flush's `compaction.flush.FlushJob`) off the caller's GIL.

Protocol over the worker's stdin/stdout, one request at a time::

    request  = | u64 length | pickle((CompactionJob, FaultPlan or None)) |
    response = | u64 length | pickle((("ok", MergeResult) or ("error", exception)), FaultPlan or None) |

The fault plan is the parent's `formats.fileio` plan (tests only): the worker arms it for the job and
sends it back with its counters advanced, so the Nth-call count spans both processes. A worker whose
parent is gone (its pipe closed) exits quietly, without a BrokenPipeError traceback on a shared stderr.

The worker is started as ``python -m compaction.worker`` (never with multiprocessing's spawn, which
would re-run the embedding program's unguarded main module), with the parent's ``sys.path``, so filter
factories pickled by reference import in the worker as they do in the parent.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import threading
from typing import Any, BinaryIO

LEN = struct.Struct(">Q")


def _read_exact(f: BinaryIO, n: int) -> bytes | None:
    data = f.read(n)
    if data is None or len(data) < n:
        return None
    return data


def _send(f: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(LEN.pack(len(data)) + data)
    f.flush()


def _recv(f: BinaryIO) -> Any:
    head = _read_exact(f, LEN.size)
    if head is None:
        raise EOFError
    body = _read_exact(f, LEN.unpack(head)[0])
    if body is None:
        raise EOFError
    return pickle.loads(body)


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """The worker process's loop: read a job from `inp`, run it, write ("ok", result) or
    ("error", exception) to `out`, until `inp` is closed."""
    import storage
    from compaction.merge import run_job
    from formats import fileio

    while True:
        try:
            job, plan, stores = _recv(inp)
        except (EOFError, OSError):
            return
        storage.install(stores)  # the parent's object stores, with their options (credentials stay in pipes)
        fileio.install(plan)
        try:
            # a job with its own run() (compaction.flush.FlushJob) runs that; a CompactionJob, the merge
            reply: tuple = ("ok", job.run() if hasattr(job, "run") else run_job(job))
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the caller
            reply = ("error", e)
        finally:
            plan = fileio.current()
            fileio.clear()
        try:
            try:
                _send(out, (reply, plan))
            except (pickle.PicklingError, TypeError, AttributeError):
                _send(out, (("error", RuntimeError(f"{type(reply[1]).__name__}: {reply[1]}")), plan))
        except OSError:  # the parent is gone (BrokenPipeError): nobody is waiting for the answer
            return


class WorkerDied(RuntimeError):
    """The worker process exited during a job; nothing it wrote is referenced."""


class Worker:
    """A handle on one worker process, started on first use; jobs run one at a time."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        return subprocess.Popen(
            [sys.executable, "-m", "compaction.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )

    def run(self, job: Any) -> Any:
        """Run `job` in the worker process (started if needed) and return its result; re-raise its error.
        WorkerDied if the process exits during the job (the next job starts a new one)."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
            p = self._proc
            import storage
            from formats import fileio

            try:
                with fileio.lend() as lent:  # this process's counted calls wait for the plan
                    _send(p.stdin, (job, lent, storage.registered()))
                    (kind, value), plan = _recv(p.stdout)
                    fileio.absorb(plan)
            except (EOFError, BrokenPipeError, OSError):
                p.kill()
                self._proc = None
                raise WorkerDied("the compaction worker process exited during the job") from None
        if kind == "error":
            raise value
        return value

    def close(self) -> None:
        """Ask the worker process to exit (killed if it does not within 10 s)."""
        with self._lock:
            p, self._proc = self._proc, None
        if p is not None:
            try:
                p.stdin.close()
                p.wait(timeout=10)
            except Exception:  # noqa: BLE001
                p.kill()


def main() -> None:
    """Serve jobs on stdin/stdout; exit quietly when the parent goes away."""
    try:
        serve(sys.stdin.buffer, sys.stdout.buffer)
    finally:
        # stdout may be a broken pipe: flushing it at exit would print a BrokenPipeError traceback
        try:
            sys.stdout.flush()
        except OSError:
            pass
        os._exit(0)


if __name__ == "__main__":
    main()
