"""What a failed object-store request means, in one line: the errors of `storage.objstore`.

obstore raises the Rust ``object_store`` crate's errors with their whole chain in the message:

    Generic S3 error: Error performing list request: Error performing GET <uri> in 6ms - Server returned
    non-2xx status code: 404 Not Found: <?xml ...?>
    <Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message>...</Error>

    Debug source:
    Generic { ... inner: Http(HttpError { kind: Connect, source: ... ConnectionRefused ... }) ... }

The first line names the request and the HTTP status, the S3 error document follows it, and the
"Debug source" part is the error's structure, where a failure without a response says what it was
(``kind: Connect`` with ``ConnectionRefused`` or ``dns error``, ``kind: Timeout``, ``BadScheme``).
`explain` reads those parts (S3's own code and message: ``NoSuchBucket``, ``AccessDenied``,
``SignatureDoesNotMatch``, ...) and `ObjectStoreError` is the one line made of them: the operation, the
object or prefix (the error's filename), the cause with S3's code, the HTTP status and the endpoint the
request went to, and a hint (what to set or create). The whole chain stays on the exception: obstore's
error is its ``__cause__``, and `detail` holds the full text with any credential replaced by ``***``.
"""

from __future__ import annotations

import dataclasses
import errno
import html
import re
import urllib.parse

from formats.fileio import FileOpError
from storage.objstore_config import redact, shown_endpoint

_REQUEST = re.compile(r"Error performing (?P<method>[A-Z]+) (?P<uri>\S+)")
_STATUS = re.compile(r"status code: (\d{3})")
_CODE = re.compile(r"<Code>([^<]*)</Code>")
_MESSAGE = re.compile(r"<Message>([^<]*)</Message>")
_REGION = re.compile(r"<Region>([^<]*)</Region>")
_KIND = re.compile(r"HttpError \{\s*kind: (\w+)")

# what a 403 with each of S3's codes means, and what to check
_DENIED = {
    "InvalidAccessKeyId": ("the server knows no such access key id",
                           "check AWS_ACCESS_KEY_ID (or access_key_id in object_store_options)"),
    "SignatureDoesNotMatch": ("the request's signature does not match: the secret key is not the access key id's",
                              "check AWS_SECRET_ACCESS_KEY (or secret_access_key in object_store_options)"),
    "ExpiredToken": ("the session token has expired", "renew AWS_SESSION_TOKEN"),
    "InvalidToken": ("the session token is not valid", "check AWS_SESSION_TOKEN"),
}


def is_panic(e: BaseException) -> bool:
    """Whether `e` is pyo3's PanicException: a Rust panic inside obstore, raised as a BaseException
    (so ``except Exception`` does not catch it). Its class is not importable: it is told by name."""
    return type(e).__name__ == "PanicException"


@dataclasses.dataclass(frozen=True)
class Failure:
    """What `explain` read from one failed request."""

    cause: str  # what went wrong, in words
    hint: str  # what to check or do ("" if nothing useful)
    status: int | None = None  # HTTP status, if a response came
    code: str | None = None  # S3's error code (NoSuchBucket, AccessDenied, ...)
    endpoint: str | None = None  # scheme://host[:port] the request went to


def _endpoint_of(text: str, configured: str | None) -> str | None:
    m = _REQUEST.search(text)
    if m:
        u = urllib.parse.urlsplit(m.group("uri"))
        if u.scheme and u.netloc:
            return shown_endpoint(f"{u.scheme}://{u.netloc}")
    return shown_endpoint(configured) if configured else None


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def _local(endpoint: str | None) -> bool:
    host = urllib.parse.urlsplit(endpoint).hostname if endpoint else None
    return host in ("127.0.0.1", "localhost", "::1")


