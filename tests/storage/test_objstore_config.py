"""Object-store URLs and client configuration are checked before any request (storage.objstore_config):
each malformed one is an `ObjectStoreConfigError` (an LsmError, so ``except Exception`` catches it) with
one line, where obstore's HTTP client would have panicked (a BaseException) or said "builder error"."""

from __future__ import annotations

import pytest

from formats.errors import LsmError, ObjectStoreConfigError
from storage.objstore import make_store
from storage.objstore_config import check_location, s3_config

BAD_LOCATIONS = {
    "s3://": "names no bucket",
    "memory://": "names no store",
    "s3:///x": "names no bucket",
    "s3://bucket": "names no database",
    "s3://bucket/": "names no database",
    "s3:/bucket/db": "write s3://bucket/db",
    "s3:bucket/db": "write s3://bucket/db",
    "s3:": "reads like a URL",
    "memory:/name/db": "write memory://name/db",
    "gs://bucket/db": "unsupported object store URL",
    "http://host/db": "unsupported object store URL",
    "s3://Bad Bucket/db": "is not a bucket name",
    "s3://user@bucket/db": "is not a bucket name",
    "s3://bucket//db": "empty segment",
    "s3://bucket/db/../x": "'..'",
    "s3://bucket/db\n": "control character",
}


@pytest.mark.parametrize("location", BAD_LOCATIONS)
def test_a_malformed_location_is_one_line(location: str) -> None:
    with pytest.raises(ObjectStoreConfigError, match=BAD_LOCATIONS[location]) as e:
        check_location(location)
    assert isinstance(e.value, LsmError) and "\n" not in str(e.value)


@pytest.mark.parametrize("location", ["db", "/tmp/x/db", "./s3:/b/db", "data:2024/db", "s3://b/db", "s3://b/db/",
                                      "s3a://b.c-d_e/x/y", "memory://any name/db"])
def test_well_formed_locations_pass(location: str) -> None:
    assert check_location(location) == location


BAD_ENDPOINTS = {
    "localhost:9000": "has no scheme: write http://localhost:9000",
    "http://[::1": "not a valid URL",
    "http://[zz]:90": "not a valid URL",
    "http://127.0.0.1:99999": "not a valid URL",
    "http://host:abc": "not a valid URL",
    "http://ho st:9000": "space",
    "http://:9000": "has no host",
    "http://": "has no host",
    "https://": "has no host",
    "ftp://host:21": "must be http or https",
    "http://\u00fc.example:1": "is not a host name",
    "http://host%41:1": "is not a host name",
    "http://host:": "port",
    "http://host:0": "port",
    "http://host:9000?x=1": "no query",
}


@pytest.mark.parametrize("endpoint", BAD_ENDPOINTS)
def test_a_malformed_endpoint_is_refused_before_the_client_sees_it(endpoint: str) -> None:
    # each of these made obstore panic on the first request, or refuse every request ("builder error")
    with pytest.raises(ObjectStoreConfigError, match=BAD_ENDPOINTS[endpoint]) as e:
        make_store("s3://bucket/db", {"endpoint": endpoint, "allow_http": True, "region": "us-east-1"})
    assert "\n" not in str(e.value) and "s3://bucket/db" in str(e.value)


def test_plain_http_needs_allow_http_and_credentials_stay_out_of_the_endpoint() -> None:
    with pytest.raises(ObjectStoreConfigError, match="plain HTTP.*AWS_ALLOW_HTTP=true"):
        make_store("s3://bucket/db", {"endpoint": "http://127.0.0.1:9000", "allow_http": False})
    with pytest.raises(ObjectStoreConfigError, match="holds credentials") as e:
        make_store("s3://bucket/db", {"endpoint": "http://AKIDEXAMPLE:hunter2secret@127.0.0.1:9000", "allow_http": True})
    assert "hunter2secret" not in str(e.value) and "AKIDEXAMPLE" not in str(e.value)
    with pytest.raises(ObjectStoreConfigError, match="has no scheme") as e:  # nor without a scheme
        make_store("s3://bucket/db", {"endpoint": "AKIDEXAMPLE:hunter2secret@127.0.0.1:9000"})
    assert "hunter2secret" not in str(e.value) and "***@127.0.0.1:9000" in str(e.value)
    with pytest.raises(ObjectStoreConfigError, match="refuses its configuration") as e:
        make_store("s3://bucket/db", {"access_key_id": "AKIDEXAMPLE", "secret_access_key": "hunter2secret",
                                      "virtual_hosted_style_request": "hunter2secret"})
    assert "hunter2secret" not in str(e.value) and 'failed to parse "***" as boolean' in str(e.value)
    assert make_store("s3://bucket/db", {"endpoint": "https://s3.example.com:8443/base", "region": "eu-west-1"})


def test_a_config_the_client_refuses_is_one_line_naming_no_secret() -> None:
    with pytest.raises(ObjectStoreConfigError, match="the S3 client refuses its configuration"):
        make_store("s3://bucket/db", {"checksum_algorithm": "nope"})
    with pytest.raises(ObjectStoreConfigError, match="not-a-key"):
        make_store("s3://bucket/db", {"not-a-key": "x"})
    # a line break in a header value made the client panic on the first request
    for key in ("token", "access_key_id", "region"):
        with pytest.raises(ObjectStoreConfigError, match=f"'{key}' holds a control character") as e:
            make_store("s3://bucket/db", {key: "secret-part\nrest"})
        assert "secret-part" not in str(e.value)


def test_options_override_the_environment_under_any_of_obstores_names(monkeypatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://env-host:1")
    monkeypatch.setenv("AWS_ALLOW_HTTP", "false")
    cfg = s3_config({"AWS_Endpoint_URL": "http://option-host:2", "aws_allow_http": "true", "max_retries": 3},
                    ignore=("max_retries",))
    assert cfg["endpoint"] == "http://option-host:2" and cfg["allow_http"] is True
    assert not any(k.lower() in ("aws_endpoint_url", "aws_allow_http", "max_retries") for k in cfg)
    make_store("s3://bucket/db", {"aws_endpoint_url": "http://option-host:2", "aws_allow_http": "true"})
