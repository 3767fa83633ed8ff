"""The ``lsm dump`` file: a database's newest version of every key as portable, line-oriented text.

Format ``lsm-dump`` version 1 (docs/format.md, "Dump files"): ASCII JSON Lines, each line ending in
``\\n``::

    {"format": "lsm-dump", "version": 1, "source": "db", "seq": 12, "dumped_at": 1795648051188}
    {"key": "user:1", "value": "alice", "expire_ts": null}
    {"key": "00ff", "key_hex": true, "value": "0a0d", "value_hex": true, "expire_ts": 1795648111188}
    {"key": "user:2", "value": null, "expire_ts": null}
    {"end": "lsm-dump", "records": 3, "sha256": "<hex digest of every byte before this line>"}

One record per key, keys strictly ascending (bytewise); a ``null`` value is a tombstone. Bytes follow the
JSON convention of every ``lsm --json`` output (text when printable UTF-8, else hex with ``"F_hex":
true``). ``expire_ts`` is absolute (epoch ms), so a loaded row expires at the very instant the source
row does, whatever the clock when it is loaded. The trailer's count and SHA-256 make a file cut short or
edited fail `parse_dump` as a whole, before anything is written.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from formats.errors import LsmError
from tools import render

FORMAT = "lsm-dump"
VERSION = 1
I64_MAX = (1 << 63) - 1
I64_MIN = -(1 << 63)
_RECORD_FIELDS = {"key", "key_hex", "value", "value_hex", "expire_ts"}
_HEADER_FIELDS = {"format", "version", "source", "seq", "dumped_at"}
_TRAILER_FIELDS = {"end", "records", "sha256"}


class DumpFileError(LsmError):
    """A dump file that is not a complete, unedited ``lsm-dump`` version 1 file; nothing was loaded."""


@dataclass(frozen=True)
class DumpRecord:
    """One key's newest stored version: `value` None is a tombstone; `expire_ts` absolute epoch ms."""

    key: bytes
    value: bytes | None
    expire_ts: int | None


@dataclass(frozen=True)
class Dump:
    """A parsed and verified dump: its header fields and its records, keys ascending."""

    header: dict[str, Any]
    records: list[DumpRecord]


def _line(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, ensure_ascii=True, separators=(", ", ": ")) + "\n").encode("ascii")


def record_line(r: DumpRecord) -> bytes:
    """The line of one record."""
    d: dict[str, Any] = {}
    render.put_bytes(d, "key", r.key)
    render.put_bytes(d, "value", r.value)
    d["expire_ts"] = None if r.value is None else r.expire_ts  # a tombstone carries no expiry
    return _line(d)


def write_dump(out: IO[bytes], records: Iterable[DumpRecord], source: str, seq: int, dumped_at: int) -> int:
    """Write a whole dump of `records` (keys ascending) to `out`; return the number of records. `seq` and
    `dumped_at` are informative header fields (what the dump is of, and when); a load ignores them."""
    digest = hashlib.sha256()
    n = 0

    def put(b: bytes) -> None:
        digest.update(b)
        out.write(b)

    put(_line({"format": FORMAT, "version": VERSION, "source": source, "seq": seq, "dumped_at": dumped_at}))
    for r in records:
        put(record_line(r))
        n += 1
    out.write(_line({"end": FORMAT, "records": n, "sha256": digest.hexdigest()}))
    return n


