"""The manifest store: ``manifest/%020d.manifest``, one immutable file per version.

A new version is published by creating id + 1 if it does not exist (compare-and-swap): the content is
written to a temporary file, fsynced, then hard-linked to its final name, which fails if another process
got there first. So a version file is never seen half-written, and two writers never both win.

Failures: an error before the link (creating, writing or fsyncing the temporary file) means the version
was not published; the temporary file is removed and the OSError raised. An error at or after the link
(the link itself, the directory fsync) means the version MAY be published: `PublishUnknownError` says so,
and the caller must neither roll back nor reuse anything the version references — the next open decides
from what is on disk. Temporary files a crash left behind are removed by `remove_stale_tmp` at open;
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

import errno
import mmap
import os
import struct
import uuid

from formats import fileio
from formats import manifest as codec
from formats.manifest import Manifest
from lsm.fsutil import fsync_dir, numbered_files, unlink_quiet

SUFFIX = ".manifest"
EPOCH_FILE = "WRITER_EPOCH"
EPOCH = struct.Struct(">Q")


TMP_PREFIX = ".tmp-"


class PublishUnknownError(Exception):
    """A manifest version may or may not be published (the link or the directory fsync failed)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


class ManifestStore:
    """The manifest versions of one database: ``<db>/manifest/%020d.manifest``, each written once."""

    def __init__(self, db_path: str) -> None:
        self.dir = os.path.join(db_path, "manifest")

    def path(self, manifest_id: int) -> str:
        """The file of version `manifest_id`."""
        return os.path.join(self.dir, f"{manifest_id:020d}{SUFFIX}")

    def ids(self) -> list[int]:
        """The versions on disk, ascending."""
        return [i for i, _ in numbered_files(self.dir, SUFFIX)]

    def read(self, manifest_id: int) -> Manifest:
        """Decode version `manifest_id` (CorruptionError naming the file if it does not decode)."""
        p = self.path(manifest_id)
        with open(p, "rb") as f:
            return codec.decode(f.read(), p)

    def latest(self) -> tuple[int, Manifest | None]:
        """(id, manifest) of the newest version, or (0, None) when there is none."""
        ids = self.ids()
        if not ids:
            return 0, None
        return ids[-1], self.read(ids[-1])

    def try_create(self, manifest_id: int, m: Manifest) -> bool:
        """Publish version `manifest_id`; False if it already exists (someone else committed).

        OSError: not published. PublishUnknownError: maybe published (see the module docstring)."""
        final = self.path(manifest_id)
        tmp = os.path.join(self.dir, f"{TMP_PREFIX}{uuid.uuid4().hex}")
        data = codec.encode(m)
        fd = fileio.create(tmp, os.O_WRONLY | os.O_EXCL)
        try:
            try:
                fileio.write(fd, data, tmp)  # every byte, or an error: never a short manifest
                fileio.fsync(fd, tmp)
            finally:
                os.close(fd)
        except BaseException:
            unlink_quiet(tmp)
            raise
        try:
            fileio.link(tmp, final)
        except FileExistsError:
            unlink_quiet(tmp)
            return False
        except OSError as e:
            unlink_quiet(tmp)
            if e.errno == errno.ENOENT:
                # our temporary file is gone, so nothing was linked: a newer opener removed it (the
                # caller finds itself fenced), or something else did (not published either way)
                raise
            raise PublishUnknownError(e) from e
        unlink_quiet(tmp)
        try:
            fsync_dir(self.dir)
        except OSError as e:
            raise PublishUnknownError(e) from e
        return True

    def remove_stale_tmp(self) -> list[str]:
        """Delete temporary files of commits that never finished (a crash between write and link)."""
        removed = []
        for name in os.listdir(self.dir):
            if name.startswith(TMP_PREFIX) and unlink_quiet(os.path.join(self.dir, name)):
                removed.append(name)
        return removed

    def prune(self, keep: int) -> None:
        """Delete all but the newest `keep` versions (readers only ever open the newest)."""
        ids = self.ids()
        for i in ids[:-keep] if keep > 0 else []:
            unlink_quiet(self.path(i))


class FenceToken:
    """The shared, memory-mapped copy of the current writer epoch (see module docstring)."""

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
