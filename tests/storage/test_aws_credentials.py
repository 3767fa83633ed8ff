"""The AWS shared credentials file as the third link of the store's credential chain (options, then the
environment, then the file): what gives an executor on a cluster node its keys without a secret on a
command line (docs/spark.md, "Credentials")."""

from __future__ import annotations

import os

import pytest

from storage.aws_credentials import CredentialsFileError, shared_file_credentials
from storage.objstore_config import s3_config

AWS_VARS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
)


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in AWS_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch


def write(path, text: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
    return str(path)


FILE = """[default]
aws_access_key_id = AKIDDEFAULT
aws_secret_access_key = default-secret

[ops]
aws_access_key_id=AKIDOPS
aws_secret_access_key=ops-secret
aws_session_token=ops-token
"""


def test_the_default_file_and_profile(clean_env, tmp_path) -> None:
    assert shared_file_credentials() == {}  # no file at ~/.aws/credentials: nothing, no error
    write(tmp_path / "home" / ".aws" / "credentials", FILE)
    assert shared_file_credentials() == {
        "access_key_id": "AKIDDEFAULT",
        "secret_access_key": "default-secret",
    }
    clean_env.setenv("AWS_PROFILE", "ops")
    assert shared_file_credentials() == {
        "access_key_id": "AKIDOPS",
        "secret_access_key": "ops-secret",
        "token": "ops-token",
    }


def test_a_named_file(clean_env, tmp_path) -> None:
    clean_env.setenv("AWS_SHARED_CREDENTIALS_FILE", write(tmp_path / "etc" / "aws", FILE))
    assert shared_file_credentials()["access_key_id"] == "AKIDDEFAULT"


@pytest.mark.parametrize(
    "text, env, message",
    [
        (None, {"AWS_SHARED_CREDENTIALS_FILE": "{tmp}/missing"}, "missing: no such file"),
        (FILE, {"AWS_PROFILE": "nope"}, "no profile [nope] (AWS_PROFILE)"),
        ("aws_secret_access_key = leaked-secret\n", {}, "not an AWS credentials file (line 1)"),
        (
            "[default]\naws_access_key_id = A\nleaked-secret-line\n",
            {},
            "not an AWS credentials file (line 3)",
        ),
        ("[default]\naws_access_key_id = A\n", {}, "needs both aws_access_key_id and aws_secret_access_key"),
    ],
)
def test_errors_say_why_and_never_quote_the_file(clean_env, tmp_path, text, env, message) -> None:
    if text is not None:
        write(tmp_path / "home" / ".aws" / "credentials", text)
    for k, v in env.items():
        clean_env.setenv(k, v.format(tmp=tmp_path))
    with pytest.raises(CredentialsFileError) as e:
        shared_file_credentials()
    assert message in str(e.value)
    assert "leaked" not in str(e.value) and "secret-line" not in str(e.value)


def test_the_chain_options_then_environment_then_file(clean_env, tmp_path) -> None:
    write(tmp_path / "home" / ".aws" / "credentials", FILE)
    assert s3_config({})["access_key_id"] == "AKIDDEFAULT"  # only the file has keys
    assert s3_config({"access_key_id": "OPT", "secret_access_key": "o"})["access_key_id"] == "OPT"
    clean_env.setenv("AWS_ACCESS_KEY_ID", "ENV")
    clean_env.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    cfg = s3_config({})
    assert (cfg["access_key_id"], cfg["secret_access_key"]) == ("ENV", "env-secret")  # the file is not read


def test_a_store_reaches_the_server_with_the_file_alone(clean_env, s3_server, tmp_path) -> None:
    """No key in the options nor in the environment: the store signs with the file's key (moto takes any)."""
    import storage

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        clean_env.delenv(name, raising=False)
    write(tmp_path / "home" / ".aws" / "credentials", FILE)
    url = s3_server.new_url()
    st = storage.register(url, {"endpoint": s3_server.endpoint, "region": "us-east-1", "allow_http": True})
    st.write_file(os.path.join(url, "k"), [b"v"])
    assert st.read(os.path.join(url, "k")) == b"v"
