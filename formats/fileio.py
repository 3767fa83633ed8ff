"""Every write-path system call the engine makes, in one module, so tests can make any of them fail.

The WAL writer, the SST writer, the manifest store, the WRITER_EPOCH token and garbage collection create,
write, sync, link and unlink files only through the functions below. They do exactly what the ``os``
call of the same name does, with two differences:

* `write` hands over every byte (a short count from write(2) is retried; a retry that fails raises), so no
  caller can mistake a partial write for a whole one;
* a failure is raised as `FileOpError`, an ``OSError`` that names the operation and the file, so the
  engine can say which call broke ("fdatasync of wal/00000000000000000003.wal failed: [Errno 5] ...").

The module lives in ``formats`` (which imports nothing of ours) because the SST writer must use it too.

Fault injection (the model is RocksDB's FaultInjectionTestFS): `inject` arms one `FaultPlan` process-wide
that makes the Nth matching call fail with ENOSPC, EIO or a short write (half the bytes reach the file,
then the retry fails with ENOSPC, which is what a filling disk does). A plan counts matching calls even
when it never fires (``nth=0``), which is how a test learns how many calls an operation makes before it
sweeps them one by one. The compaction worker process receives the parent's plan with each job and
returns it with the result (`compaction.worker`), so one plan counts calls across both processes.
"""

from __future__ import annotations

import dataclasses
import errno as errno_mod
import mmap
import os
import stat
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

WRITE_OPS = frozenset({"write", "pwrite"})
OPS = frozenset({"create", "write", "pwrite", "fsync", "fdatasync", "fsync_dir", "link", "rename", "unlink", "msync"})
KINDS = ("enospc", "eio", "short")


class FileOpError(OSError):
    """An I/O call failed: ``op`` is the call ("write", "fsync", ...), ``filename`` the file."""

    def __init__(self, errno: int, strerror: str, filename: str, op: str) -> None:
        super().__init__(errno, strerror, filename)
        self.op = op

    def __reduce__(self) -> tuple:  # keeps `op` when the compaction worker pickles it back
        return (FileOpError, (self.errno, self.strerror, self.filename, self.op))

    def __str__(self) -> str:
        return f"{self.op} of {self.filename} failed: [Errno {self.errno}] {self.strerror}"


@dataclasses.dataclass
class FaultPlan:
    """Fail call number `nth` (1-based; 0 = never, just count) among calls matching `ops` and `path`.

    `sticky=True` keeps failing every later matching call too (a disk that stays full)."""

    kind: str = "eio"
    nth: int = 0
    ops: frozenset[str] | None = None  # None: every op
    path: str | None = None  # substring the file name must contain; None: any file
    sticky: bool = False
    calls: int = 0  # matching calls seen so far
    fired: int = 0  # faults injected so far
    log: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (op, path) of matching calls

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"fault kind must be one of {KINDS}, got {self.kind!r}")
        if self.ops is not None:
            self.ops = frozenset(self.ops)
            if not self.ops <= OPS:
                raise ValueError(f"unknown ops {sorted(self.ops - OPS)}; known: {sorted(OPS)}")

    def matches(self, op: str, path: str) -> bool:
        """Whether a call of `op` on `path` is one this plan counts."""
        if self.ops is not None and op not in self.ops:
            return False
        return self.path is None or self.path in path

    def check(self, op: str, path: str) -> str | None:
        """Count the call; return the fault kind to inject now, or None."""
        if not self.matches(op, path):
            return None
        self.calls += 1
        self.log.append((op, path))
        if self.nth and (self.calls == self.nth or (self.sticky and self.calls > self.nth)):
            self.fired += 1
            return self.kind
        return None


_plan: FaultPlan | None = None
_plan_lock = threading.Lock()
_pending_enospc: set[int] = set()  # fds whose next write fails: the rest of a short write


def inject(kind: str = "eio", nth: int = 0, ops: Iterable[str] | None = None, path: str | None = None,
           sticky: bool = False) -> FaultPlan:
    """Arm a plan process-wide (replacing any other) and return it; `clear()` disarms."""
    global _plan
    _plan = FaultPlan(kind, nth, None if ops is None else frozenset(ops), path, sticky)
    return _plan


