"""A fault-injecting HTTP proxy in front of the test S3 server (tests/s3server.py).

The store talks to the proxy exactly as it would to S3 (``DbOptions(object_store_options=
s3_server.options(endpoint=proxy.endpoint))``); the proxy forwards every request to the real server and
fails the ones a rule picks, the ways S3 and the network fail:

* ``"500"``: an InternalError response, the request never reaches the server;
* ``"503"``: a 503 with S3's SlowDown body (throttling), the request never reaches the server;
* ``"reset"``: the connection is reset without a response, the request never reaches the server;
* ``"404"``: S3's NoSuchBucket (the bucket is gone), the request never reaches the server;
* ``"hang"``: no response at all, the connection left open (a stalled server), until the proxy closes;
* ``"lost"``: the request IS forwarded (a PUT lands), then the connection is reset instead of sending
  the server's response: the client cannot tell whether its request took effect;
* ``"slow"``: the request is held ``FaultProxy.slow``'s seconds, then forwarded as it is (a slow store or
  network).

A rule matches by method and a substring of the object key (the URL path and query, decoded: a
listing is ``/<bucket>?list-type=2&prefix=<prefix>``), skips its first
``nth - 1`` matches and then fails ``count`` of them (``count=None``: every one from then on), or with
``every=k`` fails every k-th match (a repeat after a fault is the next match, so it gets through).
"""

from __future__ import annotations

import dataclasses
import http.client
import socket
import struct
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ACTIONS = ("500", "503", "404", "reset", "hang", "lost", "slow")
SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message><RequestId>fault</RequestId></Error>"
)
INTERNAL = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
    b"<Message>We encountered an internal error. Please try again.</Message><RequestId>fault</RequestId></Error>"
)
NO_SUCH_BUCKET = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchBucket</Code>'
    b"<Message>The specified bucket does not exist</Message><RequestId>fault</RequestId></Error>"
)
ERRORS = {"500": (500, INTERNAL), "503": (503, SLOW_DOWN), "404": (404, NO_SUCH_BUCKET)}
# headers that describe one hop's connection, not the message (RFC 9110 7.6.1)
HOP_HEADERS = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


@dataclasses.dataclass
class Rule:
    """Fail requests with `action` (one of `ACTIONS`): those of `method` (None: any) whose key contains
    `key`, from the `nth` match on, `count` of them (None: all), or every `every`-th match.
    `seen`/`failed` count matches/faults."""

    action: str
    method: str | None = None
    key: str = ""
    nth: int = 1
    count: int | None = 1
    every: int | None = None
    seen: int = 0
    failed: int = 0

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"action must be one of {ACTIONS}, got {self.action!r}")

    def take(self, method: str, key: str) -> bool:
        """Whether this request is one to fail (counts it)."""
        if (self.method is not None and method != self.method) or self.key not in key:
            return False
        self.seen += 1
        if self.every is not None:
            if self.seen % self.every:
                return False
        elif self.seen < self.nth or (self.count is not None and self.failed >= self.count):
            return False
        self.failed += 1
        return True


@dataclasses.dataclass(frozen=True)
class Seen:
    """One request through the proxy and what was done to it ("forward" or an action)."""

    method: str
    key: str
    action: str


