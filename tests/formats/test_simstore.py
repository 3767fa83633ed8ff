"""The simulated object store and its scheduler (formats/simstore.py): what the deterministic simulation
relies on, checked on its own."""

from __future__ import annotations

import pytest
from obstore.exceptions import GenericError, NotFoundError, PreconditionError

from formats.objstore import ObjectStorage
from formats.simstore import Fate, Faults, SimClient, SimTime, SimWorld


def _run(world: SimWorld, **actors) -> None:
    for i, (name, body) in enumerate(actors.items()):
        world.spawn(name, body, at=float(i))
    world.run()


def test_a_create_if_absent_is_decided_when_it_lands_not_when_it_is_sent():
    """A PUT held in flight lands after a later one: the later one creates the object, the held one
    finds it there. This is how a slow writer's request meets a newer owner's claim."""
    def script(who, kind, key):
        return Fate(hold_s=5.0) if who == "slow" else None

    w = SimWorld(1, script=script)
    c = SimClient(w)
    out = {}

    def slow():
        try:
            c.put_create("wal/7", b"slow")
            out["slow"] = "created"
        except PreconditionError:
            out["slow"] = "exists"

    def fast():
        c.put_create("wal/7", b"")
        out["fast"] = w.now() - w.start

    _run(w, slow=slow, fast=fast)
    assert out == {"fast": pytest.approx(1.0, abs=0.1), "slow": "exists"}
    assert c.objects["wal/7"].data == b""
    assert [(who, key) for _t, who, _k, key in w.trace] == [("fast", "wal/7"), ("slow", "wal/7")]


def test_a_held_request_lands_after_its_sender_gave_up():
    w = SimWorld(2, Faults(timeout_s=3.0), script=lambda who, kind, key: Fate(hold_s=10.0))
    c = SimClient(w)
    seen = {}

    def sender():
        try:
            c.put("k", b"v", False, 0)
        except GenericError as e:
            seen["error"] = str(e)
            seen["at"] = w.now() - w.start
            seen["there"] = "k" in c.objects

    _run(w, sender=sender)
    assert "timed out" in seen["error"] and seen["at"] == pytest.approx(3.0) and not seen["there"]
    assert "k" in c.objects and c.objects["k"].mtime == pytest.approx(w.start + 10.0, abs=0.1)


def test_a_lost_response_has_landed():
    w = SimWorld(3, script=lambda who, kind, key: Fate(lose=True) if kind == "put" else None)
    c = SimClient(w)
    seen = {}

    def sender():
        with pytest.raises(GenericError, match="reset"):
            c.put("k", b"v", False, 0)
        seen["value"] = c.get("k")

    _run(w, sender=sender)
    assert seen["value"] == b"v"


def test_object_storage_on_the_simulation_retries_and_recognises_its_own_landed_create():
    """The storage layer above the client runs unchanged: a create whose response was lost is retried,
    finds the object, reads it back and knows it for its own."""
    fates = iter([Fate(lose=True)])
    w = SimWorld(4, script=lambda who, kind, key: next(fates, None) if kind == "put" else None)
    st = ObjectStorage("sim://unit", {"max_retries": 3, "retry_timeout_ms": 5000}, client=SimClient(w), clock=SimTime(w))
    out = {}

    def writer():
        out["created"] = st.put_if_absent("sim://unit/manifest/1", b"ours")
        out["stats"] = st.stats()

    _run(w, writer=writer)
    assert out["created"] is True
    assert out["stats"]["retries"] == 1 and out["stats"]["get"] == 1


def test_listing_and_ranges():
    c = SimClient(clock=lambda: 100.0)
    for k in ("db/sst/b", "db/sst/a", "db/wal/1", "db/x"):
        c.put(k, k.encode(), False, 0)
    pages = list(c.list_pages("db/sst/", 1))
    assert [[m["path"] for m in p] for p in pages] == [["db/sst/a"], ["db/sst/b"]]
    d = c.list_with_delimiter("db")
    assert d["common_prefixes"] == ["db/sst", "db/wal"] and [m["path"] for m in d["objects"]] == ["db/x"]
    assert c.get_range("db/x", 1, 3) == b"b/" and c.head("db/x") == 4
    size, tail, meta = c.get_tail("db/sst/a", 2)
    assert (size, tail) == (8, b"/a") and meta["last_modified"].timestamp() == 100.0
    c.delete("db/x")
    c.delete("db/x")  # gone already: fine, as on S3
    with pytest.raises(NotFoundError):
        c.get("db/x")


def test_the_same_seed_deals_the_same_faults():
    def trace(seed):
        w = SimWorld(seed, Faults(fail=0.2, lost=0.2, hold=0.1))
        c = SimClient(w)
        got = []

        def actor():
            for i in range(30):
                try:
                    c.put(f"k{i}", b"v", False, 0)
                    got.append("ok")
                except GenericError:
                    got.append("err")

        w.spawn("a", actor)
        w.run()
        return got, w.trace, w.injected

    assert trace(11) == trace(11)
    assert trace(11) != trace(12)
