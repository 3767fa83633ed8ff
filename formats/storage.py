"""Where the engine's durable files live: one seam, two backends.

Every durable file of a database (WAL segments, SSTs, manifest versions) is named by a path string. A
local path (``/data/db/sst/…``) is a file in a directory, as it always was; a URL (``s3://bucket/db/sst/…``,
``memory://name/sst/…``) is an object in an object store. `storage_for(path)` returns the backend that
owns a path, and the engine reads, lists, writes and deletes through it, so one code path serves both:

* `LocalStorage` does what the engine always did, through `formats.fileio` (fsync, hard-link publication,
  the fault shim) and mmap for SST reads. Its hot paths (the WAL append) never pass through here.
* `ObjectStorage` (formats.objstore) keeps the same files as objects on an object store, through obstore.

Paths are joined with ``os.path.join`` on both (a URL's separator is "/" too). Only what an object store
can do is asked of the seam: whole-file writes (an object is written once), create-if-absent (the
conditional PUT that publishes a manifest version or claims a WAL object id), ranged reads, listing by
prefix and deletes. Appends exist only locally (`lsm.wal` keeps its segment files open for them).
"""

from __future__ import annotations

import mmap
import os
import stat
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

from formats import fileio

URL_MARK = "://"


def is_url(path: str) -> bool:
    """Whether `path` names an object (``scheme://…``) rather than a local file."""
    return URL_MARK in path


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
    # the clocks this backend's files age by and its retries wait by (a simulation's, or the host's)
    clock: RealTime = REAL_TIME

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

    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Create `path` holding `data` only if it does not exist: True if we created it, False if it
        already existed. Atomic: a reader sees all of `data` or no file. Errors raise OSError; one after
        which the file may exist is `PublishUnknownError` (formats.storage). On an object store, an
        attempt whose response was lost is decided by reading the object back: `data` must be bytes no
        other writer writes (a manifest version carries its writer's epoch and nonce)."""
        raise NotImplementedError

    def delete(self, path: str) -> None:
        """Remove the file; one already gone is fine."""
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        """Whether the file exists."""
        raise NotImplementedError

    def makedirs(self, directory: str) -> None:
        """Make `directory` (and its parents) exist; nothing to do on an object store."""

    def fsync_dir(self, directory: str) -> None:
        """Make the directory's entries durable; nothing to do on an object store."""

    def stats(self) -> dict[str, int]:
        """Object-store requests and bytes by kind; all zeros locally (`ObjectStorage.stats`)."""
        return dict.fromkeys(STAT_KEYS, 0)

    def reset_stats(self) -> None:
        """Zero the request counters."""


# what one request to an object store may take, by default (formats.objstore retries; the HTTP client's
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


class LocalStorage(Storage):
    """Files in a local directory, through `formats.fileio` (module docstring)."""

    local = True

    def read(self, path: str) -> bytes:
        """The whole file."""
        with open(path, "rb") as f:
            return f.read()

    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the file (one pread)."""
        with open(path, "rb") as f:
            return os.pread(f.fileno(), end - start, start)

    def size(self, path: str) -> int:
        """The file's size (stat)."""
        return os.stat(path).st_size

    def open_map(self, path: str) -> Any:
        """A read-only mmap of the file (b"" for an empty one); ValueError if it is not a regular file."""
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # NONBLOCK: a FIFO must not hang the open
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ValueError(f"{path}: not a regular file")
            if st.st_size == 0:
                return b""
            return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)

    def list_names(self, directory: str) -> list[str]:
        """os.listdir, or [] when the directory does not exist."""
        try:
            return os.listdir(directory)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def list_mtimes(self, directory: str) -> dict[str, float]:
        """name -> st_mtime of the files directly in `directory` (a stat each)."""
        return {name: st.st_mtime for name, st in self._stats(directory).items()}

    def list_sizes(self, directory: str) -> dict[str, int]:
        """name -> size of the files directly in `directory` (a stat each)."""
        return {name: st.st_size for name, st in self._stats(directory).items()}

    def _stats(self, directory: str) -> dict[str, os.stat_result]:
        """name -> stat of the files directly in `directory` (one removed meanwhile is left out)."""
        out = {}
        for name in self.list_names(directory):
            try:
                out[name] = os.stat(os.path.join(directory, name))
            except FileNotFoundError:
                continue
        return out

    def write_file(self, path: str, chunks: Iterable[Any], *, sync: bool = True, exclusive: bool = False) -> None:
        """Create (O_EXCL if `exclusive`, else O_TRUNC), write every chunk, fsync if `sync`; a failure removes the file."""
        flags = os.O_WRONLY | (os.O_EXCL if exclusive else os.O_TRUNC)
        fd = fileio.create(path, flags)
        try:
            try:
                fileio.write_chunks(fd, chunks, path)
                if sync:
                    fileio.fsync(fd, path)
            finally:
                os.close(fd)
        except BaseException:
            try:
                fileio.unlink(path)
            except OSError:
                pass
            raise

    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Temporary file, fsync, hard link to `path` (fails if it exists), directory fsync."""
        # written to a temporary file, fsynced, then hard-linked to its name: the link fails if the
        # name exists, so a file is never seen half-written and two writers never both create it
        directory = os.path.dirname(path)
        # the temporary name holds the final one, so a fault plan or a reader of the directory sees whose
        tmp = os.path.join(directory, f"{TMP_PREFIX}{os.path.basename(path)}.{uuid.uuid4().hex}")
        fd = fileio.create(tmp, os.O_WRONLY | os.O_EXCL)
        try:
            try:
                fileio.write(fd, data, tmp)  # every byte, or an error: never a short file
                fileio.fsync(fd, tmp)
            finally:
                os.close(fd)
        except BaseException:
            _unlink_quiet(tmp)
            raise
        try:
            fileio.link(tmp, path)
        except FileExistsError:
            _unlink_quiet(tmp)
            return False
        except OSError as e:
            _unlink_quiet(tmp)
            if e.errno == 2:  # ENOENT: our temporary file is gone, so nothing was linked
                raise
            raise PublishUnknownError(e) from e
        _unlink_quiet(tmp)
        try:
            fileio.fsync_dir(directory)
        except OSError as e:
            raise PublishUnknownError(e) from e
        return True

    def delete(self, path: str) -> None:
        """Unlink through formats.fileio; a missing file is fine."""
        fileio.unlink(path)

    def exists(self, path: str) -> bool:
        """os.path.exists."""
        return os.path.exists(path)

    def makedirs(self, directory: str) -> None:
        """os.makedirs(exist_ok=True)."""
        os.makedirs(directory, exist_ok=True)

    def fsync_dir(self, directory: str) -> None:
        """fsync the directory through formats.fileio."""
        fileio.fsync_dir(directory)


def _unlink_quiet(path: str) -> None:
    try:
        fileio.unlink(path)
    except OSError:
        pass


LOCAL = LocalStorage()

# -- the registry of object stores -------------------------------------------------------------------------
_registry: dict[str, Storage] = {}  # root URL (no trailing "/") -> its backend
_attached: set[str] = set()  # the roots of `_registry` whose backend a caller built (`attach`)
_registry_lock = threading.Lock()


def _root_of(url: str) -> str:
    """``scheme://bucket`` of a URL: the store a path is resolved in when no database root is registered."""
    scheme, rest = url.split(URL_MARK, 1)
    return f"{scheme}{URL_MARK}{rest.split('/', 1)[0]}"


