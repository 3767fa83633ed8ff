"""Output helpers shared by the `lsm` commands: keys and values, RFC 3339 times, tables, JSON.

Conventions (documented for users in docs/cli.md):

Bytes (keys, values). ``auto`` (the default) shows bytes that decode as UTF-8 and hold only printable
characters as text, anything else as lowercase hex; ``--hex`` shows every key and value as hex,
``--utf8`` decodes everything as UTF-8 (invalid bytes become ``\\xNN`` escapes).
- In tables hex is written with a ``0x`` prefix: ``0xff00``.
- In JSON a bytes field ``F`` is always a string; when that string is hex, the object also holds
  ``"F_hex": true`` (absent otherwise). So ``{"key": "ff00", "key_hex": true}`` is the key b"\\xff\\x00"
  and ``{"key": "0xff"}`` is the four-character key b"0xff". A tombstone's value is ``null``.
- Key arguments (``--from``, ``--to``, ``--prefix``, ``KEY``) are UTF-8 text, or hex (an optional ``0x``
  prefix allowed) when ``--hex`` is given, as in RocksDB's ldb.

Times. Row and file times are integer milliseconds since the Unix epoch. JSON keeps them as integers
under the field's own name; object views (``show``) add ``<field>_rfc3339`` strings. Tables print
RFC 3339 in UTC with milliseconds: ``2023-11-14T22:13:20.000Z``. Time arguments are epoch ms or
RFC 3339 with an offset (``Z``, ``+01:00``); without one they are refused (see `parse_time`).

JSON. A single object is printed indented; a listing is a JSON array with one element per line, written
as it is produced so long scans stream.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

BYTES_MODES = ("auto", "hex", "utf8")
MAX_VALUE_CHARS = 64  # longer values are cut in tables (JSON never cuts)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


# -- bytes ------------------------------------------------------------------------------------------
def printable_text(b: bytes) -> str | None:
    """`b` as text if it is UTF-8 made of printable characters, else None."""
    try:
        s = b.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return s if s.isprintable() else None


def _escaped_utf8(b: bytes) -> str:
    return escaped(b.decode("utf-8", "backslashreplace"))


def escaped(s: str) -> str:
    """`s` with every character that is not printable (a newline, ESC, other control characters) as its
    Python escape (``\\n``, ``\\x1b``): text from a file or the command line printed to a terminal can
    neither break a line nor send it control sequences."""
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in s)


def bytes_for_json(b: bytes, mode: str = "auto") -> tuple[str, bool]:
    """(string, is_hex) for a JSON bytes field under `mode`."""
    if mode == "hex":
        return b.hex(), True
    if mode == "utf8":
        return b.decode("utf-8", "backslashreplace"), False
    s = printable_text(b)
    return (b.hex(), True) if s is None else (s, False)


def bytes_for_table(b: bytes | None, mode: str = "auto", limit: int | None = None) -> str:
    """Text for a table cell: printable text as is, otherwise ``0x``-prefixed hex; None shows as ``-``."""
    if b is None:
        return "-"
    if mode == "hex":
        s = "0x" + b.hex()
    elif mode == "utf8":
        s = _escaped_utf8(b)
    else:
        t = printable_text(b)
        s = "0x" + b.hex() if t is None else t
    if limit is not None and len(s) > limit:
        s = s[: limit - 3] + "..."
    return s


def put_bytes(obj: dict[str, Any], field: str, b: bytes | None, mode: str = "auto") -> None:
    """Set obj[field] (and obj[field + "_hex"] when the string is hex) following the JSON convention."""
    if b is None:
        obj[field] = None
        return
    s, is_hex = bytes_for_json(b, mode)
    obj[field] = s
    if is_hex:
        obj[field + "_hex"] = True


def frontier_text(frontier: dict[int, int]) -> str:
    """A remap frontier as ``P:O`` pairs by partition (``0:13 1:12``), ``-`` when empty."""
    return " ".join(f"{p}:{o}" for p, o in sorted(frontier.items())) or "-"


def get_bytes(obj: dict[str, Any], field: str, *, strict: bool = False) -> bytes | None:
    """The inverse of `put_bytes`: obj[field] as bytes (None for null), ValueError naming the field for
    anything else. `strict` (a dump file, which this tool wrote): hex only in lowercase, text only valid
    Unicode; otherwise any hex, and lone surrogates as the bytes they escape (text a user typed)."""
    v = obj[field]
    is_hex = obj.get(f"{field}_hex", False)
    if not isinstance(is_hex, bool):
        raise ValueError(f'"{field}_hex" must be true or false')
    if v is None:
        if is_hex:
            raise ValueError(f'"{field}_hex" given for a null {field}')
        return None
    if not isinstance(v, str):
        raise ValueError(f'"{field}" must be a string (text, or hex with "{field}_hex": true) or null')
    if is_hex:
        if strict and (len(v) % 2 or v.strip("0123456789abcdef")):
            raise ValueError(f'"{field}" is not lowercase hex')
        try:
            return bytes.fromhex(v)
        except ValueError:
            raise ValueError(f'"{field}" is not hex') from None
    try:
        return v.encode("utf-8", "strict" if strict else "surrogateescape")
    except UnicodeEncodeError:
        raise ValueError(f'"{field}" is not valid text (a lone surrogate)') from None


def parse_key(text: str, hex_mode: bool, what: str = "key") -> bytes:
    """A key given on the command line: UTF-8, or hex (optional 0x prefix) when `hex_mode`."""
    if not hex_mode:
        return text.encode("utf-8", "surrogateescape")
    h = text[2:] if text[:2] in ("0x", "0X") else text
    try:
        return bytes.fromhex(h)
    except ValueError:
        raise ValueError(f"{what} {text!r} is not hex (with --hex, keys are given in hex)") from None


# -- times ------------------------------------------------------------------------------------------
def rfc3339(ms: int | None) -> str | None:
    """Epoch milliseconds as RFC 3339 UTC with milliseconds; None stays None."""
    if ms is None:
        return None
    try:
        t = _EPOCH + _dt.timedelta(milliseconds=ms)
    except OverflowError:  # a stored i64 time beyond the calendar (years 1-9999): show the number
        return f"{ms}ms"
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def time_cell(ms: int | None) -> str:
    return "-" if ms is None else rfc3339(ms) or "-"


def time_detail(ms: int | None) -> str:
    """``2023-11-14T22:13:20.000Z (1700000000000)`` for property listings."""
    return "-" if ms is None else f"{rfc3339(ms)} ({ms})"


def parse_time(text: str) -> int:
    """Epoch milliseconds from an integer string or an RFC 3339 time with its offset (``Z``, ``+01:00``).

    The library's parser, `lsm.timeline.parse_time` (imported here when a time is parsed: see
    tools.cmd_manifest on importing the engine): a time without an offset is refused, not taken as UTC."""
    from lsm.timeline import parse_time as parse

    return parse(text)


def time_arg(text: str) -> int:
    """argparse `type=` for time options: bad input becomes a usage error."""
    try:
        ms = parse_time(text)
    except (ValueError, OverflowError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    try:
        _EPOCH + _dt.timedelta(milliseconds=ms)
    except OverflowError:
        raise argparse.ArgumentTypeError(f"time {text!r} is outside the calendar (years 1 to 9999)") from None
    return ms


def int_arg(minimum: int | None, maximum: int | None = None):
    """argparse `type=` for an integer option of at least `minimum` (None: any integer, e.g. a seed) and
    at most `maximum` (None: no bound): bad input is a usage error."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if minimum is not None and v < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} is negative" if v < 0 else f"{text!r} is below {minimum}")
        if maximum is not None and v > maximum:
            raise argparse.ArgumentTypeError(f"{text!r} is above {maximum}")
        return v

    return parse


def float_arg(minimum: float, maximum: float, *, above_minimum: bool = False):
    """argparse `type=` for a number in [minimum, maximum] (or (minimum, maximum] with `above_minimum`):
    bad input is a usage error, as with `int_arg`."""
    low = f"({minimum:g}" if above_minimum else f"[{minimum:g}"
    bounds = f"{low}, {maximum:g}]"

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (minimum < v if above_minimum else minimum <= v) or not v <= maximum:  # NaN fails too
            raise argparse.ArgumentTypeError(f"{text!r} is not in {bounds}")
        return v

    return parse


# -- sizes ------------------------------------------------------------------------------------------
def plural(n: int, word: str, many: str | None = None) -> str:
    """`n` and `word`, in the plural unless n is 1: ``plural(1, "SST")`` is ``"1 SST"``, ``plural(2, "SST")``
    ``"2 SSTs"``; `many` for a plural other than word + "s" (``plural(n, "entry", "entries")``)."""
    return f"{n} {word if n == 1 else many if many is not None else word + 's'}"


def human_bytes(n: int) -> str:
    """1023 -> '1023 B', 1536 -> '1.5 KiB'."""
    if n < 1024:
        return f"{n} B"
    v = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        v /= 1024
        if v < 1024 or unit == "TiB":
            return f"{v:.1f} {unit}"
    raise AssertionError("unreachable")


