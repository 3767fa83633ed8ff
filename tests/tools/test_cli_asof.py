"""`lsm get|scan --as-of TIME | --seq N`, `--expiry-at` (and the deprecated `--at`), and the read options
`lsm changes` shares with them (tools/read_options.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import lsm
from tests.tools._cli import T0, one_line_error, run_lsm
from tools.read_options import AT_DEPRECATED

MIN = 60_000


@pytest.fixture(scope="module")
def history_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three commits a minute apart, each one WriteBatch (so each is a seq tracker entry of its own), each
    flushed to its own L0 SST (so no flush drops a version: the history floor stays 0).

    seq 1 at T0:          k1=v1, k2=a
    seq 2 at T0 + 1 min:  k1=v2, k2 deleted, k3=x (ttl 1 s: expires at T0 + 1 min + 1 s)
    seq 3 at T0 + 2 min:  k1=v3
    """
    path = tmp_path_factory.mktemp("asof") / "db"
    clock = lsm.ManualClock(T0)
    with lsm.DB.open(path, lsm.DbOptions(clock=clock, background_compaction=False)) as db:
        db.write(lsm.WriteBatch().put(b"k1", b"v1").put(b"k2", b"a"))
        db.flush()
        clock.advance(MIN)
        db.write(lsm.WriteBatch().put(b"k1", b"v2").delete(b"k2").put(b"k3", b"x", ttl=1_000))
        db.flush()
        clock.advance(MIN)
        db.put(b"k1", b"v3")
        db.flush()
        assert db.manifest.history_floor == 0
    return path


def _scan(*args) -> list[tuple[str, str]]:
    r = run_lsm("scan", "--json", *args)
    assert r.code == 0 and r.err == "", r.err
    return [(x["key"], x["value"]) for x in r.json()]


def test_as_of_a_time_reads_that_state_and_judges_expiry_then(history_db: Path) -> None:
    assert _scan(history_db, "--as-of", T0 + 30_000) == [("k1", "v1"), ("k2", "a")]
    assert _scan(history_db, "--as-of", "2023-11-14T22:14:20Z") == [("k1", "v2"), ("k3", "x")]  # T0 + 1 min
    # expiry is judged at the as-of time, unless --expiry-at says otherwise
    assert _scan(history_db, "--as-of", T0 + MIN, "--expiry-at", T0 + MIN + 1_001) == [("k1", "v2")]
    assert _scan(history_db, "--as-of", T0 + MIN, "--expiry-at", T0 + MIN + 1_001, "--include-expired") == [
        ("k1", "v2"),
        ("k3", "x"),
    ]
    assert _scan(history_db) == [("k1", "v3")]  # the latest state, k3 long expired by the system clock
    r = run_lsm("get", "--json", history_db, "k1", "--as-of", T0 + MIN + 59_000)
    assert r.code == 0 and r.json()["value"] == "v2" and r.json()["seq"] == 2
    r = run_lsm("get", history_db, "k2", "--as-of", T0 + 90_000)
    assert one_line_error(r, 1) == "lsm: error: key k2 not found (absent, deleted or expired)"


def test_seq_reads_the_state_after_that_commit(history_db: Path) -> None:
    assert _scan(history_db, "--seq", 1) == [("k1", "v1"), ("k2", "a")]
    assert _scan(history_db, "--seq", 0) == []
    assert _scan(history_db, "--seq", 2, "--expiry-at", T0 + MIN) == [("k1", "v2"), ("k3", "x")]
    assert _scan(history_db, "--seq", 3, "--reverse", "--limit", "1") == [("k1", "v3")]
    r = run_lsm("get", "--hex", "--json", history_db, "6b31", "--seq", 1)
    assert r.code == 0 and r.json()["value"] == "7631"
    line = one_line_error(run_lsm("get", history_db, "k1", "--seq", 4), 2)
    assert line == f"lsm: error: {history_db}: seq 4 is not in 0..3"


