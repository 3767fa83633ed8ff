"""Every ``lsm`` command that takes a database or a file takes an object-store URL too (s3://...).

Real subprocess runs of `lsm` against moto's S3 server (tests/s3server.py). One database is built twice
through the engine with the same manual clock, in a local directory and under an S3 prefix, so each
read-only command's output on the URL must equal its output on the directory (once the URL is replaced by
the directory's path). Where the backends legitimately differ it is said: WAL objects are numbered as
they are claimed, not one segment per memtable, so segment ids and the manifest's replay point differ.
The runs of one test go in parallel: each `lsm` process costs about half a second, mostly start-up.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import boto3
import pytest

import lsm
from lsm.options import WriteOptions
from lsm.sources import LogWriter
from tests.s3server import BUCKET
from tests.tools._cli import T0, build_db, one_line_error, run_lsm

SST1 = f"{1:020d}-e1-0000.sst"


def _lsm(server, *args, cwd=None):
    return run_lsm(*args, cwd=cwd, env=os.environ | server.env)


def _parallel(server, runs: list[tuple[str, ...]], cwd=None) -> list:
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda a: _lsm(server, *a, cwd=cwd), runs))


@pytest.fixture(scope="module")
def pair(s3_server, tmp_path_factory):
    """(local path, URL) of the same database: two L0 SSTs and three durable, unflushed WAL rows. The
    writers stay open meanwhile (closing would flush the WAL rows into an SST)."""
    local = str(tmp_path_factory.mktemp("urls") / "db")
    url = s3_server.new_url()
    dbs = []
    for path in (local, url):
        db = build_db(path, lsm.ManualClock(T0))
        db.put(b"k6", b"v6", options=WriteOptions(sync=True))  # the object-store WAL is durable now
        dbs.append(db)
    yield local, url
    for db in dbs:
        db.close()


def _local_view(text: str, url: str, local: str) -> object:
    """The JSON output of a run on `url`, with the URL replaced by the local path."""
    return json.loads(text.replace(url, local))


READ_ONLY = [
    ("get", "{db}", "k1", "--json"),
    ("scan", "{db}", "--json"),
    ("scan", "{db}", "--all-versions", "--json"),
    ("scan", "{db}", "--as-of", str(T0 + 500), "--json"),
    ("changes", "{db}", "--seq", "0", "--json"),
    ("check", "{db}", "--json"),
    ("du", "{db}", "--expiry-at", str(T0 + 60_000), "--json"),
    ("seq-to-ts", "{db}", "1", "--json"),
    ("sst", "verify", "{db}", "--json"),
    ("sst", "show", "{db}/sst/" + SST1, "--json"),
    ("sst", "scan", "{db}/sst/" + SST1, "--all-versions", "--json"),
    ("sst", "layout", "{db}/sst/" + SST1, "--json"),
    ("manifest", "show", "{db}", "--json"),
    ("manifest", "list", "{db}", "--json"),
    ("wal", "dump", "{db}", "--json"),
]


def test_read_only_commands_give_on_a_url_what_they_give_on_the_directory(s3_server, pair):
    local, url = pair
    runs = [tuple(a.format(db=db) for a in args) for args in READ_ONLY for db in (local, url)]
    results = _parallel(s3_server, runs)
    for i, args in enumerate(READ_ONLY):
        on_dir, on_url = results[2 * i], results[2 * i + 1]
        assert on_dir.code == 0 and on_url.code == 0, (args, on_dir, on_url)
        want, got = json.loads(on_dir.out), _local_view(on_url.out, url, local)
        what = args[:2]
        if what == ("du", "{db}"):
            # the URL's du also says what the store holds and what du asked of it (test below)
            assert set(got) - set(want) == {"objects", "requests"}
            got = {k: v for k, v in got.items() if k in want}
            # a WAL object may also hold records of the memtable flushed before it (replay skips them
            # by seq): the WAL's bytes differ between the backends, its live rows do not
            for d in (got, want):
                for lv in [*d["levels"], d["total"]]:
                    if lv["level"] in ("wal", "total"):
                        lv.pop("size")
        elif what == ("manifest", "show"):
            # WAL ids number segment files on one backend, group-committed objects on the other; each
            # open draws its own writer nonce (lsm.versions)
            assert got.pop("wal_replay_from") >= 1 and want.pop("wal_replay_from") >= 1
            assert got.pop("writer_nonce") != want.pop("writer_nonce")
        elif what == ("manifest", "list"):
            for v in want + got:
                v.pop("mtime"), v.pop("wal_replay_from"), v.pop("file_size")
        elif what == ("wal", "dump"):
            want = [rec for seg in want for rec in seg["records"]]
            got = [rec for seg in got for rec in seg["records"]]
            # the first live WAL object may also hold the flushed memtable's last records (replay skips
            # them by seq): the records not in SSTs yet are the same on both backends
            shown = results[2 * READ_ONLY.index(("manifest", "show", "{db}", "--json")) + 1]
            flushed = json.loads(shown.out)["last_seq"]
            got = [rec for rec in got if rec["seq"] > flushed]
            for rec in got + want:
                rec.pop("offset")  # where in its file or object: the WAL's files differ, see above
        assert got == want, args
    # the comparisons compared something: the database is there, with its WAL rows, on both
    assert json.loads(results[2].out)[0]["key"] == "k1" and len(json.loads(results[2].out)) == 4


def test_dump_of_a_url_holds_the_records_of_the_directory(s3_server, pair):
    local, url = pair
    on_dir, on_url = _parallel(s3_server, [("dump", local), ("dump", url)])
    assert on_dir.code == on_url.code == 0
    # the header names the source and the time of the dump, the trailer's digest covers the header
    want, got = on_dir.out.splitlines(), on_url.out.splitlines()
    assert json.loads(got[0])["source"] == url and json.loads(got[0])["seq"] == json.loads(want[0])["seq"]
    assert got[1:-1] == want[1:-1] and len(want) == 8


def _objects_in(prefix_url: str, sub: str) -> tuple[int, int]:
    """(count, bytes) of the objects under <prefix>/<sub>/, listed by boto3 (not by the code under test)."""
    prefix = prefix_url.split(f"{BUCKET}/", 1)[1] + f"/{sub}/"
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
    sizes = [o["Size"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
             for o in page.get("Contents", [])]
    return len(sizes), sum(sizes)


def test_du_of_a_url_counts_its_objects_and_its_own_requests(s3_server, pair):
    local, url = pair
    as_json, text, on_dir = _parallel(s3_server, [("du", url, "--json"), ("du", url), ("du", local)])
    d = as_json.json()
    for kind in ("manifest", "wal", "sst"):
        n, nbytes = _objects_in(url, kind)
        assert d["objects"][kind] == {"objects": n, "bytes": nbytes} and n > 0, kind
    req = d["requests"]
    assert req["get"] > 0 and req["list"] > 0 and req["get_bytes"] > 0, req
    assert req["put"] == req["delete"] == 0, "du writes nothing"
    assert "objects" in text.out and "requests made by du: " in text.out and " PUT" in text.out
    # a local directory's du prints what it always did
    assert on_dir.code == 0 and "requests made by du" not in on_dir.out and "objects" not in on_dir.out


def test_write_commands_on_a_url(s3_server, pair, tmp_path):
    local, _url = pair
    url = s3_server.new_url()
    dump_obj = s3_server.new_url("dump.txt")
    steps = [
        ("put", url, "a", "1"),  # refused: no database there yet
        ("put", "--create", url, "a", "1"),
        ("put", url, "b", "2"),
        ("delete", url, "a"),
        ("dump", local, "--out", dump_obj),
        ("load", url, dump_obj),
        ("compact", url, "--json"),
        ("gc", url, "--grace-ms", "0"),
        ("scan", url, "--json"),
        ("check", url),
    ]
    res = [_lsm(s3_server, *s) for s in steps]
    assert "give --create" in one_line_error(res[0], 2)
    assert all(r.code == 0 for r in res[1:]), [(s, r) for s, r in zip(steps, res, strict=True) if r.code]
    assert res[4].out.startswith("dumped 6 records") and res[5].out.startswith("loaded 6 records")
    assert res[6].json()["ssts_after"] == 1
    # the dump's live keys, and b, which the dump does not hold (k4 and a are deleted, k3 has expired)
    assert [e["key"] for e in res[8].json()] == ["b", "k1", "k2", "k5", "k6"]
    assert res[9].out.endswith("OK\n")


def test_ingest_into_a_url_and_its_remap(s3_server, pair, tmp_path):
    _local, upstream = pair
    url, copy, failed = s3_server.new_url(), s3_server.new_url("copy"), s3_server.new_url("failed")
    log, bad = tmp_path / "log", tmp_path / "bad"  # a partitioned log is local (appended to in place)
    with LogWriter(log) as w:
        for i, p in enumerate([0, 1, 0]):
            w.append(p, b"k%d" % i, b"v%d" % i)
    with LogWriter(bad) as w:  # a record the store cannot hold: its expiry overflows
        w.append(0, b"k", b"v", ttl=2**63 - 1)
    ing, up, fails = _parallel(
        s3_server,
        [
            ("ingest", url, log, "--name", "src", "--json"),
            # a database on a URL as the source: its WAL objects are read too (seqs 7-9 are not in an SST)
            ("ingest", copy, upstream, "--source", "database-log", "--name", "up", "--json"),
            ("ingest", failed, bad, "--name", "s"),
        ],
    )
    # an ingest that fails before its first commit removes the store it created, objects and all
    assert "does not fit" in one_line_error(fails, 2)
    assert all(_objects_in(failed, sub) == (0, 0) for sub in ("manifest", "wal", "sst"))
    assert ing.code == 0 and ing.json()["records"] == 3, ing
    assert up.code == 0 and up.json()["frontier"] == {"0": 10}, up
    remap, scan, scan_copy, scan_up = _parallel(
        s3_server,
        [("remap", url, "src", "--json"), ("scan", url, "--json"), ("scan", copy, "--json"), ("scan", upstream, "--include-expired", "--json")],
    )
    assert remap.json()["frontier"] == {"0": 2, "1": 1}
    assert [(e["key"], e["value"]) for e in scan.json()] == [("k0", "v0"), ("k1", "v1"), ("k2", "v2")]
    kv = [(e["key"], e["value"]) for e in scan_up.json()]  # k3 expired upstream; the copy's TTL runs from its commit
    assert [(e["key"], e["value"]) for e in scan_copy.json()] == kv and ("k6", "v6") in kv


def test_bad_urls_are_one_line_errors(s3_server, pair, tmp_path):
    _local, url = pair
    missing = s3_server.new_url()
    secret = "do-not-print-this-secret"
    runs = [
        ("check", missing),
        ("manifest", "show", missing),
        ("wal", "dump", missing),
        ("sst", "verify", missing),
        ("sst", "show", f"{url}/sst/nope.sst"),
        ("sst", "show", url),
        ("check", f"{url}/manifest/{1:020d}.manifest"),
        ("check", "memory://lsm/db"),
        ("check", "gs://bucket/db"),
        ("log", "write", "memory://lsm/a-log"),
        ("ingest", missing, f"{missing}-log", "--name", "n"),
        ("check", "s3://no-such-bucket/db"),
    ]
    with ThreadPoolExecutor(max_workers=4) as pool:
        res = list(pool.map(lambda a: run_lsm(*a, cwd=tmp_path, env=os.environ | s3_server.env | {"AWS_SECRET_ACCESS_KEY": secret}), runs))
    lines = [one_line_error(r, 2) for r in res]
    for line in lines[:3]:
        assert f"{missing}: no object under this URL" in line
    assert f"{missing}: No such file or directory" in lines[3]  # as sst verify says of a missing path
    assert "no such object" in lines[4]
    assert "is a directory, not an SST file" in lines[5]
    assert "is a file, not a database directory" in lines[6]
    assert "exists only inside the process that created it" in lines[7]
    assert "unsupported object store URL" in lines[8]
    assert "a memory:// log lives inside one process" in lines[9]
    assert f"{missing}-log: no partitioned log here" in lines[10]
    assert "no-such-bucket" in lines[11]
    assert not any(secret in r.err or secret in r.out for r in res)
    assert os.listdir(tmp_path) == [], "a URL was taken for a local path and created there"
    assert _objects_in(missing, "manifest") == (0, 0), "ingest created the database it was refused for"
