"""``lsm log write|show`` and ``lsm ingest`` on a log kept on the S3 server (``s3://bucket/prefix``): the
same records, offsets and output as a log in a directory, in segment objects."""

from __future__ import annotations

import os
from pathlib import Path

from formats.storage import storage_for
from lsm.sources import PartitionedLog
from lsm.sources.object_log import partition_dir
from tests.tools._cli import one_line_error, run_lsm, run_lsm_each
from tests.tools.test_cli_log import LINES, jsonl, lsm_in


def test_write_show_and_ingest_an_object_log(s3_server, tmp_path: Path) -> None:
    url = s3_server.new_url("log")
    local = str(tmp_path / "log")
    for where in (url, local):
        r = lsm_in(jsonl(LINES), "log", "write", where)
        assert r.code == 0, r.err
        assert r.out == f"wrote 5 records to {where} (partition 0: offsets 0..2; partition 2: offsets 0..1)\n"
    assert list(PartitionedLog(url).read(0, 0)) == list(PartitionedLog(local).read(0, 0))
    assert list(PartitionedLog(url).read(2, 0)) == list(PartitionedLog(local).read(2, 0))
    shows = run_lsm_each(
        [
            ("log", "show", url),
            ("log", "show", local),
            # a key (0xff00) and a value are not UTF-8: JSON says how its bytes are written, once
            ("log", "show", url, "--json", "--key-encoding", "hex", "--value-encoding", "hex"),
            ("log", "show", local, "--json", "--key-encoding", "hex", "--value-encoding", "hex"),
        ]
    )
    assert [s.code for s in shows] == [0, 0, 0, 0], shows
    assert shows[0].out == shows[1].out and shows[2].json() == shows[3].json()

    # a second run appends after the first, one segment per record with --sync
    r = lsm_in(jsonl([{"key": "e", "value": "5"}, {"key": "f", "value": "6"}]), "log", "write", url, "--sync")
    assert r.code == 0 and "partition 0: offsets 3..4" in r.out, r
    assert len(storage_for(url).list_names(partition_dir(url, 0))) == 3  # the first run's and two more

    db = s3_server.new_url("db")
    ing = run_lsm("ingest", db, url, "--name", "ev", "--json")
    assert ing.code == 0, ing.err
    assert ing.json()["frontier"] == {"0": 5, "2": 2} and ing.json()["records"] == 7
    again = run_lsm("ingest", db, url, "--name", "ev", "--engine", "local", "--json")
    assert again.code == 0 and again.json()["records"] == 0  # nothing twice
    scan = run_lsm("scan", db, "--json")
    # b's 500 ms TTL has run out, d waits for the end of its transaction, ff00 is a delete
    assert [e["key"] for e in scan.json()] == ["a", "c", "e", "f"]


def test_object_log_errors_are_one_line(s3_server, tmp_path: Path) -> None:
    db_url = s3_server.new_url("db")
    assert run_lsm("put", "--create", db_url, "k", "v").code == 0
    missing = s3_server.new_url("nolog")
    runs = [("log", "show", missing), ("log", "show", "memory://x/log")]
    res = run_lsm_each(runs)
    assert f"{missing}: no partitioned log here" in one_line_error(res[0], 2)
    assert "a memory:// log lives inside one process" in one_line_error(res[1], 2)
    r = lsm_in(jsonl(LINES), "log", "write", db_url)
    assert "an lsm-sim database, not a partitioned log" in one_line_error(r, 2)
    assert not storage_for(db_url).exists(os.path.join(db_url, "LOG"))
