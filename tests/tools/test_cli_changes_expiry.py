"""``lsm changes``: a put whose TTL has passed is an expiry (op "expired", with the put's expire_ts), not
a delete; a delete stays a delete. Real `lsm` subprocesses."""

from __future__ import annotations

import lsm
from tests.tools._cli import T0, run_lsm_each


def test_an_expired_put_is_an_expiry_not_a_delete(tmp_path) -> None:
    path = tmp_path / "db"
    clock = lsm.ManualClock(T0)
    with lsm.DB.open(path, lsm.DbOptions(clock=clock, background_compaction=False)) as db:
        db.put(b"session", b"token", ttl=1_000)  # seq 1: expires at T0 + 1000
        db.put(b"user", b"alice")  # seq 2
        db.delete(b"gone")  # seq 3
        db.put(b"later", b"v", ttl=10_000)  # seq 4: still live at T0 + 5000
    at = str(T0 + 5_000)
    table, as_json, with_value, before = run_lsm_each(
        [
            ("changes", path, "--seq", "0", "--expiry-at", at),
            ("changes", path, "--seq", "0", "--expiry-at", at, "--json"),
            ("changes", path, "--seq", "0", "--expiry-at", at, "--json", "--include-expired"),
            ("changes", path, "--seq", "0", "--expiry-at", str(T0 + 500), "--json"),
        ]
    )
    rows = as_json.json()
    assert [(r["seq"], r["op"], r["key"], r["value"], r["expire_ts"]) for r in rows] == [
        (1, "expired", "session", None, T0 + 1_000),
        (2, "put", "user", "alice", None),
        (3, "delete", "gone", None, None),
        (4, "put", "later", "v", T0 + 10_000),
    ]
    assert with_value.json()[0] == {**rows[0], "value": "token"}  # --include-expired: the value it had
    assert before.json()[0]["op"] == "put"  # at T0 + 500 it had not expired yet
    lines = table.out.splitlines()
    assert lines[0].split() == ["seq", "ts", "op", "key", "expire_ts", "value"]
    assert lines[1].split()[2:] == ["expired", "session", "2023-11-14T22:13:21.000Z"]
    assert lines[3].split()[2:] == ["delete", "gone", "-"]
