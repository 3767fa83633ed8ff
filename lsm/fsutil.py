"""Small file-system helpers with the durability the engine promises."""

from __future__ import annotations

import os


def fsync_dir(path: str) -> None:
    """Make a directory's entries (new, renamed, deleted files) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is handed to the OS."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


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


def unlink_quiet(path: str) -> None:
    """Delete `path`; a file that is already gone is not an error."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
