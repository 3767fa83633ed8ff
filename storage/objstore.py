"""The object-store backend of the storage seam (storage), built on obstore.

obstore is the Python binding of the Rust ``object_store`` crate (the one SlateDB uses): S3 and every
S3-compatible server, and an in-process memory store. A database at ``s3://bucket/prefix`` keeps each
durable file as the object ``prefix/<dir>/<name>``; ``memory://name/…`` is a store that lives as long as
the process (tests, examples).

Configuration: obstore's config keys (``endpoint``, ``region``, ``access_key_id``, ``secret_access_key``,
``allow_http``, …) from ``DbOptions.object_store_options``, else the standard AWS environment variables
(``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_ALLOW_HTTP``), else for the credentials the AWS shared credentials file (storage.aws_credentials).
Credentials are never logged or put in an error message.

Requests: every request sent is counted (`stats`): PUT, GET, LIST, DELETE and HEAD, with the bytes of
those that succeeded, and ``retries``, how many of them repeated one that had failed. Transient failures
(a 5xx such as 500 InternalError or 503 SlowDown, 429, a reset connection, a timeout) are retried here,
not inside obstore (its own retries are turned off), with exponential backoff from 20 ms, at most
``max_retries`` times within ``retry_timeout_ms``: so each attempt is counted, and `put_if_absent` knows
which of its attempts may have landed. A failure that outlasts the retries, or one that retrying cannot
cure (403, 400), is raised as `objstore_errors.ObjectStoreError` (an OSError: one line with the
operation, the object, S3's error code and a hint), which the engine treats like a disk error (the
failed state); a malformed URL or endpoint is `ObjectStoreConfigError` before any request is sent
(storage.objstore_config). A create-if-absent is refused as "already exists" on a first attempt only
because another writer's object is there (False); after an attempt of its own that may have landed (its
response lost), the object is read back and compared with what was written, so such a PUT is recognised
as ours, never guessed; if even that cannot be decided, `PublishUnknownError`.
"""

from __future__ import annotations

import errno
import os
import re
import threading
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, TypeVar

import obstore
from obstore.exceptions import AlreadyExistsError, GenericError, NotFoundError, PreconditionError

from formats.errors import ObjectStoreConfigError
from storage.base import (
    BACKOFF_MAX_MS,
    PUT_DIRS,
    REAL_TIME,
    RETRY_TIMEOUT_MS,
    STAT_KEYS,
    PublishUnknownError,
    RealTime,
    Storage,
)
from storage.objcache import ObjectCache
from storage.objclient import Client, ObstoreClient, StampedClient
from storage.objread import READAHEAD_BYTES, TAIL_BYTES, WINDOWS, RangeFile
from storage.objstore_config import check_config, check_root, redact, s3_config, secrets_of
from storage.objstore_errors import is_panic, request_error
from storage.registry import URL_MARK

# objects above this are uploaded in parts (S3 wants parts of >= 5 MiB; a few parts keep a retry cheap)
MULTIPART_MIN = 16 << 20
MULTIPART_CHUNK = 8 << 20
# a ranged GET into a read-ahead window (storage.objread) is received in chunks of about this size, each
# copied into the window as it comes
STREAM_CHUNK = 64 << 10
LIST_PAGE = 1000  # keys per LIST response (S3's maximum, and its default)
# retries of transient failures; `object_store_options` may set "max_retries" and "retry_timeout_ms"
MAX_RETRIES = 6
RETRY_KEYS = ("max_retries", "retry_timeout_ms")
# keys of `object_store_options` that configure the HTTP client, not the store: how long one request may
# take ("timeout", whole request, default 30 s), its connect phase, or a stall between reads. A request
# that times out is retried as any transient failure
CLIENT_KEYS = ("timeout", "connect_timeout", "read_timeout", "pool_idle_timeout")
BACKOFF_FIRST = 0.02  # seconds before the first retry, doubled before each next one up to BACKOFF_MAX
BACKOFF_MAX = BACKOFF_MAX_MS / 1000
# obstore's own retries are off: `ObjectStorage._retrying` makes and counts every attempt
NO_RETRIES = {"max_retries": 0, "retry_timeout": timedelta(seconds=0)}
# statuses a repeat may cure (RFC 9110: timeouts, throttling, server errors); other 4xx are final
_STATUS = re.compile(r"status code: (\d{3})")

T = TypeVar("T")


