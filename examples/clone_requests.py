"""Count what a clone of a store on an object store costs: write ROWS rows to SRC, compact them, clone
SRC to SRC-clone, and print the clone's requests (`db.object_store_stats()` of the clone's store) and
what it reads back. docs/checkpoints.md runs it against `lsm s3 serve`:

    lsm s3 serve --port 0 --bucket demo -- python examples/clone_requests.py s3://demo/big 1000000
"""

from __future__ import annotations

import json
import sys
import time

import lsm


def main(src: str, rows: int) -> None:
    opts = lsm.DbOptions(background_compaction=False)
    t0 = time.perf_counter()
    with lsm.DB.open(src, opts) as db:
        batch = lsm.WriteBatch()
        for i in range(rows):
            batch.put(b"key%09d" % i, b"v" * 40)
            if len(batch) == 10_000:
                db.write(batch)
                batch = lsm.WriteBatch()
        if len(batch):
            db.write(batch)
        db.flush()
        db.compact(full=True)
        ssts = len(db.manifest.all_ssts())
        sst_bytes = sum(e.size for e in db.manifest.all_ssts())
        loaded = time.perf_counter() - t0
        t1 = time.perf_counter()
        with lsm.DB.clone(db, src + "-clone", options=opts) as clone:
            cloned = time.perf_counter() - t1
            stats = clone.object_store_stats()
            probe = b"key%09d" % (rows // 2)
            assert clone.get(probe) == b"v" * 40
    print(json.dumps({"rows": rows, "source_ssts": ssts, "source_sst_bytes": sst_bytes,
                      "load_seconds": round(loaded, 1), "clone_seconds": round(cloned, 2),
                      "clone_requests": stats}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
