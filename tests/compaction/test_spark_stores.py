"""What a Spark task carries to reach an object store (compaction.spark_stores): the store's URL and the
driver's settings, never a credential; on a local master the credentials in a private file the driver
removes when the job ends. No Spark here: the tests/spark suites run the jobs."""

from __future__ import annotations

import json
import os
import stat
import uuid

import pytest
from pyspark import cloudpickle

import storage
from compaction.spark_stores import (
    ExecutorCredentialsError,
    ExecutorStore,
    executor_stores,
    handed_off,
    is_credential,
    local_master,
    on_executor,
)


def _store_with_secret(s3_server) -> tuple[str, str]:
    """A database URL on the test server, its store registered with options holding a secret of its own."""
    url = s3_server.new_url()
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    root = url.rsplit("/", 1)[0]  # a root of its own: the bucket's store keeps the environment's settings
    storage.register(
        root,
        dict(
            s3_server.options(),
            access_key_id="key-id-1",
            secret_access_key=secret,
            session_token="tok-1",
            max_retries=2,
        ),
    )
    return url, secret


def test_no_credential_travels_in_a_task(s3_server) -> None:
    url, secret = _store_with_secret(s3_server)
    (shipped,) = executor_stores([os.path.join(url, "sst", "x.sst")])
    assert shipped.root == url.rsplit("/", 1)[0] and shipped.handoff is None
    assert shipped.options["endpoint"] == s3_server.endpoint and shipped.options["max_retries"] == 2
    assert shipped.options["allow_http"] is True and shipped.options["region"] == "us-east-1"
    assert not {"access_key_id", "secret_access_key", "session_token", "token"} & shipped.options.keys()
    blob = cloudpickle.dumps([shipped])
    for value in (secret, "key-id-1", "tok-1"):
        assert value.encode() not in blob


def test_the_drivers_environment_settings_travel(s3_server) -> None:
    """A store the driver reaches through the AWS variables: the executors get its endpoint, region and
    allow_http from the task (only the credentials come from their own side)."""
    url = s3_server.new_url()
    (shipped,) = executor_stores([url])
    assert shipped.options == {"endpoint": s3_server.endpoint, "region": "us-east-1", "allow_http": True}


def test_local_paths_ship_nothing_and_memory_is_refused(tmp_path) -> None:
    assert executor_stores([str(tmp_path / "db")]) == []
    import lsm

    with pytest.raises(
        lsm.SparkStoreError, match=r"memory:// store \(a database, a log\) lives in this process"
    ):
        executor_stores(["memory://x/db"])


def test_a_local_master_gets_a_private_file(s3_server) -> None:
    url, secret = _store_with_secret(s3_server)
    stores = executor_stores([url])
    with handed_off(stores, "local[2,4]") as shipped:
        (s,) = shipped
        assert s.handoff is not None and s.options == stores[0].options
        assert stat.S_IMODE(os.stat(s.handoff).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(s.handoff)).st_mode) == 0o700
        with open(s.handoff) as f:
            assert json.load(f) == {
                "access_key_id": "key-id-1",
                "secret_access_key": secret,
                "session_token": "tok-1",
            }
        assert secret.encode() not in cloudpickle.dumps(shipped)
        # the executor side: the store registered with the driver's settings and the handed credentials
        storage.install([(s.root, {})])  # (another store under that root, as a reused worker may hold)
        on_executor(shipped)
        got = storage.storage_for(url).options
        assert got["secret_access_key"] == secret and got["endpoint"] == s3_server.endpoint
    assert not os.path.exists(os.path.dirname(s.handoff))  # removed when the job ended
    with pytest.raises(ExecutorCredentialsError, match="its job has ended") as e:
        on_executor(shipped)
    assert secret not in str(e.value)


def test_another_master_takes_the_executors_own_credentials(s3_server) -> None:
    url, _secret = _store_with_secret(s3_server)
    stores = executor_stores([url])
    with handed_off(stores, "spark://head:7077") as shipped:
        assert shipped == stores and shipped[0].handoff is None
    # on the executor the store gets its key from this process's chain (here the AWS variables)
    on_executor(shipped)
    st = storage.storage_for(url)
    assert "secret_access_key" not in st.options
    st.write_file(os.path.join(url, "probe"), [b"x"])  # the environment's keys work on the server
    assert st.read(os.path.join(url, "probe")) == b"x"


@pytest.mark.parametrize(
    "key, secret",
    [
        ("secret_access_key", True),
        ("aws_session_token", True),
        ("token", True),
        ("access_key_id", True),
        ("sse_customer_key_base64", True),
        ("endpoint", False),
        ("region", False),
        ("allow_http", False),
        ("max_retries", False),
        ("container_credentials_relative_uri", False),
    ],
)
def test_is_credential(key, secret) -> None:
    assert is_credential(key) is secret


def test_local_master() -> None:
    assert local_master("local[2]") and local_master("local") and local_master("local-cluster[2,1,1024]")
    assert not local_master("spark://h:7077") and not local_master("yarn")


def test_executor_store_is_plain_data() -> None:
    s = ExecutorStore("s3://b/p", {"region": "r"})
    assert cloudpickle.loads(cloudpickle.dumps(s)) == s
