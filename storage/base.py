"""The storage seam: what the engine asks of the place its durable files live, and nothing else.

Every durable file of a database (WAL segments, SSTs, manifest versions) is named by a path string
(storage.paths names each one). A local path (``/data/db/sst/…``) is a file in a directory; a URL
(``s3://bucket/db/sst/…``, ``memory://name/sst/…``) is an object in an object store. A `Storage` reads,
lists, writes and deletes them, so one code path above serves both:

* `storage.local.LocalStorage` keeps them in a directory, through `formats.fileio` (fsync, hard-link
  publication, the fault shim) and mmap for SST reads.
* `storage.objstore.ObjectStorage` keeps the same files as objects, through obstore (S3 and anything
  S3-compatible, obstore's memory store), or through a simulated object store (storage.simstore).

Paths are joined with ``os.path.join`` on both (a URL's separator is "/" too). Only what an object store
can do is asked of the seam: whole-file writes (an object is written once), create-if-absent (the
conditional PUT that publishes a manifest version or claims a WAL object id), ranged reads, listing by
prefix and deletes. What only a directory can do (append to a file, lock it) is said by `appends`, and
the WAL manager (lsm.wal_manager) writes its log the way the backend allows.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO


class RealTime:
    """The host's clocks: what a storage backend waits by unless a simulation gives it its own."""

    @staticmethod
    def time() -> float:
        """Seconds since the epoch (compared with objects' last-modified times)."""
        return time.time()

    @staticmethod
    def monotonic() -> float:
        """Seconds on a clock that never goes back (deadlines, elapsed times)."""
        return time.monotonic()

    @staticmethod
    def sleep(seconds: float) -> None:
        """Wait `seconds`."""
        time.sleep(seconds)


REAL_TIME = RealTime()


