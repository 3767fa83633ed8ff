"""Read-only inspection of a database directory: check it whole, and measure where its space goes.

Both work on the files, not through an open `DB`: they never fence a running writer and never write.
The files are reached through `storage`, so `path` may be an object-store URL as well.

- `check_database(path) -> CheckReport`, or `CheckError` naming the first problem: every manifest version
  kept decodes; every SST the newest manifest references exists, passes `formats.verify.verify_sst` and
  has the SsTableInfo the manifest records; sorted runs are sorted and do not overlap; every key's
  versions are read newest first (newer L0 SSTs and runs hold only newer seqs than older sources whose
  key ranges they overlap, or, where they do not, than the older source's versions of each key both
  hold); ``last_seq``, the clock watermark
  and ``next_sst_id`` cover every SST; the WAL segments from the replay point decode. Unreferenced SSTs
  and torn WAL tails are notes, not problems; entries other than manifest/, sst/ and wal/ at the top of
  the directory (put there by something else) are warnings, not problems either. A writer committing
  meanwhile can make a file vanish between listing and reading; the check is then run again (up to
  `attempts` times).
- `space_usage(path, now) -> SpaceReport`: per level (the unflushed WAL, L0, each sorted run), the bytes
  and rows that are live (the newest version of a key, visible), expired (the newest version, past its
  expire_ts at `now`), tombstones (the newest version, a delete) and shadowed (an older version no reader
  without a snapshot sees). Row bytes are encoded, uncompressed row sizes; `size` is bytes on disk.
- `stored_files(path)`: the files (objects) and bytes each of manifest/, wal/ and sst/ holds.

- `stored_versions(path, start, end)`: every version the database stores (what ``lsm scan --all-versions``
  and ``lsm dump`` read), key by key, newest first, with the level holding it.

``lsm check`` and ``lsm du`` (tools/cmd_db.py) only render these results.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from compaction.merge import merge_sources
from formats.errors import CorruptionError, LsmError
from formats.manifest import Manifest, SstEntry
from formats.sst import SstReader
from formats.verify import verify_sst
from formats.wal import ROW_CODEC as WAL_ROW_CODEC
from lsm.checkpoints import sst_path
from lsm.syskeys import SYSTEM_PREFIX, is_system
from storage import path_kind
from storage.paths import DbPaths, DbStore, open_store
from storage.ssts import open_sst

if TYPE_CHECKING:
    from lsm.history import HistoryView

CATEGORIES = ("live", "expired", "tombstone", "shadowed")


class CheckError(LsmError):
    """What `check_database` found wrong; the message names the file and what is wrong."""


# -- locating the database ----------------------------------------------------------------------------
# What lsm-sim keeps at the top of a database directory (lsm.db creates them); anything else there was put
# by someone else (a log written into the wrong directory, say) and `check_database` notes it.
DB_ENTRIES = frozenset(("manifest", "sst", "wal"))


def is_database_dir(path: str | os.PathLike[str]) -> bool:
    """True if `path` is a directory holding an lsm-sim database, or one being created (its manifest/
    directory exists): what must not be used as anything else, e.g. a partitioned log. On an object
    store (a URL) a directory exists when objects lie under it."""
    store = open_store(path)
    return store.storage.holds_directory(store.paths.manifest_dir)


def database_dir(path: str) -> str:
    """Check that `path` is an lsm-sim database directory, or the URL of one on an object store
    (NotADatabaseError if not); return it."""
    from lsm.errors import NotADatabaseError
    from lsm.manifest import ManifestStore

    store = open_store(path)
    if ManifestStore(store).ids():  # a database: one listing says so, nothing else to ask
        return path
    kind = path_kind(path)
    if kind is None:
        raise NotADatabaseError(f"{path}: {store.storage.nothing_there(path)}")
    if kind != "dir":
        raise NotADatabaseError(f"{path}: is a file, not a database directory")
    if not is_database_dir(path):
        raise NotADatabaseError(f"{path}: not an lsm-sim database (no manifest/ directory)")
    if not ManifestStore(path).ids():  # commands that write (gc, time-seq --reset) must not create one
        raise NotADatabaseError(f"{path}: not an lsm-sim database (no manifest version in manifest/)")
    return path


def latest_manifest(path: str) -> tuple[int, Manifest]:
    """(id, manifest) of the newest version of the database at `path` (NotADatabaseError if none)."""
    from lsm.errors import NotADatabaseError
    from lsm.manifest import ManifestStore

    store = ManifestStore(database_dir(path))
    mid, m = store.latest()
    if m is None:
        raise NotADatabaseError(f"{path}: no manifest version in {store.dir}: not an lsm-sim database")
    return mid, m


def _sst_file(path: str, m: Manifest, name: str) -> str:
    """The file of SST `name` of manifest `m` of the database at `path` (a clone's may be its source's)."""
    return sst_path(DbPaths(path), m, name)  # naming only: no backend to resolve for each SST


def levels(m: Manifest) -> list[tuple[str, tuple[SstEntry, ...]]]:
    """("L0", ssts) then ("run <id>", ssts) for each sorted run, newest first (the read order)."""
    return [("L0", m.l0)] + [(f"run {r.id}", r.ssts) for r in m.runs]


# -- check --------------------------------------------------------------------------------------------
@dataclasses.dataclass
class CheckReport:
    """What a successful `check_database` covered."""

    manifest_id: int = 0  # the newest version, the one checked in full
    manifest_versions: int = 0  # versions kept on disk that decoded
    ssts: int = 0
    rows: int = 0
    sst_bytes: int = 0
    l0: int = 0  # L0 SSTs
    runs: int = 0  # sorted runs
    wal_segments: int = 0
    wal_records: int = 0
    notes: list[str] = dataclasses.field(default_factory=list)  # unreferenced SSTs, torn WAL tails
    # files lsm-sim did not put there (e.g. a log written into the database directory): the store's own
    # files are sound, so not a problem, but someone is using the directory for something else
    warnings: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return dataclasses.asdict(self)


def check_database(path: str, attempts: int = 3) -> CheckReport:
    """Check the whole database at `path` (see the module docstring); CheckError names the first problem.

    When a check fails while a writer has committed a newer manifest meanwhile, it is run again on the
    new version, up to `attempts` runs in all."""
    from lsm.manifest import ManifestStore

    store = ManifestStore(database_dir(path))
    problem: CheckError | None = None
    for _ in range(max(1, attempts)):
        before = store.ids()[-1:]
        try:
            return _check_once(path)
        except CheckError as e:
            problem = e
            if store.ids()[-1:] == before:
                break
    assert problem is not None
    raise problem


def _overlap(a_first: bytes, a_last: bytes, b_first: bytes, b_last: bytes) -> bool:
    return a_first <= b_last and b_first <= a_last


def _source_ranges(m: Manifest) -> list[tuple[str, bytes, bytes, int, int, tuple[SstEntry, ...]]]:
    """(label, first_key, last_key, min_seq, max_seq, SSTs) of each read-path source, newest first."""
    out = [
        (f"L0 SST {e.name}", e.info.first_key, e.info.last_key, e.info.min_seq, e.info.max_seq, (e,))
        for e in m.l0
    ]
    for r in m.runs:
        if r.ssts:
            i = [e.info for e in r.ssts]
            first, last = i[0].first_key, i[-1].last_key
            out.append((f"run {r.id}", first, last, min(x.min_seq for x in i), max(x.max_seq for x in i), r.ssts))
    return out


def _seqs_by_key(path: str, m: Manifest, ssts: tuple[SstEntry, ...], lo: bytes, hi: bytes,
                 newest: bool) -> dict[bytes, int]:
    """Per key in [lo, hi] held by `ssts`: its smallest seq there (newest=True) or its largest."""
    out: dict[bytes, int] = {}
    pick = min if newest else max
    for e in ssts:
        if e.info.last_key < lo or e.info.first_key > hi:
            continue
        with open_sst(_sst_file(path, m, e.name)) as r:
            for row in r.iter(lo):
                key = row[0]
                if key > hi:
                    break
                seq = e.info.max_seq if row[1] is None else row[1]  # v0 rows: the file's seq
                out[key] = pick(out.get(key, seq), seq)
    return out


def _misordered_key(path: str, m: Manifest, newer: tuple, older: tuple) -> bytes | None:
    """A key both sources hold whose version in `newer` (read first) is not newer than every one in
    `older`, or None. Reads the keys of both in their common key range."""
    lo, hi = max(newer[1], older[1]), min(newer[2], older[2])
    top = _seqs_by_key(path, m, newer[5], lo, hi, newest=True)
    for key, seq in _seqs_by_key(path, m, older[5], lo, hi, newest=False).items():
        if key in top and not top[key] > seq:
            return key
    return None


def _check_checkpoints(db: DbStore, store: Any, m: Manifest, listed: set[str], rep: CheckReport) -> set[str]:
    """The SSTs the live checkpoints of `m` keep (docs/checkpoints.md); CheckError if a checkpoint's
    manifest version or one of its own SSTs is gone. A note counts what only checkpoints keep."""
    from lsm.checkpoints import external_roots, live
    from lsm.clock import SystemClock

    kept: set[str] = set()
    cps = live(m, max(SystemClock().now(), m.clock_watermark))
    for cp in cps:
        try:
            v = store.read(cp.manifest_id)
        except FileNotFoundError:
            raise CheckError(f"checkpoint {cp.id} names manifest version {cp.manifest_id}, which is gone") from None
        outside = external_roots(v)
        for e in v.all_ssts():
            if e.name not in outside and e.name not in listed:
                raise CheckError(f"checkpoint {cp.id}: SST {e.name} of its version {cp.manifest_id} is gone")
            kept.add(e.name)
    only = kept - {e.name for e in m.all_ssts()}
    if cps:
        rep.notes.append(f"{len(cps)} checkpoint(s) keep {len(only)} SST file(s) the manifest no longer references")
    return kept


def _sst_number(name: str) -> int | None:
    head = name.split("-", 1)[0].split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _check_once(path: str) -> CheckReport:
    from lsm.manifest import ManifestStore

    store = ManifestStore(path)
    rep = CheckReport()
    for mid in store.ids():
        try:
            store.read(mid)
        except FileNotFoundError:
            continue  # pruned by a running writer since we listed
        except CorruptionError as e:
            raise CheckError(str(e)) from None
        rep.manifest_versions += 1
    rep.manifest_id, m = latest_manifest(path)
    rep.l0, rep.runs = len(m.l0), len(m.runs)
    mpath = store.path(rep.manifest_id)
    seen = _check_ssts(path, m, mpath, rep)
    _check_shape(m, mpath, path)
    _check_watermarks(m, mpath)
    db = open_store(path)
    sst_dir = db.paths.sst_dir
    listed = set(db.storage.list_names(sst_dir))
    seen = seen | _check_checkpoints(db, store, m, listed, rep)
    orphans = sorted(n for n in listed if n.endswith(".sst") and n not in seen)
    if orphans:
        rep.notes.append(
            f"{len(orphans)} SST file(s) in sst/ not referenced by the manifest (left for garbage "
            f"collection): {', '.join(orphans[:5])}{' ...' if len(orphans) > 5 else ''}"
        )
    _check_wal(path, m, rep)
    foreign = sorted(set(db.storage.list_entries(path)) - DB_ENTRIES)
    if foreign:
        rep.warnings.append(
            f"{len(foreign)} unexpected entr{'y' if len(foreign) == 1 else 'ies'} in {path} (not lsm-sim's: "
            f"it keeps only {', '.join(sorted(DB_ENTRIES))} there): {', '.join(foreign[:5])}"
            + (" ..." if len(foreign) > 5 else "")
        )
    return rep


def _check_ssts(path: str, m: Manifest, mpath: str, rep: CheckReport) -> set[str]:
    """Each referenced SST: present once, verified, its SsTableInfo as recorded; return their names."""
    seen: set[str] = set()
    for lvl, ssts in levels(m):
        for e in ssts:
            if e.name in seen:
                raise CheckError(f"{mpath}: SST {e.name} is referenced twice")
            seen.add(e.name)
            p = _sst_file(path, m, e.name)
            try:
                with open_sst(p) as r:
                    verify_sst(r)
                    file_info = r.info
            except FileNotFoundError:  # opening is the existence test: no extra request on an object store
                raise CheckError(f"{p}: missing, but manifest {rep.manifest_id} lists it in {lvl}") from None
            except CorruptionError as e2:
                raise CheckError(str(e2)) from None
            diffs = [
                f"{f.name} {getattr(e.info, f.name)!r} != {getattr(file_info, f.name)!r}"
                for f in dataclasses.fields(file_info)
                if getattr(e.info, f.name) != getattr(file_info, f.name)
            ]
            if diffs:
                raise CheckError(
                    f"{p}: SsTableInfo in manifest {rep.manifest_id} disagrees with the file: {'; '.join(diffs)}"
                )
            rep.ssts += 1
            rep.rows += file_info.num_rows
            rep.sst_bytes += file_info.file_size
            n = _sst_number(e.name)
            if n is not None and n >= m.next_sst_id:
                raise CheckError(f"{mpath}: next_sst_id {m.next_sst_id} would reuse the id of {e.name}")
    return seen


def _check_shape(m: Manifest, mpath: str, path: str) -> None:
    """Run ids unique, runs sorted and disjoint, overlapping sources ordered by seq in read order.

    Sources whose key ranges overlap are ordered when the one read first holds only newer seqs (always
    so under size-tiering). Under leveling a level's SSTs arrive at different times, so that need not
    hold while every key's versions are still read newest first; for such a pair the keys both hold are
    read and compared (`_misordered_key`)."""
    run_ids = [r.id for r in m.runs]
    if len(set(run_ids)) != len(run_ids):
        raise CheckError(f"{mpath}: sorted run ids repeat: {run_ids}")
    for r in m.runs:
        for a, b in itertools.pairwise(r.ssts):
            if not a.info.last_key < b.info.first_key:
                raise CheckError(f"{mpath}: run {r.id}: {a.name} and {b.name} overlap or are out of key order")
    sources = _source_ranges(m)
    for i, newer in enumerate(sources):
        for older in sources[i + 1 :]:
            if (
                _overlap(newer[1], newer[2], older[1], older[2])
                and not newer[3] > older[4]
                and _misordered_key(path, m, newer, older) is not None
            ):
                raise CheckError(
                    f"{mpath}: {newer[0]} (seq {newer[3]}-{newer[4]}) is read before {older[0]} "
                    f"(seq {older[3]}-{older[4]}) and their keys overlap, but it does not hold only newer seqs"
                )


def _check_watermarks(m: Manifest, mpath: str) -> None:
    """last_seq and the clock watermark at or above everything stored in an SST."""
    infos = [e.info for _, ssts in levels(m) for e in ssts]
    if not infos:
        return
    top_seq = max(i.max_seq for i in infos)
    if m.last_seq < top_seq:
        raise CheckError(f"{mpath}: last_seq {m.last_seq} is below seq {top_seq} stored in an SST")
    ts = [i.max_ts for i in infos if i.max_ts is not None]
    if ts and m.clock_watermark < max(ts):
        raise CheckError(f"{mpath}: clock_watermark {m.clock_watermark} is below ts {max(ts)} stored in an SST")


def _check_wal(path: str, m: Manifest, rep: CheckReport) -> None:
    """The WAL segments from the replay point decode (a torn tail is a note); count the records in them
    that are not in SSTs yet."""
    from lsm.wal_replay import live_segments, read_segments

    db = open_store(path)
    try:
        # what replay reads and applies (lsm.wal_replay: records above the manifest's last_seq)
        for seg in read_segments(db, live_segments(db, m.wal_replay_from), missing_ok=True):
            rep.wal_segments += 1
            rep.wal_records += sum(1 for r in seg.records if r.seq > m.last_seq)
            if seg.torn is not None:
                rep.notes.append(f"{seg.path}: torn tail at offset {seg.torn} (replay stops there)")
    except CorruptionError as e:
        raise CheckError(str(e)) from None


# -- space --------------------------------------------------------------------------------------------
@dataclasses.dataclass
class LevelUsage:
    """Space of one level ("wal", "L0", "run <id>", or "total"): files, bytes on disk, and the encoded
    row bytes and row counts of each category."""

    level: str
    files: int = 0
    size: int = 0
    live_bytes: int = 0
    live_rows: int = 0
    expired_bytes: int = 0
    expired_rows: int = 0
    tombstone_bytes: int = 0
    tombstone_rows: int = 0
    shadowed_bytes: int = 0
    shadowed_rows: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The fields in declaration order (the JSON ``lsm du --json`` prints)."""
        return dataclasses.asdict(self)


