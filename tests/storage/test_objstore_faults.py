"""Request faults on the object-store backend: a fault-injecting s3_proxy (tests/s3proxy.py) between the
store and the S3 server fails chosen requests. Transient faults are retried and counted; a fault that
outlasts the retries is an OSError (the engine's failed state); a create-if-absent whose response was
lost is recognised as ours, or reported as unknown, never guessed."""

from __future__ import annotations

import time

import pytest
from obstore.exceptions import GenericError, NotFoundError

from formats.fileio import FileOpError
from storage import PublishUnknownError, objstore, register
from storage.objstore import ObjectStorage
from tests.s3proxy import FaultProxy

TRANSIENT = ["500", "503", "reset"]


def faulty_store(s3_server, s3_proxy: FaultProxy, retries: int = 3, timeout_ms: int = 2000) -> ObjectStorage:
    """A fresh store whose requests go through `s3_proxy`, with small retry limits (fast tests)."""
    opts = s3_server.options(endpoint=s3_proxy.endpoint) | {"max_retries": retries, "retry_timeout_ms": timeout_ms}
    return register(s3_server.new_url(), opts)


# op -> (the HTTP method it sends, the request kind it counts as, the call: True when it worked)
OPS = {
    "get": ("GET", "get", lambda st, p: st.read(p) == b"payload"),
    "get_range": ("GET", "get", lambda st, p: st.read_range(p, 1, 4) == b"ayl"),
    "head": ("HEAD", "head", lambda st, p: st.size(p) == 7),
    "list": ("GET", "list", lambda st, p: st.list_names(st.root + "/sst") == ["obj"]),
    "put": ("PUT", "put", lambda st, p: st.write_file(p, (b"pay", b"load")) is None),
    "put_if_absent": ("PUT", "put", lambda st, p: st.put_if_absent(st.root + "/manifest/1", b"v1")),
    # obstore deletes through S3's bulk delete: a POST to the bucket
    "delete": ("POST", "delete", lambda st, p: st.delete(p) is None and not st.exists(p)),
}


@pytest.mark.parametrize("action", TRANSIENT)
@pytest.mark.parametrize("op", list(OPS))
def test_a_transient_fault_is_retried_and_counted(s3_server, s3_proxy: FaultProxy, op: str, action: str) -> None:
    st = faulty_store(s3_server, s3_proxy)
    p = st.root + "/sst/obj"
    st.write_file(p, (b"payload",))
    st.reset_stats()
    s3_proxy.log.clear()
    method, kind, run = OPS[op]
    s3_proxy.fail(action, method=method)
    assert run(st, p)
    assert [s.action for s in s3_proxy.requests(method)][:2] == [action, "forward"]
    stats = st.stats()
    assert stats["retries"] == 1
    assert stats[kind] >= 2  # the failed attempt and its repeat are both requests sent


@pytest.mark.parametrize("op", ["get", "put"])
def test_a_lost_response_of_an_idempotent_request_is_repeated(s3_server, s3_proxy: FaultProxy, op: str) -> None:
    st = faulty_store(s3_server, s3_proxy)
    p = st.root + "/sst/obj"
    st.write_file(p, (b"payload",))
    method, _kind, run = OPS[op]
    s3_proxy.fail("lost", method=method)
    assert run(st, p)
    assert st.stats()["retries"] == 1


def test_a_create_whose_response_was_lost_is_recognised_as_ours(s3_server, s3_proxy: FaultProxy) -> None:
    st = faulty_store(s3_server, s3_proxy)
    p = st.root + "/manifest/00000000000000000007.manifest"
    s3_proxy.fail("lost", method="PUT", key="/manifest/")
    assert st.put_if_absent(p, b"version seven")  # landed, response lost; the repeat finds it: ours
    assert [s.action for s in s3_proxy.requests()] == ["lost", "forward", "forward"]  # PUT, PUT refused, GET
    assert st.read(p) == b"version seven"
    assert st.stats()["retries"] == 1


def test_a_create_that_failed_before_another_writers_object_landed_is_not_ours(s3_server, s3_proxy) -> None:
    # our first attempt is reset before it reaches the store; the other writer creates the object before
    # our repeat, which is refused: the bytes there are not ours, so the create is not ours
    st = faulty_store(s3_server, s3_proxy)
    other = ObjectStorage(st.root, s3_server.options())  # the same prefix, straight to the server
    p = st.root + "/wal/00000000000000000003.wal"
    s3_proxy.fail("reset", method="PUT", key="/wal/")
    decide = s3_proxy.decide

    def other_writes_after_the_reset(method: str, key: str) -> str:
        action = decide(method, key)
        if action == "reset":
            assert other.put_if_absent(p, b"theirs")
        return action

    s3_proxy.decide = other_writes_after_the_reset  # type: ignore[method-assign]
    assert not st.put_if_absent(p, b"ours")
    assert st.read(p) == b"theirs"