def clear() -> None:
    """Disarm fault injection."""
    global _plan
    _plan = None
    _pending_enospc.clear()


def current() -> FaultPlan | None:
    """The armed plan, if any (the compaction worker ships it to its process)."""
    return _plan


def install(plan: FaultPlan | None) -> None:
    """Arm `plan` as it is, counters included (the worker's side of `current`)."""
    global _plan
    _plan = plan


def absorb(plan: FaultPlan | None) -> None:
    """Take over the counters of a copy of the armed plan that ran in another process."""
    cur = _plan
    if cur is not None and plan is not None:
        cur.calls, cur.fired, cur.log = plan.calls, plan.fired, plan.log


@contextmanager
def faults(kind: str = "eio", nth: int = 0, ops: Iterable[str] | None = None, path: str | None = None,
           sticky: bool = False) -> Iterator[FaultPlan]:
    """``with faults("enospc", 3, ops={"write"}) as plan:`` arms a plan for the block."""
    plan = inject(kind, nth, ops, path, sticky)
    try:
        yield plan
    finally:
        clear()


_lend_cv = threading.Condition()
_lender: int | None = None  # the thread whose worker process holds the plan (see `lend`)


@contextmanager
def lend() -> Iterator[FaultPlan | None]:
    """``with lend() as plan:`` ship `plan` to a worker process and `absorb` its copy before leaving.

    While it is lent, calls of this process that the plan would count wait for it to come back (only
    while a plan is armed: tests), so every call is counted once, in one order, and the Nth call fails
    exactly once however the two processes interleave. One lend at a time; the lender itself must not
    do counted I/O inside the block."""
    global _lender
    if _plan is None:
        yield None
        return
    me = threading.get_ident()
    with _lend_cv:
        while _lender is not None:
            _lend_cv.wait()
        _lender = me
    try:
        yield _plan
    finally:
        with _lend_cv:
            _lender = None
            _lend_cv.notify_all()


def _wait_lent() -> None:
    with _lend_cv:
        while _lender is not None and _lender != threading.get_ident():
            _lend_cv.wait()


def _fail(op: str, path: str, code: int) -> FileOpError:
    return FileOpError(code, os.strerror(code), path, op)


def _gate(op: str, path: str) -> str | None:
    """The injected fault for this call (raising it for every kind but a short write), or None."""
    plan = _plan
    if plan is None:
        return None
    if _lender is not None:  # the plan is in a worker process: count after it comes back
        _wait_lent()
    with _plan_lock:  # the flush thread and a writer may count at once
        kind = plan.check(op, path)
    if kind is None or (kind == "short" and op in WRITE_OPS):
        return kind
    raise _fail(op, path, errno_mod.EIO if kind == "eio" else errno_mod.ENOSPC)


def _wrap(op: str, path: str, e: OSError) -> OSError:
    if isinstance(e, FileOpError):
        return e
    return FileOpError(e.errno or errno_mod.EIO, e.strerror or str(e), path, op)


# -- the calls -------------------------------------------------------------------------------------------
def create(path: str, flags: int, mode: int = 0o644) -> int:
    """os.open(path, flags | O_CREAT, mode); FileExistsError (with O_EXCL) passes through unwrapped."""
    _gate("create", path)
    try:
        return os.open(path, flags | os.O_CREAT, mode)
    except FileExistsError:
        raise
    except OSError as e:
        raise _wrap("create", path, e) from None


