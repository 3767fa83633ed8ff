"""The name of every file a database writes, from its root: the one place a store path is built
(LevelDB's filename.h, SlateDB's paths.rs).

    <root>/manifest/%020d.manifest   a manifest version (storage.paths.MANIFEST_SUFFIX)
    <root>/manifest/WRITER_EPOCH     the current writer epoch, memory-mapped by writers (local only)
    <root>/manifest/.tmp-*           a version being published (local only; removed at the next open)
    <root>/wal/%020d.wal             a WAL segment (a local file) or WAL object
    <root>/sst/<name>.sst            an SST; only those a manifest names are live

The root is a directory or an object-store URL; names are joined with "/" either way (os.path.join on
a URL keeps its separators). `DbStore` is a database's root resolved once to the backend that serves it
(`open_store`): what `DB.open` hands down to every part of the engine.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from storage.base import Storage, numbered
from storage.local import LOCAL
from storage.registry import is_url, register

MANIFEST_DIR, WAL_DIR, SST_DIR = "manifest", "wal", "sst"
MANIFEST_SUFFIX, WAL_SUFFIX, SST_SUFFIX = ".manifest", ".wal", ".sst"
EPOCH_FILE = "WRITER_EPOCH"


@dataclasses.dataclass(frozen=True)
class DbPaths:
    """The paths of one database's files (module docstring)."""

    root: str

    @property
    def manifest_dir(self) -> str:
        """The directory (prefix) of the manifest versions."""
        return os.path.join(self.root, MANIFEST_DIR)

    @property
    def wal_dir(self) -> str:
        """The directory (prefix) of the WAL segments or objects."""
        return os.path.join(self.root, WAL_DIR)

    @property
    def sst_dir(self) -> str:
        """The directory (prefix) of the SSTs."""
        return os.path.join(self.root, SST_DIR)

    @property
    def epoch_file(self) -> str:
        """The memory-mapped writer epoch of a local database."""
        return os.path.join(self.manifest_dir, EPOCH_FILE)

    def manifest(self, manifest_id: int) -> str:
        """Manifest version `manifest_id`."""
        return os.path.join(self.manifest_dir, f"{manifest_id:020d}{MANIFEST_SUFFIX}")

    def wal(self, segment_id: int) -> str:
        """WAL segment (object) `segment_id`."""
        return os.path.join(self.wal_dir, f"{segment_id:020d}{WAL_SUFFIX}")

    def sst(self, name: str) -> str:
        """The SST file named `name` (a name as the manifest holds it, with its suffix)."""
        return os.path.join(self.sst_dir, name)

    def dirs(self) -> tuple[str, str, str]:
        """The three directories a local database has (created at its first open)."""
        return self.manifest_dir, self.wal_dir, self.sst_dir


def manifest_ids(storage: Storage, paths: DbPaths) -> list[tuple[int, str]]:
    """(id, path) of the manifest versions stored, ascending."""
    return storage.list_numbered(paths.manifest_dir, MANIFEST_SUFFIX)


def wal_ids(storage: Storage, paths: DbPaths, names: list[str] | None = None) -> list[tuple[int, str]]:
    """(id, path) of the WAL segments (objects) stored, ascending; from `names` if a listing is at hand."""
    if names is None:
        return storage.list_numbered(paths.wal_dir, WAL_SUFFIX)
    return numbered(paths.wal_dir, names, WAL_SUFFIX)


@dataclasses.dataclass(frozen=True)
class DbStore:
    """A database's root resolved to the backend that serves it, with the names of its files: what the
    engine is handed instead of a path it would have to resolve again."""

    storage: Storage
    paths: DbPaths
    options: dict[str, Any] | None = None  # the object-store options it was resolved with

    @property
    def root(self) -> str:
        """The database's path or URL, as given to `DB.open`."""
        return self.paths.root


def open_store(root: str | os.PathLike[str], options: dict[str, Any] | None = None) -> DbStore:
    """`root` (a directory or an object-store URL) resolved once: a URL to the object store registered
    for it (created with `options`, obstore's config keys, else the standard environment), a path to
    the local directory backend."""
    root = os.fspath(root)
    storage = register(root, options) if is_url(root) else LOCAL
    return DbStore(storage, DbPaths(root), options)


__all__ = [
    "EPOCH_FILE",
    "MANIFEST_SUFFIX",
    "SST_SUFFIX",
    "WAL_SUFFIX",
    "DbPaths",
    "DbStore",
    "manifest_ids",
    "open_store",
    "wal_ids",
]