class Storage:
    """The operations the engine needs from the place its files live (see the module docstring)."""

    local: bool = True
    shared: bool = True  # whether another process (a worker, a Spark executor) sees the same files
    # whether a file can be appended to and locked (a directory): the WAL is then a segment file per
    # memtable; else immutable objects, group-committed (lsm.wal_manager)
    appends: bool = True
    # whether writing a file is an upload worth overlapping with the work that makes the next one
    # (compaction.output uploads each finished SST in a background thread)
    uploads: bool = False
    # whether a file of one store can be hard-linked into another of the same kind (a directory): a
    # clone then links the source's SSTs instead of referencing them (lsm.clone)
    hard_links: bool = True
    # the clocks this backend's files age by and its retries wait by (a simulation's, or the host's)
    clock: RealTime = REAL_TIME
    cache: Any = None  # a local disk cache of what it serves (storage.objcache), where that helps
    # the URL a worker process or a Spark executor registers to reach this store (storage.registry):
    # None for the local file system, which every process reaches by path
    root: str | None = None

    def now(self) -> float:
        """Seconds since the epoch on the clock the files' modification times are stamped by: a file's
        age for a grace period is ``now() - mtime``."""
        return self.clock.time()

    def read(self, path: str) -> bytes:
        """The whole file (FileNotFoundError if there is none)."""
        raise NotImplementedError

    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the file."""
        raise NotImplementedError

    def read_exclusive(self, path: str) -> bytes:
        """The whole file once no writer is appending to it: a local WAL segment is read under an
        exclusive flock (a writer appends under a shared one, lsm.wal); an object is immutable, so a
        plain read (FileNotFoundError if there is none)."""
        return self.read(path)

    def size(self, path: str) -> int:
        """The file's length in bytes (FileNotFoundError if there is none)."""
        raise NotImplementedError

    def open_map(self, path: str) -> Any:
        """A read-only, sliceable view of the whole file: ``len(m)``, ``m[a:b]`` and ``m.close()``
        (an mmap locally; ranged GETs with a cached tail on an object store)."""
        raise NotImplementedError

    def list_names(self, directory: str) -> list[str]:
        """Names of the files directly in `directory` (empty if it does not exist)."""
        raise NotImplementedError

    def list_mtimes(self, directory: str) -> dict[str, float]:
        """name -> modification time (seconds since the epoch) of the files directly in `directory`."""
        raise NotImplementedError

    def list_sizes(self, directory: str) -> dict[str, int]:
        """name -> size in bytes of the files directly in `directory` (one listing on an object store)."""
        raise NotImplementedError

    def list_numbered(self, directory: str, suffix: str) -> list[tuple[int, str]]:
        """(id, path) of the files named ``<digits><suffix>`` in `directory`, ascending by id."""
        return numbered(directory, self.list_names(directory), suffix)

    def list_entries(self, directory: str) -> list[str]:
        """Names of the files and of the subdirectories directly in `directory` (empty if there is none):
        on an object store the objects and the common prefixes one level down."""
        return self.list_names(directory)

    def write_file(self, path: str, chunks: Iterable[Any], *, sync: bool = True, exclusive: bool = False) -> None:
        """Write a whole new file (replacing any old one unless `exclusive`) from `chunks`; durable when
        this returns if `sync`. A failure leaves no file behind that a reader could take for whole."""
        raise NotImplementedError

    @contextlib.contextmanager
    def replacing(self, path: str) -> Iterator[BinaryIO]:
        """A binary stream whose bytes replace the file at `path` when the block ends without an error, so
        that a reader sees the old file or all of the new one, never part of it: an object is written by
        one PUT of the buffered bytes (whole or not at all)."""
        buf = io.BytesIO()
        yield buf
        self.write_file(path, [buf.getbuffer()])

    def remove_tree(self, directory: str) -> None:
        """Remove every file under `directory` (the objects under the prefix), as far as it can."""
        for name in self.list_entries(directory):
            p = os.path.join(directory, name)
            if self.list_entries(p):
                self.remove_tree(p)
            else:
                try:
                    self.delete(p)
                except OSError:
                    return

    def map_whole(self, path: str) -> Any:
        """A sliceable view of the whole file for a reader that visits all of it in no order (a tool):
        `open_map`, with the whole file at hand (one GET of an object, not one per slice)."""
        return self.open_map(path)

    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Create `path` holding `data` only if it does not exist: True if we created it, False if it
        already existed. Atomic: a reader sees all of `data` or no file. Errors raise OSError; one after
        which the file may exist is `PublishUnknownError` (storage). On an object store, an
        attempt whose response was lost is decided by reading the object back: `data` must be bytes no
        other writer writes (a manifest version carries its writer's epoch and nonce)."""
        raise NotImplementedError

    def delete(self, path: str) -> None:
        """Remove the file; one already gone is fine."""
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        """Whether the file exists."""
        raise NotImplementedError

    def prepare_database(self, root: str, dirs: tuple[str, ...], marker: str, create: bool) -> str | None:
        """Check that `root` holds a database (its `marker` directory or objects exist) or may become one,
        and lay out `dirs` if `create`: None when fine, else why not (no such database, a file, a
        directory holding something else). An object store has no directories: a database is its objects."""
        if not create and not self.list_names(marker):
            return "no such database"
        return None

    def read_appended(self, path: str, ident: Any, pos: int) -> tuple[Any, int, bytes] | None:
        """What was appended to the file since a reader read it up to `pos` as identity `ident` (None
        the first time): (identity, where the bytes start, the bytes), or None if the file is gone. An
        object is written once: read whole the first time, nothing after."""
        if ident is not None:
            return ident, pos, b""
        try:
            return path, 0, self.read(path)
        except FileNotFoundError:
            return None

    def nothing_there(self, path: str) -> str:
        """How to say that nothing is at `path`, for an error message."""
        return "no such file or directory"

    def holds_directory(self, directory: str) -> bool:
        """Whether `directory` exists: a directory locally, a prefix some object lies under otherwise."""
        return bool(self.list_names(directory))

    def stale_temporaries(self, directory: str) -> list[str]:
        """Paths of the temporary files in `directory` that a `put_if_absent` interrupted by a crash left
        behind (none on an object store: an object is published whole by one PUT)."""
        return []

    def shared_cell(self, path: str, size: int) -> Any:
        """A small writable memory cell at `path` that every process opening the same database maps and
        sees at once (a memory-mapped file of a directory, created zeroed if absent), or None where the
        backend has no such thing (an object store)."""
        return None

    def makedirs(self, directory: str) -> None:
        """Make `directory` (and its parents) exist; nothing to do on an object store."""

    def fsync_dir(self, directory: str) -> None:
        """Make the directory's entries durable; nothing to do on an object store."""

    def stats(self) -> dict[str, int]:
        """Object-store requests and bytes by kind; all zeros locally (`ObjectStorage.stats`)."""
        return dict.fromkeys(STAT_KEYS, 0)

    def reset_stats(self) -> None:
        """Zero the request counters."""


# what one request to an object store may take, by default (storage.objstore retries; the HTTP client's
# whole-request timeout, obstore's default): with the longest backoff, how long a write can be in flight
# before it is acknowledged (lsm.wal_object derives the WAL's deletion grace from it)
RETRY_TIMEOUT_MS = 20_000
REQUEST_TIMEOUT_MS = 30_000
BACKOFF_MAX_MS = 1_000
_UNITS_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}