def _obj(line: bytes, no: int, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DumpFileError(f"line {no}: {what} is not JSON ({e})") from None
    except RecursionError:  # no line of a dump nests: a hostile or broken file, not a crash
        raise DumpFileError(f"line {no}: {what} is JSON nested too deeply (a dump's lines are flat objects)") from None
    if not isinstance(obj, dict):
        raise DumpFileError(f"line {no}: {what} is not a JSON object")
    return obj


def _int(v: object) -> bool:
    return type(v) is int


def _bytes(obj: dict[str, Any], field: str, no: int) -> bytes | None:
    try:
        return render.get_bytes(obj, field, strict=True)
    except ValueError as e:
        raise DumpFileError(f"line {no}: {e}") from None


def _record(line: bytes, no: int) -> DumpRecord:
    obj = _obj(line, no, "a record")
    unknown = sorted(set(obj) - _RECORD_FIELDS)
    missing = sorted({"key", "value", "expire_ts"} - set(obj))
    if unknown or missing:
        raise DumpFileError(
            f"line {no}: a record has fields key, value, expire_ts (unknown {unknown}, missing {missing})"
        )
    key = _bytes(obj, "key", no)
    if not key:
        raise DumpFileError(f"line {no}: a record's key must be 1..65535 bytes")
    value = _bytes(obj, "value", no)
    exp = obj["expire_ts"]
    if exp is not None and not (_int(exp) and I64_MIN <= exp <= I64_MAX):
        raise DumpFileError(f'line {no}: "expire_ts" must be null or a signed 64-bit integer (epoch ms)')
    if value is None and exp is not None:
        raise DumpFileError(f'line {no}: a tombstone (value null) has "expire_ts" null')
    return DumpRecord(key, value, exp)


def parse_dump(data: bytes, name: str = "dump") -> Dump:
    """Parse and verify a whole dump (header, every record, key order, trailer count and SHA-256);
    DumpFileError naming the first problem, so that a load writes nothing from a bad file."""
    try:
        return _parse(data)
    except DumpFileError as e:
        raise DumpFileError(f"{name}: not a complete {FORMAT} version {VERSION} file: {e}") from None


def _parse(data: bytes) -> Dump:
    if not data:
        raise DumpFileError("the file is empty")
    if not data.endswith(b"\n"):
        raise DumpFileError("the last line is cut short (no newline at the end: a truncated file?)")
    lines = data[:-1].split(b"\n")
    header = _obj(lines[0], 1, "the header")
    if header.get("format") != FORMAT:
        raise DumpFileError(f'line 1: the header does not name the format "{FORMAT}"')
    if header.get("version") != VERSION:
        raise DumpFileError(
            f"line 1: format version {header.get('version')!r}; this lsm reads version {VERSION}"
        )
    if (
        set(header) != _HEADER_FIELDS
        or not _int(header["seq"])
        or not _int(header["dumped_at"])
        or not isinstance(header["source"], str)
    ):
        raise DumpFileError(f"line 1: a version {VERSION} header has the fields {sorted(_HEADER_FIELDS)}")
    if len(lines) < 2:
        raise DumpFileError("no trailer line (a truncated file?)")
    trailer = _obj(lines[-1], len(lines), "the last line")
    if trailer.get("end") != FORMAT:
        raise DumpFileError(f"line {len(lines)}: the last line is not the trailer (a truncated file?)")
    if (
        set(trailer) != _TRAILER_FIELDS
        or not _int(trailer["records"])
        or not isinstance(trailer["sha256"], str)
    ):
        raise DumpFileError(f"line {len(lines)}: the trailer has the fields {sorted(_TRAILER_FIELDS)}")
    body = lines[1:-1]
    if trailer["records"] != len(body):
        raise DumpFileError(f"the trailer counts {trailer['records']} records, the file holds {len(body)}")
    digest = hashlib.sha256(data[: len(data) - len(lines[-1]) - 1]).hexdigest()
    if digest != trailer["sha256"]:
        raise DumpFileError("the SHA-256 of the lines before the trailer does not match it (an edited file?)")
    records = [_record(line, no) for no, line in enumerate(body, start=2)]
    for no, (a, b) in enumerate(zip(records, records[1:], strict=False), start=3):
        if not a.key < b.key:
            raise DumpFileError(f"line {no}: keys must be strictly ascending")
    return Dump(header, records)


def newest_versions(rows: Iterator[tuple]) -> Iterator[DumpRecord]:
    """The newest version of each key of `rows` (key ascending, seq descending): what a dump holds."""
    last = None
    for row in rows:
        if row[0] != last:
            last = row[0]
            yield DumpRecord(row[0], row[4], row[3] if row[4] is not None else None)


__all__ = [
    "FORMAT",
    "VERSION",
    "Dump",
    "DumpFileError",
    "DumpRecord",
    "newest_versions",
    "parse_dump",
    "record_line",
    "write_dump",
]
