"""What `storage.objstore.ObjectStorage` asks of an object store, one request per call, and the time it
waits by.

`ObstoreClient` sends each call as one request through obstore (S3, or obstore's in-process memory
store). `storage.simstore.SimClient` answers the same calls from a simulated object store whose
latencies, reorderings, lost responses and failures come from a seeded scheduler, so the engine above
(`ObjectStorage` with its retries, its create-if-absent read-back, the WAL, the manifest, gc) runs
unchanged against it. Errors are obstore's own exception classes (`NotFoundError`, `AlreadyExistsError`,
`PreconditionError`, `GenericError` carrying the HTTP status in its message), whoever raises them, so
`ObjectStorage` tells transient from final failures in one way.

The time an `ObjectStorage` waits by is the seam's own (`storage.RealTime`, or a simulation's). An
object's age is judged from its last-modified time, which a real store stamps by the host's wall clock
when the object lands; `StampedClient` stamps the objects it writes by another clock (a simulation's
instead), so that their ages are on the clock the `ObjectStorage` judges them by.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import obstore
from obstore.exceptions import AlreadyExistsError, PreconditionError


class Client(Protocol):
    """One object-store request per method (see the module docstring)."""

    def get(self, key: str) -> bytes:
        """The whole object (GET)."""

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object (a ranged GET)."""

    def get_range_stream(self, key: str, start: int, end: int, chunk: int) -> Iterator[Any]:
        """Bytes [start, end) as a stream of buffers of about `chunk` bytes (one ranged GET)."""

    def get_tail(self, key: str, nbytes: int) -> tuple[int, bytes, dict[str, Any]]:
        """(object size, its last `nbytes` bytes, its metadata: e_tag, version, last_modified), one GET."""

    def head(self, key: str) -> int:
        """The object's size (HEAD)."""

    def list_pages(self, prefix: str, page: int) -> Iterator[list[dict[str, Any]]]:
        """Metadata (path, size, last_modified) of the objects under `prefix`, one list per LIST response
        of up to `page` keys."""

    def list_with_delimiter(self, prefix: str | None) -> dict[str, Any]:
        """The objects ("objects") and common prefixes ("common_prefixes") one level under `prefix`."""

    def put(self, key: str, data: Any, multipart: bool, chunk_size: int) -> None:
        """Write the object, replacing any (in parts of `chunk_size` if `multipart`)."""

    def put_create(self, key: str, data: bytes) -> None:
        """Write the object only if none exists (If-None-Match: *): AlreadyExistsError or PreconditionError
        if one does."""

    def delete(self, key: str) -> None:
        """Remove the object (one already gone is fine)."""


class ObstoreClient:
    """`Client` over an obstore store (an `S3Store`, a `MemoryStore`)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def get(self, key: str) -> bytes:
        """The whole object."""
        return bytes(obstore.get(self.store, key).bytes())

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object."""
        return bytes(obstore.get_range(self.store, key, start=start, end=end))

    def get_range_stream(self, key: str, start: int, end: int, chunk: int) -> Iterator[Any]:
        """Bytes [start, end) as a stream of buffers of about `chunk` bytes."""
        res = obstore.get(self.store, key, options={"range": (start, end)})
        return iter(res.stream(min_chunk_size=chunk))

    def get_tail(self, key: str, nbytes: int) -> tuple[int, bytes, dict[str, Any]]:
        """(object size, its last `nbytes` bytes, its metadata: e_tag, version, last_modified)."""
        res = obstore.get(self.store, key, options={"range": {"suffix": nbytes}})
        return res.meta["size"], bytes(res.bytes()), res.meta

    def head(self, key: str) -> int:
        """The object's size."""
        return obstore.head(self.store, key)["size"]

    def list_pages(self, prefix: str, page: int) -> Iterator[list[dict[str, Any]]]:
        """Metadata (path, size, last_modified) of the objects under `prefix`, one list per LIST response."""
        return iter(obstore.list(self.store, prefix, return_arrow=False, chunk_size=page))

    def list_with_delimiter(self, prefix: str | None) -> dict[str, Any]:
        """The objects ("objects": metadata) and common prefixes ("common_prefixes") one level under `prefix`."""
        return obstore.list_with_delimiter(self.store, prefix)

    def put(self, key: str, data: Any, multipart: bool, chunk_size: int) -> None:
        """Write the object (replacing any), in parts of `chunk_size` if `multipart`."""
        obstore.put(self.store, key, data, use_multipart=multipart, chunk_size=chunk_size)

    def put_create(self, key: str, data: bytes) -> None:
        """Write the object only if it does not exist (If-None-Match: *)."""
        obstore.put(self.store, key, data, mode="create")

    def delete(self, key: str) -> None:
        """Remove the object."""
        obstore.delete(self.store, key)