def explain(e: BaseException, op: str, bucket: str, key: str, configured: str | None) -> Failure:
    """The cause and a hint for request error `e` of operation `op` ("get", "list", ...) on `key` in
    `bucket`, `configured` being the endpoint the store was given (None: AWS's own)."""
    text = str(e)
    endpoint = _endpoint_of(text, configured)
    frm = f" from {endpoint}" if endpoint else ""
    if is_panic(e):
        return Failure(f"the S3 client failed on this request ({_first_line(e)})",
                       "check the endpoint, the region and the bucket", endpoint=endpoint)
    m = _STATUS.search(text)
    status = int(m.group(1)) if m else None
    code = m.group(1) if (m := _CODE.search(text)) else None
    message = html.unescape(m.group(1)) if (m := _MESSAGE.search(text)) else None
    if status is not None:
        where = f"{code}, HTTP {status}{frm}" if code else f"HTTP {status}{frm}"
        if code == "NoSuchBucket" or (status == 404 and op == "list"):
            how = f"aws s3 mb s3://{bucket}" + (f" --endpoint-url {endpoint}" if configured else "")
            if _local(endpoint):
                how += f", or start a local server with it: lsm s3 serve --bucket {bucket}"
            return Failure(f"bucket {bucket!r} does not exist ({where})",
                           f"create it first ({how}), or check the bucket in the URL", status, code, endpoint)
        if code in _DENIED:
            cause, hint = _DENIED[code]
            return Failure(f"{cause} ({where})", hint, status, code, endpoint)
        if status in (401, 403):
            what = (f"bucket {bucket!r}" if not key else f"prefix {key.rstrip('/') + '/'!r} of bucket {bucket!r}"
                    if op == "list" else f"object {key!r} of bucket {bucket!r}")
            hint = ("the credentials are accepted but may not do this: check the policies of the user and "
                    "of the bucket" if code == "AccessDenied" else
                    "check the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) and the policies of "
                    "the user and of the bucket")
            return Failure(f"access denied to {what} ({where})", hint, status, code, endpoint)
        region = m.group(1) if (m := _REGION.search(text)) else None
        if code in ("AuthorizationHeaderMalformed", "PermanentRedirect", "IllegalLocationConstraintException") or status == 301:
            return Failure(f"bucket {bucket!r} is in another region ({where})",
                           f"set AWS_REGION={region}" if region else "set AWS_REGION to the bucket's region",
                           status, code, endpoint)
        said = f": {message}" if message else ""
        hint = "the server kept failing through the retries: try again later" if status >= 500 or status in (408, 429) else ""
        return Failure(f"the server answered {where}{said}", hint, status, code, endpoint)
    kind = m.group(1) if (m := _KIND.search(text)) else None
    if "BadScheme" in text or "builder error" in text:
        http = bool(endpoint) and endpoint.lower().startswith("http:")
        return Failure(f"the HTTP client refused to send the request to {endpoint or 'the endpoint'}",
                       "set AWS_ALLOW_HTTP=true for a plain-HTTP endpoint" if http else "check the endpoint",
                       endpoint=endpoint)
    if "ConnectionRefused" in text or "Connection refused" in text:
        hint = "is the server running? check AWS_ENDPOINT_URL"
        if _local(endpoint):
            hint += " (lsm s3 serve starts a local S3 server)"
        return Failure(f"cannot connect to {endpoint or 'the endpoint'}: connection refused", hint, endpoint=endpoint)
    if "dns error" in text:
        return Failure(f"cannot resolve the host of {endpoint or 'the endpoint'}",
                       "check the host in AWS_ENDPOINT_URL (or the region)", endpoint=endpoint)
    if "certificate" in text.lower():
        return Failure(f"the TLS certificate of {endpoint or 'the endpoint'} is not trusted",
                       "an https endpoint needs a certificate this host trusts; a plain-HTTP test server "
                       "needs http:// and AWS_ALLOW_HTTP=true", endpoint=endpoint)
    if kind == "Timeout" or "TimedOut" in text or "timed out" in text:
        return Failure(f"no answer from {endpoint or 'the endpoint'} in time (retried)",
                       "the server or the network is down or slow; timeout and connect_timeout in "
                       "object_store_options set the limits", endpoint=endpoint)
    if kind == "Connect":
        return Failure(f"cannot connect to {endpoint or 'the endpoint'}", "check AWS_ENDPOINT_URL and the network",
                       endpoint=endpoint)
    if kind is not None:
        return Failure(f"the request to {endpoint or 'the endpoint'} failed ({kind.lower()} error, retried)",
                       "the connection broke: try again", endpoint=endpoint)
    return Failure(f"{type(e).__name__}: {_first_line(e).removeprefix('Generic S3 error: ')}", "", endpoint=endpoint)


class ObjectStoreError(FileOpError):
    """A request to the object store failed for good (after the retries, or at once when retrying
    cannot help). An OSError, as a disk's error is: the engine treats both alike. The message is one
    line (module docstring); the fields say the same for a program:

    `op` the operation (get, put, list, head, delete), `filename` the object or prefix URL, `bucket`
    and `key`, `status` (HTTP, or None without a response), `code` (S3's error code or None), `endpoint`
    (where the request went), `cause` and `hint` in words, `detail` obstore's whole error text with
    credentials replaced by ``***``. The obstore error is ``__cause__`` where it was raised."""

    def __init__(self, op: str, path: str, bucket: str, key: str, failure: Failure, detail: str = "") -> None:
        code = errno.EACCES if failure.status in (401, 403) else errno.EIO
        hint = f"; {failure.hint}" if failure.hint else ""
        super().__init__(code, f"{op.upper()} failed: {failure.cause}{hint}", path, op)
        self.bucket = bucket
        self.key = key
        self.failure = failure
        self.status = failure.status
        self.code = failure.code
        self.endpoint = failure.endpoint
        self.cause = failure.cause
        self.hint = failure.hint
        self.detail = detail

    def __reduce__(self) -> tuple:  # a compaction worker pickles it back to the parent
        return (ObjectStoreError, (self.op, self.filename, self.bucket, self.key, self.failure, self.detail))

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def request_error(e: BaseException, op: str, path: str, bucket: str, key: str, configured: str | None,
                  secrets: list[str]) -> ObjectStoreError:
    """The `ObjectStoreError` for request error `e` (see `explain`); `secrets` are kept out of it."""
    failure = explain(e, op, bucket, key, configured)
    failure = dataclasses.replace(failure, cause=redact(failure.cause, secrets), hint=redact(failure.hint, secrets))
    return ObjectStoreError(op, path, bucket, key, failure, redact(f"{type(e).__name__}: {e}", secrets))


__all__ = ["Failure", "ObjectStoreError", "explain", "is_panic", "request_error"]
