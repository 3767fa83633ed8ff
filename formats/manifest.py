"""Manifest codec: the versioned, checksummed record of the LSM shape.

One file per manifest version, ``manifest/%020d.manifest``::

    | magic "LSMM" | u16 format_version | u32 payload_len | payload (msgpack map) | u64 xxh3_64(all before) |

Payload keys (format_version 1)::

    writer_epoch, compactor_epoch   ints; fencing of stale writers and compactors
    next_sst_id, next_run_id        ints; ids handed out for new files and runs
    last_seq                        int; last sequence number durable in SSTs (WAL holds the rest)
    wal_replay_from                 int; first WAL segment id not yet flushed
    clock_watermark                 int ms; largest ts ever written
    history_floor                   int; largest seq of a version a flush or compaction dropped or
                                    rewrote: every version with a higher seq is stored as committed
    l0                              [sst entry], newest first
    runs                            [{"id": int, "ssts": [sst entry]}], newest run first, each run's
                                    SSTs in key order
    seq_tracker                     bytes; `lsm.seq_tracker` encoding (SlateDB seq-tracker RFC)
    time_seq                        bytes; `lsm.time_seq` encoding
    purge_lag                       optional map; cumulative purge-lag histogram of every compaction
                                    committed (`compaction.purge_lag.PurgeLag.to_dict`); absent until a
                                    compaction drops an expired row or tombstone, so older manifests
                                    decode and manifests without purges encode byte-identically
    seq_reservations                optional [[first, last]]; seq ranges the writer reserved for bulk
                                    loads that have neither committed nor been abandoned: no seq from
                                    the first one on is final for readers (`lsm.history`). Cleared by the
                                    load's commit, by its abandonment and by the next writable open
    bulk_loads                      optional [[first, last]]; seq ranges of committed bulk loads, each ONE
                                    commit for readers of history (at its last seq); a range at or below
                                    history_floor is dropped by the next load's commit
    writer_nonce                    optional int (63 bits); drawn by the writable open that published the
                                    version with its epochs, kept by its later commits: two openers that
                                    bump one version write different bytes (a create whose response was
                                    lost is decided by reading the object back). Absent (0) before it existed

    checkpoints                     optional [{"id": str, "manifest_id": int, "seq": int, "ts": int,
                                    "name": str|None, "expires_at": int|None}]; the checkpoints of the
                                    store (lsm.checkpoints): each names the manifest version it reads,
                                    whose files nothing deletes while it lives (expires_at, in ms of the
                                    store's clock; None: until deleted)
    external                        optional [{"root": str, "checkpoint_id": str, "names": [str]}]; a
                                    clone's SSTs that live in another store (lsm.clone): `names` are read
                                    from ``<root>/sst/<name>``, held there by that store's checkpoint
                                    `checkpoint_id`, and never deleted by this store

    sst entry = {"name": str, "info": SsTableInfo as a map}; the file is ``sst/<name>``, names unique

format_version 2 is version 1 with `checkpoints` or `external` present: a manifest with neither is
written as version 1, byte-identical to one from before the keys existed; a manifest with either is
version 2, which an lsm-sim that knows nothing of checkpoints refuses (FormatVersionError) rather than
collect the files a checkpoint keeps or look for a clone's SSTs in its own root. DO NOT CHANGE: stored
on disk.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import msgpack
import xxhash

from formats.errors import CorruptionError, FormatVersionError
from formats.sst import SsTableInfo

MAGIC = b"LSMM"
FORMAT_VERSION = 2  # the newest version written (module docstring: 1 when nothing needs 2)
READABLE_VERSIONS = (1, 2)
HEADER = struct.Struct(">4sHI")
CHECK = struct.Struct(">Q")


@dataclasses.dataclass(frozen=True)
class SstEntry:
    """One SST in the manifest: its file name in ``sst/`` and its SsTableInfo."""

    name: str
    info: SsTableInfo

    @property
    def size(self) -> int:
        """The SST's file size in bytes."""
        return self.info.file_size