@dataclasses.dataclass
class SpaceReport:
    """`space_usage`'s result: expiry judged at `at` (epoch ms), one `LevelUsage` per level, their sum."""

    at: int
    levels: list[LevelUsage]
    total: LevelUsage
    purge_lag: dict[str, Any] | None = None  # the manifest's cumulative purge-lag histogram (None: none yet)


def _sst_rows(r: SstReader, src: int) -> Iterator[tuple]:
    """Rows of one SST tagged with their source index and encoded size (row + its offset slot)."""
    fixed = 2 + r.codec.attrs.size + 4
    for key, seq, ts, exp, value in r:
        yield (key, seq, ts, exp, value, src, fixed + len(key) + (len(value) if value is not None else 0))


def _wal_rows(path: str, m: Manifest) -> tuple[list[tuple], LevelUsage, int]:
    """The unflushed rows of the WAL (sorted, tagged with source 0), the WAL's level, the newest ts seen."""
    from lsm.wal_replay import live_segments, read_segments

    rows: list[tuple] = []
    usage = LevelUsage("wal")
    max_ts = m.clock_watermark
    fixed = 2 + WAL_ROW_CODEC.attrs.size
    db = open_store(path)
    for seg in read_segments(db, live_segments(db, m.wal_replay_from), missing_ok=True):
        usage.size += _size(db, seg.path)
        usage.files += 1
        for rec in seg.records:
            max_ts = max(max_ts, rec.ts)
            if rec.seq <= m.last_seq:
                continue
            for key, seq, ts, exp, value in rec.rows:
                size = fixed + len(key) + (len(value) if value is not None else 0)
                rows.append((key, seq, ts, exp, value, 0, size))
    rows.sort(key=lambda row: (row[0], -row[1]))
    return rows, usage, max_ts