class StampedClient:
    """`Client` over `inner` whose listings give the objects it wrote the last-modified time `now()`
    (seconds since the epoch) returned when their PUT did, instead of the store's own stamp.

    For a simulation on a simulated clock against a real store (obstore's memory store, an S3 server):
    the store stamps objects by the host's wall clock, so an object's age (``now() - last_modified``, the
    WAL's deletion grace) would depend on how fast the simulation runs. There the simulation is one
    process and its simulated clock is the only time anything happens on, so the time of each write on
    that clock is known here. An object this client did not write (another process's, or one written
    before it was made) keeps the store's stamp. Every request is still exactly one request of `inner`."""

    def __init__(self, inner: Client, now: Callable[[], float]) -> None:
        self.inner = inner
        self.now = now
        self._stamps: dict[str, float] = {}  # key -> when (by `now`) this client wrote it
        self._lock = threading.Lock()  # SSTs are uploaded from a background thread

    def _stamp(self, key: str) -> float | None:
        """Stamp `key` now, before its PUT is sent (a PUT that fails may still have landed, at this time
        on our clock); returns the stamp it had."""
        with self._lock:
            before = self._stamps.get(key)
            self._stamps[key] = self.now()
            return before

    def _restamp(self, metas: list[dict[str, Any]]) -> list[dict[str, Any]]:
        with self._lock:
            stamps = [self._stamps.get(m["path"]) for m in metas]
        return [m if t is None else {**m, "last_modified": datetime.datetime.fromtimestamp(t, datetime.UTC)}
                for m, t in zip(metas, stamps, strict=True)]

    def get(self, key: str) -> bytes:
        """The whole object."""
        return self.inner.get(key)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object."""
        return self.inner.get_range(key, start, end)

    def get_range_stream(self, key: str, start: int, end: int, chunk: int) -> Iterator[Any]:
        """Bytes [start, end) as a stream of buffers of about `chunk` bytes."""
        return self.inner.get_range_stream(key, start, end, chunk)

    def get_tail(self, key: str, nbytes: int) -> tuple[int, bytes, dict[str, Any]]:
        """(object size, its last `nbytes` bytes, its metadata as the store gave it: an identity, not an age)."""
        return self.inner.get_tail(key, nbytes)

    def head(self, key: str) -> int:
        """The object's size."""
        return self.inner.head(key)

    def list_pages(self, prefix: str, page: int) -> Iterator[list[dict[str, Any]]]:
        """The store's pages of metadata, this client's objects stamped by `now` (one LIST a page)."""
        for metas in self.inner.list_pages(prefix, page):
            yield self._restamp(metas)

    def list_with_delimiter(self, prefix: str | None) -> dict[str, Any]:
        """The objects and common prefixes one level under `prefix`, this client's objects stamped by `now`."""
        res = self.inner.list_with_delimiter(prefix)
        return {**res, "objects": self._restamp(list(res["objects"]))}

    def put(self, key: str, data: Any, multipart: bool, chunk_size: int) -> None:
        """Write the object (replacing any), stamped now."""
        self._stamp(key)
        self.inner.put(key, data, multipart, chunk_size)

    def put_create(self, key: str, data: bytes) -> None:
        """Write the object only if it does not exist, stamped now; an object that exists keeps its stamp."""
        before = self._stamp(key)
        try:
            self.inner.put_create(key, data)
        except (AlreadyExistsError, PreconditionError):  # not ours: nothing of this request landed
            with self._lock:
                if before is None:
                    self._stamps.pop(key, None)
                else:
                    self._stamps[key] = before
            raise

    def delete(self, key: str) -> None:
        """Remove the object, and its stamp."""
        self.inner.delete(key)
        with self._lock:
            self._stamps.pop(key, None)