@dataclasses.dataclass(frozen=True)
class SortedRun:
    """A sorted run: SSTs in key order whose key ranges do not overlap, with a unique id."""

    id: int
    ssts: tuple[SstEntry, ...]

    @property
    def size(self) -> int:
        """The run's total file size in bytes."""
        return sum(s.size for s in self.ssts)


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A durable checkpoint: the manifest version `manifest_id` as it was at `seq` and time `ts` (ms of
    the store's clock), kept readable until deleted or, if `expires_at` is set, until the store's clock
    passes it (lsm.checkpoints). `id` is unique (a UUID); `name` is the user's label, if any."""

    id: str
    manifest_id: int
    seq: int
    ts: int
    name: str | None = None
    expires_at: int | None = None

    def live(self, now: int) -> bool:
        """Whether the checkpoint still holds its state at time `now` (ms)."""
        return self.expires_at is None or now < self.expires_at


@dataclasses.dataclass(frozen=True)
class ExternalDb:
    """SSTs a clone reads from the store it was cloned from: `names` in ``<root>/sst/``, kept there by
    that store's checkpoint `checkpoint_id`."""

    root: str
    checkpoint_id: str
    names: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Manifest:
    """One manifest version: epochs, id counters, last seq, WAL replay point, clock watermark, the
    LSM shape (L0 newest first, sorted runs newest first) and the seq<->time maps (see the diagram above)."""

    writer_epoch: int = 0
    compactor_epoch: int = 0
    next_sst_id: int = 1
    next_run_id: int = 1
    last_seq: int = 0
    wal_replay_from: int = 1
    clock_watermark: int = 0
    l0: tuple[SstEntry, ...] = ()
    runs: tuple[SortedRun, ...] = ()
    seq_tracker: bytes = b""
    time_seq: bytes = b""
    history_floor: int = 0
    purge_lag: dict[str, Any] | None = None  # PurgeLag.to_dict(); formats imports nothing of ours
    seq_reservations: tuple[tuple[int, int], ...] = ()  # (first, last) of each outstanding bulk load
    bulk_loads: tuple[tuple[int, int], ...] = ()  # (first, last) of each committed bulk load
    writer_nonce: int = 0  # the writable open's own draw (see the diagram above); 0: none
    checkpoints: tuple[Checkpoint, ...] = ()  # oldest first
    external: tuple[ExternalDb, ...] = ()  # a clone's SSTs in other stores

    @property
    def format_version(self) -> int:
        """The format version this manifest is written in (module docstring)."""
        return 2 if self.checkpoints or self.external else 1

    def replace(self, **kw: Any) -> Manifest:
        """A copy with the given fields changed."""
        return dataclasses.replace(self, **kw)

    def all_ssts(self) -> list[SstEntry]:
        """Every SST the version references: L0, then each run's."""
        return list(self.l0) + [s for r in self.runs for s in r.ssts]


def _entry(e: SstEntry) -> dict:
    return {"name": e.name, "info": e.info.to_dict()}


def encode(m: Manifest) -> bytes:
    """The manifest file bytes of `m` (header, msgpack payload, xxh3 checksum)."""
    d = dataclasses.asdict(m)
    d["l0"] = [_entry(e) for e in m.l0]
    d["runs"] = [{"id": r.id, "ssts": [_entry(e) for e in r.ssts]} for r in m.runs]
    # optional keys, omitted while empty: manifests that need neither are byte-identical to those from
    # before the keys existed, and decode defaults them
    if d["purge_lag"] is None:
        del d["purge_lag"]
    if d["history_floor"] == 0:
        del d["history_floor"]
    if d["writer_nonce"] == 0:
        del d["writer_nonce"]
    for key in ("seq_reservations", "bulk_loads"):
        if d[key]:
            d[key] = [list(r) for r in d[key]]
        else:
            del d[key]
    for key in ("checkpoints", "external"):  # asdict made maps of them already; names become a list
        if not d[key]:
            del d[key]
    for ext in d.get("external", ()):
        ext["names"] = list(ext["names"])
    payload = msgpack.packb(d, use_bin_type=True)
    head = HEADER.pack(MAGIC, m.format_version, len(payload))
    body = head + payload
    return body + CHECK.pack(xxhash.xxh3_64_intdigest(body))


def decode(buf: bytes, path: str = "<bytes>") -> Manifest:
    """The `Manifest` in `buf`; CorruptionError (naming `path`) if it is damaged, FormatVersionError if
    its version is unknown."""
    if len(buf) < HEADER.size + CHECK.size:
        raise CorruptionError(path, 0, f"manifest of {len(buf)} bytes is truncated")
    magic, version, length = HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise CorruptionError(path, 0, "bad magic number: not an lsm-sim manifest")
    end = HEADER.size + length
    if end + CHECK.size != len(buf):
        raise CorruptionError(path, 0, "manifest length does not match the file")
    (check,) = CHECK.unpack_from(buf, end)
    if xxhash.xxh3_64_intdigest(buf[:end]) != check:
        raise CorruptionError(path, end, "manifest checksum mismatch")
    if version not in READABLE_VERSIONS:
        raise FormatVersionError(
            path, f"manifest format version {version} was written by a newer lsm-sim (this one reads 1 and 2)"
        )
    try:
        d = msgpack.unpackb(buf[HEADER.size : end], raw=False)
        d["l0"] = tuple(_sst(e) for e in d["l0"])
        d["runs"] = tuple(SortedRun(r["id"], tuple(_sst(e) for e in r["ssts"])) for r in d["runs"])
        if not isinstance(d.get("purge_lag", {}), dict):
            raise ValueError("purge_lag is not a map")
        for key in ("seq_reservations", "bulk_loads"):
            if key in d:
                d[key] = tuple(_seq_range(r, key) for r in d[key])
        if "checkpoints" in d:
            d["checkpoints"] = tuple(_checkpoint(c) for c in d["checkpoints"])
        if "external" in d:
            d["external"] = tuple(ExternalDb(str(x["root"]), str(x["checkpoint_id"]), tuple(map(str, x["names"])))
                                  for x in d["external"])
        names = {f.name for f in dataclasses.fields(Manifest)}
        return Manifest(**{k: v for k, v in d.items() if k in names})
    except Exception as e:
        raise CorruptionError(path, HEADER.size, f"undecodable manifest payload: {e}") from None


def _seq_range(r: Any, key: str) -> tuple[int, int]:
    first, last = r
    if type(first) is not int or type(last) is not int or not 0 < first <= last:
        raise ValueError(f"{key}: {r!r} is not a seq range")
    return first, last


def _checkpoint(c: Any) -> Checkpoint:
    cp = Checkpoint(**c)
    ints = (cp.manifest_id, cp.seq, cp.ts) + ((cp.expires_at,) if cp.expires_at is not None else ())
    if type(cp.id) is not str or any(type(v) is not int for v in ints) or not (cp.name is None or type(cp.name) is str):
        raise ValueError(f"checkpoint {c!r} is malformed")
    return cp


def _sst(e: dict) -> SstEntry:
    return SstEntry(e["name"], SsTableInfo.from_dict(e["info"]))
