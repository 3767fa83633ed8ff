"""SlateDB as a `lsm bench` engine (``--compare slatedb``; with ``--store s3`` also ``slatedb-s3``).

SlateDB is the object-store LSM this project's object-store design follows (docs/object-store.md); its
Python binding (``pip install slatedb``, `slatedb.uniffi`) is asyncio: every call returns a coroutine that
resolves when the Rust future does. The engine keeps one event loop per open database and runs each
chunk of a benchmark's loop as one coroutine (`put_many`, `count_found`), so a chunk pays one entry into
the loop, not one per operation, as an asyncio program calling it would; scans drain the iterator with
``next_batch`` (the binding's call for crossing the language boundary once per batch, not per row).

Options like lsm's (`slatedb_like_lsm`): the memtable is frozen at lsm's ``memtable_bytes``
(``l0_sst_size_bytes``), the WAL is flushed every lsm ``wal_flush_interval_ms`` (``flush_interval``),
4 KiB blocks, no compression; the rest are SlateDB's defaults (its in-process compactor and garbage
collector, a 10 bits/key bloom filter, the in-memory block cache).

Durability (the one choice the comparison turns on, docs/benchmarks.md): without ``--sync`` a write is
``db.put`` as SlateDB's binding acknowledges it, from its WAL buffer, durable at the next WAL flush (at
most ``flush_interval`` later), which is what lsm's ``sync=False`` is on an object store. With ``--sync``
each write is followed by ``flush_with_options(FlushType.WAL)``: it returns once a WAL object holding it
is written, as lsm's ``sync=True`` does; ``WriteHandle.await_durable`` promises the same but waits for
the flush timer, so a sequential writer would measure the timer, not the engine.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from tools.bench.engines import Engine, lsm_options

SCAN_BATCH = 1024  # rows per next_batch call of a scan

# SlateDB's object-store request counters by the `api` label -> lsm's request kinds (db.object_store_stats)
_API_KIND = {
    "put": "put", "multipart_init": "put", "multipart_part": "put", "multipart_complete": "put",
    "get": "get", "get_range": "get", "get_ranges": "get", "head": "head",
    "list": "list", "list_with_offset": "list", "list_with_delimiter": "list", "delete": "delete",
}


def slatedb_like_lsm(policy: str) -> dict[str, Any]:
    """SlateDB settings (`Settings.set` keys -> values) that match lsm's options with `policy`: the size
    at which the memtable becomes an L0 SST, and the WAL flush interval. Compaction is SlateDB's own
    (size-tiered, its default; it has no leveled or FIFO scheduler)."""
    o = lsm_options(policy)
    return {"l0_sst_size_bytes": o.memtable_bytes, "flush_interval": f"{o.wal_flush_interval_ms}ms"}


class SlatedbEngine(Engine):
    """SlateDB in a local directory (its local-file object store rooted at the engine's path)."""

    name = "slatedb"

    module = "slatedb.uniffi"

    package = "slatedb"

    def __init__(self, path: str, sync: bool, policy: str = "tiered") -> None:
        super().__init__(path, sync, policy)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._recorder: Any = None

    def describe(self) -> str:
        s = ", ".join(f"{k}={v}" for k, v in slatedb_like_lsm(self.policy).items())
        write = "put + flush(WAL) per write" if self.sync else "put (acknowledged from the WAL buffer)"
        return f"{s}, 4 KiB blocks, no compression; {write}"

    def version(self) -> str:
        return f"slatedb {importlib.metadata.version('slatedb')}"

    def _store(self) -> Any:
        from slatedb.uniffi import ObjectStoreBuilder, ObjectStoreType

        os.makedirs(self.path, exist_ok=True)
        b = ObjectStoreBuilder(ObjectStoreType.LOCAL)
        b.with_config("local_path", os.path.abspath(self.path))
        return b.build(), "db"

    def _open(self) -> None:
        from slatedb.uniffi import DbBuilder, DefaultMetricsRecorder, Settings, SstBlockSize

        store, db_path = self._store()
        settings = Settings.default()
        for key, value in slatedb_like_lsm(self.policy).items():
            settings.set(key, f'"{value}"' if isinstance(value, str) else str(value))
        builder = DbBuilder(db_path, store)
        builder.with_settings(settings)
        builder.with_sst_block_size(SstBlockSize.BLOCK4_KIB)
        self._recorder = DefaultMetricsRecorder()
        builder.with_metrics_recorder(self._recorder)
        self._loop = asyncio.new_event_loop()
        self.db = self._run(builder.build())

    def _run(self, coro: Any) -> Any:
        assert self._loop is not None
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        if self.db is not None:
            self._run(self.db.shutdown())
            self.db = None
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    async def _durable(self) -> None:
        from slatedb.uniffi import FlushOptions, FlushType

        await self.db.flush_with_options(FlushOptions(flush_type=FlushType.WAL))

    def put_fn(self) -> Any:
        return lambda k, v: self.put_many([(k, v)])

    def put_many(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        async def body() -> None:
            put = self.db.put
            for k, v in pairs:
                await put(k, v)
                if self.sync:
                    await self._durable()

        self._run(body())

    def write_batch(self, pairs: Sequence[tuple[bytes, bytes]]) -> None:
        from slatedb.uniffi import WriteBatch

        async def body() -> None:
            b = WriteBatch()
            for k, v in pairs:
                b.put(k, v)
            await self.db.write(b)
            if self.sync:
                await self._durable()

        self._run(body())

    def get_fn(self) -> Any:
        return lambda k: self._run(self.db.get(k))

    def count_found(self, keys: Sequence[bytes]) -> int:
        async def body() -> int:
            get = self.db.get
            found = 0
            for k in keys:
                if await get(k) is not None:
                    found += 1
            return found

        return self._run(body())

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        from slatedb.uniffi import KeyRange

        it = self._run(self.db.scan(KeyRange(start=None, start_inclusive=False, end=None, end_inclusive=False)))
        while True:
            rows = self._run(it.next_batch(SCAN_BATCH))
            for kv in rows:
                yield kv.key, kv.value
            if len(rows) < SCAN_BATCH:
                return

    def _flush_memtable(self) -> None:
        from slatedb.uniffi import FlushOptions, FlushType

        self._run(self.db.flush_with_options(FlushOptions(flush_type=FlushType.MEM_TABLE)))

    def prepare_reads(self) -> str:
        self._flush_memtable()
        return "after flush(MemTable); compaction left to SlateDB's compactor"

    def settle(self) -> str:
        self._flush_memtable()
        return "flush(MemTable); SlateDB's compactor not waited for"

    def _counter(self, name: str) -> int:
        return sum(m.value[0] for m in self._recorder.metrics_by_name(name) if m.value.is_counter())

    def flush_bytes_written(self) -> int | None:
        # SlateDB counts the bytes of its L0 flushes, but not those its compactor writes (so no write amp)
        return self._counter("slatedb.db.l0_flush_bytes")


class SlatedbS3Engine(SlatedbEngine):
    """SlateDB on S3 (``lsm bench --store s3``): the bucket of `path` (``s3://bucket``), at the endpoint,
    region and credentials of the standard AWS environment (``AWS_ENDPOINT_URL``, ``AWS_ALLOW_HTTP`` for
    a local server, as `tools.bench.s3.endpoint` sets them); each fresh open takes a new prefix."""

    name = "slatedb-s3"

    on_s3 = True

    def __init__(self, path: str, sync: bool, policy: str = "tiered") -> None:
        super().__init__(path, sync, policy)
        self.bucket = path
        self.url = ""

    def describe(self) -> str:
        return f"{super().describe()}; at {self.bucket}/..."

    def open(self, fresh: bool) -> None:
        from tools.bench.s3 import fresh_prefix

        self.close()
        if fresh or not self.url:
            self.url = fresh_prefix(self.bucket, "slatedb")
        self._open()

    def _store(self) -> Any:
        from slatedb.uniffi import ObjectStoreBuilder, ObjectStoreType

        bucket, _, prefix = self.url.removeprefix("s3://").partition("/")
        b = ObjectStoreBuilder.from_env(ObjectStoreType.S3)
        b.with_config("bucket", bucket)
        return b.build(), prefix

    def requests(self) -> dict[str, int]:
        """The object-store requests of this database so far (SlateDB's ``object_store.request_count``
        counters, every component: writer, compactor, garbage collector), in lsm's kinds; ``put_wal``
        is SlateDB's count of WAL buffer flushes, one WAL object each (read a moment apart from the
        request counters, the two may differ by a flush in flight)."""
        out = dict.fromkeys(("put", "get", "head", "list", "delete"), 0)
        for m in self._recorder.metrics_by_name("slatedb.object_store.request_count"):
            api = next((lab.value for lab in m.labels if lab.key == "api"), "")
            if api in _API_KIND and m.value.is_counter():
                out[_API_KIND[api]] += m.value[0]
        out["put_wal"] = self._counter("slatedb.wal.wal_buffer_flushes")
        return out
