"""Output helpers shared by the `lsm` commands: keys and values, RFC 3339 times, tables, JSON.

Conventions (documented for users in docs/cli.md):

Bytes (keys, values). Each output writes every key in ONE encoding and every value in one encoding,
chosen once for the command (``--key-encoding`` / ``--value-encoding`` utf8|hex|base64, `BytesMode`):
- JSON defaults to ``utf8`` for both: a key or value that is not valid UTF-8 stops the command with one
  error line naming the option that shows it (never a lossy or a per-row guess). With ``hex`` a field
  ``F`` is lowercase hex and every object also holds ``"F_hex": true``; with ``base64``, standard base64
  and ``"F_base64": true``: the output says its encoding, and `get_bytes` (``lsm log write``) reads it.
- Tables default to ``auto``: printable UTF-8 as text, anything else as ``0x``-prefixed hex (the prefix
  marks it). ``utf8`` escapes invalid bytes as ``\\xNN``, ``hex`` writes ``0x...``, ``base64`` base64.
- ``--hex`` is both encodings hex (and key arguments read as hex), as RocksDB's ldb ``--hex``;
  ``--utf8`` is deprecated: it still writes invalid bytes as ``\\xNN`` escapes, in JSON too, with a
  warning naming the replacement.
- Key arguments (``--from``, ``--to``, ``--prefix``, ``KEY``) are read in the key encoding when one is
  given (hex with an optional ``0x`` prefix, base64), else as UTF-8 text; a VALUE argument in the value
  encoding. The dump file format (tools/dumpfile.py) keeps ``auto`` per record: it is a file format.

Times. Row and file times are integer milliseconds since the Unix epoch. JSON keeps them as integers
under the field's own name; object views (``show``) add ``<field>_rfc3339`` strings. Tables print
RFC 3339 in UTC with milliseconds: ``2023-11-14T22:13:20.000Z``. Time arguments are epoch ms or
RFC 3339 with an offset (``Z``, ``+01:00``); without one they are refused (see `parse_time`).

JSON. A single object is printed indented; a listing is a JSON array with one element per line, written
as it is produced so long scans stream.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import datetime as _dt
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

ENCODINGS = ("utf8", "hex", "base64")  # --key-encoding / --value-encoding
# the modes a field is written in: the ENCODINGS, "auto" (a table's default: text or 0x-hex) and
# "escaped" (the deprecated --utf8: invalid bytes as \\xNN, also in JSON)
BYTES_MODES = ("auto", *ENCODINGS, "escaped")
MAX_VALUE_CHARS = 64  # longer values are cut in tables (JSON never cuts)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
UTF8_DEPRECATED = (
    "lsm: warning: --utf8 is deprecated: it writes bytes that are not UTF-8 as \\xNN escapes, which cannot "
    "be told from text; use --key-encoding utf8 --value-encoding utf8 (which refuse such bytes) or hex/base64"
)


class NotUtf8Error(ValueError):
    """Bytes that a ``utf8`` output cannot write exactly; the message names the option that can."""


@dataclass(frozen=True)
class BytesMode:
    """How one command's output writes keys and values (`BYTES_MODES`), and reads key and value
    arguments (`ENCODINGS`), decided once from its options by `bytes_mode_of`."""

    key: str = "auto"
    value: str = "auto"
    key_in: str = "utf8"
    value_in: str = "utf8"

    def __post_init__(self) -> None:
        for f in ("key", "value"):
            if getattr(self, f) not in BYTES_MODES:
                raise ValueError(f"unknown bytes mode {getattr(self, f)!r}: use one of {BYTES_MODES}")
        for f in ("key_in", "value_in"):
            if getattr(self, f) not in ENCODINGS:
                raise ValueError(f"unknown encoding {getattr(self, f)!r}: use one of {ENCODINGS}")


def bytes_mode_of(args: argparse.Namespace) -> BytesMode:
    """The `BytesMode` of a command's parsed options (--key-encoding, --value-encoding, --hex, --utf8,
    --json). A bad combination is ValueError (a usage error): --hex or --utf8 with an encoding option."""
    legacy = getattr(args, "legacy_bytes", None)
    key, value = getattr(args, "key_encoding", None), getattr(args, "value_encoding", None)
    if legacy is not None and (key is not None or value is not None):
        given = "--key-encoding" if key is not None else "--value-encoding"
        raise ValueError(f"--{legacy} sets both encodings: give it or {given}, not both")
    if legacy == "hex":
        return BytesMode("hex", "hex", "hex", "hex")
    if legacy == "utf8":
        return BytesMode("escaped", "escaped")
    default = "utf8" if getattr(args, "json", False) else "auto"
    return BytesMode(key or default, value or default, key or "utf8", value or "utf8")


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


def bytes_for_json(b: bytes, mode: str = "auto", field: str = "key") -> tuple[str, str | None]:
    """(string, flag) for a JSON bytes field under `mode`: flag "hex" or "base64" when the string is in
    that encoding, None when it is the text. `mode` "utf8" refuses bytes that are not UTF-8
    (NotUtf8Error naming the option for `field`)."""
    if mode == "hex":
        return b.hex(), "hex"
    if mode == "base64":
        return base64.b64encode(b).decode("ascii"), "base64"
    if mode == "escaped":
        return b.decode("utf-8", "backslashreplace"), None
    if mode == "utf8":
        try:
            return b.decode("utf-8"), None
        except UnicodeDecodeError:
            raise NotUtf8Error(_not_utf8(b, field)) from None
    s = printable_text(b)
    return (b.hex(), "hex") if s is None else (s, None)


def _not_utf8(b: bytes, field: str) -> str:
    option = "--value-encoding" if field == "value" else "--key-encoding"
    what = "a value" if field == "value" else f"the {field.replace('_', ' ')}" if field != "key" else "the key"
    shown = "0x" + b[:32].hex() + ("..." if len(b) > 32 else "")
    return (
        f"{what} {shown} is not UTF-8, and this output writes {'values' if field == 'value' else 'keys'} as "
        f"UTF-8 text: give {option} hex or {option} base64"
    )


def bytes_for_table(b: bytes | None, mode: str = "auto", limit: int | None = None) -> str:
    """Text for a table cell under `mode`: ``auto`` printable text as is, otherwise ``0x``-prefixed hex;
    ``hex`` always ``0x`` hex; ``base64``; ``utf8``/``escaped`` text with invalid bytes as ``\\xNN``.
    None shows as ``-``."""
    if b is None:
        return "-"
    if mode == "hex":
        s = "0x" + b.hex()
    elif mode == "base64":
        s = base64.b64encode(b).decode("ascii")
    elif mode in ("utf8", "escaped"):
        s = _escaped_utf8(b)
    else:
        t = printable_text(b)
        s = "0x" + b.hex() if t is None else t
    if limit is not None and len(s) > limit:
        s = s[: limit - 3] + "..."
    return s


def put_bytes(obj: dict[str, Any], field: str, b: bytes | None, mode: str = "auto") -> None:
    """Set obj[field] (and obj[field + "_hex"] or obj[field + "_base64"] when the string is in that
    encoding) following the JSON convention."""
    if b is None:
        obj[field] = None
        return
    s, flag = bytes_for_json(b, mode, field)
    obj[field] = s
    if flag is not None:
        obj[f"{field}_{flag}"] = True


def frontier_text(frontier: dict[int, int]) -> str:
    """A remap frontier as ``P:O`` pairs by partition (``0:13 1:12``), ``-`` when empty."""
    return " ".join(f"{p}:{o}" for p, o in sorted(frontier.items())) or "-"


def get_bytes(obj: dict[str, Any], field: str, *, strict: bool = False) -> bytes | None:
    """The inverse of `put_bytes`: obj[field] as bytes (None for null), ValueError naming the field for
    anything else. `strict` (a dump file, which this tool wrote): hex only in lowercase, text only valid
    Unicode, no base64 (a dump never holds it); otherwise any hex, standard base64 with
    ``"F_base64": true``, and lone surrogates as the bytes they escape (text a user typed)."""
    v = obj[field]
    flags = [f for f in ("hex", "base64") if f"{field}_{f}" in obj and not (strict and f == "base64")]
    for f in flags:
        if not isinstance(obj[f"{field}_{f}"], bool):
            raise ValueError(f'"{field}_{f}" must be true or false')
    flags = [f for f in flags if obj[f"{field}_{f}"]]
    if len(flags) > 1:
        raise ValueError(f'"{field}_hex" and "{field}_base64" exclude each other')
    if v is None:
        if flags:
            raise ValueError(f'"{field}_{flags[0]}" given for a null {field}')
        return None
    if not isinstance(v, str):
        raise ValueError(
            f'"{field}" must be a string (text, or hex with "{field}_hex": true, or base64 with '
            f'"{field}_base64": true) or null'
        )
    if flags == ["hex"]:
        if strict and (len(v) % 2 or v.strip("0123456789abcdef")):
            raise ValueError(f'"{field}" is not lowercase hex')
        try:
            return bytes.fromhex(v)
        except ValueError:
            raise ValueError(f'"{field}" is not hex') from None
    if flags == ["base64"]:
        return _base64(v, f'"{field}"')
    try:
        return v.encode("utf-8", "strict" if strict else "surrogateescape")
    except UnicodeEncodeError:
        raise ValueError(f'"{field}" is not valid text (a lone surrogate)') from None


def _base64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise ValueError(f"{what} is not base64") from None


def parse_key(text: str, encoding: str | bool, what: str = "key") -> bytes:
    """A key (or value) given on the command line, in `encoding` (`ENCODINGS`): UTF-8 text, hex (an
    optional 0x prefix) or base64. A bool is the older form: True for hex, False for UTF-8."""
    if isinstance(encoding, bool):
        encoding = "hex" if encoding else "utf8"
    if encoding == "utf8":
        return text.encode("utf-8", "surrogateescape")
    if encoding == "base64":
        return _base64(text, f"{what} {text!r}")
    h = text[2:] if text[:2] in ("0x", "0X") else text
    try:
        return bytes.fromhex(h)
    except ValueError:
        raise ValueError(f"{what} {text!r} is not hex (keys are given in hex with --hex or --key-encoding hex)") from None


def key_range(args: argparse.Namespace, start_attr: str = "start", end_attr: str = "end") -> tuple[bytes | None, bytes | None]:
    """(--from, --to) of a command as bytes, read in the key encoding (None when not given). A --from
    after --to is refused (ValueError: exit 2) rather than read as an empty range, as RocksDB's
    CompactRange and DeleteRange refuse an end before the start; --from equal to --to is the empty range."""
    enc = args.bytes_mode.key_in if hasattr(args, "bytes_mode") else "utf8"
    texts = getattr(args, start_attr), getattr(args, end_attr)
    start = None if texts[0] is None else parse_key(texts[0], enc, "--from")
    end = None if texts[1] is None else parse_key(texts[1], enc, "--to")
    if start is not None and end is not None and start > end:
        raise ValueError(
            f"--from {texts[0]!r} is after --to {texts[1]!r}: the range is [--from, --to) in key order "
            + ("whatever the direction (swap them; --reverse reads it backwards)" if hasattr(args, "reverse") else "(swap them)")
        )
    return start, end


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


def fit_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], width: int | None, drop: Sequence[str]
) -> tuple[str, list[str]]:
    """`table`, leaving out the columns named in `drop`, in that order, until no line is wider than
    `width` (None: all columns); returns the text and the names left out. Columns not in `drop` always
    stay, so a table may still be wider."""
    left_out: list[str] = []
    while True:
        keep = [i for i, h in enumerate(headers) if h not in left_out]
        text = table([headers[i] for i in keep], [[r[i] for i in keep] for r in rows])
        over = width is not None and max(map(len, text.splitlines())) > width
        candidates = [h for h in drop if h in headers and h not in left_out]
        if not over or not candidates:
            return text, left_out
        left_out.append(candidates[0])


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
    """--json, and for commands that show keys or values --key-encoding/--value-encoding and the older
    --hex/--utf8 (`bytes_mode_of` turns them into ``args.bytes_mode`` once parsed)."""
    p.add_argument(
        "--json", action="store_true", help="print JSON (an array for listings) instead of a table"
    )
    if bytes_args:
        for what in ("key", "value"):
            p.add_argument(
                f"--{what}-encoding",
                choices=ENCODINGS,
                metavar="E",
                help=f"write every {what} as utf8, hex or base64 (default: utf8 in JSON, text or 0x-hex in "
                f"tables); {what} arguments are read in it too",
            )
        g = p.add_mutually_exclusive_group()
        g.add_argument(
            "--hex",
            dest="legacy_bytes",
            action="store_const",
            const="hex",
            help="every key and value as hex, key arguments read as hex (both encodings hex)",
        )
        g.add_argument(
            "--utf8",
            dest="legacy_bytes",
            action="store_const",
            const="utf8",
            help="deprecated: text with invalid bytes as \\xNN escapes (use --key-encoding utf8)",
        )
        p.set_defaults(legacy_bytes=None)


def add_key_input_args(p: argparse.ArgumentParser) -> None:
    """For a command whose only bytes are key arguments (--from, --to): --key-encoding E says how they are
    given, --hex being --key-encoding hex (as on every command)."""
    p.add_argument(
        "--key-encoding",
        choices=ENCODINGS,
        metavar="E",
        help="key arguments are utf8 (default), hex or base64",
    )
    p.add_argument(
        "--hex", dest="legacy_bytes", action="store_const", const="hex", help="key arguments are hex"
    )
    p.set_defaults(legacy_bytes=None)


def finish_output_args(args: argparse.Namespace) -> None:
    """After parsing: set ``args.bytes_mode`` (a `BytesMode`) on a command that shows bytes, and warn
    once about --utf8. ValueError for a bad combination."""
    if not hasattr(args, "legacy_bytes"):
        return
    args.bytes_mode = bytes_mode_of(args)
    if args.legacy_bytes == "utf8":
        sys.stdout.flush()
        sys.stderr.write(UTF8_DEPRECATED + "\n")


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