def register(root: str, options: dict[str, Any] | None = None) -> Storage:
    """The backend for the database (or bucket) at URL `root`, created with obstore config `options`
    (else the standard environment) the first time, and kept: later paths under `root` resolve to it, so
    its request counters are that database's. A second call with options replaces the client."""
    root = root.rstrip("/")
    with _registry_lock:
        have = _registry.get(root)
        if have is not None and (not options or getattr(have, "options", None) == options):
            return have
        from formats.objstore import ObjectStorage  # obstore is imported only by object-store users

        st = ObjectStorage(root, options)
        _registry[root] = st
        _attached.discard(root)
        return st


def attach(root: str, storage: Storage) -> Storage:
    """Serve every URL under `root` from `storage`, a backend the caller built (a simulated object store,
    formats.simstore), until `detach(root)`. Returns `storage`."""
    with _registry_lock:
        _registry[root.rstrip("/")] = storage
        _attached.add(root.rstrip("/"))
    return storage


def is_attached(path: str) -> bool:
    """Whether `path` is a URL under a root whose backend a caller attached (`attach`): its scheme is that
    backend's own (a simulation's ``sim://``), not one of the URLs a user may give, so the checks of
    `formats.objstore_config` do not apply to it."""
    with _registry_lock:
        return any(path == root or path.startswith(root + "/") for root in _attached)


def detach(root: str) -> None:
    """Forget the backend of `root` (`attach`, `register`)."""
    with _registry_lock:
        _registry.pop(root.rstrip("/"), None)
        _attached.discard(root.rstrip("/"))


def registered() -> list[tuple[str, dict[str, Any]]]:
    """(root, options) of every registered object store, for a worker process to `install`."""
    with _registry_lock:
        return [(root, dict(st.options)) for root, st in _registry.items() if st.shared]


def install(entries: list[tuple[str, dict[str, Any]]]) -> None:
    """Register the object stores of another process's `registered()` (a compaction worker's job)."""
    for root, options in entries:
        with _registry_lock:
            have = _registry.get(root)
        if have is None or have.options != options:
            register(root, options)


def file_buffer(size: int) -> mmap.mmap:
    """A writable buffer of `size` bytes in an unnamed temporary file (``TMPDIR``), mapped: page cache
    that the kernel may write back and reclaim, as it does the mapped SST files of a local directory,
    not anonymous memory the process pins."""
    with tempfile.TemporaryFile() as f:
        f.truncate(size)
        return mmap.mmap(f.fileno(), size)


def storage_for(path: str | os.PathLike[str]) -> Storage:
    """The backend that owns `path`: the local file system for a path, else the registered object
    store with the longest root that is a prefix of the URL (registering its bucket if none is)."""
    p = os.fspath(path)
    if URL_MARK not in p:
        return LOCAL
    best: Storage | None = None
    best_len = -1
    for root, st in list(_registry.items()):
        if (p == root or p.startswith(root + "/")) and len(root) > best_len:
            best, best_len = st, len(root)
    if best is not None:
        return best
    return register(_root_of(p))


def path_kind(path: str | os.PathLike[str]) -> str | None:
    """What is at `path`: "dir", "file" (a regular file), "other" (a FIFO, a device) or None (nothing).
    On an object store an object is a file and a prefix that other objects lie under is a directory (one
    HEAD, then one LIST if there is no object)."""
    p = os.fspath(path)
    if not is_url(p):
        if os.path.isdir(p):
            return "dir"
        if os.path.isfile(p):
            return "file"
        return "other" if os.path.exists(p) else None
    st = storage_for(p)
    if key_of(p).strip("/") and st.exists(p):
        return "file"
    return "dir" if st.list_entries(p) else None


def key_of(url: str) -> str:
    """The object key of a URL within its bucket (``s3://b/db/sst/x`` -> ``db/sst/x``)."""
    _scheme, rest = url.split(URL_MARK, 1)
    return rest.split("/", 1)[1] if "/" in rest else ""

