"""A request that fails for good is one line that says why (storage.objstore_errors): the operation, the
object, S3's error code, the HTTP status, the endpoint and a hint, with obstore's whole error kept as
``__cause__`` and in `detail`, and no credential anywhere. Against real servers: moto's S3 server, one
that checks credentials (`s3_auth_server`), and a port nothing listens on."""

from __future__ import annotations

import pickle
import socket
import time

import pytest

from storage import register
from storage.objstore import ObjectStorage, transient
from storage.objstore_errors import ObjectStoreError, is_panic


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fails(call) -> ObjectStoreError:
    with pytest.raises(ObjectStoreError) as e:
        call()
    err = e.value
    assert "\n" not in str(err) and str(err) == f"{err.filename}: {err.strerror}"
    return err


def test_a_missing_bucket_names_it_and_how_to_create_it(s3_server) -> None:
    st = register("s3://no-such-bucket-e1/db", s3_server.options())
    for call, op in ((lambda: st.list_names(st.root + "/manifest"), "list"),
                     (lambda: st.read(st.root + "/manifest/1.manifest"), "get")):
        err = _fails(call)
        assert (err.op, err.status, err.code, err.bucket) == (op, 404, "NoSuchBucket", "no-such-bucket-e1")
        assert err.strerror.startswith(f"{op.upper()} failed: bucket 'no-such-bucket-e1' does not exist "
                                       f"(NoSuchBucket, HTTP 404 from {s3_server.endpoint}); create it first")
        assert f"aws s3 mb s3://no-such-bucket-e1 --endpoint-url {s3_server.endpoint}" in err.hint
        assert err.filename.startswith("s3://no-such-bucket-e1/db/manifest")
        # obstore's error, whole: a GenericError for the LIST, a FileNotFoundError (a 404) for the GET
        assert "<Code>NoSuchBucket</Code>" in str(err.__cause__) and "<Code>NoSuchBucket</Code>" in err.detail
        back = pickle.loads(pickle.dumps(err))  # as a compaction worker sends it to its parent
        assert (type(back), str(back), back.code, back.detail) == (ObjectStoreError, str(err), err.code, err.detail)


def test_a_missing_object_is_still_file_not_found(s3_server) -> None:
    st = register(s3_server.new_url(), s3_server.options())
    with pytest.raises(FileNotFoundError, match="no such object"):
        st.read(st.root + "/sst/none.sst")
    assert not st.exists(st.root + "/sst/none.sst")


@pytest.mark.parametrize(
    "who, code, says",
    [
        ("unknown", "InvalidAccessKeyId", "check AWS_ACCESS_KEY_ID"),
        ("wrong-secret", "SignatureDoesNotMatch", "check AWS_SECRET_ACCESS_KEY"),
        ("no-policy", "AccessDenied", "policies of the user and of the bucket"),
    ],
)
def test_refused_credentials_say_which_and_never_show_them(s3_auth_server, who: str, code: str, says: str) -> None:
    srv = s3_auth_server
    key_id, secret = {
        "unknown": ("AKIAUNKNOWNKEY000000", "an-unknown-secret-value"),
        "wrong-secret": (srv.key_id, "a-wrong-secret-value"),
        "no-policy": (srv.denied_key_id, srv.denied_secret),
    }[who]
    opts = {"endpoint": srv.endpoint, "region": "us-east-1", "access_key_id": key_id, "secret_access_key": secret,
            "allow_http": True}
    st = ObjectStorage(f"s3://lsm-test/{who}", opts)
    for call in (lambda: st.list_names(st.root + "/manifest"), lambda: st.write_file(st.root + "/sst/a", [b"x"])):
        err = _fails(call)
        assert (err.status, err.code) == (403, code) and f"({code}, HTTP 403 from {srv.endpoint})" in str(err)
        assert says in err.hint
        assert key_id not in str(err) + err.detail and secret not in str(err) + err.detail
    # the owner of the keys gets through: the refusals were the credentials'
    good = ObjectStorage(f"s3://lsm-test/{who}", {**opts, "access_key_id": srv.key_id, "secret_access_key": srv.secret})
    good.write_file(good.root + "/sst/a", [b"x"])
    assert good.list_names(good.root + "/sst") == ["a"]


def test_a_dead_endpoint_says_so_promptly(s3_server) -> None:
    endpoint = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    st = register("s3://lsm-test/dead", {**s3_server.options(), "endpoint": endpoint})
    t0 = time.monotonic()
    err = _fails(lambda: st.list_names(st.root + "/manifest"))
    assert time.monotonic() - t0 < 10
    assert err.strerror.startswith(f"LIST failed: cannot connect to {endpoint}: connection refused; is the server running?")
    assert err.status is None and err.endpoint == endpoint
    # refused connections are retried (a server that is starting or restarting): the retries were made
    assert st.stats()["retries"] == st.max_retries


def test_a_builder_error_is_final() -> None:
    from obstore.exceptions import GenericError

    assert not transient(GenericError("Error performing GET http://h/b in 1us - HTTP error: builder error"))


def test_a_panic_inside_a_request_is_an_object_store_error(s3_server) -> None:
    """What `make_store` refuses can no longer reach the client; a panic that still escapes obstore on a
    request (here: a client built past those checks, with an endpoint it cannot parse) is one OSError,
    not pyo3's PanicException, which ``except Exception`` does not catch."""
    import obstore

    from storage.objclient import ObstoreClient

    st = register(s3_server.new_url(), s3_server.options())
    st.client = ObstoreClient(obstore.store.S3Store("lsm-test", config={**s3_server.options(), "endpoint": "localhost:9000"}))
    err = _fails(lambda: st.list_names(st.root + "/manifest"))
    assert is_panic(err.__cause__) and "the S3 client failed on this request" in err.strerror
    err = _fails(lambda: st.read(st.root + "/manifest/1.manifest"))
    assert err.op == "get"