class FaultProxy:
    """The proxy: `endpoint` for the store's options, `fail(...)` to add a rule, `log` of requests."""

    def __init__(self, upstream: str) -> None:
        u = urllib.parse.urlsplit(upstream)
        self.upstream = (u.hostname or "127.0.0.1", u.port or 80)
        self.rules: list[Rule] = []
        self.log: list[Seen] = []
        self._lock = threading.Lock()
        self.closing = threading.Event()  # wakes the handlers of "hang" requests
        self.slow_s = 0.0  # how long a "slow" request is held (`slow`)
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._server = _Server(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        # shutdown() waits for the loop to look again: a short poll makes close() quick (the default
        # 0.5 s was most of a fault test's teardown)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.01,), name="s3-fault-proxy",
                                        daemon=True)
        self._thread.start()

    def fail(self, action: str, method: str | None = None, key: str = "", nth: int = 1,
             count: int | None = 1, every: int | None = None) -> Rule:
        """Add a rule (see `Rule`); the first rule that takes a request decides its fate."""
        rule = Rule(action, method, key, nth, count, every)
        with self._lock:
            self.rules.append(rule)
        return rule

    def slow(self, delay_s: float, method: str | None = None, key: str = "", nth: int = 1,
             count: int | None = 1) -> Rule:
        """Hold matching requests `delay_s` seconds before forwarding them (see `Rule` for the rest); every
        "slow" rule holds its requests that long, the last one set."""
        self.slow_s = delay_s
        return self.fail("slow", method, key, nth, count)

    def unknowable(self, key: str, landed: bool, method: str | None = None) -> None:
        """Make the next PUT of `key` an outcome nobody can learn: it lands if `landed` (its response
        lost) or not at all, and every later request of `key` (of `method`, None: any) is reset."""
        if landed:
            self.fail("lost", method="PUT", key=key)
        self.fail("reset", method=method, key=key, count=None)

    def heal(self) -> None:
        """Drop every rule: forward everything from now on."""
        with self._lock:
            self.rules.clear()

    def requests(self, method: str | None = None, key: str = "", action: str | None = None) -> list[Seen]:
        """The logged requests matching `method`, a key substring and `action`."""
        with self._lock:
            return [s for s in self.log if (method is None or s.method == method) and key in s.key
                    and (action is None or s.action == action)]

    def decide(self, method: str, key: str) -> str:
        """The fate of one request: "forward" or the action of the first rule taking it (logged)."""
        with self._lock:
            action = next((r.action for r in self.rules if r.take(method, key)), "forward")
            self.log.append(Seen(method, key, action))
            return action

    def close(self) -> None:
        """Stop serving."""
        self.closing.set()
        self._server.shutdown()
        self._server.server_close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that gave up on a request (an aborted upload, a closed store) is no error here."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the store's HTTP client expects
    # a response goes out as two writes (headers, then body): with Nagle's algorithm on, the body waits
    # for the client's delayed ACK of the headers, ~40 ms on every request through the proxy
    disable_nagle_algorithm = True
    owner: FaultProxy

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        """Quiet: the proxy's own `log` records what matters."""

    def _relay(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        key = urllib.parse.unquote(self.path)
        action = self.owner.decide(self.command, key)
        if action == "slow":
            time.sleep(self.owner.slow_s)
        if action == "reset":
            self._reset()
            return
        if action == "hang":
            self.owner.closing.wait()
            self._reset()
            return
        if action in ERRORS:
            status, text = ERRORS[action]
            # a HEAD's error has its length but no body, as S3 sends it
            self._respond(status, [("Content-Type", "application/xml"), ("Content-Length", str(len(text)))],
                          text, head=self.command == "HEAD")
            return
        conn = http.client.HTTPConnection(*self.owner.upstream, timeout=30)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
            conn.request(self.command, self.path, body=body if n or self.command in ("PUT", "POST") else None,
                         headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            if action == "lost":  # it landed; the client never hears so
                self._reset()
                return
            head = self.command == "HEAD"  # its Content-Length is the object's, with no body
            drop = HOP_HEADERS if head else HOP_HEADERS | {"content-length"}
            out = [(k, v) for k, v in resp.getheaders() if k.lower() not in drop]
            self._respond(resp.status, out, data, head=head)
        finally:
            conn.close()

    def _respond(self, status: int, headers: list[tuple[str, str]], body: bytes, head: bool = False) -> None:
        self.send_response_only(status)
        for k, v in headers:
            self.send_header(k, v)
        if not head:  # a HEAD response carries the Content-Length of what a GET would send
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)
        self.wfile.flush()

    def _reset(self) -> None:
        """Close the connection with a TCP RST (linger 0) and no response."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay
