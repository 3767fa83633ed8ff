"""What `storage.objstore.ObjectStorage` asks of an object store, one request per call, and the time it
waits by.

`ObstoreClient` sends each call as one request through obstore (S3, or obstore's in-process memory
store). `storage.simstore.SimClient` answers the same calls from a simulated object store whose
latencies, reorderings, lost responses and failures come from a seeded scheduler, so the engine above
(`ObjectStorage` with its retries, its create-if-absent read-back, the WAL, the manifest, gc) runs
unchanged against it. Errors are obstore's own exception classes (`NotFoundError`, `AlreadyExistsError`,
`PreconditionError`, `GenericError` carrying the HTTP status in its message), whoever raises them, so
`ObjectStorage` tells transient from final failures in one way.

The time an `ObjectStorage` waits by is the seam's own (`storage.RealTime`, or a simulation's).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import obstore


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
