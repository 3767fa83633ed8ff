"""``lsm log write|show``: produce to and inspect a partitioned log (`lsm.sources.PartitionedLog`).

``lsm log write DIR`` reads JSON Lines on stdin, one record per line, and appends each to its partition
as soon as it is read (so a producer can stream into it)::

    {"partition": 0, "key": "user:1", "value": "alice", "ttl": 60000, "event_ts": 1700000000000,
     "tx": "t1", "tx_end": true}

- ``key`` (required) and ``value`` (required; ``null`` is a delete) are UTF-8 text, or hex when the
  object also holds ``"key_hex": true`` / ``"value_hex": true``: the same convention as every ``--json``
  output of `lsm` (see tools/render.py), so the records of ``lsm log show --json`` can be written back.
- ``partition`` defaults to ``--partition`` (0); ``ttl`` (ms), ``event_ts`` (ms or RFC 3339), ``tx``
  (int or string) and ``tx_end`` (bool, or an object ``{"<partition>": records}`` closing a transaction
  across partitions) are optional. Unknown fields are refused.
- ``offset`` is optional: the log assigns offsets, and when a line gives one it must be the offset the
  record gets (so copying a log, or resuming a copy, cannot silently misplace records).

A line ``{"advance": TIME}`` (ms or RFC 3339; ``"partition": P`` for one partition, else every partition)
appends a progress marker instead (`LogWriter.advance`): no record after it in that partition has an
event_ts below TIME, what ``lsm ingest --times source`` commits by.

A bad line stops the command (exit 2) naming the line; the lines before it were already appended.

DIR may be an object-store URL (``s3://bucket/prefix``): the log is then a chain of immutable segment
objects per partition (lsm.sources.object_log, docs/sources.md), and the records of a partition are
published as one segment at the end of stdin, every 4 MiB, or each on its own with ``--sync``; a reader
sees them once published.

``lsm log show DIR`` prints the complete records (partition, offset, op, key, value, ttl, event_ts, tx),
and notes a torn tail (a record a producer is still appending). ``--json`` prints a JSON array of the
record objects above, each with its ``offset``.

``lsm log show DIR --follow`` prints the records there are, then each record as it is appended, like
``kafka-console-consumer``: a header line, then one tab-separated line per record (``--json``: one JSON
object per line, JSON Lines, no header), partitions that appear later included, polling every
``--interval`` ms. Ctrl-C (SIGINT) or SIGTERM ends it between two records: it prints how many records
it showed to stderr and exits 0, the normal end of a follow.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from tools import render

SHOW_COLUMNS = ("partition", "offset", "op", "key", "value", "ttl", "event_ts", "tx")
FIELDS = frozenset(
    ("partition", "offset", "key", "key_hex", "key_base64", "value", "value_hex", "value_base64", "ttl", "event_ts", "tx", "tx_end")
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("log", help="a partitioned log (the source of lsm ingest): write, show")
    s = p.add_subparsers(dest="log_command", metavar="COMMAND", required=True)
    w = s.add_parser(
        "write",
        help="append records given as JSON Lines on stdin to a partitioned log",
        description="Append one record per JSON line of stdin to the partitioned log in DIR (created if "
        'missing), each as soon as it is read: {"partition": 0, "key": "k", "value": "v" or null, "ttl": '
        'ms, "event_ts": ms or RFC 3339, "tx": id, "tx_end": true}. Keys and values are UTF-8 text, or hex '
        'with "key_hex": true / "value_hex": true. Prints where the records went.',
    )
    w.add_argument("dir", metavar="DIR", help="the log's directory, or an s3://bucket/prefix URL")
    w.add_argument(
        "--partition", type=_partition_arg, default=0, metavar="P", help="for lines without one (0)"
    )
    w.add_argument(
        "--sync",
        action="store_true",
        help="fsync after every record (else once at the end); on an object store, publish every record as "
        "its own segment (else at the end and every 4 MiB per partition)",
    )
    w.add_argument("--json", action="store_true", help="print the summary as JSON")
    w.set_defaults(func=cmd_write)

    sh = s.add_parser(
        "show",
        help="the complete records of a partitioned log, and any torn tail",
        description="Print the complete records of the partitioned log in DIR, partition by partition in "
        "offset order, and where a partition ends in a torn record (a producer mid-append: not yet a "
        "record). With --follow, then print each record as it is appended (partitions created later "
        "included) until Ctrl-C or SIGTERM, which exits 0.",
    )
    sh.add_argument("dir", metavar="DIR", help="the log's directory, or an s3://bucket/prefix URL")
    sh.add_argument("--partition", type=_partition_arg, metavar="P", help="only partition P")
    sh.add_argument("--from", dest="start", type=render.int_arg(0), default=0, metavar="OFFSET")
    sh.add_argument("--limit", type=render.int_arg(0), metavar="N", help="at most N records per partition")
    sh.add_argument(
        "--follow",
        action="store_true",
        help="then print records as they are appended, one per line (JSON Lines with --json), until Ctrl-C",
    )
    render.add_interval_arg(sh)
    render.add_output_args(sh)
    sh.set_defaults(func=cmd_show)


def _partition_arg(text: str) -> int:
    from lsm.sources.protocol import MAX_PARTITION

    return render.int_arg(0, MAX_PARTITION)(text)


# -- write ----------------------------------------------------------------------------------------------
def _int_field(obj: dict[str, Any], field: str) -> int | None:
    v = obj.get(field)
    if v is not None and (type(v) is not int):
        raise ValueError(f'"{field}" must be an integer')
    return v


def parse_line(line: str, default_partition: int) -> tuple[int, int | None, dict[str, Any]]:
    """(partition, expected offset or None, LogWriter.append keyword arguments) for one JSON line;
    ValueError if it is bad."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e.msg} at column {e.colno}") from None
    except RecursionError:  # (no record nests at all: a hostile or broken line)
        raise ValueError("JSON nested too deeply (a record is one flat object)") from None
    if not isinstance(obj, dict):
        raise ValueError("a record must be a JSON object")
    unknown = sorted(set(obj) - FIELDS)
    if unknown:
        raise ValueError(f"unknown fields {unknown} (known: {sorted(FIELDS)})")
    for field in ("key", "value"):
        if field not in obj:
            raise ValueError(f'"{field}" is required ("value": null is a delete)')
    key = render.get_bytes(obj, "key")
    if key is None:
        raise ValueError('"key" must not be null')
    partition = obj.get("partition", default_partition)
    if type(partition) is not int or partition < 0:
        raise ValueError('"partition" must be an integer >= 0')
    event_ts = obj.get("event_ts")
    if isinstance(event_ts, str):
        event_ts = render.parse_time(event_ts)
    elif event_ts is not None and type(event_ts) is not int:
        raise ValueError('"event_ts" must be integer ms or an RFC 3339 string')
    tx = obj.get("tx")
    if tx is not None and type(tx) not in (int, str):
        raise ValueError('"tx" must be an integer or a string')
    tx_end = obj.get("tx_end", False)
    if isinstance(tx_end, dict):  # a transaction across partitions: {"<partition>": records, ...}
        try:
            tx_end = {int(p): n for p, n in tx_end.items()}
        except ValueError:
            raise ValueError('"tx_end" counts are keyed by partition ids ("0", "1", ...)') from None
    elif not isinstance(tx_end, bool):
        raise ValueError('"tx_end" must be true, false or an object {"<partition>": records}')
    offset = obj.get("offset")
    if offset is not None and (type(offset) is not int or offset < 0):
        raise ValueError('"offset" must be an integer >= 0')
    kw = {
        "key": key,
        "value": render.get_bytes(obj, "value"),
        "ttl": _int_field(obj, "ttl"),
        "event_ts": event_ts,
        "tx": tx,
        "tx_end": tx_end,
    }
    return partition, offset, kw


