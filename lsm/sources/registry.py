"""Sources by name: what ``lsm ingest DB SOURCE --source KIND`` opens.

KIND is a name of `SOURCES` or an import path ``package.module:Factory``; the factory is called with the
SOURCE argument (a directory, a path, a URL: whatever the adapter reads from) and must return a
`lsm.sources.Source`. So adding an adapter is one module implementing the protocol (and passing
`lsm.sources.verify_source`), with no change here: ``--source mypkg.kafka:KafkaTopic``.

>>> open_source("partitioned-log", "/nonexistent")
Traceback (most recent call last):
...
lsm.errors.SourceError: /nonexistent: not a directory (no partitioned log here)
"""

from __future__ import annotations

import importlib

from lsm.sources.protocol import Source

SOURCES = {
    "partitioned-log": "lsm.sources.partitioned_log:PartitionedLog",
    "database-log": "lsm.sources.database_log:DatabaseLog",
}


def factory_for(kind: str) -> object:
    """The factory KIND names (a name of `SOURCES` or ``package.module:Factory``); ValueError if none."""
    target = SOURCES.get(kind, kind)
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(
            f"unknown source {kind!r}: use one of {', '.join(SOURCES)} or package.module:Factory"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"source {kind!r}: cannot import {module_name}: {e}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ValueError(f"source {kind!r}: {module_name} has no callable {attr}")
    return factory


def open_source(kind: str, location: str) -> Source:
    """``factory(location)`` for the factory KIND names; ValueError unless it returns a `Source`."""
    src = factory_for(kind)(location)  # type: ignore[operator]
    if not isinstance(src, Source):
        raise ValueError(
            f"source {kind!r}: {type(src).__name__} is not a lsm.sources.Source (name, partitions, end, read)"
        )
    return src


__all__ = ["SOURCES", "factory_for", "open_source"]
