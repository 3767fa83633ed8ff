"""The manifest store: ``manifest/%020d.manifest``, one immutable file per version.

A new version is published by creating id + 1 if it does not exist (compare-and-swap), through the
storage seam (`formats.storage.Storage.put_if_absent`). In a local directory the content is written to a
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

import mmap
import os
import struct

from formats import fileio
from formats import manifest as codec
from formats.manifest import Manifest
from formats.storage import TMP_PREFIX, PublishUnknownError, storage_for  # noqa: F401 (re-exported)
from lsm.fsutil import numbered_files

SUFFIX = ".manifest"
EPOCH_FILE = "WRITER_EPOCH"
EPOCH = struct.Struct(">Q")


class ManifestStore:
    """The manifest versions of one database: ``<db>/manifest/%020d.manifest``, each written once."""

    def __init__(self, db_path: str) -> None:
        self.dir = os.path.join(db_path, "manifest")
        self.storage = storage_for(self.dir)

    def path(self, manifest_id: int) -> str:
        """The file of version `manifest_id`."""
        return os.path.join(self.dir, f"{manifest_id:020d}{SUFFIX}")

    def ids(self) -> list[int]:
        """The versions on disk, ascending."""
        return [i for i, _ in numbered_files(self.dir, SUFFIX)]

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
        if not self.storage.local:  # an object is published whole by one PUT: it leaves no temporaries
            return []
        return [os.path.join(self.dir, n) for n in self.storage.list_names(self.dir) if n.startswith(TMP_PREFIX)]

    def prunable(self, keep: int) -> list[str]:
        """The versions but the newest `keep` (readers only ever open the newest): for the version set
        to delete."""
        ids = self.ids()
        return [self.path(i) for i in (ids[:-keep] if keep > 0 else [])]


class FenceToken:
    """The shared, memory-mapped copy of the current writer epoch (see module docstring).

    An object-store database has no file to map: its token is this process's own copy (`LocalToken`),
    and fencing is decided by the store itself (a newer writer's WAL object id or manifest version)."""

    def __init__(self, manifest_dir: str) -> None:
        self.path = os.path.join(manifest_dir, EPOCH_FILE)
        fd = fileio.create(self.path, os.O_RDWR)
        try:
            if os.fstat(fd).st_size < EPOCH.size:
                fileio.pwrite(fd, EPOCH.pack(0), 0, self.path)
            self._map = mmap.mmap(fd, EPOCH.size)
        finally:
            os.close(fd)

    @property
    def view(self) -> mmap.mmap:
        """The mapping itself: ``view[0:8] != encode(epoch)`` is the cheapest fence check there is."""
        return self._map

    @staticmethod
    def encode(epoch: int) -> bytes:
        """The token bytes for `epoch` (what `view()[0:8]` holds once it is published)."""
        return EPOCH.pack(epoch)

    def read(self) -> int:
        """The epoch currently published."""
        return EPOCH.unpack_from(self._map, 0)[0]

    def publish(self, epoch: int) -> None:
        """Publish `epoch` as the current writer epoch (every process mapping the token sees it)."""
        self._map[0 : EPOCH.size] = EPOCH.pack(epoch)
        fileio.msync(self._map, self.path)

    def close(self) -> None:
        """Unmap the token."""
        self._map.close()


class LocalToken:
    """The fence token of an object-store database: our own epoch, or 0 once we learn we are fenced
    (a WAL object id or a manifest version another writer took). Same interface as `FenceToken`."""

    def __init__(self) -> None:
        self._buf = bytearray(EPOCH.size)

    @property
    def view(self) -> bytearray:
        """The token bytes, as `FenceToken.view`."""
        return self._buf

    encode = staticmethod(FenceToken.encode)

    def read(self) -> int:
        """The epoch currently held (0: fenced)."""
        return EPOCH.unpack_from(self._buf, 0)[0]

    def publish(self, epoch: int) -> None:
        """Hold `epoch` (0 marks this handle fenced)."""
        self._buf[0 : EPOCH.size] = EPOCH.pack(epoch)

    def close(self) -> None:
        """Nothing to release."""


def fence_token(store: ManifestStore) -> FenceToken | LocalToken:
    """The fence token of the database whose manifests `store` holds."""
    return FenceToken(store.dir) if store.storage.local else LocalToken()
