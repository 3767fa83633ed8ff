"""`DB.open` of an object-store URL that cannot work fails with an error a program can catch and read:
`ObjectStoreConfigError` (an LsmError) for a malformed URL or endpoint, before anything is sent or
created; `ObjectStoreError` (an OSError naming S3's code) for a store that answers no. Never pyo3's
PanicException, which ``except Exception`` does not catch."""

from __future__ import annotations

import os

import pytest

import lsm
from storage.objstore_errors import ObjectStoreError


@pytest.mark.parametrize(
    "path, says",
    [
        ("s3://", "names no bucket"),
        ("memory://", "names no store"),
        ("s3:///x", "names no bucket"),
        ("s3://lsm-test", "names no database"),
        ("s3:/lsm-test/db", "write s3://lsm-test/db"),
        ("s3://lsm-test/a//b", "empty segment"),
        ("gs://bucket/db", "unsupported object store URL"),
    ],
)
def test_a_malformed_url_is_refused_and_nothing_is_created(s3_server, tmp_path, monkeypatch, path, says) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(lsm.ObjectStoreConfigError, match=says):
        lsm.DB.open(path)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("endpoint", ["localhost:9000", "http://[::1", "http://ho st:1", "http://127.0.0.1:99999"])
def test_a_malformed_endpoint_is_an_exception_not_a_panic(s3_server, endpoint) -> None:
    opts = lsm.DbOptions(object_store_options={**s3_server.options(), "endpoint": endpoint})
    try:
        lsm.DB.open(s3_server.new_url(), opts)
    except Exception as e:  # noqa: BLE001 - the point: a PanicException is a BaseException and got through
        assert isinstance(e, lsm.ObjectStoreConfigError) and "endpoint" in str(e) and "\n" not in str(e)
    else:
        raise AssertionError("opened with a malformed endpoint")


def test_a_missing_bucket_is_an_os_error_naming_it(s3_server) -> None:
    with pytest.raises(ObjectStoreError) as e:
        lsm.DB.open("s3://no-such-bucket-d1/db", lsm.DbOptions(object_store_options=s3_server.options()))
    assert isinstance(e.value, OSError) and e.value.code == "NoSuchBucket"
    assert "bucket 'no-such-bucket-d1' does not exist" in str(e.value)


def test_a_backend_the_caller_attached_opens_under_its_own_scheme_and_only_while_attached() -> None:
    """The URL check is for a user's URL: a store served by a backend the caller built and attached (the
    deterministic simulation's ``sim://``) opens, and the same URL is refused once it is detached."""
    from storage import attach, detach
    from storage.objstore import ObjectStorage
    from storage.simstore import SimClient

    root = "sim://attached-check/db"
    attach(root, ObjectStorage(root, {}, client=SimClient(clock=lambda: 100.0)))
    try:
        opts = lsm.DbOptions(clock=lsm.ManualClock(1000), background_compaction=False, compaction_process=False,
                             flush_process=False, background_flush=False, wal_flush_interval_ms=None)
        with lsm.DB.open(root, opts) as db:
            db.put(b"k", b"v")
            assert db.get(b"k") == b"v"
    finally:
        detach(root)
    with pytest.raises(lsm.ObjectStoreConfigError, match="unsupported object store URL"):
        lsm.DB.open(root)
