"""Which backend serves a path: a local path is the local directory backend, a URL (``s3://bucket/…``,
``memory://name/…``, ``sim://…``) the object store registered for its root.

`DB.open` resolves a path once (`open_store`, storage.store) and hands the backend down; the registry
is what lets another process resolve the same URL to the same store: a compaction worker or a Spark
executor receives `registered()` with its job and `install`s it, and a tool given a URL on the
command line resolves it here.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from storage.base import REAL_TIME, RealTime, Storage
from storage.local import LOCAL

URL_MARK = "://"


def is_url(path: str) -> bool:
    """Whether `path` names an object (``scheme://…``) rather than a local file."""
    return URL_MARK in path


# -- the registry of object stores -------------------------------------------------------------------------
_registry: dict[str, Storage] = {}  # root URL (no trailing "/") -> its backend
_attached: set[str] = set()  # the roots of `_registry` whose backend a caller built (`attach`)
_registry_lock = threading.Lock()


def _root_of(url: str) -> str:
    """``scheme://bucket`` of a URL: the store a path is resolved in when no database root is registered."""
    scheme, rest = url.split(URL_MARK, 1)
    return f"{scheme}{URL_MARK}{rest.split('/', 1)[0]}"


def register(root: str, options: dict[str, Any] | None = None, clock: RealTime | None = None) -> Storage:
    """The backend for the database (or bucket) at URL `root`, created with obstore config `options`
    (else the standard environment) the first time, and kept: later paths under `root` resolve to it, so
    its request counters are that database's. A second call with options replaces the client. `clock`:
    the clocks its requests wait by and its objects age by (`Storage.clock`; default the host's, and a
    later call without one keeps the backend's): a simulation gives its simulated clock (tools.simulate)."""
    root = root.rstrip("/")
    with _registry_lock:
        have = _registry.get(root)
        if (have is not None and (not options or getattr(have, "options", None) == options)
                and (clock is None or have.clock is clock)):
            return have
        from storage.objstore import ObjectStorage  # obstore is imported only by object-store users

        if have is None and not options:
            # a database under a root registered with its configuration (a bucket registered with its
            # credentials) is reached as that root is, with counters of its own; under an attached
            # root, by the attached backend itself
            parent, parent_root = _longest_prefix(root)
            if parent is not None and parent_root in _attached:
                return parent
            if parent is not None:
                options = getattr(parent, "options", None)
                clock = clock if clock is not None else parent.clock
        if clock is None:
            clock = have.clock if have is not None else REAL_TIME
        st = ObjectStorage(root, options, clock=clock)
        _registry[root] = st
        _attached.discard(root)
        return st


def attach(root: str, storage: Storage) -> Storage:
    """Serve every URL under `root` from `storage`, a backend the caller built (a simulated object store,
    storage.simstore), until `detach(root)`. Returns `storage`."""
    with _registry_lock:
        _registry[root.rstrip("/")] = storage
        _attached.add(root.rstrip("/"))
    return storage


def is_attached(path: str) -> bool:
    """Whether `path` is a URL under a root whose backend a caller attached (`attach`): its scheme is that
    backend's own (a simulation's ``sim://``), not one of the URLs a user may give, so the checks of
    `storage.objstore_config` do not apply to it."""
    with _registry_lock:
        return any(path == root or path.startswith(root + "/") for root in _attached)


def detach(root: str) -> None:
    """Forget the backend of `root` (`attach`, `register`)."""
    with _registry_lock:
        _registry.pop(root.rstrip("/"), None)
        _attached.discard(root.rstrip("/"))


def registered() -> list[tuple[str, dict[str, Any]]]:
    """(root, options) of every registered object store, for a worker process to `install`: the options
    each was built with, the environment's values included."""
    with _registry_lock:
        return [(root, dict(st.process_options)) for root, st in _registry.items() if st.shared]


def install(entries: list[tuple[str, dict[str, Any]]]) -> None:
    """Register the object stores of another process's `registered()` (a compaction worker's job)."""
    for root, options in entries:
        with _registry_lock:
            have = _registry.get(root)
        if have is None or have.options != options:
            register(root, options)


def storage_for(path: str | os.PathLike[str]) -> Storage:
    """The backend that owns `path`: the local file system for a path, else the registered object
    store with the longest root that is a prefix of the URL (registering its bucket if none is)."""
    p = os.fspath(path)
    if URL_MARK not in p:
        return LOCAL
    best, _root = _longest_prefix(p, proper=False)
    if best is not None:
        return best
    return register(_root_of(p))


def _longest_prefix(path: str, *, proper: bool = True) -> tuple[Storage | None, str]:
    """The registered backend with the longest root that `path` lies under (or is, unless `proper`)."""
    best: Storage | None = None
    best_root = ""
    for root, st in list(_registry.items()):
        under = path.startswith(root + "/") or (not proper and path == root)
        if under and len(root) > len(best_root):
            best, best_root = st, root
    return best, best_root


def path_kind(path: str | os.PathLike[str]) -> str | None:
    """What is at `path`: "dir", "file" (a regular file), "other" (a FIFO, a device) or None (nothing).
    On an object store an object is a file and a prefix that other objects lie under is a directory (one
    HEAD, then one LIST if there is no object)."""
    p = os.fspath(path)
    if not is_url(p):
        if os.path.isdir(p):
            return "dir"
        if os.path.isfile(p):
            return "file"
        return "other" if os.path.exists(p) else None
    st = storage_for(p)
    if key_of(p).strip("/") and st.exists(p):
        return "file"
    return "dir" if st.list_entries(p) else None


def key_of(url: str) -> str:
    """The object key of a URL within its bucket (``s3://b/db/sst/x`` -> ``db/sst/x``)."""
    _scheme, rest = url.split(URL_MARK, 1)
    return rest.split("/", 1)[1] if "/" in rest else ""