def duration_ms(value: Any, what: str) -> int:
    """Milliseconds of a duration given as obstore's client options take it: "30s", "500ms", "2min",
    a number of seconds, or a timedelta. ValueError naming `what` otherwise."""
    import datetime
    import re

    if isinstance(value, datetime.timedelta):
        ms = value / datetime.timedelta(milliseconds=1)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        ms = value * 1000
    elif isinstance(value, str) and (m := re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*", value)) and m[2] in _UNITS_MS:
        ms = float(m[1]) * _UNITS_MS[m[2]]
    else:
        raise ValueError(f"{what} must be a duration such as '30s' or '500ms', got {value!r}")
    if not ms > 0:
        raise ValueError(f"{what} must be a positive duration, got {value!r}")
    return int(-(-ms // 1))


def request_bound_ms(options: dict[str, Any] | None) -> int:
    """The longest one request (its retries and backoffs included) can take before the caller is told
    it succeeded, under object-store `options` ("retry_timeout_ms", "timeout"): the retry window, plus
    one whole attempt begun at its end, plus the longest backoff. ValueError if they do not parse."""
    o = options or {}
    retry = o.get("retry_timeout_ms", RETRY_TIMEOUT_MS)
    if type(retry) is not int or retry < 0:
        raise ValueError(f"object_store_options['retry_timeout_ms'] must be an int >= 0, got {retry!r}")
    timeout = duration_ms(o.get("timeout", f"{REQUEST_TIMEOUT_MS}ms"), "object_store_options['timeout']")
    return retry + timeout + BACKOFF_MAX_MS


# requests by kind, bytes moved, the retries of failed attempts, and the PUTs by the directory they wrote
# to (WAL objects, SSTs, manifests)
STAT_KEYS = ("put", "get", "list", "delete", "head", "put_bytes", "get_bytes", "retries", "put_wal", "put_sst",
             "put_manifest")
PUT_DIRS = ("wal", "sst", "manifest")


def numbered(directory: str, names: Iterable[str], suffix: str) -> list[tuple[int, str]]:
    """(id, path) of the names ``<digits><suffix>`` among `names` (files of `directory`), ascending."""
    out = []
    for name in names:
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            if stem.isdigit():
                out.append((int(stem), os.path.join(directory, name)))
    out.sort()
    return out


class PublishUnknownError(Exception):
    """A create-if-absent may or may not have taken effect (a link, a directory fsync or a PUT's
    response failed after the request may have landed). The caller must not guess: the next open
    reads what is there."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


TMP_PREFIX = ".tmp-"


def file_buffer(size: int) -> mmap.mmap:
    """A writable buffer of `size` bytes in an unnamed temporary file (``TMPDIR``), mapped: page cache
    that the kernel may write back and reclaim, as it does the mapped SST files of a local directory,
    not anonymous memory the process pins."""
    with tempfile.TemporaryFile() as f:
        f.truncate(size)
        return mmap.mmap(f.fileno(), size)
