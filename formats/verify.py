"""Deep verification of one SST: everything `SstReader.verify` checks, plus that the metadata agrees
with the rows.

`SstReader.verify` checks every block's checksum and decoding and the key order. `verify_sst` then
reads every row once and compares what the metadata (SsTableInfo) claims with what the rows hold: the
key range, the ts and expire_ts ranges, the key/value byte totals, and that the bloom filter admits
every stored key (a key the filter denies would be unreadable). Used by ``lsm sst verify`` and by
`lsm.inspect.check_database`.
"""

from __future__ import annotations

from formats.errors import CorruptionError
from formats.row import FORMAT_V1, RowFeature
from formats.sst import SstReader


def check_blocks(r: SstReader) -> None:
    """Check every block checksum, the key order and the metadata against the content.

    Raises CorruptionError naming the offset of the first problem. O(file).
    """
    info = r.info
    prev: tuple | None = None
    count = tombstones = expiring = 0
    min_seq = max_seq = None
    for i, h in enumerate(r.blocks):
        rows = r.block_rows(i)
        if rows and (rows[0][0] != h.first_key or rows[-1][0] != h.last_key):
            raise CorruptionError(r.path, h.offset, "block keys disagree with the index")
        for row in rows:
            if prev is not None:
                if row[0] < prev[0] or (
                    row[0] == prev[0] and info.format_version == FORMAT_V1 and row[1] >= prev[1]
                ):
                    raise CorruptionError(r.path, h.offset, f"key {row[0]!r} is out of order")
            prev = row
            count += 1
            if row[4] is None:
                tombstones += 1
            if row[3] is not None:
                expiring += 1
            if info.format_version == FORMAT_V1:
                s = row[1]
                min_seq = s if min_seq is None or s < min_seq else min_seq
                max_seq = s if max_seq is None or s > max_seq else max_seq
    problems = []
    if count != info.num_rows:
        problems.append(f"metadata says {info.num_rows} rows, found {count}")
    if tombstones != info.num_tombstones:
        problems.append(f"metadata says {info.num_tombstones} tombstones, found {tombstones}")
    if expiring != info.num_expiring:
        problems.append(f"metadata says {info.num_expiring} rows with expire_ts, found {expiring}")
    if RowFeature.Seq in r.codec.features and (min_seq, max_seq) != (info.min_seq, info.max_seq):
        problems.append("metadata seq range disagrees with the rows")
    if problems:
        raise CorruptionError(r.path, r.info.filter_offset + r.info.filter_size, "; ".join(problems))


def verify_sst(r: SstReader) -> None:
    """`SstReader.verify` plus the metadata it does not compare: key, ts and expire_ts ranges, byte
    totals, and the bloom filter (a key the filter denies would be unreadable). Raises CorruptionError."""
    r.verify()
    info = r.info
    meta_at = info.filter_offset + info.filter_size
    first = last = None
    min_ts = max_ts = min_exp = max_exp = None
    key_bytes = value_bytes = 0
    prev_key = None
    has_ts = RowFeature.Timestamp in r.codec.features
    has_ttl = RowFeature.TimeToLive in r.codec.features
    for i in range(len(r.blocks)):
        for key, _seq, ts, exp, value in r.block_rows(i):
            if first is None:
                first = key
            last = key
            key_bytes += len(key)
            if value is not None:
                value_bytes += len(value)
            if ts is not None:
                min_ts = ts if min_ts is None or ts < min_ts else min_ts
                max_ts = ts if max_ts is None or ts > max_ts else max_ts
            if exp is not None:
                min_exp = exp if min_exp is None or exp < min_exp else min_exp
                max_exp = exp if max_exp is None or exp > max_exp else max_exp
            if key != prev_key:
                if not r.bloom.may_contain(key):
                    raise CorruptionError(
                        r.path, info.filter_offset, f"bloom filter denies stored key {key!r}"
                    )
                prev_key = key
    problems = []
    if (first, last) != (info.first_key, info.last_key):
        problems.append("metadata key range disagrees with the rows")
    if has_ts and (min_ts, max_ts) != (info.min_ts, info.max_ts):
        problems.append(
            f"metadata ts range [{info.min_ts}, {info.max_ts}] disagrees with the rows [{min_ts}, {max_ts}]"
        )
    if has_ttl and (min_exp, max_exp) != (info.min_expire_ts, info.max_expire_ts):
        problems.append("metadata expire_ts range disagrees with the rows")
    if info.key_bytes and (key_bytes, value_bytes) != (info.key_bytes, info.value_bytes):
        problems.append("metadata key/value byte totals disagree with the rows")
    if problems:
        raise CorruptionError(r.path, meta_at, "; ".join(problems))


__all__ = ["verify_sst"]
