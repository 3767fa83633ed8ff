"""The databases `lsm bench compact` compacts, written directly as SSTs plus one manifest version.

`build_database` writes ``spec.num`` rows (db_bench keys, db_bench values) as ``spec.runs`` overlapping
sorted runs of geometrically decreasing size, newest (smallest) first, each split into SSTs of
``target_sst_bytes``; some rows carry a TTL (half expired at the compaction tick) and the newer runs hold
tombstones, so a full compaction drops versions, tombstones and expired rows. `build_tiny` is a handful
of rows in two L0 SSTs (the fixed cost of a compaction).
"""

from __future__ import annotations

import dataclasses
import random
import sys
from typing import TYPE_CHECKING, Any

from tools.bench.harness import KEY_SIZE, make_values
from tools.render import plural

if TYPE_CHECKING:
    from formats.manifest import SstEntry
    from lsm.versions import VersionSet

T0 = 1_700_000_000_000  # first row timestamp (ms)
TTL = 3_600_000


@dataclasses.dataclass
class Spec:
    """The database to build: rows, runs, value size, and the share of TTL rows and tombstones."""

    num: int
    runs: int
    value_size: int
    seed: int
    ttl_fraction: float
    delete_fraction: float
    target_sst_bytes: int
    block_bytes: int


# -- building the database -------------------------------------------------------------------------------
def run_sizes(num: int, runs: int) -> list[int]:
    """Rows per run, newest first, each twice the size of the one above it."""
    weights = [2**i for i in range(runs)]
    sizes = [num * w // sum(weights) for w in weights]
    sizes[-1] += num - sum(sizes)
    return sizes


def build_database(path: str, spec: Spec, progress: bool = False) -> dict[str, Any]:
    """Write `spec.num` rows as `spec.runs` sorted runs of SSTs and commit them as the database at `path`.

    The SSTs are written under an open handle: their file ids come from its version set, and one commit
    of that version set publishes them (compare-and-swap, fenced by the handle's epochs, a failed I/O
    call raised as `DbFailedError`), the path every version of a store takes. SSTs a failed commit cannot
    have published are deleted again."""
    from formats.manifest import SortedRun
    from lsm import DB, DbOptions, ManualClock

    tick = T0 + spec.num + 2 * TTL  # the compaction clock: after every write
    # the handle's clock stays below the tick, so the watermark it records at close is below it too
    with DB.open(path, DbOptions(clock=ManualClock(tick - 1), background_compaction=False)) as db:
        vs = db.engine.versions
        written: list[SstEntry] = []
        try:
            runs = _write_runs(spec, tick, vs, written, progress)
            # runs[0] is the newest (smallest, highest seqs): the manifest lists runs newest first, as a
            # DB does
            records = tuple(SortedRun(i + 1, ssts) for i, ssts in enumerate(runs))
            vs.commit(
                lambda m: m.replace(
                    runs=records,
                    next_run_id=len(records) + 1,
                    last_seq=max(m.last_seq, spec.num),
                    clock_watermark=max(m.clock_watermark, tick - 1),
                ),
                vs.install,
            )
        except BaseException as e:
            vs.discard_outputs(tuple(written), e)
            raise
    nbytes = sum(e.info.file_size for e in written)
    return {"rows": spec.num, "runs": [len(s) for s in runs], "ssts": len(written), "bytes": nbytes, "tick": tick}


def _write_runs(
    spec: Spec, tick: int, vs: VersionSet, written: list[SstEntry], progress: bool
) -> list[tuple[SstEntry, ...]]:
    """The SSTs of `build_database`'s runs, newest run first, named by ids from `vs`; each SST is added
    to `written` as soon as it is complete."""
    from formats.manifest import SstEntry
    from formats.sst import SstWriter

    values = make_values(spec.value_size, 0.5, spec.seed)
    nvals = len(values)
    sizes = run_sizes(spec.num, spec.runs)
    rng = random.Random(spec.seed)
    seq = spec.num  # the newest run holds the highest seqs; each row its own seq
    runs: list[tuple[SstEntry, ...]] = []
    per_sst = max(1, spec.target_sst_bytes // (KEY_SIZE + spec.value_size + 33))
    for r, n in enumerate(sizes):
        keys = rng.sample(range(spec.num), n)
        keys.sort()
        deletes = spec.delete_fraction if r < spec.runs - 1 else 0.0  # tombstones above the oldest run
        rand = rng.random
        entries = []
        for lo in range(0, n, per_sst):
            chunk = keys[lo : lo + per_sst]
            name = f"{vs.alloc_ids():020d}-bench-{r}.sst"
            w = SstWriter(vs.sst_path(name), creation_timestamp=T0, block_bytes=spec.block_bytes, sync=False)
            for k in chunk:
                s = seq
                seq -= 1
                ts = T0 + s
                x = rand()
                if x < deletes:
                    w.add((b"%016d" % k, s, ts, None, None))
                elif x < deletes + spec.ttl_fraction:
                    # half expire before the tick, half after
                    exp = tick - 1 if x < deletes + spec.ttl_fraction / 2 else tick + TTL
                    w.add((b"%016d" % k, s, ts, exp, values[s % nvals]))
                else:
                    w.add((b"%016d" % k, s, ts, None, values[s % nvals]))
            entries.append(SstEntry(name, w.finish()))
            written.append(entries[-1])
        runs.append(tuple(entries))
        if progress:
            print(
                f"# built run {r + 1}/{spec.runs}: {plural(n, 'row')} in {plural(len(entries), 'SST')}",
                file=sys.stderr,
                flush=True,
            )
        del keys
    return runs


def build_tiny(path: str, tick: int) -> None:
    """A handful of rows in two L0 SSTs."""
    from lsm import DB, DbOptions, ManualClock

    clock = ManualClock(tick - 100)
    with DB.open(path, DbOptions(clock=clock, background_compaction=False)) as db:
        for i in range(8):
            db.put(b"tiny%02d" % (i % 5), b"v%d" % i, ttl=10 if i == 3 else None)
            if i == 4:
                db.flush()
        db.delete(b"tiny00")


def rocksdb_options() -> Any:
    """The RocksDB options of the compaction comparison: raw mode (keys and values as given), no
    compression (lsm-sim writes none), no automatic compaction (the database keeps the shape it was
    built in until `compact_range`); RocksDB's defaults otherwise."""
    import rocksdict

    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_compression_type(rocksdict.DBCompressionType.none())
    opts.set_disable_auto_compactions(True)
    return opts


def build_rocksdb(lsm_path: str, path: str) -> dict[str, Any]:
    """The rows of the lsm database at `lsm_path` (built by `build_database`) written into a RocksDB
    database at `path` (rocksdict), oldest run first, each run flushed into its own L0 files: the same
    keys, values and deletes, in overlapping sorted runs of the same sizes. RocksDB has no per-row
    expiry, so a TTL row is a plain value there (lsm-sim drops half of them in the compaction: it does
    more work, not less)."""
    import rocksdict

    from lsm.manifest import ManifestStore
    from storage.paths import DbPaths
    from storage.ssts import open_sst

    _, m = ManifestStore(lsm_path).latest()
    db = rocksdict.Rdict(path, rocksdb_options())
    rows = 0
    try:
        for run in reversed(m.runs):  # oldest first: RocksDB gives later writes higher seqs
            for e in run.ssts:
                with open_sst(DbPaths(lsm_path).sst(e.name)) as r:
                    for block in r.iter_blocks():
                        wb = rocksdict.WriteBatch(raw_mode=True)
                        for key, _seq, _ts, _exp, value in block:
                            if value is None:
                                wb.delete(key)
                            else:
                                wb.put(key, value)
                        db.write(wb)
                        rows += len(block)
            db.flush(wait=True)
        files = len(db.live_files())
    finally:
        db.close()
    return {"rows": rows, "runs": len(m.runs), "files": files}
