"""Small file-system helpers with the durability the engine promises.

The system calls themselves go through `formats.fileio` (one place, so tests can inject faults); a URL
(an object-store database) goes through its backend in `formats.storage`."""

from __future__ import annotations

from formats import fileio
from formats.storage import is_url, storage_for


def fsync_dir(path: str) -> None:
    """Make a directory's entries (new, renamed, deleted files) durable (nothing to do on an object store)."""
    if not is_url(path):
        fileio.fsync_dir(path)


def write_all(fd: int, data: bytes, path: str = "<fd>") -> None:
    """Hand every byte to the OS (short counts retried); raise FileOpError if that fails."""
    fileio.write(fd, data, path)


def numbered_files(directory: str, suffix: str) -> list[tuple[int, str]]:
    """(id, path) of files named ``%020d<suffix>`` in `directory`, sorted by id."""
    return storage_for(directory).list_numbered(directory, suffix)


def unlink_quiet(path: str) -> bool:
    """Delete a file no longer needed; True if it is gone. A failure leaves it for garbage collection:
    callers use this only for files nothing references any more, so it must not fail their work."""
    try:
        storage_for(path).delete(path)
    except OSError:
        return False
    return True