def _size(db: DbStore, path: str) -> int:
    """The size of a WAL segment (0 if it was deleted since it was read)."""
    try:
        return db.storage.size(path)
    except FileNotFoundError:
        return 0


def space_usage(path: str, now: int | None = None) -> SpaceReport:
    """Space by level and category (see the module docstring), expiry judged at `now` (epoch ms).

    `now` None reads by what a read-only ``DB.open`` would: the system time, or the newest time stored if
    that is later. O(rows): every row of every SST and of the unflushed WAL is read once, in one merge."""
    from lsm.clock import SystemClock

    _mid, m = latest_manifest(path)
    wal_rows, wal_usage, max_ts = _wal_rows(path, m)
    usage = [wal_usage]
    sources: list[Any] = [wal_rows]
    readers: list[SstReader] = []
    try:
        for name, ssts in levels(m):
            src = len(usage)
            usage.append(LevelUsage(name, files=len(ssts), size=sum(e.size for e in ssts)))
            opened = [open_sst(_sst_file(path, m, e.name)) for e in ssts]
            readers += opened
            if name == "L0":  # overlapping: each SST is a source of its own
                sources += [_sst_rows(r, src) for r in opened]
            else:  # a run's SSTs are disjoint and in key order: one concatenated source
                sources.append(itertools.chain.from_iterable([_sst_rows(r, src) for r in opened]))
        if now is None:
            now = max(SystemClock().now(), max_ts)
        acc = [{c: [0, 0] for c in CATEGORIES} for _ in usage]  # [bytes, rows] per level and category
        last_key = None
        for row in merge_sources(sources):
            key = row[0]
            if key >= SYSTEM_PREFIX and is_system(key):
                continue  # the engine's own rows (the remap of ingested sources) are not user data
            if key == last_key:
                cat = "shadowed"
            else:
                last_key = key
                if row[4] is None:
                    cat = "tombstone"
                elif row[3] is not None and now > row[3]:
                    cat = "expired"
                else:
                    cat = "live"
            a = acc[row[5]][cat]
            a[0] += row[6]
            a[1] += 1
    finally:
        for r in readers:
            r.close()
    for lvl, counts in zip(usage, acc, strict=True):
        for c, (nbytes, nrows) in counts.items():
            setattr(lvl, f"{c}_bytes", nbytes)
            setattr(lvl, f"{c}_rows", nrows)
    total = LevelUsage("total")
    for f in dataclasses.fields(LevelUsage):
        if f.name != "level":
            setattr(total, f.name, sum(getattr(x, f.name) for x in usage))
    return SpaceReport(now, usage, total, m.purge_lag)


