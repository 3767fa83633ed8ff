"""Small file-system helpers with the durability the engine promises.

The system calls themselves go through `formats.fileio` (one place, so tests can inject faults)."""

from __future__ import annotations

import os

from formats import fileio


def fsync_dir(path: str) -> None:
    """Make a directory's entries (new, renamed, deleted files) durable."""
    fileio.fsync_dir(path)


def write_all(fd: int, data: bytes, path: str = "<fd>") -> None:
    """Hand every byte to the OS (short counts retried); raise FileOpError if that fails."""
    fileio.write(fd, data, path)


def numbered_files(directory: str, suffix: str) -> list[tuple[int, str]]:
    """(id, path) of files named ``%020d<suffix>`` in `directory`, sorted by id."""
    out = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            if stem.isdigit():
                out.append((int(stem), os.path.join(directory, name)))
    out.sort()
    return out


def unlink_quiet(path: str) -> bool:
    """Delete a file no longer needed; True if it is gone. A failure leaves it for garbage collection:
    callers use this only for files nothing references any more, so it must not fail their work."""
    try:
        fileio.unlink(path)
    except OSError:
        return False
    return True
