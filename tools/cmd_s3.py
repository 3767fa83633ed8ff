"""``lsm s3 serve``: a local S3 server for trying lsm-sim on ``s3://`` and for its tests, in one step.

It runs moto's S3 server (``moto.server.ThreadedMotoServer``, the one the tests use) on 127.0.0.1,
creates the buckets named by ``--bucket`` (default ``lsm``) and then either

- prints the environment lines that point a shell (``lsm``, a program using ``lsm.DB.open``, Spark) at
  it, ``export AWS_ENDPOINT_URL=http://127.0.0.1:9000`` and the others of `ENV`, on stdout, and serves
  until Ctrl-C or SIGTERM, which exit 0; or
- with a command after ``--``, runs that command with those variables set and stops the server when it
  ends, exiting with its status (``lsm s3 serve -- lsm put --create s3://lsm/db k v``).

The server keeps everything in memory: its buckets and objects are gone once it stops. moto is an
optional dependency (``pip install 'lsm-sim[s3]'``); without it the command is one line saying so.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from typing import Any

from formats.errors import LsmError
from tools import render

HOST = "127.0.0.1"
DEFAULT_PORT = 9000
DEFAULT_BUCKET = "lsm"
INSTALL_HINT = "lsm s3 serve needs moto's server: pip install 'lsm-sim[s3]'"
# what a client needs besides the endpoint; moto accepts any credentials, these are its documented ones
ENV = {"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
       "AWS_ALLOW_HTTP": "true"}


class S3ServeError(LsmError):
    """The local S3 server cannot start: moto is not installed, the port is taken, a bad bucket name."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("s3", help="a local S3 server for s3:// databases (moto): serve")
    s = p.add_subparsers(dest="s3_command", metavar="COMMAND", required=True)
    serve = s.add_parser(
        "serve",
        help="run a local S3 server with a bucket, print the variables that point lsm at it",
        description="Start moto's S3 server on 127.0.0.1 (everything in memory), create the buckets, then "
        "print the environment lines to export (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, "
        "AWS_SECRET_ACCESS_KEY, AWS_ALLOW_HTTP) and serve until Ctrl-C or SIGTERM (exit 0). With a "
        "command after --, run it with those variables set instead, stop the server when it ends and exit "
        "with its status. Needs the s3 extra: pip install 'lsm-sim[s3]'.",
    )
    serve.add_argument("--port", type=render.int_arg(0, 65535), default=DEFAULT_PORT, metavar="N",
                       help=f"the port to listen on ({DEFAULT_PORT}; 0: any free port, printed)")
    serve.add_argument("--bucket", action="append", metavar="NAME",
                       help=f"a bucket to create (repeatable; default {DEFAULT_BUCKET})")
    # not "command": the top-level parser keeps the command's name under that name
    serve.add_argument("run", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                       help="run this command against the server instead of serving until Ctrl-C")
    serve.set_defaults(func=cmd_serve)


def _server_class() -> Any:
    try:
        from moto.server import ThreadedMotoServer
    except ImportError:
        raise S3ServeError(INSTALL_HINT) from None
    return ThreadedMotoServer


def _check_port(port: int) -> None:
    """Refuse a port something listens on: moto's server thread would die there and leave its start
    waiting for good. Bound as the server binds it (SO_REUSEADDR), so a port in TIME_WAIT is free."""
    if port == 0:
        return
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError as e:
            raise S3ServeError(f"cannot listen on {HOST}:{port} ({e.strerror}): pick another port with "
                               "--port N (0: any free one)") from None


def start(port: int, buckets: list[str]) -> tuple[Any, dict[str, str]]:
    """Start moto's server on `port` of 127.0.0.1 with `buckets`; (server, its environment)."""
    from storage.objstore_config import check_root

    for b in buckets:
        check_root(f"s3://{b}")
    server_class = _server_class()
    _check_port(port)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    server = server_class(ip_address=HOST, port=port, verbose=False)
    server.start()
    host, real_port = server.get_host_and_port()
    endpoint = f"http://{host}:{real_port}"
    try:
        for b in buckets:  # moto takes an unsigned CreateBucket
            urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{b}", method="PUT"), timeout=10).read()
    except BaseException:
        server.stop()
        raise
    return server, {"AWS_ENDPOINT_URL": endpoint, **ENV}


def cmd_serve(args: argparse.Namespace) -> int:
    command = args.run[1:] if args.run[:1] == ["--"] else args.run
    buckets = args.bucket or [DEFAULT_BUCKET]
    server, env = start(args.port, buckets)
    try:
        if command:
            return subprocess.run(command, env=os.environ | env).returncode
        return _serve(env, buckets)
    finally:
        server.stop()


def _serve(env: dict[str, str], buckets: list[str]) -> int:
    """Print the environment lines, then wait for SIGINT or SIGTERM."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for k, v in env.items():
            sys.stdout.write(f"export {k}={v}\n")
        sys.stdout.flush()
        names = ", ".join(f"s3://{b}" for b in buckets)
        sys.stderr.write(f"lsm: serving {names} at {env['AWS_ENDPOINT_URL']} (in memory) until Ctrl-C\n")
        sys.stderr.flush()
        while not stop.wait(1.0):
            pass
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return 0


__all__ = ["ENV", "S3ServeError", "cmd_serve", "register", "start"]