def stored_files(path: str) -> dict[str, tuple[int, int]]:
    """(count, bytes) of the files each directory of the database at `path` holds (manifest, wal, sst),
    referenced or not: what an object store bills for. One listing per directory."""
    db = open_store(path)
    out = {}
    for sub, d in zip(("manifest", "wal", "sst"), db.paths.dirs(), strict=True):
        sizes = list(db.storage.list_sizes(d).values())
        out[sub] = (len(sizes), sum(sizes))
    return out


# -- every stored version ----------------------------------------------------------------------------------
def stored_versions(path: str, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple]:
    """Every version of the user keys in [start, end) the database at `path` stores, as ``(key, seq, ts,
    expire_ts, value, level)``: key ascending, seq descending within a key (the read path's order), value
    None for a tombstone, level "wal" (unflushed), "L0" or "run <id>". Nothing is resolved: shadowed
    versions, tombstones and expired rows are all there, as RocksDB's ``ldb idump`` shows them.

    Read from one consistent view of the files (`lsm.history.open_view`: a flush or compaction committing
    meanwhile makes it read again), without opening the database, so a running writer is not fenced. The
    engine's own rows (the remaps of ingested sources) are left out. A generator: close it (or read it
    to the end) to release the SSTs."""
    from lsm.history import open_view

    view = open_view(path)
    try:
        yield from view_versions(view, start, end)
    finally:
        view.close()


