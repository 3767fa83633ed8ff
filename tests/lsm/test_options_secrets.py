"""Credentials in DbOptions.object_store_options never reach a repr, a str, an error or a log line
(issue 32 defect 5): the options object prints every other field, and the store still signs with them."""

from __future__ import annotations

import logging

import pytest

import lsm
from lsm.options import REDACTED, is_secret_option, redacted_store_options

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
TOKEN = "FwoGZXIvYXdzEXAMPLE-SESSION-TOKEN"
KEY_ID = "AKIAEXAMPLEKEYID"


def _creds(s3_server=None, endpoint: str | None = None) -> dict:
    base = s3_server.options(endpoint=endpoint) if s3_server is not None else {"region": "us-east-1"}
    return base | {"secret_access_key": SECRET, "token": TOKEN, "access_key_id": KEY_ID}


def _leaks(text: str) -> list[str]:
    return [s for s in (SECRET, TOKEN, KEY_ID) if s in text]


def _chain(e: BaseException | None) -> str:
    """str and repr of `e` and of every exception it was raised from or during."""
    out = []
    while e is not None:
        out += [str(e), repr(e)]
        e = e.__cause__ or e.__context__
    return "\n".join(out)


def test_repr_and_str_of_the_options_hide_the_credentials() -> None:
    creds = _creds() | {"endpoint": "http://127.0.0.1:9000", "aws_session_token": TOKEN,
                        "client_secret": SECRET, "sas_key": SECRET}
    o = lsm.DbOptions(object_store_options=creds, history_retention=5)
    for text in (repr(o), str(o), f"{o}", repr([o])):
        assert _leaks(text) == [], text
        assert "history_retention=5" in text and "'endpoint': 'http://127.0.0.1:9000'" in text
        assert "'region': 'us-east-1'" in text and f"'secret_access_key': '{REDACTED}'" in text
    assert o.object_store_options["secret_access_key"] == SECRET  # the store still gets the real value
    assert repr(lsm.DbOptions()).startswith("DbOptions(clock=SystemClock(), default_ttl=None, ")
    assert "object_store_options=None" in repr(lsm.DbOptions())


def test_which_keys_hold_credentials() -> None:
    for name in ("secret_access_key", "aws_secret_access_key", "token", "session_token", "access_key_id",
                 "account_key", "sas_token", "client_secret", "service_account_key", "password",
                 "Credentials", 7):
        assert is_secret_option(name), name
    for name in ("endpoint", "region", "allow_http", "bucket", "timeout", "max_retries", "virtual_hosted_style_request"):
        assert not is_secret_option(name), name
    assert redacted_store_options(None) is None
    assert redacted_store_options({"region": "r", "token": TOKEN}) == {"region": "r", "token": REDACTED}


def test_errors_of_a_store_opened_with_credentials_do_not_carry_them(s3_server, s3_proxy, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    # a config key the client refuses
    with pytest.raises(BaseException) as bad_key:  # noqa: PT011 - what matters is its text
        lsm.DB.open(s3_server.new_url(), lsm.DbOptions(object_store_options=_creds(s3_server) | {"bogus": 1}))
    assert "bogus" in str(bad_key.value) and _leaks(_chain(bad_key.value)) == []
    # a request the server refuses for good (the bucket is gone), signed with the credentials
    url = s3_server.new_url()
    s3_proxy.fail("404", count=None)
    opts = lsm.DbOptions(object_store_options=_creds(s3_server, s3_proxy.endpoint) | {"max_retries": 0})
    with pytest.raises((lsm.LsmError, OSError)) as gone:
        lsm.DB.open(url, opts)
    assert _leaks(_chain(gone.value)) == []
    assert _leaks("\n".join(r.getMessage() for r in caplog.records)) == []