@pytest.mark.parametrize("landed", [True, False], ids=["landed", "not-landed"])
def test_a_create_whose_outcome_cannot_be_learned_is_unknown(s3_server, s3_proxy: FaultProxy, landed: bool) -> None:
    st = faulty_store(s3_server, s3_proxy, retries=2, timeout_ms=1000)
    p = st.root + "/manifest/00000000000000000002.manifest"
    s3_proxy.unknowable("/manifest/", landed)  # every later request fails: the PUT repeats, the read back
    with pytest.raises(PublishUnknownError) as e:
        st.put_if_absent(p, b"v2")
    assert isinstance(e.value.error, OSError) and "manifest/00000000000000000002" in str(e.value.error)
    s3_proxy.heal()
    assert st.exists(p) == landed  # what the next open reads, and decides by


def test_a_persistent_fault_is_an_os_error_after_the_retries(s3_server, s3_proxy: FaultProxy) -> None:
    st = faulty_store(s3_server, s3_proxy, retries=3)
    s3_proxy.fail("500", method="PUT", count=None)
    with pytest.raises(FileOpError, match="sst/x") as e:
        st.write_file(st.root + "/sst/x", (b"data",))
    assert e.value.op == "put"
    assert len(s3_proxy.requests("PUT")) == 4 and st.stats()["retries"] == 3
    assert not st.exists(st.root + "/sst/x")
    # a create that kept failing may have landed at any attempt: its outcome is unknown, not "absent"
    with pytest.raises(PublishUnknownError):
        st.put_if_absent(st.root + "/manifest/1", b"v1")


def test_retries_stop_at_the_retry_timeout(s3_server, s3_proxy: FaultProxy) -> None:
    st = faulty_store(s3_server, s3_proxy, retries=1000, timeout_ms=300)
    s3_proxy.fail("503", method="GET", count=None)
    t = time.monotonic()
    with pytest.raises(OSError):
        st.read(st.root + "/sst/x")
    assert time.monotonic() - t < 2.0
    assert 2 <= st.stats()["retries"] < 20


def test_a_missing_object_is_not_retried(s3_server, s3_proxy: FaultProxy) -> None:
    st = faulty_store(s3_server, s3_proxy)
    with pytest.raises(FileNotFoundError):
        st.read(st.root + "/sst/missing")
    assert st.stats()["retries"] == 0 and len(s3_proxy.requests("GET")) == 1


@pytest.mark.parametrize("action", ["500", "reset"])
def test_a_multipart_upload_with_a_failed_part_is_aborted_and_repeated(s3_server, s3_proxy, monkeypatch,
                                                                       action: str) -> None:
    monkeypatch.setattr(objstore, "MULTIPART_MIN", 1 << 20)  # two parts (8 MiB + 1 MiB) for 9 MiB
    st = faulty_store(s3_server, s3_proxy)
    p = st.root + "/sst/big.sst"
    data = bytes(range(256)) * (9 << 12)
    s3_proxy.fail(action, method="PUT", key="/sst/big")
    st.write_file(p, (data,))
    assert st.read(p) == data
    assert s3_proxy.requests("DELETE", "/sst/big")  # the failed upload was aborted: no parts left to pay for
    assert st.stats()["retries"] == 1


@pytest.mark.parametrize(("status", "retried"), [("500 Internal Server Error", True), ("503 Service Unavailable", True),
                                                 ("429 Too Many Requests", True), ("408 Request Timeout", True),
                                                 ("400 Bad Request", False), ("403 Forbidden", False)])
def test_which_statuses_are_retried(status: str, retried: bool) -> None:
    msg = f"Error performing GET http://h/b/k in 3ms - Server returned non-2xx status code: {status}: <Error/>"
    assert objstore.transient(GenericError(msg)) == retried
    assert objstore.transient(GenericError("Error performing GET http://h/b/k - HTTP error: error sending request"))
    assert not objstore.transient(NotFoundError("Object at location k not found"))


def test_a_stalled_request_times_out_and_is_retried(s3_server, s3_proxy: FaultProxy) -> None:
    opts = s3_server.options(endpoint=s3_proxy.endpoint) | {"max_retries": 2, "retry_timeout_ms": 5000,
                                                            "timeout": "300ms"}
    st = register(s3_server.new_url(), opts)
    p = st.root + "/wal/00000000000000000001.wal"
    s3_proxy.fail("hang", method="PUT", key="/wal/")
    t = time.monotonic()
    assert st.put_if_absent(p, b"records")
    assert time.monotonic() - t < 3  # not the client's default 30 s
    assert [s.action for s in s3_proxy.requests("PUT")] == ["hang", "forward"]
    assert st.read(p) == b"records" and st.stats()["retries"] == 1