def transient(e: BaseException) -> bool:
    """Whether request error `e` may go away on a retry: a transport error (reset, refused, timeout),
    a 5xx, 408 or 429. Not-found, already-exists, a failed precondition, 403 and other 4xx are final,
    and so is a request the HTTP client refuses to build (a "builder error": it refuses every repeat)."""
    if not isinstance(e, GenericError):
        return False
    text = str(e)
    m = _STATUS.search(text)
    if m is None:
        return "builder error" not in text
    return m.group(1) in ("408", "429") or m.group(1).startswith("5")


_memory_stores: dict[str, Any] = {}  # memory://name -> its MemoryStore, shared by every root under it
_memory_lock = threading.Lock()


def make_store(root: str, options: dict[str, Any] | None) -> Any:
    """The obstore client for the bucket of URL `root`; `ObjectStoreConfigError` for a malformed URL,
    endpoint or config (checked first: obstore's HTTP client panics on an endpoint it cannot parse)."""
    scheme, bucket = check_root(root)
    if scheme == "memory":
        with _memory_lock:
            st = _memory_stores.get(bucket)
            if st is None:
                st = _memory_stores[bucket] = obstore.store.MemoryStore()
            return st
    cfg = s3_config(options, RETRY_KEYS + CLIENT_KEYS)
    check_config(cfg, root)
    client = {k: v for k, v in (options or {}).items() if k in CLIENT_KEYS}
    try:
        return obstore.store.S3Store(bucket, config=cfg, client_options=client or None, retry_config=NO_RETRIES)
    except BaseException as e:  # a bad key or value; a panic (a BaseException) is one too
        if not isinstance(e, Exception) and not is_panic(e):
            raise
        first = redact((str(e).strip().splitlines() or [type(e).__name__])[0], secrets_of(cfg))
        raise ObjectStoreConfigError(f"{root}: the S3 client refuses its configuration: {first}") from e


def drop_memory_store(name: str) -> None:
    """Forget ``memory://name`` and every object in it (a test's store, say, once the test is done): a
    later URL under that name starts empty."""
    with _memory_lock:
        _memory_stores.pop(name, None)


