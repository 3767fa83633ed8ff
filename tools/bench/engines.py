"""The stores a `lsm bench` db-suite workload runs on: lsm itself, RocksDB (rocksdict), LevelDB (plyvel).

Each engine opens with its default options, in its own directory, and exposes what a workload needs:
a put function, batched writes, a get function, a full scan, and `prepare_reads` (the state readrandom
is measured on; each engine says what it did). Adding an engine: an `Engine` subclass with `name` and
`module` (the binding it needs), added to `ENGINES`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tools.render import plural


class Engine:
    """What a workload needs from a store. Each engine lives in its own directory."""

    name = "?"

    def __init__(self, path: str, sync: bool) -> None:
        self.path = path
        self.sync = sync
        self.db: Any = None

    module: str | None = None  # the binding this engine needs (importable when usable)

    @classmethod
    def available(cls) -> str | None:
        """None when usable, else why not."""
        if cls.module is not None and importlib.util.find_spec(cls.module) is None:
            return "not installed (pip install 'lsm-sim[bench]')"
        return None

    def version(self) -> str:
        """The engine and library version, for the output's ``# ...`` header lines."""
        return ""

    def open(self, fresh: bool) -> None:
        """(Re)open; ``fresh`` deletes this engine's directory first (db_bench's fresh_db)."""
        self.close()
        if fresh and os.path.exists(self.path):
            shutil.rmtree(self.path)
        self._open()

    def _open(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Close the store if it is open."""
        if self.db is not None:
            self.db.close()
            self.db = None

    def put_fn(self) -> Callable[[bytes, bytes], Any]:
        """``put(key, value)`` with this run's write options bound."""
        raise NotImplementedError

    def write_batch(self, pairs: Sequence[tuple[bytes, bytes]]) -> None:
        """One atomic batch through the engine's WriteBatch class (`_batch`) and write options (`_wo`)."""
        b = self._batch()
        put = b.put
        for k, v in pairs:
            put(k, v)
        self.db.write(b, self._wo)

    def get_fn(self) -> Callable[[bytes], bytes | None]:
        """``get(key) -> value or None``."""
        return self.db.get

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) in key order."""
        raise NotImplementedError

    def prepare_reads(self) -> str:
        """Bring the DB to the state readrandom is defined on; return what was done (for the output)."""
        return ""


class LsmEngine(Engine):
    """lsm-sim itself, ``lsm.DB.open(path, lsm.DbOptions())``."""

    name = "lsm"

    def version(self) -> str:
        try:
            return f"lsm-sim {importlib.metadata.version('lsm-sim')}"
        except importlib.metadata.PackageNotFoundError:
            return "lsm-sim"

    def _open(self) -> None:
        import lsm

        self.db = lsm.DB.open(self.path, lsm.DbOptions())
        self._wo = lsm.WriteOptions(sync=True) if self.sync else None
        self._batch = lsm.WriteBatch

    def put_fn(self) -> Callable[[bytes, bytes], Any]:
        return functools.partial(self.db.put, options=self._wo) if self._wo else self.db.put

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        return self.db.scan()

    def prepare_reads(self) -> str:
        self.db.flush()
        if hasattr(self.db, "compact"):
            self.db.compact()
            note = "after flush() + compact()"
        else:
            note = "after flush(); no compact() in this build"
        if hasattr(self.db, "lsm_shape"):
            shape = self.db.lsm_shape()
            runs = shape.get("runs", [])
            l0, ssts = len(shape.get("l0", [])), sum(map(len, runs))
            note += f": {plural(l0, 'L0 SST')}, {plural(len(runs), 'run')} of {plural(ssts, 'SST')}"
        return note


class RocksdictEngine(Engine):
    """RocksDB through rocksdict, default Options (so not raw mode: keys and values get a type byte)."""

    name = "rocksdict"

    module = "rocksdict"

    def version(self) -> str:
        v = f"rocksdict {importlib.metadata.version('rocksdict')}"
        try:  # RocksDB writes its version into the OPTIONS file of every DB
            for n in sorted(os.listdir(self.path)):
                if n.startswith("OPTIONS-"):
                    with open(os.path.join(self.path, n)) as f:
                        for line in f:
                            if line.strip().startswith("rocksdb_version="):
                                return f"{v} (RocksDB {line.split('=', 1)[1].strip()})"
        except OSError:
            pass
        return v

    def _open(self) -> None:
        import rocksdict

        self.db = rocksdict.Rdict(self.path)
        self._wo = None
        if self.sync:
            self._wo = rocksdict.WriteOptions()
            self._wo.sync = True
        self._batch = rocksdict.WriteBatch

    def put_fn(self) -> Callable[[bytes, bytes], Any]:
        return functools.partial(self.db.put, write_opt=self._wo) if self._wo else self.db.put

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(self.db.items())

    def prepare_reads(self) -> str:
        self.db.flush(wait=True)
        return "after flush(); no compact_range()"


class PlyvelEngine(Engine):
    """LevelDB through plyvel, ``plyvel.DB(path, create_if_missing=True)``, defaults otherwise."""

    name = "plyvel"

    module = "plyvel"

    def version(self) -> str:
        import plyvel

        return f"plyvel {plyvel.__version__} (LevelDB {plyvel.__leveldb_version__})"

    def _open(self) -> None:
        import plyvel

        self.db = plyvel.DB(self.path, create_if_missing=True)

    def put_fn(self) -> Callable[[bytes, bytes], Any]:
        return functools.partial(self.db.put, sync=True) if self.sync else self.db.put

    def write_batch(self, pairs: Sequence[tuple[bytes, bytes]]) -> None:
        with self.db.write_batch(sync=self.sync) as b:
            put = b.put
            for k, v in pairs:
                put(k, v)

    def get_fn(self) -> Callable[[bytes], bytes | None]:
        return self.db.get

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(self.db.iterator())

    def prepare_reads(self) -> str:
        # LevelDB has no flush call (compact_range would also compact everything): reads see up to one
        # 4 MiB memtable that is not flushed yet.
        return "no flush API; memtable left as is"


ENGINES: dict[str, type[Engine]] = {e.name: e for e in (LsmEngine, RocksdictEngine, PlyvelEngine)}
