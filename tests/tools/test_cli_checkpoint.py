"""``lsm checkpoint create|list|delete``, the checkpoints in ``lsm manifest show`` and ``lsm du``: real
subprocess runs of `lsm` (tests/tools/_cli.py) on a directory and on moto's S3 server."""

from __future__ import annotations

import os

import pytest

import lsm
from tests._store import names
from tests.tools._cli import T0, one_line_error, run_lsm


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def where(request, tmp_path):
    """(database root, environment of the `lsm` runs) on a directory, then on S3."""
    if request.param == "local":
        return str(tmp_path / "db"), None
    server = request.getfixturevalue("s3_server")
    return server.new_url("db"), os.environ | server.env


def lsm_(where, *args):
    return run_lsm(*args, env=where[1])


def make_db(root: str) -> None:
    with lsm.DB.open(root, lsm.DbOptions(clock=lsm.ManualClock(T0), background_compaction=False)) as db:
        for i in range(20):
            db.put(b"k%02d" % i, b"first" * 10)


def test_create_list_delete(where):
    root = where[0]
    make_db(root)
    made = lsm_(where, "checkpoint", "create", root, "--name", "nightly", "--lifetime", "6h", "--json")
    assert made.code == 0, made.err
    cp = made.json()
    assert cp["name"] == "nightly" and cp["seq"] == 20 and cp["expires_at"] == cp["ts"] + 6 * 3_600_000
    listed = lsm_(where, "checkpoint", "list", root, "--json")
    assert listed.code == 0 and [c["id"] for c in listed.json()] == [cp["id"]]
    text = lsm_(where, "checkpoint", "list", root)
    assert cp["id"] in text.out and "nightly" in text.out
    with lsm.DB.open(root, lsm.DbOptions(), read_only=True, checkpoint=cp["id"]) as r:
        assert r.get(b"k00") == b"first" * 10
    gone = lsm_(where, "checkpoint", "delete", root, cp["id"])
    assert gone.code == 0 and cp["id"] in gone.out
    assert lsm_(where, "checkpoint", "list", root, "--json").json() == []
    assert "no checkpoints" in lsm_(where, "checkpoint", "list", root).out


def test_manifest_show_and_du_count_what_only_checkpoints_keep(where):
    root = where[0]
    make_db(root)
    cp = lsm_(where, "checkpoint", "create", root, "--json").json()
    kept = {n: None for n in names(root, "sst")}
    with lsm.DB.open(root, lsm.DbOptions(background_compaction=False)) as db:
        for i in range(20):
            db.put(b"k%02d" % i, b"second" * 10)
        db.flush()
        db.compact(full=True)
        db.gc(grace_ms=0)
        retired = {e.name for e in db.manifest.all_ssts()}
    assert not retired & set(kept) and set(kept) <= set(names(root, "sst"))
    show = lsm_(where, "manifest", "show", root, "--json")
    assert [c["id"] for c in show.json()["checkpoints"]] == [cp["id"]]
    assert cp["id"] in lsm_(where, "manifest", "show", root).out
    du = lsm_(where, "du", root, "--json").json()
    from storage.paths import open_store

    st = open_store(root).storage
    size = sum(st.size(open_store(root).paths.sst(n)) for n in kept)
    assert du["checkpoints"] == {"checkpoints": 1, "files": len(kept), "bytes": size}
    assert f"kept only by 1 checkpoint: {len(kept)} file" in lsm_(where, "du", root).out
    lsm_(where, "checkpoint", "delete", root, cp["id"])
    assert lsm_(where, "du", root, "--json").json()["checkpoints"] == {"checkpoints": 0, "files": 0, "bytes": 0}


def test_bad_input_is_one_line_and_writes_nothing(where, tmp_path):
    root = where[0]
    make_db(root)
    before = names(root, "manifest")
    for args in (
        ("checkpoint", "delete", root, "no-such-id"),
        ("checkpoint", "create", root, "--lifetime", "0"),
        ("checkpoint", "create", root, "--lifetime", "soon"),
        ("checkpoint", "create", root, "--lifetime", "-5s"),
    ):
        line = one_line_error(lsm_(where, *args), 2)
        assert "no live checkpoint" in line or "--lifetime" in line, line
    assert names(root, "manifest") == before
    missing = str(tmp_path / "nowhere")
    for args in (("checkpoint", "list", missing), ("checkpoint", "create", missing)):
        one_line_error(run_lsm(*args), 2)
    assert not os.path.exists(missing)


def test_clone(where, tmp_path):
    root = where[0]
    make_db(root)
    dst = root + "-clone"
    made = lsm_(where, "clone", root, dst, "--json")
    assert made.code == 0, made.err
    rep = made.json()
    assert rep["seq"] == 20 and rep["ssts"] >= 1
    s3 = where[1] is not None
    assert rep["external_ssts"] == (rep["ssts"] if s3 else 0)  # no copy on S3; links between directories
    if s3:
        assert names(dst, "sst") == []
    with lsm.DB.open(dst, lsm.DbOptions()) as c:
        assert c.get(b"k05") == b"first" * 10
        c.put(b"k05", b"clone")
    with lsm.DB.open(root, lsm.DbOptions(), read_only=True) as r:
        assert r.get(b"k05") == b"first" * 10
    one_line_error(lsm_(where, "clone", root, dst), 2)  # DST holds a database now
    cp = lsm_(where, "checkpoint", "create", root, "--json").json()
    again = lsm_(where, "clone", root, root + "-c2", "--checkpoint", cp["id"])
    assert again.code == 0 and "clone" in again.out
    line = one_line_error(lsm_(where, "clone", root, root + "-c3", "--checkpoint", "nope"), 2)
    assert "no live checkpoint" in line
    assert names(root + "-c3", "manifest") == []
