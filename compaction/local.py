"""The local executors and the background compactor thread.

`run_local` runs a job with the one merge (`compaction.merge.run_job`) in the calling thread.
`run_in_worker` runs the same function in a worker process (`compaction.worker`; one per Python
process, shared by every DB, started on first use): the merge is pure Python, and in a thread it would take the GIL from the
writers; in a worker it runs on another core. A job travels by pickle, like a Spark task, so a job
whose filters do not pickle runs in the calling thread instead.
`BackgroundCompactor` is a daemon thread that calls a `step()` callback — given by the DB, which owns the
manifest and commits — whenever it is woken (after a flush) or a poll interval passes (periodic
compaction is due by time alone), until `step()` reports there is nothing left to do.
"""

from __future__ import annotations

import atexit
import pickle
import threading
from collections.abc import Callable

from compaction.merge import CompactionJob, MergeResult, run_job
from compaction.worker import Worker

_worker = Worker()
atexit.register(_worker.close)


def run_local(job: CompactionJob) -> MergeResult:
    """Run `job` in this process (the local executor)."""
    return run_job(job)


def run_in_worker(job: CompactionJob) -> MergeResult:
    """Run the job in the shared worker process (in this thread if its filters do not pickle)."""
    try:
        pickle.dumps(job.filters)
    except Exception:  # noqa: BLE001 - unpicklable user filters still work, just on this core
        return run_job(job)
    return _worker.run(job)


class BackgroundCompactor:
    """A daemon thread that calls `step()` while it finds work, then sleeps until `wake()`
    (or, with `poll_seconds`, until the next poll). An exception from `step` stops it and is kept in `error`."""

    def __init__(self, step: Callable[[], bool], poll_seconds: float | None = None, name: str = "lsm-compact"):
        """`step()` runs one job and returns True if it did something (then it is called again)."""
        self._step = step
        self._poll = poll_seconds
        self._cv = threading.Condition()
        self._wake = False
        self._stop = False
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Ask the thread to look for work now."""
        with self._cv:
            self._wake = True
            self._cv.notify()

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._wake and not self._stop:
                    if not self._cv.wait(self._poll):
                        break  # poll interval passed
                if self._stop:
                    return
                self._wake = False
            try:
                while not self._stop and self._step():
                    pass
            except BaseException as e:  # noqa: BLE001 - kept for the owner to report; the thread idles
                self.error = e
                with self._cv:
                    while not self._wake and not self._stop:
                        self._cv.wait()

    def stop(self) -> None:
        """Stop the thread and wait for it (unless called from it); idempotent."""
        with self._cv:
            self._stop = True
            self._cv.notify()
        if self._thread is not threading.current_thread():
            self._thread.join()
