"""The stores a `lsm bench` db-suite workload runs on: lsm itself, RocksDB (rocksdict), LevelDB (plyvel),
SlateDB (`tools.bench.engine_slatedb`).

Each engine opens in its own directory and exposes what a workload needs: a put function, batched
writes, a get function, a full scan, `prepare_reads` (the state readrandom is measured on; each engine
says what it did) and `sst_bytes_written` (for write amplification). lsm runs its default options with
the run's compaction policy; ``rocksdict`` is RocksDB configured like that lsm (`rocksdb_like_lsm`: the
same memtable size, L0 trigger and compression, and the compaction style that matches the policy,
`ROCKSDB_STYLE`), ``rocksdict-defaults`` is RocksDB with its own defaults; plyvel runs LevelDB's
defaults. Adding an engine: an `Engine` subclass with `name`, `module` (the binding it needs), `package`
(what installs it) and `describe`, added to `ENGINES`.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from compaction.policy import DEFAULT_POLICY, POLICIES
from tools.render import plural

# lsm's compaction policy -> the RocksDB compaction style it is compared with: size-tiered merges whole
# sorted runs as universal compaction does, leveled keeps one run per level as level compaction does,
# fifo drops whole files as FIFO compaction does
ROCKSDB_STYLE = {"tiered": "universal", "leveled": "level", "fifo": "fifo"}


def bench_policies() -> list[str]:
    """lsm's compaction policies the bench can compare (those with a RocksDB style), in registry order."""
    return [p for p in POLICIES if p in ROCKSDB_STYLE]


