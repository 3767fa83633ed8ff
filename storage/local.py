"""The local directory backend of the storage seam: a database's files in a directory, through
`formats.fileio` (every write counted or failed there, fsync, hard-link publication) and mmap for reads.
Its hot path, the WAL append, does not pass through here (lsm.wal keeps its segment files open)."""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

from formats import fileio
from storage.base import TMP_PREFIX, PublishUnknownError, Storage


class LocalStorage(Storage):
    """Files in a local directory, through `formats.fileio` (module docstring)."""

    local = True

    def read(self, path: str) -> bytes:
        """The whole file."""
        with open(path, "rb") as f:
            return f.read()

    def prepare_database(self, root: str, dirs: tuple[str, ...], marker: str, create: bool) -> str | None:
        """A directory: refuse a file, a non-empty directory without `marker`, a missing one unless
        `create`; then make `root` and `dirs`."""
        if os.path.exists(root) and not os.path.isdir(root):
            return "is a file, not a database directory"
        if os.path.isdir(root):
            if os.listdir(root) and not os.path.isdir(marker):
                return "directory is not empty and holds no lsm-sim database"
        elif not create:
            return "no such database"
        if create:
            for d in (root, *dirs):
                os.makedirs(d, exist_ok=True)
        return None

    def read_appended(self, path: str, ident: Any, pos: int) -> tuple[Any, int, bytes] | None:
        """The bytes past `pos` of the file, if it is the same file (device and inode) and no shorter;
        else the whole file again. None if it is gone."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            st = os.fstat(fd)
            now = (st.st_dev, st.st_ino)
            start = pos if ident == now and pos <= st.st_size else 0
            return now, start, os.pread(fd, st.st_size - start, start) if st.st_size > start else b""
        finally:
            os.close(fd)

    def holds_directory(self, directory: str) -> bool:
        """os.path.isdir."""
        return os.path.isdir(directory)

    def stale_temporaries(self, directory: str) -> list[str]:
        """The ``.tmp-*`` files in `directory` (`put_if_absent` writes its temporary file there)."""
        return [os.path.join(directory, n) for n in self.list_names(directory) if n.startswith(TMP_PREFIX)]

    def shared_cell(self, path: str, size: int) -> Any:
        """An mmap of the file at `path` (created and zero-filled to `size` if shorter)."""
        fd = fileio.create(path, os.O_RDWR)
        try:
            if os.fstat(fd).st_size < size:
                fileio.pwrite(fd, bytes(size), 0, path)
            return mmap.mmap(fd, size)
        finally:
            os.close(fd)

    def read_exclusive(self, path: str) -> bytes:
        """The whole file, read under an exclusive flock (waits out a writer's append in flight)."""
        with open(path, "rb") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
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
        return fileio.map_file(path)

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
        fileio.write_file(path, chunks, sync=sync, exclusive=exclusive)

    @contextlib.contextmanager
    def replacing(self, path: str) -> Iterator[BinaryIO]:
        """A temporary file beside `path` to stream into, fsynced and renamed over it when the block ends
        without an error (removed otherwise)."""
        tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            with open(tmp, "wb") as f:
                yield f
                f.flush()
                fileio.fsync(f.fileno(), tmp)
            fileio.rename(tmp, path)
        finally:
            _unlink_quiet(tmp)

    def remove_tree(self, directory: str) -> None:
        """shutil.rmtree (errors ignored)."""
        shutil.rmtree(directory, ignore_errors=True)

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

