"""A progress line for Spark work on a terminal: ``[stage 3] 5/8 tasks``, redrawn in place.

`SparkProgress(sc)` is a context manager: while its block runs, a thread polls the SparkContext's status
tracker (the active stages, and each one's completed and total tasks) and rewrites one ``\\r`` line on
stderr when it changes; on exit the line is cleared, so what the command prints next starts on a clean
line. It draws only when the stream is a terminal (or when told to): a pipe or a log gets nothing.
Spark's own console progress bar is off (`compaction.spark.session_builder`), and it would go to the JVM's
log file anyway (`tools.common.spark_session_for`).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import Any, TextIO


def progress_text(stages: Sequence[tuple[int, int, int]]) -> str:
    """The line for active stages given as (stage id, completed tasks, total tasks); "" when none."""
    return "  ".join(f"[stage {sid}] {done}/{total} tasks" for sid, done, total in stages)


class SparkProgress:
    """``with SparkProgress(sc):`` shows the tasks of the active Spark stages on `stream` (default stderr)."""

    def __init__(
        self,
        sc: Any,
        stream: TextIO | None = None,
        *,
        enabled: bool | None = None,
        interval: float = 0.25,
    ) -> None:
        self.sc = sc
        self.stream = stream if stream is not None else sys.stderr
        # None: only on a terminal (a pipe or a file would collect every redraw)
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shown = ""

    def stages(self) -> list[tuple[int, int, int]]:
        """(stage id, completed tasks, total tasks) of every active stage, by stage id."""
        tracker = self.sc.statusTracker()
        out = []
        for sid in sorted(tracker.getActiveStageIds()):
            info = tracker.getStageInfo(sid)
            if info is not None:  # the stage ended between the two calls
                out.append((sid, info.numCompletedTasks, info.numTasks))
        return out

    def _draw(self, line: str) -> None:
        # pad with blanks over the rest of a longer previous line; "" clears the line
        pad = " " * max(0, len(self._shown) - len(line))
        self.stream.write(f"\r{line}{pad}" + ("\r" if not line else ""))
        self.stream.flush()
        self._shown = line

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                line = progress_text(self.stages())
            except Exception:  # noqa: BLE001 - the context is stopping: the job reports its own errors
                return
            if line != self._shown:
                self._draw(line)

    def __enter__(self) -> SparkProgress:
        if self.enabled:
            self._thread = threading.Thread(target=self._poll, name="lsm-spark-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            if self._shown:
                self._draw("")


__all__ = ["SparkProgress", "progress_text"]