class ObjectStorage(Storage):
    """The files of URLs under `root` as objects (module docstring)."""

    local = False
    hard_links = False
    appends = False  # an object is written once, whole
    uploads = True

    def __init__(self, root: str, options: dict[str, Any] | None = None, *, client: Client | None = None,
                 clock: RealTime = REAL_TIME) -> None:
        self.root = root.rstrip("/")
        given = client is not None
        # memory:// lives in this process only: worker processes and Spark executors cannot see it; nor
        # does a store given its own client (a simulation, storage.simstore)
        self.shared = not given and not self.root.startswith("memory" + URL_MARK)
        self.options = dict(options or {})
        if client is None:
            client = ObstoreClient(make_store(self.root, options))
            if not isinstance(clock, RealTime):
                # obstore's stores stamp objects by the host's wall clock: ages judged on another clock (a
                # simulation's) need the objects this store writes stamped by that clock
                client = StampedClient(client, clock.time)
        self.client: Client = client
        # what another process builds this store with (`storage.registered`): the configuration this
        # client was made with, the environment read now; a worker's own environment is the one it was
        # started with, which may predate the variables this process set
        own = {k: v for k, v in self.options.items() if k in RETRY_KEYS + CLIENT_KEYS}
        self.process_options = {**s3_config(options, RETRY_KEYS + CLIENT_KEYS), **own} if self.shared else {}
        # the clocks retries wait by and object ages are judged by (a simulation's, or the host's)
        self.clock = clock
        # whether sequential readers may fetch ahead in other threads (`RangeFile.read_ahead`): not in a
        # simulation, where every request must come from the thread the scheduler runs
        self.fetch_ahead = not given
        scheme, rest = self.root.split(URL_MARK, 1)
        self._bucket_url = f"{scheme}{URL_MARK}{rest.split('/', 1)[0]}"
        self._lock = threading.Lock()
        self._stats = dict.fromkeys(STAT_KEYS, 0)
        self.max_retries = int(self.options.get("max_retries", MAX_RETRIES))
        self.retry_timeout = int(self.options.get("retry_timeout_ms", RETRY_TIMEOUT_MS)) / 1000
        # the local disk cache of SST ranges (storage.objcache), set by DB.open from
        # DbOptions.object_cache_dir; None: nothing of this store is written locally
        self.cache: ObjectCache | None = None

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

    def _retrying(self, kind: str, attempt: Callable[[], T], path: str = "") -> T:
        """`attempt()` (one request of `kind`), repeated after a `transient` failure with exponential
        backoff, at most `max_retries` times within `retry_timeout`. Every failed attempt is counted
        (and each repeat as a retry); the caller counts the one that succeeds, with its bytes. The last
        error is raised as obstore raised it."""
        clock = self.clock
        deadline = clock.monotonic() + self.retry_timeout
        delay = BACKOFF_FIRST
        retries = 0
        while True:
            try:
                return attempt()
            except Exception as e:
                self.count(kind, 0, path)
                if not transient(e) or retries >= self.max_retries or clock.monotonic() + delay > deadline:
                    raise
            retries += 1
            self.count("retries")
            clock.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX)

    def _error(self, op: str, path: str, e: BaseException) -> OSError:
        """The OSError for request error `e` (anything but a request's failure or a panic is raised
        again as it is): "no such object", or `ObjectStoreError`'s one line (storage.objstore_errors)."""
        if not isinstance(e, Exception) and not is_panic(e):
            raise e  # KeyboardInterrupt, SystemExit: not the request's
        if isinstance(e, (NotFoundError, FileNotFoundError)) and "<Code>NoSuchBucket</Code>" not in str(e):
            return FileNotFoundError(errno.ENOENT, "no such object", path)
        cfg = s3_config(self.options, RETRY_KEYS + CLIENT_KEYS) if self.shared else {}
        bucket = self._bucket_url.split(URL_MARK, 1)[1]
        return request_error(e, op, path, bucket, self.key(path), cfg.get("endpoint"), secrets_of(cfg))

    # -- reads ---------------------------------------------------------------------------------------------
    def read(self, path: str) -> bytes:
        """The whole object: one GET."""
        key = self.key(path)
        try:
            data = self._retrying("get", lambda: self.client.get(key))
        except BaseException as e:
            raise self._error("get", path, e) from e
        self.count("get", len(data))
        return data

    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object: one ranged GET."""
        if end <= start:
            return b""
        key = self.key(path)
        try:
            data = self._retrying("get", lambda: self.client.get_range(key, start, end))
        except BaseException as e:
            raise self._error("get", path, e) from e
        self.count("get", len(data))
        return data

    def read_range_into(self, path: str, start: int, buf: Any) -> int:
        """Bytes [start, start + len(buf)) of the object (fewer at its end) into `buf`: one ranged GET,
        taken as a stream of small chunks, so no buffer of the range's size is allocated on the way (the
        read-ahead windows of `RangeFile` are kept and refilled). Returns how many bytes came."""
        key = self.key(path)
        view = memoryview(buf)

        def attempt() -> int:  # a repeat after a failure part way writes the range again from its start
            n = 0
            for chunk in self.client.get_range_stream(key, start, start + len(buf), STREAM_CHUNK):
                view[n : n + len(chunk)] = chunk
                n += len(chunk)
            return n

        try:
            n = self._retrying("get", attempt)
        except BaseException as e:
            raise self._error("get", path, e) from e
        self.count("get", n)
        return n

    def read_tail(self, path: str, nbytes: int) -> tuple[int, bytes, str]:
        """(object size, its last `nbytes` bytes, its identity) with one GET. The identity (size, ETag,
        last-modified time) changes whenever the name is written again: what the disk cache keys on."""
        key = self.key(path)

        try:
            size, data, meta = self._retrying("get", lambda: self.client.get_tail(key, nbytes))
        except BaseException as e:
            raise self._error("get", path, e) from e
        self.count("get", len(data))
        modified = meta["last_modified"].timestamp() if meta.get("last_modified") else ""
        return size, data, f"{path}\0{size}\0{meta.get('e_tag')}\0{meta.get('version')}\0{modified}"

    def size(self, path: str) -> int:
        """The object's size: one HEAD."""
        key = self.key(path)
        try:
            size = self._retrying("head", lambda: self.client.head(key))
        except BaseException as e:
            raise self._error("head", path, e) from e
        self.count("head")
        return size

    def exists(self, path: str) -> bool:
        """Whether the object exists: one HEAD."""
        try:
            self.size(path)
        except FileNotFoundError:
            return False
        return True

    def nothing_there(self, path: str) -> str:
        """No object under the URL (a memory:// store is seen only by the process that made it)."""
        if not self.shared:
            return "no object under this URL (a memory:// store exists only inside the process that created it)"
        return "no object under this URL"

    def list_entries(self, directory: str) -> list[str]:
        """Names of the objects and of the "subdirectories" (common prefixes) directly under
        `directory`: one LIST with a delimiter."""
        prefix = self.key(directory).rstrip("/")
        try:
            res = self._retrying("list", lambda: self.client.list_with_delimiter(prefix or None))
        except BaseException as e:
            raise self._error("list", directory, e) from e
        self.count("list")
        names = [p.rsplit("/", 1)[-1] for p in res["common_prefixes"]]
        return names + [m["path"].rsplit("/", 1)[-1] for m in res["objects"]]

    def map_whole(self, path: str) -> bytes:
        """The whole object, fetched with one GET."""
        return self.read(path)

    def open_map(self, path: str) -> RangeFile:
        """A `RangeFile` over the object (its tail fetched now)."""
        return RangeFile(self, path)

    def list_names(self, directory: str) -> list[str]:
        """Names of the objects directly under `directory`: LIST requests by prefix."""
        return list(self.list_mtimes(directory))

    def list_mtimes(self, directory: str) -> dict[str, float]:
        """name -> last-modified time of the objects directly under `directory`, from one listing."""
        return {name: meta["last_modified"].timestamp() for name, meta in self._list(directory).items()}

    def list_sizes(self, directory: str) -> dict[str, int]:
        """name -> size of the objects directly under `directory`, from one listing."""
        return {name: meta["size"] for name, meta in self._list(directory).items()}

    def _list(self, directory: str) -> dict[str, Any]:
        """name -> obstore's metadata of the objects directly under `directory` (a LIST per 1000)."""
        prefix = self.key(directory).rstrip("/") + "/"

        def attempt() -> dict[str, Any]:  # a listing that fails part way is started again
            out: dict[str, Any] = {}
            # S3 answers a LIST with pages of up to 1000 keys: one request per chunk of that size
            # (obstore's default chunks of 50 would count twenty requests for one page)
            for page in self.client.list_pages(prefix, LIST_PAGE):
                self.count("list")
                for meta in page:
                    rest = meta["path"][len(prefix) :]
                    if rest and "/" not in rest:
                        out[rest] = meta
            return out

        try:
            return self._retrying("list", attempt)
        except BaseException as e:
            raise self._error("list", directory, e) from e

    # -- writes --------------------------------------------------------------------------------------------
    def write_file(self, path: str, chunks: Iterable[Any], *, sync: bool = True, exclusive: bool = False) -> None:
        """One PUT of the joined `chunks` (multipart above `MULTIPART_MIN`); durable when it returns."""
        # an object is durable when its PUT returns, so `sync` changes nothing here
        if exclusive:
            data = b"".join(chunks)
            if not self.put_if_absent(path, data):
                raise FileExistsError(errno.EEXIST, "object exists", path)
            return
        parts = tuple(chunks)
        # one part goes as it is (obstore reads any buffer, a mapped file too), more are joined
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        key = self.key(path)
        multipart = len(data) > MULTIPART_MIN
        try:
            # a plain PUT is idempotent: a repeat after a lost response writes the same object again
            self._retrying("put", lambda: self.client.put(key, data, multipart, MULTIPART_CHUNK), path)
        except BaseException as e:
            raise self._error("put", path, e) from e
        self.count("put", len(data), path)

    def put_if_absent(self, path: str, data: bytes) -> bool:
        """One PUT with If-None-Match, repeated after a transient failure (module docstring: "already
        exists" after an attempt of ours that may have landed is decided by reading the object back)."""
        data = bytes(data)
        key = self.key(path)
        attempts = 0

        def attempt() -> None:
            nonlocal attempts
            attempts += 1
            self.client.put_create(key, data)

        try:
            self._retrying("put", attempt, path)
        except (AlreadyExistsError, PreconditionError):
            if attempts == 1:  # no attempt of ours can have landed: another writer's object
                return False
            # an earlier attempt failed transiently and may have landed with only its response lost:
            # the object is ours if it holds our bytes (which no other writer writes: see Storage)
            try:
                theirs = self.read(path)
            except OSError as e:
                raise PublishUnknownError(e) from e
            return theirs == data
        except BaseException as e:
            err = self._error("put", path, e)
            if attempts == 1 and not transient(e):  # refused outright (403, ...): nothing landed
                raise err from e
            raise PublishUnknownError(err) from e
        self.count("put", len(data), path)
        return True

    def delete(self, path: str) -> None:
        """One DELETE; an object already gone is fine."""
        key = self.key(path)
        try:
            self._retrying("delete", lambda: self.client.delete(key))
        except (NotFoundError, FileNotFoundError):
            return
        except BaseException as e:
            raise self._error("delete", path, e) from e
        self.count("delete")


__all__ = [
    "READAHEAD_BYTES",
    "TAIL_BYTES",
    "WINDOWS",
    "ObjectStorage",
    "RangeFile",
    "drop_memory_store",
    "make_store",
    "transient",
]
