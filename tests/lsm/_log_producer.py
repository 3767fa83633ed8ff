"""A log producer in a child process, for tests of readers racing a real second process.

Not a test module; tests run it as ``python _log_producer.py MODE DIR ...``.

``torn DIR PARTITION``
    Writes the first half of one record (key ``torn``, a 4 KiB value) to the partition file, prints
    ``half`` and flushes stdout, waits for a line on stdin, then writes the rest (one record, two
    write(2) calls: what a reader sees while a producer is mid-append) and prints ``done``.

``append DIR PARTITIONS COUNT VALUE_BYTES``
    A `LogWriter` appending COUNT records round-robin over partitions 0..PARTITIONS-1 as fast as it can;
    record i has key ``%08d`` % i and a value of VALUE_BYTES bytes starting with ``i:``. Prints ``done``.

``db PATH BATCHES KEYS_PER_BATCH MEMTABLE_BYTES``
    An upstream database for `DatabaseLog` tests: opens PATH (history_retention of a year, so nothing is
    ever dropped; background compaction on) and commits BATCHES WriteBatches with sync: batch i puts
    ``%08d-%02d`` % (i, j) = ``i`` for each j, puts ``last`` = ``i``, and when i % 3 == 0 deletes
    ``%08d-00`` % (i - 1). Prints ``done`` after closing.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import lsm  # noqa: E402
from formats.log import encode_record  # noqa: E402
from lsm.sources import LogWriter  # noqa: E402
from lsm.sources.partitioned_log import partition_path  # noqa: E402


def value_for(i: int, size: int) -> bytes:
    head = f"{i}:".encode()
    return head + b"x" * max(0, size - len(head))


def main(argv: list[str]) -> None:
    mode, directory = argv[0], argv[1]
    if mode == "torn":
        partition = int(argv[2])
        rec = encode_record(b"torn", value_for(0, 4096))
        fd = os.open(partition_path(directory, partition), os.O_WRONLY | os.O_APPEND)
        os.write(fd, rec[: len(rec) // 2])
        print("half", flush=True)
        sys.stdin.readline()
        os.write(fd, rec[len(rec) // 2 :])
        os.close(fd)
        print("done", flush=True)
    elif mode == "append":
        parts, count, size = int(argv[2]), int(argv[3]), int(argv[4])
        with LogWriter(directory) as w:
            for i in range(count):
                w.append(i % parts, b"%08d" % i, value_for(i, size))
        print("done", flush=True)
    elif mode == "db":
        batches, keys, memtable = int(argv[2]), int(argv[3]), int(argv[4])
        opts = lsm.DbOptions(memtable_bytes=memtable, history_retention=365 * 86_400_000)
        with lsm.DB.open(directory, opts) as db:
            for i in range(1, batches + 1):
                b = lsm.WriteBatch()
                for j in range(keys):
                    b.put(b"%08d-%02d" % (i, j), b"%d" % i)
                b.put(b"last", b"%d" % i)
                if i % 3 == 0:
                    b.delete(b"%08d-00" % (i - 1))
                db.write(b, lsm.WriteOptions(sync=True))
        print("done", flush=True)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv[1:])