def test_out_of_retention_is_one_line(history_db: Path, tmp_path: Path) -> None:
    line = one_line_error(run_lsm("get", history_db, "k1", "--seq", 1, "--history-retention", 1_000), 2)
    assert line.startswith(f"lsm: error: {history_db}: cannot read as of seq 1 (the latest state is seq 3): ")
    assert "--history-retention 1000 ms does not reach back that far" in line
    line = one_line_error(run_lsm("scan", history_db, "--as-of", T0, "--history-retention", 0), 2)
    assert "cannot read as of 2023-11-14T22:13:20.000Z" in line
    # before the first commit: every version is on disk, and the store then was empty (an exact answer)
    line = one_line_error(run_lsm("get", history_db, "k1", "--as-of", T0 - 1_000), 1)
    assert "key k1 not found" in line
    # the latest state is always readable
    assert _scan(history_db, "--seq", 3, "--history-retention", 0) == [("k1", "v3")]
    # a compaction that dropped versions: the command cannot know the writer's retention, and says so
    path = tmp_path / "compacted"
    clock = lsm.ManualClock(T0)
    with lsm.DB.open(path, lsm.DbOptions(clock=clock, background_compaction=False)) as db:
        db.put(b"k", b"1")
        db.flush()
        clock.advance(MIN)
        db.put(b"k", b"2")
        db.flush()
        db.compact(full=True)
        assert db.manifest.history_floor > 0
    line = one_line_error(run_lsm("get", path, "k", "--seq", 1), 2)
    assert "compaction has dropped old versions of this database" in line
    assert "give --history-retention MS" in line


def test_as_of_and_seq_exclude_each_other(history_db: Path) -> None:
    r = run_lsm("scan", history_db, "--as-of", T0, "--seq", 1)
    assert "not allowed with argument" in one_line_error(r, 2)
    r = run_lsm("get", history_db, "k1", "--expiry-at", T0, "--at", T0)
    assert "not allowed with argument" in one_line_error(r, 2)


def test_at_is_a_deprecated_alias_of_expiry_at(history_db: Path) -> None:
    new = run_lsm("get", "--json", history_db, "k1", "--expiry-at", T0)
    old = run_lsm("get", "--json", history_db, "k1", "--at", T0)
    assert old.code == new.code == 0 and old.out == new.out  # still the latest value: v3
    assert new.err == "" and old.err == AT_DEPRECATED + "\n"
    assert old.json()["value"] == "v3"
    assert "--expiry-at" in old.err and "--as-of" in old.err and len(old.err.splitlines()) == 1
    r = run_lsm("du", "--json", history_db, "--at", T0)
    assert r.code == 0 and r.err == AT_DEPRECATED + "\n" and r.json()["at"] == T0


def test_changes_share_the_expiry_options(history_db: Path) -> None:
    def changes(*args) -> list[tuple]:
        r = run_lsm("changes", "--json", history_db, *args)
        assert r.code == 0, r.err
        return [(c["seq"], c["key"], c["op"], c["value"]) for c in r.json()]

    # k3's TTL has passed by the system clock: an expiry (no value unless --include-expired), a put when
    # judged earlier
    assert changes("--seq", 1) == [
        (2, "k2", "delete", None),
        (2, "k3", "expired", None),
        (3, "k1", "put", "v3"),
    ]
    assert changes("--seq", 1, "--include-expired")[1] == (2, "k3", "expired", "x")
    assert changes("--seq", 1, "--expiry-at", T0 + MIN)[1] == (2, "k3", "put", "x")
    r = run_lsm("changes", history_db, "--seq", 1, "--at", T0 + MIN)
    assert r.code == 0 and r.err == AT_DEPRECATED + "\n"
    # changes start at a point (--since or --seq): they take no --as-of, and need one of the two
    assert "unrecognized arguments: --as-of" in one_line_error(
        run_lsm("changes", history_db, "--seq", 1, "--as-of", T0), 2
    )
    assert "one of the arguments --since --seq is required" in one_line_error(
        run_lsm("changes", history_db), 2
    )
