"""Run the `lsm` command with its stderr on a pseudo-terminal: what a user at a terminal sees.

Progress bars and lines are drawn only when stderr is a terminal; a test that pipes stderr sees none, so
these tests give the command a real pty (120 columns, as a terminal would report) and collect everything
written to it, while stdout stays a pipe (what `--json` consumers read)."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import termios
import threading

from tests.tools._cli import LSM_CMD, ROOT, Result, lsm_env


def run_lsm_tty(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> Result:
    """`lsm ARGS` with stderr on a pty of 120 columns; stdout piped. Result.err is the terminal's text.
    `env` adds variables to this process's environment."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    full = lsm_env(env)
    chunks: list[bytes] = []

    def read() -> None:  # drain the pty as it fills, or the command blocks on a full terminal buffer
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        p = subprocess.Popen(
            [*LSM_CMD, *map(str, args)], cwd=ROOT, env=full, stdout=subprocess.PIPE, stderr=slave, text=True
        )
        os.close(slave)
        out, _ = p.communicate(timeout=timeout)
    finally:
        reader.join(timeout=10)
        os.close(master)
    err = b"".join(chunks).decode(errors="replace")
    assert "Traceback" not in err, err
    return Result(p.returncode, out, err)
