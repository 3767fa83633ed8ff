"""The manifest store: ``manifest/%020d.manifest``, one immutable file per version.

A new version is published by creating id + 1 if it does not exist (compare-and-swap), through the
storage seam (`storage.Storage.put_if_absent`). In a local directory the content is written to a
temporary file, fsynced, then hard-linked to its final name, which fails if another process got there
first; on an object store it is one PUT with If-None-Match, which the store refuses if the object exists.
Either way a version is never seen half-written, and two writers never both win.

Failures: an error before the link (creating, writing or fsyncing the temporary file) means the version
was not published; the temporary file is removed and the OSError raised. An error at or after the link
(the link itself, the directory fsync) means the version MAY be published: `PublishUnknownError` says so,
and the caller must neither roll back nor reuse anything the version references — the next open decides
from what is on disk. Temporary files a crash left behind (`stale_tmp`) are removed at open;
that open has already fenced every earlier handle, so a fenced writer may find its temporary file gone
when it links: the link then fails with ENOENT, nothing is published, and the writer reports
`FencedError` (lsm.versions).

Fencing: every open bumps `writer_epoch` (and `compactor_epoch`) in the manifest; a commit that finds a
newer epoch raises FencedError. Writes do not read the manifest, so the current writer epoch is also kept
in ``manifest/WRITER_EPOCH`` (8 bytes, big-endian), which every writer maps into memory and checks before
each WAL append — a check that costs a memory read, not a system call (the flock protocol that closes the
race between that check and the append is described in `lsm.wal` and `lsm.db`).
"""

from __future__ import annotations

import os
import struct

from formats import fileio
from formats import manifest as codec
from formats.manifest import Manifest
from storage import TMP_PREFIX, PublishUnknownError  # noqa: F401 (re-exported)
from storage.paths import DbStore, manifest_ids, open_store

EPOCH = struct.Struct(">Q")


class ManifestStore:
    """The manifest versions of one database: ``<db>/manifest/%020d.manifest``, each written once.

    Given the `DbStore` the engine resolved at open; a path or URL (a tool's argument) is resolved here."""

    def __init__(self, store: DbStore | str | os.PathLike[str]) -> None:
        self.db = store if isinstance(store, DbStore) else open_store(store)
        self.dir = self.db.paths.manifest_dir
        self.storage = self.db.storage

    def path(self, manifest_id: int) -> str:
        """The file of version `manifest_id`."""
        return self.db.paths.manifest(manifest_id)

    def ids(self) -> list[int]:
        """The versions on disk, ascending."""
        return [i for i, _ in manifest_ids(self.storage, self.db.paths)]

    def read(self, manifest_id: int) -> Manifest:
        """Decode version `manifest_id` (CorruptionError naming the file if it does not decode)."""
        p = self.path(manifest_id)
        return codec.decode(self.storage.read(p), p)

    def latest(self) -> tuple[int, Manifest | None]:
        """(id, manifest) of the newest version, or (0, None) when there is none."""
        ids = self.ids()
        if not ids:
            return 0, None
        return ids[-1], self.read(ids[-1])

    def try_create(self, manifest_id: int, m: Manifest) -> bool:
        """Publish version `manifest_id`; False if it already exists (someone else committed).

        OSError: not published. PublishUnknownError: maybe published (see the module docstring)."""
        return self.storage.put_if_absent(self.path(manifest_id), codec.encode(m))

    def stale_tmp(self) -> list[str]:
        """Temporary files of commits that never finished (a crash between write and link): for the
        version set to delete (`lsm.versions.VersionSet.delete_files`) once it owns the store."""
        return self.storage.stale_temporaries(self.dir)

    def prunable(self, keep: int) -> list[str]:
        """The versions but the newest `keep` (readers only ever open the newest): for the version set
        to delete."""
        ids = self.ids()
        return [self.path(i) for i in (ids[:-keep] if keep > 0 else [])]


class FenceToken:
    """The current writer epoch as every writer of the database sees it: a memory cell the backend shares
    between processes (`Storage.shared_cell`: the mapped WRITER_EPOCH file of a directory), or, where
    there is none (an object store), this process's own copy, set to 0 once it learns it is fenced (a
    WAL object id or a manifest version another writer took): the store itself decides fencing there.

    ``view[0:8] != encode(epoch)`` is the cheapest fence check there is (a memory read)."""

    def __init__(self, store: DbStore) -> None:
        self.path = store.paths.epoch_file
        self._map = store.storage.shared_cell(self.path, EPOCH.size)
        self.shared = self._map is not None  # False: this process's own copy (module docstring)
        if self._map is None:
            self._map = bytearray(EPOCH.size)

    @property
    def view(self) -> bytes | bytearray:
        """The cell itself (`view[0:8]` is the published epoch's encoding)."""
        return self._map

    @staticmethod
    def encode(epoch: int) -> bytes:
        """The token bytes for `epoch` (what `view[0:8]` holds once it is published)."""
        return EPOCH.pack(epoch)

    def read(self) -> int:
        """The epoch currently published (0 for a process's own copy that learned it is fenced)."""
        return EPOCH.unpack_from(self._map, 0)[0]

    def publish(self, epoch: int) -> None:
        """Publish `epoch` as the current writer epoch (every process sharing the cell sees it; 0 marks
        this handle fenced)."""
        self._map[0 : EPOCH.size] = EPOCH.pack(epoch)
        if self.shared:
            fileio.msync(self._map, self.path)

    def close(self) -> None:
        """Unmap a shared cell."""
        if self.shared:
            self._map.close()