def view_versions(view: HistoryView, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple]:
    """`stored_versions` of an open `lsm.history.HistoryView` (opened for every seq: ``open_view(path)``),
    for a caller that also wants the view's `last_seq`; the caller closes the view."""
    if view.seqs != (0, None):
        raise ValueError(f"view_versions needs a view of every seq, not of seqs {view.seqs}")
    by_name = {os.path.basename(r.path): r for r in view.readers}
    wal = [
        (*row, "wal")
        for rec in view.wal
        for row in rec.rows
        if (start is None or row[0] >= start) and (end is None or row[0] < end)
    ]
    wal.sort(key=lambda row: (row[0], -row[1]))
    sources: list[Any] = [wal]
    for name, ssts in levels(view.manifest):
        its = [_tagged(by_name[e.name].iter(start, end), name) for e in ssts]
        if name == "L0":  # overlapping: each SST is a source of its own
            sources += its
        else:  # a run's SSTs are disjoint and in key order: one source
            sources.append(itertools.chain.from_iterable(its))
    for row in merge_sources(sources):
        if row[0] >= SYSTEM_PREFIX and is_system(row[0]):
            continue
        yield row


def _tagged(rows: Iterator[tuple], level: str) -> Iterator[tuple]:
    for row in rows:
        yield (*row, level)


__all__ = [
    "CATEGORIES",
    "CheckError",
    "CheckReport",
    "LevelUsage",
    "SpaceReport",
    "check_database",
    "database_dir",
    "latest_manifest",
    "levels",
    "space_usage",
    "stored_files",
    "stored_versions",
    "view_versions",
]
