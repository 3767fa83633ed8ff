"""Options of a DB, of a write and of a read. Validated when built, so bad values fail early."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from compaction.policy import POLICIES
from formats.sst_layout import COMPRESSION_CODES, KNOWN_COMPRESSIONS
from lsm.clock import I64_MAX, Clock, SystemClock
from lsm.events import check_listeners
from lsm.wal import RECOVERY_MODES
from storage import request_bound_ms

if TYPE_CHECKING:
    from lsm.snapshot import Snapshot


class _NoTtl:
    """Sentinel: write without an expiry even when DbOptions.default_ttl is set."""

    def __repr__(self) -> str:
        return "NO_TTL"


NO_TTL: Any = _NoTtl()

# words in the name of an object-store config key whose value is a credential (obstore's S3, GCS and Azure
# keys: secret_access_key, token, session_token, access_key_id, account_key, sas_token, client_secret,
# service_account_key, credentials, ...): `redacted_store_options` hides such values
_SECRET_WORDS = ("secret", "token", "password", "credential", "key")
REDACTED = "<redacted>"


def is_secret_option(name: object) -> bool:
    """Whether the object-store config key `name` holds a credential (its value is never printed)."""
    return not isinstance(name, str) or any(w in name.lower() for w in _SECRET_WORDS)


def redacted_store_options(options: dict[str, Any] | None) -> dict[str, Any] | None:
    """`options` (DbOptions.object_store_options) with the value of every credential key replaced by
    ``"<redacted>"``: what a repr, a message, a log line or a report may show of them."""
    if options is None:
        return None
    return {k: REDACTED if is_secret_option(k) else v for k, v in options.items()}


def check_ttl(ttl: object) -> None:
    """ttl is None (use the default), NO_TTL, or an int >= 0 (ms)."""
    if ttl is None or ttl is NO_TTL:
        return
    if type(ttl) is not int:
        raise TypeError(f"ttl must be int milliseconds, not {type(ttl).__name__}")
    if ttl < 0:
        raise ValueError(f"ttl must be >= 0 ms, got {ttl}")
    if ttl > I64_MAX:
        raise ValueError(f"ttl {ttl} ms does not fit a signed 64-bit integer")


def _positive(name: str, v: object, allow_none: bool = False, minimum: int = 1) -> None:
    if v is None and allow_none:
        return
    if type(v) is not int or v < minimum:
        raise ValueError(f"DbOptions.{name} must be an int >= {minimum}, got {v!r}")


@dataclasses.dataclass
class DbOptions:
    """How a DB behaves. Sizes in bytes, times in ms.

    The first block of fields is pinned by the design; the rest tune compaction and caching.

    ``max_clock_skew_ms`` (default one day) guards the write path against a clock glitch: a reading of
    `clock` more than that far ahead of the host's wall clock (``time.time()``) makes the write raise
    `lsm.ClockError` naming the reading, the host time and the option, and nothing is written (a read
    ignores such a reading). `SystemClock` is the host's clock and `ManualClock` is moved on purpose, so
    neither is checked; ``None`` turns the check off. A store whose watermark is already in the future is
    mended by `DB.repair_clock` (docs/time.md).
    """

    clock: Clock = dataclasses.field(default_factory=SystemClock)
    default_ttl: int | None = None
    memtable_bytes: int = 4 << 20
    block_bytes: int = 4096
    bloom_bits_per_key: int = 10
    sst_format_version: int = 1
    l0_compaction_threshold: int = 4
    periodic_compaction_interval: int | None = None
    compaction_filters: Sequence[Any] = ()
    background_compaction: bool = True
    spark_offload_min_bytes: int | None = None
    history_retention: int = 0
    # the SSTs' block codec: None/"none", "zlib", "zstd" or "lz4" (docs/format.md; zstd for object stores)
    compression: str | None = None
    # what to compact next (compaction/policy.py POLICIES): "tiered" (size-tiered), or another policy
    compaction_policy: str = "tiered"
    # -- tuning beyond the pinned names --
    block_cache_bytes: int = 64 << 20
    target_sst_bytes: int = 8 << 20
    max_immutable_memtables: int = 2
    size_ratio: float = 2.0  # adjacent runs merge when the newer ones add up to >= older / size_ratio
    max_merge_inputs: int = 8  # cap on sorted runs per size-tiered job
    # runs of similar size that gather before a size-tiered merge (compaction/scheduler.py): 2 merges pairs
    # at once (read-friendly); 4..6 rewrite random writes less often, for a few more runs to read
    min_merge_width: int = 2
    # a size-tiered job whose rows a merge would not change is a manifest edit (compaction/trivial_move.py)
    # when its inputs add up to at least this; None never moves
    trivial_move_min_bytes: int | None = 1 << 20
    periodic_compaction_jitter: float = 0.0  # fraction of the interval, deterministic per SST
    periodic_compaction_max_bytes: int | None = None  # cap on input bytes of one periodic job
    # compaction_policy="leveled" (compaction/leveled.py): the top level's target is at most the base;
    # each level targets 1/multiplier of the one below it, and none less than the base
    max_bytes_for_level_base: int = 16 << 20
    max_bytes_for_level_multiplier: float = 10.0
    # compaction_policy="fifo": the oldest SSTs are dropped while all SSTs add up to more (None: no cap)
    fifo_max_bytes: int | None = None
    spark_session: Any = None
    spark_master: str = "local[*]"
    spark_tasks: int | None = None
    gc_grace_ms: int = 60_000
    # background jobs run in a worker process, off the writers' GIL; False runs them in a thread (for
    # filters that must share state with the program). db.compact() always runs in the caller.
    compaction_process: bool = True
    time_seq_min_time: int = 1754006400  # seconds; time bins ignore earlier clock readings (2025-08-01)
    manifest_history: int = 100  # manifest versions kept on disk
    # lsm.events.EventListener objects told of every flush and compaction (see lsm/events.py)
    event_listeners: Sequence[Any] = ()
    # False: a full memtable (and the idle flush) is flushed in the writing thread, with no flush
    # thread, so a single-threaded driver on a ManualClock is deterministic (the simulator)
    background_flush: bool = True
    # with background_flush: the flush thread has a worker process write each L0 SST from the frozen
    # memtable's WAL segment (compaction.flush), off the writers' GIL; False writes it in the thread
    flush_process: bool = True
    # what WAL replay accepts at open (lsm.wal.RECOVERY_MODES, after RocksDB's WALRecoveryMode):
    # "tolerate_truncated_tail" drops only an incomplete last record; "tolerate_corrupted_tail" also a
    # complete last record with a bad checksum; "absolute_consistency" refuses either; "point_in_time"
    # replays up to the first damaged record of any segment and ignores everything after it
    wal_recovery_mode: str = "tolerate_truncated_tail"
    # a reading of `clock` more than this many ms ahead of the host's wall clock (time.time()) is refused
    # with ClockError and nothing is written: one far-future glitch would otherwise become the floor of
    # every later write (docs/time.md, "Clock mishaps"). Not applied to SystemClock (it is the host's
    # clock) nor to ManualClock (moved on purpose); None turns the check off
    max_clock_skew_ms: int | None = 86_400_000
    # an object-store database (DB.open("s3://bucket/prefix")): obstore's S3 config keys (endpoint,
    # region, access_key_id, secret_access_key, allow_http, ...); None: the standard AWS environment
    object_store_options: dict[str, Any] | None = None
    # its WAL: writes are buffered and group-committed into one immutable WAL object every this many ms,
    # or sooner once the buffer holds wal_flush_bytes (WriteOptions(sync=True) waits for its object);
    # None: no timer, writes become durable at a sync write, a full buffer, db.flush_wal(), flush or close
    # (RocksDB's manual_wal_flush; a simulation drives the WAL itself this way)
    wal_flush_interval_ms: int | None = 100
    wal_flush_bytes: int = 4 << 20
    # an optional bounded local disk cache of SST blocks read from the object store (None: no cache;
    # nothing of an object-store database is written locally unless this names a directory)
    object_cache_dir: str | None = None
    object_cache_bytes: int = 1 << 30
    # a following reader (DB.open(read_only=True, follow=True)) moves to the writer's newest state this often
    reader_poll_interval_ms: int = 1000

    def __repr__(self) -> str:
        # the dataclass's repr, without the credentials of object_store_options: an options object ends
        # up in logs, tracebacks and test output
        fields = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "object_store_options" and isinstance(v, dict):
                v = redacted_store_options(v)
            fields.append(f"{f.name}={v!r}")
        return f"{type(self).__qualname__}({', '.join(fields)})"

    def __post_init__(self) -> None:
        if not callable(getattr(self.clock, "now", None)):
            raise TypeError("DbOptions.clock must have a now() -> int method")
        if self.default_ttl is not None:
            check_ttl(self.default_ttl)
        _positive("memtable_bytes", self.memtable_bytes, minimum=1024)
        _positive("block_bytes", self.block_bytes, minimum=64)
        _positive("bloom_bits_per_key", self.bloom_bits_per_key)
        if self.sst_format_version not in (0, 1):
            raise ValueError(f"DbOptions.sst_format_version must be 0 or 1, got {self.sst_format_version!r}")
        if self.sst_format_version == 0 and self.default_ttl is not None:
            raise ValueError("format version 0 has no TimeToLive attribute: it cannot be used with default_ttl")
        if not isinstance(self.compaction_policy, str) or self.compaction_policy not in POLICIES:
            raise ValueError(
                f"DbOptions.compaction_policy must be one of {', '.join(sorted(POLICIES))}, "
                f"got {self.compaction_policy!r}"
            )
        _positive("l0_compaction_threshold", self.l0_compaction_threshold, minimum=2)
        _positive("periodic_compaction_interval", self.periodic_compaction_interval, allow_none=True)
        _positive("spark_offload_min_bytes", self.spark_offload_min_bytes, allow_none=True, minimum=0)
        _positive("history_retention", self.history_retention, minimum=0)
        if not (self.compression is None or isinstance(self.compression, str)) or (
            self.compression not in COMPRESSION_CODES
        ):
            raise ValueError(
                f"DbOptions.compression must be one of {KNOWN_COMPRESSIONS}, got {self.compression!r}"
            )
        _positive("block_cache_bytes", self.block_cache_bytes, minimum=0)
        _positive("target_sst_bytes", self.target_sst_bytes, minimum=1024)
        _positive("max_immutable_memtables", self.max_immutable_memtables)
        _positive("max_merge_inputs", self.max_merge_inputs, minimum=2)
        _positive("min_merge_width", self.min_merge_width, minimum=2)
        if self.min_merge_width > self.max_merge_inputs:
            raise ValueError("DbOptions.min_merge_width must be <= max_merge_inputs")
        _positive("max_bytes_for_level_base", self.max_bytes_for_level_base)
        if not (
            type(self.max_bytes_for_level_multiplier) in (int, float) and self.max_bytes_for_level_multiplier >= 2
        ):
            raise ValueError(
                f"DbOptions.max_bytes_for_level_multiplier must be a number >= 2, got {self.max_bytes_for_level_multiplier!r}"
            )
        _positive("fifo_max_bytes", self.fifo_max_bytes, allow_none=True)
        _positive("trivial_move_min_bytes", self.trivial_move_min_bytes, allow_none=True, minimum=0)
        if not self.size_ratio >= 1:
            raise ValueError("DbOptions.size_ratio must be >= 1")
        if not 0 <= self.periodic_compaction_jitter < 1:
            raise ValueError("DbOptions.periodic_compaction_jitter must be in [0, 1)")
        for f in self.compaction_filters:
            if not callable(getattr(f, "create", None)):
                raise TypeError(f"compaction filter factory {f!r} has no create(ctx) method")
        self.compaction_filters = tuple(self.compaction_filters)
        self.event_listeners = check_listeners(self.event_listeners)
        _positive("max_clock_skew_ms", self.max_clock_skew_ms, allow_none=True, minimum=0)
        _positive("wal_flush_interval_ms", self.wal_flush_interval_ms, allow_none=True)
        _positive("wal_flush_bytes", self.wal_flush_bytes)
        _positive("object_cache_bytes", self.object_cache_bytes)
        _positive("reader_poll_interval_ms", self.reader_poll_interval_ms)
        if self.object_store_options is not None and not isinstance(self.object_store_options, dict):
            raise TypeError("DbOptions.object_store_options must be a dict of obstore config keys")
        # the WAL's deletion grace is derived from how long one request may take (lsm.wal_object.wal_bound):
        # options that give no bound are refused here, before anything is opened
        request_bound_ms(self.object_store_options)
        if self.wal_recovery_mode not in RECOVERY_MODES:
            raise ValueError(
                f"DbOptions.wal_recovery_mode must be one of {', '.join(RECOVERY_MODES)}, "
                f"got {self.wal_recovery_mode!r}"
            )


@dataclasses.dataclass(frozen=True)
class WriteOptions:
    """sync=False hands the WAL bytes to the OS (they survive a killed process); sync=True fsyncs."""

    sync: bool = False


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How a read sees the database.

    include_expired=True shows rows whose TTL has passed but that compaction has not removed yet.
    now (ms, or an RFC 3339 string) judges TTL expiry at that time instead of the DB clock's now (the
    state read is unchanged: use `snapshot`, or scan's as_of, to read an older state).
    snapshot (an open `lsm.Snapshot` of the same DB) reads as of its seq, and at its read time unless
    `now` is given (RocksDB's ReadOptions::snapshot)."""

    include_expired: bool = False
    now: int | str | None = None
    snapshot: Snapshot | None = None

    def __post_init__(self) -> None:
        if self.now is not None and type(self.now) not in (int, str):
            raise TypeError(f"ReadOptions.now must be int ms or an RFC 3339 string, not {type(self.now).__name__}")