def advance_line(line: str) -> tuple[int, list[int] | None] | None:
    """For a progress-marker line ``{"advance": TIME}`` (ms or RFC 3339; with ``"partition": P`` for one
    partition, else every partition): (time, partitions or None); None for any other line. ValueError if
    it is bad."""
    if '"advance"' not in line:
        return None
    try:
        obj = json.loads(line)
    except RecursionError:  # as in parse_line: a marker is one flat object
        raise ValueError("JSON nested too deeply (a progress marker is one flat object)") from None
    if not isinstance(obj, dict) or "advance" not in obj:
        return None
    unknown = sorted(set(obj) - {"advance", "partition"})
    if unknown:
        raise ValueError(f'a progress marker line holds "advance" and optionally "partition", not {unknown}')
    ts = obj["advance"]
    if isinstance(ts, str):
        ts = render.parse_time(ts)
    elif type(ts) is not int:
        raise ValueError('"advance" must be integer ms or an RFC 3339 string')
    p = obj.get("partition")
    if p is not None and (type(p) is not int or p < 0):
        raise ValueError('"partition" must be an integer >= 0')
    return ts, None if p is None else [p]


def log_location(path: str) -> str:
    """`path`: a directory, or the URL of a log on an object store (lsm.sources.object_log); refused
    (ValueError) if it is a ``memory://`` URL, which would be gone when this command ends."""
    if path.startswith("memory://"):
        raise ValueError(
            f"{path}: a memory:// log lives inside one process and would be gone when this command ends: "
            "use a directory or an s3:// URL"
        )
    return path