def write(fd: int, data: Any, path: str) -> None:
    """Write every byte of `data` to `fd` (retrying short counts); raise if any byte cannot be written."""
    if _plan is None and not _pending_enospc:  # the fast path of every WAL append
        try:
            n = os.write(fd, data)
        except OSError as e:
            raise _wrap("write", path, e) from None
        if n == len(data):
            return
        data = memoryview(data)[n:]
        if n == 0:
            raise _fail("write", path, errno_mod.ENOSPC)
    view = memoryview(data)
    while view:
        if fd in _pending_enospc:
            _pending_enospc.discard(fd)
            raise _fail("write", path, errno_mod.ENOSPC)
        kind = _gate("write", path)
        try:
            if kind == "short":
                n = os.write(fd, view[: len(view) // 2])
                _pending_enospc.add(fd)
            else:
                n = os.write(fd, view)
        except OSError as e:
            raise _wrap("write", path, e) from None
        if n == 0 and kind != "short":
            raise _fail("write", path, errno_mod.ENOSPC)
        view = view[n:]


def write_chunks(fd: int, chunks: Iterable[Any], path: str) -> None:
    """`write` each chunk in order."""
    for c in chunks:
        write(fd, c, path)


def pwrite(fd: int, data: bytes, offset: int, path: str) -> None:
    """Write all of `data` at `offset`."""
    kind = _gate("pwrite", path)
    try:
        n = os.pwrite(fd, data[: len(data) // 2] if kind == "short" else data, offset)
    except OSError as e:
        raise _wrap("pwrite", path, e) from None
    if n != len(data):
        raise _fail("pwrite", path, errno_mod.ENOSPC)


def fsync(fd: int, path: str) -> None:
    """os.fsync(fd) of the file `path`."""
    _gate("fsync", path)
    try:
        os.fsync(fd)
    except OSError as e:
        raise _wrap("fsync", path, e) from None


def fdatasync(fd: int, path: str) -> None:
    """os.fdatasync(fd) of the file `path`."""
    _gate("fdatasync", path)
    try:
        os.fdatasync(fd)
    except OSError as e:
        raise _wrap("fdatasync", path, e) from None


def fsync_dir(path: str) -> None:
    """Make a directory's entries (new, linked, deleted files) durable."""
    _gate("fsync_dir", path)
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise _wrap("fsync_dir", path, e) from None


def link(src: str, dst: str) -> None:
    """os.link; FileExistsError passes through unwrapped (it is the manifest's compare-and-swap)."""
    _gate("link", dst)
    try:
        os.link(src, dst)
    except FileExistsError:
        raise
    except OSError as e:
        raise _wrap("link", dst, e) from None


def rename(src: str, dst: str) -> None:
    """os.replace(src, dst)."""
    _gate("rename", dst)
    try:
        os.replace(src, dst)
    except OSError as e:
        raise _wrap("rename", dst, e) from None


def unlink(path: str, missing_ok: bool = True) -> None:
    """os.unlink; a file already gone is fine unless missing_ok=False."""
    _gate("unlink", path)
    try:
        os.unlink(path)
    except FileNotFoundError:
        if not missing_ok:
            raise
    except OSError as e:
        raise _wrap("unlink", path, e) from None


def msync(m: Any, path: str) -> None:
    """Flush a shared memory map to its file (mmap.flush)."""
    _gate("msync", path)
    try:
        m.flush()
    except OSError as e:
        raise _wrap("msync", path, e) from None


__all__ = [
    "FileOpError",
    "FaultPlan",
    "inject",
    "clear",
    "current",
    "install",
    "absorb",
    "faults",
    "create",
    "write",
    "write_chunks",
    "pwrite",
    "fsync",
    "fdatasync",
    "fsync_dir",
    "link",
    "rename",
    "unlink",
    "msync",
]


def map_file(path: str) -> Any:
    """A read-only mmap of the file at `path` (b"" for an empty one); ValueError if it is not a regular
    file (a FIFO must not hang the open: it is opened non-blocking)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path}: not a regular file")
        if st.st_size == 0:
            return b""
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


def write_file(path: str, chunks: Iterable[Any], *, sync: bool = True, exclusive: bool = False) -> None:
    """Create `path` (O_EXCL if `exclusive`, else O_TRUNC), write every chunk, fsync if `sync`. A failure
    removes the file: no reader ever takes a partial one for whole."""
    fd = create(path, os.O_WRONLY | (os.O_EXCL if exclusive else os.O_TRUNC))
    try:
        try:
            write_chunks(fd, chunks, path)
            if sync:
                fsync(fd, path)
        finally:
            os.close(fd)
    except BaseException:
        try:
            unlink(path)
        except OSError:
            pass
        raise
