"""A database's files as a test looks at them, on any backend: named by the store's own naming module
(storage.paths) and read or changed through the backend that serves the root, so a test that lists, damages
or removes a file runs the same on a directory, a memory store and S3."""

from __future__ import annotations

from storage.paths import DbStore, open_store

DIRS = ("manifest", "wal", "sst")


def store(root: str) -> DbStore:
    """The database at `root` resolved to its backend (a path or URL, as a test was given it)."""
    return open_store(root)


def _dir(s: DbStore, kind: str) -> str:
    if kind not in DIRS:
        raise ValueError(f"kind must be one of {DIRS}, not {kind!r}")
    return getattr(s.paths, f"{kind}_dir")


def names(root: str, kind: str) -> list[str]:
    """The file names in the database's `kind` directory ("manifest", "wal" or "sst"), sorted."""
    s = store(root)
    return sorted(n for n in s.storage.list_names(_dir(s, kind)) if not n.startswith("."))


def files(root: str) -> dict[str, list[str]]:
    """`names` of the SST and WAL directories: {"sst": [...], "wal": [...]}."""
    return {kind: names(root, kind) for kind in ("sst", "wal")}


def path(root: str, kind: str, name: str) -> str:
    """The path (URL) of file `name` in the database's `kind` directory."""
    s = store(root)
    return f"{_dir(s, kind)}/{name}"


def read(root: str, kind: str, name: str) -> bytes:
    """The bytes of file `name` of the `kind` directory."""
    return store(root).storage.read(path(root, kind, name))


def write(root: str, kind: str, name: str, data: bytes) -> None:
    """Replace (or create) file `name` of the `kind` directory with `data`, durably."""
    store(root).storage.write_file(path(root, kind, name), [data])


def remove(root: str, kind: str, name: str) -> None:
    """Delete file `name` of the `kind` directory."""
    store(root).storage.delete(path(root, kind, name))


def size(root: str, kind: str, name: str) -> int:
    """The size in bytes of file `name` of the `kind` directory."""
    return store(root).storage.size(path(root, kind, name))
