"""Where an object-store database is, and how its client is configured: checked before any request.

A location is a local path or a URL ``scheme://bucket/key``:

    location  = local-path | url
    url       = scheme "://" bucket "/" key        scheme: s3, s3a (S3) or memory (in-process)
    bucket    = 1*255 of [A-Za-z0-9._-], starting with a letter or a digit (memory: any name without "/")
    key       = segment *("/" segment) ["/"]        a segment is not empty, not "." or "..", and has no
                                                    control character (what obstore's paths refuse)

A database or a file needs a key (``s3://bucket`` alone would spread a database over a bucket's root).
A local path whose first component reads like a URL scheme followed by one slash or none (``s3:/b/db``,
``s3:b``, ``memory:``) is refused as a mistyped URL rather than created as a directory named ``s3:``;
``./s3:/b`` names such a directory on purpose.

An S3 endpoint is ``http(s)://host[:port][/path]``: the Rust HTTP client obstore uses panics on a request
to an endpoint it cannot parse (``localhost:9000``, ``http://[::1``), so `check_endpoint` refuses those
first, and a plain-HTTP endpoint without ``allow_http`` (which the client would refuse on every request
as a "builder error"). Every refusal is `ObjectStoreConfigError` with one line; a credential never
appears in it (an endpoint is shown without any user-info part).
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

from formats.errors import ObjectStoreConfigError

URL_MARK = "://"
S3_SCHEMES = ("s3", "s3a")
SCHEMES = (*S3_SCHEMES, "memory")
USAGE = "use s3://bucket/prefix or memory://name/prefix"
# schemes of other stores and of URLs in general: a path starting "<one of these>:" is a mistyped URL
_URL_LIKE = re.compile(r"^(?:(?:s3a?|memory|gs|gcs|az|abfss?|adl|wasbs?|hdfs|https?|file):|[A-Za-z][A-Za-z0-9+.-]+:(?:/|$))",
                       re.IGNORECASE)
_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")
_HOST = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# obstore's S3 config keys, by what they set (it takes each with or without "aws_", in any case)
ENDPOINT_KEYS = ("endpoint", "endpoint_url", "aws_endpoint", "aws_endpoint_url")
ALLOW_HTTP_KEYS = ("allow_http", "aws_allow_http")
SECRET_KEYS = ("access_key_id", "secret_access_key", "token", "session_token")
# the standard AWS environment, read when `object_store_options` do not set a key
ENV_KEYS = {
    "AWS_ENDPOINT_URL": "endpoint",
    "AWS_ENDPOINT": "endpoint",
    "AWS_REGION": "region",
    "AWS_DEFAULT_REGION": "region",
    "AWS_ACCESS_KEY_ID": "access_key_id",
    "AWS_SECRET_ACCESS_KEY": "secret_access_key",
    "AWS_SESSION_TOKEN": "token",
    "AWS_ALLOW_HTTP": "allow_http",
}


def split_url(url: str) -> tuple[str, str, str]:
    """(scheme, bucket, key) of a URL; nothing is checked (`check_location` does)."""
    scheme, rest = url.split(URL_MARK, 1)
    bucket, _, key = rest.partition("/")
    return scheme, bucket, key


def check_location(location: str, what: str = "database") -> str:
    """`location` if it is a well-formed local path or object-store URL (module docstring) for a
    database or a file (`what` names it in the message); else `ObjectStoreConfigError`."""
    if URL_MARK not in location:
        if _URL_LIKE.match(location):
            scheme, rest = location.split(":", 1)
            meant = f"{scheme}{URL_MARK}{rest.lstrip('/')}" if rest.strip("/") else f"{scheme}{URL_MARK}bucket/prefix"
            raise ObjectStoreConfigError(
                f"{location!r} reads like a URL without its '//': write {meant} for an object store "
                f"({USAGE}), or ./{location} for a local directory of that name"
            )
        return location
    scheme, bucket, key = split_url(location)
    check_root(f"{scheme}{URL_MARK}{bucket}", location)
    if not key.strip("/"):
        raise ObjectStoreConfigError(
            f"{location!r} names no {what} inside {scheme}://{bucket}: give a key after the "
            f"{'name' if scheme == 'memory' else 'bucket'} ({USAGE})"
        )
    segments = key.split("/")
    if segments[-1] == "":
        segments.pop()  # one trailing "/" names the same prefix
    for seg in segments:
        if seg in ("", ".", "..") or _CONTROL.search(seg):
            bad = "an empty segment (//)" if seg == "" else repr(seg) if seg in (".", "..") else "a control character"
            raise ObjectStoreConfigError(f"{location!r}: the key has {bad}, which object keys may not hold")
    return location


def check_root(root: str, shown: str | None = None) -> tuple[str, str]:
    """(scheme, bucket) of the store URL `root` (``scheme://bucket``, a key after it ignored), checked:
    a supported scheme and a well-formed bucket. `shown` is the URL the message names (default root)."""
    shown = root if shown is None else shown
    if URL_MARK not in root:
        raise ObjectStoreConfigError(f"{shown!r} is not an object store URL: {USAGE}")
    scheme, bucket, _key = split_url(root)
    if scheme not in SCHEMES:
        raise ObjectStoreConfigError(f"unsupported object store URL {shown!r}: {USAGE}")
    if not bucket:
        raise ObjectStoreConfigError(
            f"{shown!r} names no {'store' if scheme == 'memory' else 'bucket'}: {USAGE}"
        )
    if scheme in S3_SCHEMES and not _BUCKET.match(bucket):
        raise ObjectStoreConfigError(
            f"{shown!r}: {bucket!r} is not a bucket name (letters, digits, '.', '-' and '_', starting with "
            "a letter or a digit)"
        )
    return scheme, bucket


def s3_config(options: Mapping[str, Any] | None, ignore: Iterable[str] = ()) -> dict[str, Any]:
    """obstore S3 config: the standard environment, overridden by `options` but for the keys in `ignore`
    (the store's own: retries, HTTP client); credentials from the AWS shared credentials file when
    neither gives a key id (`storage.aws_credentials`). The endpoint and allow_http of `options` count
    under any of obstore's names for them (``aws_endpoint_url``, ...), so they override the environment's."""
    cfg: dict[str, Any] = {}
    for env, key in ENV_KEYS.items():
        v = os.environ.get(env)
        if v and key not in cfg:
            cfg[key] = v
    skip = set(ignore)
    given = {k: v for k, v in (options or {}).items() if k not in skip}
    for key, names in (("endpoint", ENDPOINT_KEYS), ("allow_http", ALLOW_HTTP_KEYS)):
        value = config_value(given, names)
        if value is not None:
            given = {k: v for k, v in given.items() if str(k).lower() not in names} | {key: value}
    if "access_key_id" not in cfg and config_value(given, ("access_key_id", "aws_access_key_id")) is None:
        from storage.aws_credentials import shared_file_credentials

        cfg.update(shared_file_credentials())
    cfg.update(given)
    if isinstance(cfg.get("allow_http"), str):
        cfg["allow_http"] = cfg["allow_http"].lower() in ("1", "true", "yes")
    return cfg


def config_value(cfg: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    """The value of the first of `keys` in obstore config `cfg` (keys compared without case), or None."""
    lowered = {str(k).lower(): v for k, v in cfg.items()}
    for k in keys:
        if k in lowered:
            return lowered[k]
    return None


def secrets_of(cfg: Mapping[str, Any]) -> list[str]:
    """The credential values in obstore config `cfg`: what `redact` hides."""
    out = []
    for k, v in cfg.items():
        name = str(k).lower().removeprefix("aws_")
        if name in SECRET_KEYS and isinstance(v, str) and v:
            out.append(v)
    return out


def redact(text: str, secrets: list[str]) -> str:
    """`text` with every credential of `secrets` replaced by ``***``."""
    for s in sorted(secrets, key=len, reverse=True):
        text = text.replace(s, "***")
    return text


def shown_endpoint(endpoint: str) -> str:
    """`endpoint` for a message: any ``user:password@`` part replaced by ``***@``."""
    scheme, sep, rest = endpoint.partition(URL_MARK)
    if not sep:  # no scheme: all of it is the authority and what follows
        scheme, rest = "", endpoint
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rsplit("@", 1)[1]
    return f"{scheme}{sep}{authority}{slash}{path}"


def check_config(cfg: Mapping[str, Any], url: str) -> None:
    """Refuse S3 config `cfg` of the store at `url` where the client would panic on a request: a value
    with a control character (a credential or region with a line break cannot go in a header), or an
    endpoint `check_endpoint` refuses. The message names the key, never the value."""
    for k, v in cfg.items():
        if isinstance(v, str) and _CONTROL.search(v):
            raise ObjectStoreConfigError(f"{url}: the value of {k!r} holds a control character (a line break?)")
    if cfg.get("endpoint") is not None:
        check_endpoint(cfg["endpoint"], bool(cfg.get("allow_http")), url)


def check_endpoint(endpoint: Any, allow_http: bool, url: str) -> None:
    """Refuse an S3 endpoint the client cannot use (module docstring); `url` is the store's, named in
    the message with the endpoint."""
    if not isinstance(endpoint, str):
        raise ObjectStoreConfigError(f"{url}: the endpoint must be a string, not {type(endpoint).__name__}")
    shown = shown_endpoint(endpoint)
    where = f"{url}: endpoint {shown!r}"
    if _CONTROL.search(endpoint) or " " in endpoint:
        raise ObjectStoreConfigError(f"{where} holds a space or a control character")
    if URL_MARK not in endpoint:
        raise ObjectStoreConfigError(
            f"{where} has no scheme: write http://{shown} (with AWS_ALLOW_HTTP=true) or https://{shown}"
        )
    try:
        u = urllib.parse.urlsplit(endpoint)
        port = u.port
    except ValueError as e:  # an unclosed "[", a port that is not a number or out of range
        raise ObjectStoreConfigError(f"{where} is not a valid URL ({e})") from None
    scheme = u.scheme.lower()
    if scheme not in ("http", "https"):
        raise ObjectStoreConfigError(f"{where}: the scheme must be http or https, not {u.scheme!r}")
    if "@" in u.netloc:
        raise ObjectStoreConfigError(
            f"{where} holds credentials: give them as AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "(or access_key_id and secret_access_key), never in the endpoint"
        )
    host = u.hostname or ""
    if not host:
        raise ObjectStoreConfigError(f"{where} has no host: write {scheme}://host[:port]")
    if not u.netloc.startswith("[") and not _HOST.match(host):
        raise ObjectStoreConfigError(
            f"{where}: {host!r} is not a host name (letters, digits, '-', '.' and '_'; an IPv6 address "
            "goes in brackets)"
        )
    if u.netloc.endswith(":") or port == 0:
        raise ObjectStoreConfigError(f"{where}: the port must be a number from 1 to 65535")
    if u.query or u.fragment or "?" in endpoint or "#" in endpoint:
        raise ObjectStoreConfigError(f"{where}: an endpoint has no query or fragment (?...#...)")
    if scheme == "http" and not allow_http:
        raise ObjectStoreConfigError(
            f"{where} is plain HTTP, which the client refuses by default: set AWS_ALLOW_HTTP=true (or "
            "allow_http in object_store_options) for a test server, or use https"
        )


__all__ = [
    "ALLOW_HTTP_KEYS",
    "ENDPOINT_KEYS",
    "ENV_KEYS",
    "SCHEMES",
    "check_config",
    "check_endpoint",
    "check_location",
    "check_root",
    "config_value",
    "redact",
    "s3_config",
    "secrets_of",
    "shown_endpoint",
    "split_url",
]
