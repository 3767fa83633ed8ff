"""Opening an SST through the storage seam: the reader (formats.sst_reader, a codec) is handed the file's
bytes as its backend serves them (an mmap of a local file, ranged GETs of an object)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from formats.sst import SsTableInfo, SstReader, SstWriter
from storage.base import Storage
from storage.registry import storage_for


def open_sst(path: str, *, storage: Storage | None = None, **kwargs: Any) -> SstReader:
    """An `SstReader` of the SST at `path`, read through `storage` (default: the backend that serves
    `path`, storage.registry). Keyword arguments go to `SstReader` (cache, cache_id, verify_checksums)."""
    st = storage if storage is not None else storage_for(path)
    try:
        view = st.open_map(path)
    except ValueError:
        raise ValueError(f"{path}: not a regular file, so not an SST") from None
    return SstReader(path, view=view, **kwargs)


def write_sst(path: str, rows: Iterable[Sequence], *, storage: Storage | None = None, **kwargs: Any) -> SsTableInfo:
    """Write `rows` (sorted) as a new SST at `path` through `storage` (default: the backend that serves
    `path`): one object, or a local file fsynced. Keyword arguments as for `formats.sst.SstWriter`."""
    st = storage if storage is not None else storage_for(path)
    w = SstWriter(path, put=lambda p, chunks: st.write_file(p, (b"".join(chunks),)), **kwargs)
    for r in rows:
        w.add(r)
    return w.finish()


__all__ = ["open_sst", "write_sst"]