def cmd_write(args: argparse.Namespace) -> int:
    from lsm.errors import SourceError
    from lsm.sources import LogWriter

    log_location(args.dir)
    written: dict[int, list[int]] = {}  # partition -> [first offset, next offset]
    count = markers = 0
    with LogWriter(args.dir, sync=args.sync) as w:
        for lineno, line in enumerate(sys.stdin, 1):
            if not line.strip():
                continue
            try:
                adv = advance_line(line)
                if adv is not None:  # a progress marker (LogWriter.advance), for lsm ingest --times source
                    w.advance(*adv)
                    markers += 1
                    continue
                partition, expected, kw = parse_line(line, args.partition)
                if expected is not None and expected != w.end(partition):
                    raise ValueError(
                        f"the record says offset {expected}, but the next offset of partition {partition} "
                        f"is {w.end(partition)}"
                    )
                offset = w.append(partition, **kw)
            except (ValueError, TypeError, SourceError) as e:
                n = render.plural(count, "record")
                before = f"; the {n} before it {'was' if count == 1 else 'were'} written" if count else ""
                raise ValueError(f"stdin line {lineno}: {e}{before}") from None
            span = written.setdefault(partition, [offset, offset])
            span[1] = offset + 1
            count += 1
    parts = {str(p): {"first": a, "next": b} for p, (a, b) in sorted(written.items())}
    if args.json:
        out = {"dir": args.dir, "records": count, "partitions": parts}
        if markers:
            out["markers"] = markers
        render.print_json(out)
        return 0
    spans = "; ".join(
        f"partition {p}: " + (f"offset {a}" if b - a == 1 else f"offsets {a}..{b - 1}")
        for p, (a, b) in sorted(written.items())
    )
    render.print_text(
        f"wrote {count} record{'s' if count != 1 else ''} to {args.dir}"
        + (f" ({spans})" if spans else "")
        + (f" and {render.plural(markers, 'progress marker')}" if markers else "")
    )
    return 0


# -- show -----------------------------------------------------------------------------------------------
def record_json(r: Any, mode: render.BytesMode) -> dict[str, Any]:
    """One record as a JSON object (the shape `lsm log write` reads, plus its offset)."""
    d: dict[str, Any] = {"partition": r.partition, "offset": r.offset}
    render.put_bytes(d, "key", r.key, mode.key)
    render.put_bytes(d, "value", r.value, mode.value)
    d.update(ttl=r.ttl, event_ts=r.event_ts, tx=r.tx, tx_end=r.tx_end)
    return d


def _cells(r: Any, mode: render.BytesMode) -> tuple:
    """The table cells of one record: partition, offset, op, key, value, ttl, event_ts, tx."""
    return (
        r.partition,
        r.offset,
        "delete" if r.value is None else "put",
        render.bytes_for_table(r.key, mode.key),
        render.bytes_for_table(r.value, mode.value, render.MAX_VALUE_CHARS),
        "-" if r.ttl is None else r.ttl,
        render.time_cell(r.event_ts),
        "-" if r.tx is None else f"{r.tx}{' (end)' if r.tx_end else ''}",
    )