class Engine:
    """What a workload needs from a store. Each engine lives in its own directory."""

    name = "?"

    def __init__(self, path: str, sync: bool, policy: str = DEFAULT_POLICY) -> None:
        self.path = path
        self.sync = sync
        self.policy = policy  # lsm's compaction policy in this run (what the like-for-like engines match)
        self.db: Any = None

    def describe(self) -> str:
        """How this engine is configured, for the output's ``Engines:`` header."""
        return "default options"

    def sst_bytes_written(self) -> int | None:
        """Bytes written to SSTs (flushes and compactions) since the engine opened, or None when the
        engine does not tell (write amplification is then not reported)."""
        return None

    def flush_bytes_written(self) -> int | None:
        """The flushes' part of `sst_bytes_written` (None when the engine does not tell)."""
        return None

    def settle(self) -> str:
        """Flush the memtables and wait until no compaction is due or running (``--settle``); return what
        was done, or "" when the engine cannot."""
        return ""

    module: str | None = None  # the binding this engine needs (importable when usable)
    package: str | None = None  # the distribution that installs `module` (pip install NAME)
    on_s3 = False  # runs on the bench's S3 endpoint (--store s3), not in a local directory

    @classmethod
    def available(cls) -> str | None:
        """None when usable, else why not (naming the package to install)."""
        if cls.module is None:
            return None
        package = cls.package or cls.module
        try:  # imported, not only found: a binding whose native library cannot load is not usable either
            importlib.import_module(cls.module)
        except ModuleNotFoundError as e:
            if e.name is None or e.name.split(".")[0] != cls.module.split(".")[0]:
                return f"the Python package {package!r} does not import ({e})"
            return f"the Python package {package!r} is not installed: pip install {package} (or 'lsm-sim[bench]')"
        except ImportError as e:
            return f"the Python package {package!r} does not import ({e})"
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

    def put_many(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        """One put per pair, in order (a benchmark's chunk; an asyncio engine runs it as one coroutine)."""
        put = self.put_fn()
        for k, v in pairs:
            put(k, v)

    def get_fn(self) -> Callable[[bytes], bytes | None]:
        """``get(key) -> value or None``."""
        return self.db.get

    def count_found(self, keys: Sequence[bytes]) -> int:
        """One get per key; how many found a value (readrandom's chunk)."""
        get = self.get_fn()
        found = 0
        for k in keys:
            if get(k) is not None:
                found += 1
        return found

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

        preload_lazy_imports()
        self.db = lsm.DB.open(self.path, lsm_options(self.policy))
        self._wo = lsm.WriteOptions(sync=True) if self.sync else None
        self._batch = lsm.WriteBatch

    def describe(self) -> str:
        return f"DbOptions(compaction_policy={self.policy!r})"

    def sst_bytes_written(self) -> int | None:
        # compactions still running are not counted yet; trivial moves write nothing
        return self.db.flush_bytes_written + self.db.compaction_stats.bytes_out

    def flush_bytes_written(self) -> int | None:
        return self.db.flush_bytes_written

    def settle(self) -> str:
        # compact() waits for a running background job (one lock), then runs what the policy picks
        # until nothing is due: where background compaction would end up
        self.db.flush()
        self.db.compact()
        return "settled: flush() + compact()"

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


class LsmS3Engine(LsmEngine):
    """lsm-sim on an object store (``lsm bench --store s3``): the same options, the database at an S3
    URL (`tools.bench.s3`). `path` is the bucket URL; each fresh open takes a new prefix under it."""

    name = "lsm-s3"

    on_s3 = True

    def __init__(self, path: str, sync: bool, policy: str = DEFAULT_POLICY) -> None:
        super().__init__(path, sync, policy)
        self.bucket = path
        self.url = ""
        self.puts_at_start = 0

    def open(self, fresh: bool) -> None:
        from tools.bench.s3 import fresh_prefix

        self.close()
        if fresh or not self.url:
            self.url = fresh_prefix(self.bucket, "db")
        import lsm

        preload_lazy_imports()
        self.db = lsm.DB.open(self.url, lsm_options(self.policy))
        self._wo = lsm.WriteOptions(sync=True) if self.sync else None
        self._batch = lsm.WriteBatch

    def describe(self) -> str:
        return f"DbOptions(compaction_policy={self.policy!r}) at {self.bucket}/..."

    def requests(self) -> dict[str, int]:
        """The object-store requests of this database so far."""
        return self.db.object_store_stats()


def preload_lazy_imports() -> None:
    """Import what lsm imports on first use: numpy, which the scan's array path and the merge import when
    they first run (`import lsm` leaves it out, for the command line's start-up). A benchmark times rows,
    not that one-off import: 0.1-0.5 s, which at ``--num 20000`` was most of lsm's first ``readseq``."""
    importlib.import_module("numpy")


def lsm_options(policy: str) -> Any:
    """The `lsm.DbOptions` the bench runs lsm with: the defaults and `policy`."""
    import lsm

    return lsm.DbOptions(compaction_policy=policy)


def rocksdb_like_lsm(policy: str) -> dict[str, Any]:
    """RocksDB options that match lsm's with `policy`: the same memtable size (write_buffer_size), the
    same number of L0 files that triggers a compaction (level0_file_num_compaction_trigger), the same
    block compression (none unless lsm's compression is set), and the compaction style of `ROCKSDB_STYLE`;
    for leveled also lsm's SST size and level targets (max_bytes_for_level_base, _multiplier; RocksDB's
    dynamic level sizes, its default, as lsm's leveled policy computes them).
    """
    o = lsm_options(policy)
    out: dict[str, Any] = {
        "write_buffer_size": o.memtable_bytes,
        "level0_file_num_compaction_trigger": o.l0_compaction_threshold,
        "compression": "none" if o.compression in (None, "none") else o.compression,
        "compaction_style": ROCKSDB_STYLE[policy],
    }
    if policy == "leveled":  # the level targets lsm's leveled policy uses, and its SST size
        out["target_file_size_base"] = o.target_sst_bytes
        out["max_bytes_for_level_base"] = o.max_bytes_for_level_base
        out["max_bytes_for_level_multiplier"] = o.max_bytes_for_level_multiplier
    return out


SETTLE_TIMEOUT_S = 600  # RocksDB's background compactions after a fill: minutes at most at --num 1M
SETTLE_QUIET_S = 1.0  # no flush or compaction running and nothing written for this long: settled

# RocksDB's statistics tickers of SST bytes written: by flushes and by compactions (exact byte counts;
# the ``rocksdb.stats`` property gives them only in GB with two decimals)
_WRITE_TICKERS = re.compile(r"^rocksdb\.(?:flush|compact)\.write\.bytes COUNT : (\d+)$", re.M)


class RocksdictEngine(Engine):
    """RocksDB through rocksdict, configured like lsm (`rocksdb_like_lsm`), in raw mode (keys and values
    stored as the bytes given, as lsm stores them), with statistics on for write amplification."""

    name = "rocksdict"

    module = package = "rocksdict"

    def settings(self) -> dict[str, Any]:
        """The options set on top of RocksDB's defaults (empty: all defaults)."""
        return rocksdb_like_lsm(self.policy)

    def describe(self) -> str:
        s = self.settings()
        if not s:
            return "RocksDB's default options"
        return ", ".join(f"{k}={v}" for k, v in s.items())

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

    def _options(self) -> Any:
        import rocksdict

        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.enable_statistics()
        s = self.settings()
        if "write_buffer_size" in s:
            opts.set_write_buffer_size(s["write_buffer_size"])
        if "level0_file_num_compaction_trigger" in s:
            opts.set_level_zero_file_num_compaction_trigger(s["level0_file_num_compaction_trigger"])
        if "compression" in s:
            opts.set_compression_type(getattr(rocksdict.DBCompressionType, s["compression"])())
        if "target_file_size_base" in s:
            opts.set_target_file_size_base(s["target_file_size_base"])
        if "max_bytes_for_level_base" in s:
            opts.set_max_bytes_for_level_base(s["max_bytes_for_level_base"])
        if "max_bytes_for_level_multiplier" in s:
            opts.set_max_bytes_for_level_multiplier(float(s["max_bytes_for_level_multiplier"]))
        if "compaction_style" in s:
            opts.set_compaction_style(getattr(rocksdict.DBCompactionStyle, s["compaction_style"])())
        return opts

    def _open(self) -> None:
        import rocksdict

        self._opts = self._options()  # kept: its statistics object is where the write counters live
        self.db = rocksdict.Rdict(self.path, options=self._opts)
        self._wo = None
        if self.sync:
            self._wo = rocksdict.WriteOptions()
            self._wo.sync = True
        self._batch = functools.partial(rocksdict.WriteBatch, raw_mode=True)

    def sst_bytes_written(self) -> int | None:
        # flush and compaction output bytes as RocksDB counts them (trivial moves write nothing)
        stats = self._opts.get_statistics() or ""
        counts = _WRITE_TICKERS.findall(stats)
        return sum(map(int, counts)) if len(counts) == 2 else None

    def flush_bytes_written(self) -> int | None:
        m = re.search(
            r"^rocksdb\.flush\.write\.bytes COUNT : (\d+)$", self._opts.get_statistics() or "", re.M
        )
        return None if m is None else int(m.group(1))

    def settle(self) -> str:
        # "rocksdb.compaction-pending" cannot be the test: universal compaction keeps it at 1 while its
        # picker finds nothing to do (as many sorted runs as the trigger, none it may merge). So: no
        # flush or compaction running, and the write counter unchanged, for SETTLE_QUIET_S in a row
        self.db.flush(wait=True)
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        quiet_since, last = time.monotonic(), self.sst_bytes_written()
        while time.monotonic() < deadline:
            time.sleep(0.05)
            busy = self.db.property_int_value("rocksdb.num-running-compactions") or 0
            busy += self.db.property_int_value("rocksdb.num-running-flushes") or 0
            now = self.sst_bytes_written()
            if busy or now != last:
                quiet_since, last = time.monotonic(), now
            elif time.monotonic() - quiet_since >= SETTLE_QUIET_S:
                return "settled: flush(wait) + compactions done"
        return f"not settled after {SETTLE_TIMEOUT_S} s"

    def put_fn(self) -> Callable[[bytes, bytes], Any]:
        return functools.partial(self.db.put, write_opt=self._wo) if self._wo else self.db.put

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(self.db.items())

    def prepare_reads(self) -> str:
        self.db.flush(wait=True)
        return "after flush(); no compact_range()"


class RocksdictDefaultsEngine(RocksdictEngine):
    """RocksDB through rocksdict with RocksDB's default options (64 MiB memtable, level compaction,
    Snappy), in raw mode and with statistics on, as `RocksdictEngine`: the second line beside it."""

    name = "rocksdict-defaults"

    def settings(self) -> dict[str, Any]:
        return {}


class PlyvelEngine(Engine):
    """LevelDB through plyvel, ``plyvel.DB(path, create_if_missing=True)``, defaults otherwise."""

    name = "plyvel"

    module = package = "plyvel"

    def version(self) -> str:
        import plyvel

        return f"plyvel {plyvel.__version__} (LevelDB {plyvel.__leveldb_version__})"

    def describe(self) -> str:
        return "LevelDB's default options"

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


# SlateDB's engines subclass Engine from this module, so they are imported once it is defined
from tools.bench.engine_slatedb import SlatedbEngine, SlatedbS3Engine  # noqa: E402

ENGINES: dict[str, type[Engine]] = {
    e.name: e
    for e in (
        LsmEngine, LsmS3Engine, RocksdictEngine, RocksdictDefaultsEngine, PlyvelEngine, SlatedbEngine, SlatedbS3Engine
    )
}