# -- tables -----------------------------------------------------------------------------------------
def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Plain aligned columns, two spaces apart; numbers right-aligned, text left-aligned."""
    cells = [[("-" if c is None else str(c)) for c in r] for r in rows]
    numeric = [True] * len(headers)
    seen_number = [False] * len(headers)
    widths = [len(h) for h in headers]
    for r in cells:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
            if _is_number(c):
                seen_number[i] = True
            elif c not in ("-", ""):
                numeric[i] = False
    numeric = [n and s for n, s in zip(numeric, seen_number, strict=True)]
    head = [h.rjust(widths[i]) if numeric[i] and cells else h.ljust(widths[i]) for i, h in enumerate(headers)]
    lines = ["  ".join(head).rstrip()]
    for r in cells:
        parts = [c.rjust(widths[i]) if numeric[i] else c.ljust(widths[i]) for i, c in enumerate(r)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _is_number(s: str) -> bool:
    return s.lstrip("-").isdigit()


def properties(pairs: Iterable[tuple[str, Any]]) -> str:
    """Two columns, name and value, for one object."""
    pairs = [(k, "-" if v is None else str(v)) for k, v in pairs]
    w = max((len(k) for k, _ in pairs), default=0)
    return "\n".join(f"{k.ljust(w)}  {v}".rstrip() for k, v in pairs)


# A --follow poll interval: longer than an hour is no tail, and the wait must stay a representable time
MAX_INTERVAL_MS = 3_600_000


def add_interval_arg(p: argparse.ArgumentParser) -> None:
    """--interval MS, how often a --follow looks for new records (200 ms; 1 to `MAX_INTERVAL_MS`)."""
    p.add_argument(
        "--interval",
        type=int_arg(1, MAX_INTERVAL_MS),
        default=200,
        metavar="MS",
        help=f"--follow looks for new records every MS (200; at most {MAX_INTERVAL_MS})",
    )


# -- output -----------------------------------------------------------------------------------------
def add_output_args(p: argparse.ArgumentParser, *, bytes_args: bool = True) -> None:
    """--json, and --hex/--utf8 for commands that show keys or values."""
    p.add_argument(
        "--json", action="store_true", help="print JSON (an array for listings) instead of a table"
    )
    if bytes_args:
        g = p.add_mutually_exclusive_group()
        g.add_argument(
            "--hex",
            dest="bytes_mode",
            action="store_const",
            const="hex",
            help="show every key and value as hex (and read key arguments as hex)",
        )
        g.add_argument(
            "--utf8",
            dest="bytes_mode",
            action="store_const",
            const="utf8",
            help="show every key and value as UTF-8 text, escaping invalid bytes",
        )
        p.set_defaults(bytes_mode="auto")


def print_text(text: str) -> None:
    if text:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def print_json_array(items: Iterable[Any]) -> None:
    """A JSON array, one compact element per line, written as the elements come."""
    w = sys.stdout.write
    first = True
    for item in items:
        w(("[\n  " if first else ",\n  ") + json.dumps(item, ensure_ascii=False))
        first = False
    w("[]\n" if first else "\n]\n")


def error(message: str) -> None:
    """The one-line error every command prints on failure."""
    sys.stdout.flush()
    sys.stderr.write(f"lsm: error: {escaped(message)}\n")
