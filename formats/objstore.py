"""The object-store backend of the storage seam (formats.storage), built on obstore.

obstore is the Python binding of the Rust ``object_store`` crate (the one SlateDB uses): S3 and every
S3-compatible server, and an in-process memory store. A database at ``s3://bucket/prefix`` keeps each
durable file as the object ``prefix/<dir>/<name>``; ``memory://name/…`` is a store that lives as long as
the process (tests, examples).

Configuration: obstore's config keys (``endpoint``, ``region``, ``access_key_id``, ``secret_access_key``,
``allow_http``, …) from ``DbOptions.object_store_options``, else the standard AWS environment variables
(``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_ALLOW_HTTP``). Credentials are never logged or put in an error message.

Requests: every call is counted (`stats`): PUT, GET, LIST, DELETE and HEAD, with bytes. Transient
failures (5xx, 503 SlowDown, a reset connection, a timeout) are retried by obstore with exponential
backoff; a failure that outlasts the retries is raised as `fileio.FileOpError` (an OSError), which the
engine treats like a disk error. A create-if-absent whose response was lost can come back as "already
exists" from the retry that followed it; `put_if_absent` then reads the object and compares it with what
it wrote, so such a PUT is recognised as ours, never guessed.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

import obstore
from obstore.exceptions import AlreadyExistsError, NotFoundError, PreconditionError

from formats.fileio import FileOpError
from formats.storage import PUT_DIRS, STAT_KEYS, URL_MARK, PublishUnknownError, Storage

# objects above this are uploaded in parts (S3 wants parts of >= 5 MiB; a few parts keep a retry cheap)
MULTIPART_MIN = 16 << 20
MULTIPART_CHUNK = 8 << 20
# a sequential reader (a compaction's input) fetches this much per GET: few requests, bounded memory
READAHEAD = 1 << 20
# an SST's open reads its tail (footer, metadata, and usually its index and bloom filter) with one GET
TAIL_BYTES = 256 << 10
# retries of transient failures; `object_store_options` may set "max_retries" and "retry_timeout_ms"
MAX_RETRIES = 6
RETRY_TIMEOUT_MS = 20_000
RETRY_KEYS = ("max_retries", "retry_timeout_ms")


def retry_config(options: dict[str, Any]) -> dict[str, Any]:
    """obstore's retry config: exponential backoff from 20 ms, at most `max_retries` retries within
    `retry_timeout_ms`."""
    return {
        "max_retries": int(options.get("max_retries", MAX_RETRIES)),
        "backoff": {"init_backoff": timedelta(milliseconds=20), "max_backoff": timedelta(seconds=1), "base": 2.0},
        "retry_timeout": timedelta(milliseconds=int(options.get("retry_timeout_ms", RETRY_TIMEOUT_MS))),
    }

_memory_stores: dict[str, Any] = {}  # memory://name -> its MemoryStore, shared by every root under it
_memory_lock = threading.Lock()

ENV_KEYS = {
    "AWS_ENDPOINT_URL": "endpoint",
    "AWS_ENDPOINT": "endpoint",
    "AWS_REGION": "region",
    "AWS_DEFAULT_REGION": "region",
    "AWS_ACCESS_KEY_ID": "access_key_id",
    "AWS_SECRET_ACCESS_KEY": "secret_access_key",
    "AWS_SESSION_TOKEN": "token",
    "AWS_ALLOW_HTTP": "allow_http",
}


def s3_config(options: dict[str, Any] | None) -> dict[str, Any]:
    """obstore S3 config: the standard environment, overridden by `options`."""
    cfg: dict[str, Any] = {}
    for env, key in ENV_KEYS.items():
        v = os.environ.get(env)
        if v and key not in cfg:
            cfg[key] = v
    cfg.update({k: v for k, v in (options or {}).items() if k not in RETRY_KEYS})
    if isinstance(cfg.get("allow_http"), str):
        cfg["allow_http"] = cfg["allow_http"].lower() in ("1", "true", "yes")
    return cfg


def make_store(root: str, options: dict[str, Any] | None) -> Any:
    """The obstore client for the bucket of URL `root`."""
    scheme, rest = root.split(URL_MARK, 1)
    bucket = rest.split("/", 1)[0]
    if scheme == "memory":
        with _memory_lock:
            st = _memory_stores.get(bucket)
            if st is None:
                st = _memory_stores[bucket] = obstore.store.MemoryStore()
            return st
    if scheme in ("s3", "s3a"):
        return obstore.store.S3Store(bucket, config=s3_config(options), retry_config=retry_config(options or {}))
    raise ValueError(f"unsupported object store URL {root!r}: use s3://bucket/prefix or memory://name/prefix")


class ObjectStorage(Storage):
    """The files of URLs under `root` as objects (module docstring)."""

    local = False

    def __init__(self, root: str, options: dict[str, Any] | None = None) -> None:
        self.root = root.rstrip("/")
        # memory:// lives in this process only: worker processes and Spark executors cannot see it
        self.shared = not self.root.startswith("memory" + URL_MARK)
        self.options = dict(options or {})
        self.store = make_store(self.root, options)
        scheme, rest = self.root.split(URL_MARK, 1)
        self._bucket_url = f"{scheme}{URL_MARK}{rest.split('/', 1)[0]}"
        self._lock = threading.Lock()
        self._stats = dict.fromkeys(STAT_KEYS, 0)

    # -- bookkeeping -------------------------------------------------------------------------------------
    def key(self, path: str) -> str:
        """The object key of `path` (a URL in this store's bucket)."""
        if not path.startswith(self._bucket_url):
            raise ValueError(f"{path!r} is not in {self._bucket_url}")
        return path[len(self._bucket_url) :].lstrip("/")

    def count(self, kind: str, nbytes: int = 0, path: str = "") -> None:
        """Count one request of `kind` (put, get, list, delete, head) moving `nbytes` (a PUT also by the
        directory of `path`: wal, sst, manifest)."""
        with self._lock:
            self._stats[kind] += 1
            if nbytes and kind in ("put", "get"):
                self._stats[kind + "_bytes"] += nbytes
            if kind == "put" and path:
                d = os.path.basename(os.path.dirname(path))
                if d in PUT_DIRS:
                    self._stats["put_" + d] += 1

    def stats(self) -> dict[str, int]:
        """Requests and bytes counted since creation or `reset_stats`."""
        with self._lock:
            return dict(self._stats)

    def reset_stats(self) -> None:
        """Zero the counters."""
        with self._lock:
            self._stats = dict.fromkeys(STAT_KEYS, 0)

    def _error(self, op: str, path: str, e: Exception) -> OSError:
        if isinstance(e, (NotFoundError, FileNotFoundError)):
            return FileNotFoundError(errno.ENOENT, "no such object", path)
        return FileOpError(errno.EIO, f"{type(e).__name__}: {_first_line(e)}", path, op)

    # -- reads ---------------------------------------------------------------------------------------------
    def read(self, path: str) -> bytes:
        """The whole object: one GET."""
        try:
            data = bytes(obstore.get(self.store, self.key(path)).bytes())
        except Exception as e:
            self.count("get")
            raise self._error("get", path, e) from None
        self.count("get", len(data))
        return data

    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object: one ranged GET."""
        if end <= start:
            return b""
        try:
            data = bytes(obstore.get_range(self.store, self.key(path), start=start, end=end))
        except Exception as e:
            self.count("get")
            raise self._error("get", path, e) from None
        self.count("get", len(data))
        return data

    def read_tail(self, path: str, nbytes: int) -> tuple[int, bytes]:
        """(object size, its last `nbytes` bytes) with one GET."""
        try:
            res = obstore.get(self.store, self.key(path), options={"range": {"suffix": nbytes}})
            data = bytes(res.bytes())
            size = res.meta["size"]
        except Exception as e:
            self.count("get")
            raise self._error("get", path, e) from None
        self.count("get", len(data))
        return size, data

    def size(self, path: str) -> int:
        """The object's size: one HEAD."""
        self.count("head")
        try:
            return obstore.head(self.store, self.key(path))["size"]
        except Exception as e:
            raise self._error("head", path, e) from None

    def exists(self, path: str) -> bool:
        """Whether the object exists: one HEAD."""
        try:
            self.size(path)
        except FileNotFoundError:
            return False
        return True

    def open_map(self, path: str, sequential: bool = False) -> RangeFile:
        """A `RangeFile` over the object (its tail fetched now)."""
        return RangeFile(self, path, READAHEAD if sequential else 0)

    def list_names(self, directory: str) -> list[str]:
        """Names of the objects directly under `directory`: LIST requests by prefix."""
        return list(self.list_mtimes(directory))

    def list_mtimes(self, directory: str) -> dict[str, float]:
        """name -> last-modified time of the objects directly under `directory` (one LIST per page of 1000)."""
        prefix = self.key(directory).rstrip("/") + "/"
        out: dict[str, float] = {}
        try:
            for page in obstore.list(self.store, prefix, return_arrow=False):
                self.count("list")  # one LIST request per page of up to 1000 keys
                for meta in page:
                    rest = meta["path"][len(prefix) :]
                    if rest and "/" not in rest:
                        out[rest] = meta["last_modified"].timestamp()
        except Exception as e:
            self.count("list")
            raise self._error("list", directory, e) from None
        return out

    # -- writes --------------------------------------------------------------------------------------------
    def write_file(self, path: str, chunks: Iterable[Any], *, sync: bool = True, exclusive: bool = False) -> None:
        """One PUT of the joined `chunks` (multipart above `MULTIPART_MIN`); durable when it returns."""
        # an object is durable when its PUT returns, so `sync` changes nothing here
        if exclusive:
            data = b"".join(chunks)
            if not self.put_if_absent(path, data):
                raise FileExistsError(errno.EEXIST, "object exists", path)
            return
        data = b"".join(chunks)
        multipart = len(data) > MULTIPART_MIN
        try:
            obstore.put(self.store, self.key(path), data, use_multipart=multipart, chunk_size=MULTIPART_CHUNK)
        except Exception as e:
            self.count("put", 0, path)
            raise self._error("put", path, e) from None
        self.count("put", len(data), path)

    def put_if_absent(self, path: str, data: bytes) -> bool:
        """One PUT with If-None-Match (module docstring: a lost response is recognised by reading back)."""
        data = bytes(data)
        key = self.key(path)
        try:
            obstore.put(self.store, key, data, mode="create")
        except (AlreadyExistsError, PreconditionError):
            self.count("put", 0, path)
            # ours, if an earlier attempt of this PUT landed and only its response was lost
            try:
                theirs = self.read(path)
            except OSError as e:
                raise PublishUnknownError(e) from e
            return theirs == data
        except Exception as e:
            self.count("put", 0, path)
            raise PublishUnknownError(self._error("put", path, e)) from None
        self.count("put", len(data), path)
        return True

    def delete(self, path: str) -> None:
        """One DELETE; an object already gone is fine."""
        self.count("delete")
        try:
            obstore.delete(self.store, self.key(path))
        except (NotFoundError, FileNotFoundError):
            pass
        except Exception as e:
            raise self._error("delete", path, e) from None


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else ""


class RangeFile:
    """A read-only view of one object that fetches byte ranges on demand (what `SstReader` slices).

    The first access fetches the object's tail (`TAIL_BYTES`: footer, metadata, and for most SSTs the
    index and bloom filter) with one GET; `prefetch(start)` widens the cached tail back to `start`, so
    opening an SST costs one or two GETs. A slice outside the cached tail is one ranged GET (the block
    cache above keeps what is read). With `readahead` (a sequential reader: a compaction's input) a slice
    outside the tail fetches a window of that many bytes from its start instead, and the next slices are
    served from the window: a whole SST in one or a few GETs, and at most one window held."""

    def __init__(self, storage: ObjectStorage, path: str, readahead: int = 0) -> None:
        self.storage = storage
        self.path = path
        self.readahead = readahead
        self._win_at = 0
        self._win = b""
        self._size, tail = storage.read_tail(path, TAIL_BYTES)
        self._tail_at = self._size - len(tail)
        self._tail = tail

    def __len__(self) -> int:
        return self._size

    def prefetch(self, start: int) -> None:
        """Cache the bytes from `start` to the end of the object (one GET for what is not cached yet)."""
        start = max(0, start)
        if start < self._tail_at:
            self._tail = self.storage.read_range(self.path, start, self._tail_at) + self._tail
            self._tail_at = start

    def __getitem__(self, item: slice) -> bytes:
        if not isinstance(item, slice) or item.step not in (None, 1):
            raise TypeError("RangeFile supports plain slices only")
        start, stop, _ = item.indices(self._size)
        if stop <= start:
            return b""
        if start >= self._tail_at:
            return self._tail[start - self._tail_at : stop - self._tail_at]
        if not self.readahead:
            return self.storage.read_range(self.path, start, stop)
        w = self._win_at
        if not (w <= start and stop <= w + len(self._win)):
            end = min(self._size, max(stop, start + self.readahead))
            self._win, self._win_at = self.storage.read_range(self.path, start, end), start
            w = start
        return self._win[start - w : stop - w]

    def close(self) -> None:
        """Drop the cached tail and window."""
        self._tail = self._win = b""