def cmd_show(args: argparse.Namespace) -> int:
    from lsm.sources import PartitionedLog

    mode = args.bytes_mode
    log = PartitionedLog(log_location(args.dir))
    if args.follow:
        if args.limit is not None:
            raise ValueError("--limit does not apply to --follow (it prints records until Ctrl-C)")
        return _follow(args, log)
    parts = log.partitions() if args.partition is None else [args.partition]

    def records():
        for p in parts:
            stop = None if args.limit is None else args.start + args.limit
            yield from log.read(p, args.start, stop)

    if args.json:
        render.print_json_array(record_json(r, mode) for r in records())
        return 0
    cells = [_cells(r, mode) for r in records()]
    if cells:
        render.print_text(render.table(SHOW_COLUMNS, cells))
    ends = {p: log.end(p) for p in parts}
    render.print_text(count_line(cells, ends))
    for p in parts:
        torn = log.torn_bytes(p)
        if torn:
            render.print_text(
                f"partition {p}: torn tail of {render.plural(torn, 'byte')} after offset {ends[p] - 1}: a record still being "
                "appended (or cut short); it is not a record yet"
            )
    return 0


def count_line(cells: list[tuple], ends: dict[int, int]) -> str:
    """The line under ``log show``'s table: the partitions and the records it shows; when --from or
    --limit left some out, how many of each partition's records those are."""
    shown: dict[int, int] = dict.fromkeys(ends, 0)
    for c in cells:
        shown[c[0]] += 1
    n, total = len(cells), sum(ends.values())
    parts = render.plural(len(ends), "partition")
    if n == total:
        per = f" ({', '.join(f'{p}: {k}' for p, k in ends.items())})" if ends else ""
        return f"{parts}, {render.plural(n, 'record')}{per}"
    per = ", ".join(f"{p}: {shown[p]} of {k}" for p, k in ends.items())
    return f"{parts}, {n} of {render.plural(total, 'record')} shown ({per})"


# -- show --follow --------------------------------------------------------------------------------------
def _follow(args: argparse.Namespace, log: Any) -> int:
    """Print the records of `log` (from ``--from`` on, in each partition) as they become complete, until
    SIGINT or SIGTERM. Every poll looks at every partition again, so one created later is followed too."""
    from lsm.errors import SourceRegressedError

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    shown = 0
    try:
        if not args.json:
            sys.stdout.write("\t".join(SHOW_COLUMNS) + "\n")
        nxt: dict[int, int] = {}  # partition -> the offset after the last one printed
        while not stop.is_set():
            parts = log.partitions() if args.partition is None else [args.partition]
            for p in parts:
                start = nxt.get(p, args.start)
                end = log.end(p)
                if p in nxt and end < start:  # what was printed is gone: the file was cut or replaced
                    raise SourceRegressedError(
                        f"{args.dir}: partition {p} now ends at offset {end}, but offsets up to {start - 1} "
                        "were shown: the file was truncated or replaced"
                    )
                for line in _lines(log, p, start, end, args, stop):
                    sys.stdout.write(line + "\n")
                    shown += 1
                    start += 1
                    nxt[p] = start
            sys.stdout.flush()
            stop.wait(args.interval / 1000)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    sys.stderr.write(f"followed {args.dir}: {shown} record{'s' if shown != 1 else ''} shown\n")
    return 0


def _lines(log: Any, partition: int, start: int, end: int, args: argparse.Namespace, stop: Any) -> Iterator[str]:
    """The output line of each record of `partition` in [start, end), stopping early once `stop` is set."""
    if start >= end:
        return
    for r in log.read(partition, start, end):
        if stop.is_set():
            return
        if args.json:
            yield json.dumps(record_json(r, args.bytes_mode), ensure_ascii=False)
        else:
            yield "\t".join(str(c) for c in _cells(r, args.bytes_mode))
