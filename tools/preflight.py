"""What a command that writes checks before it opens the store writable.

Opening a store writable fences the process writing to it (its next write raises FencedError), so a
command refused for bad input must be refused before that: a put of an empty or reserved key, a TTL whose
expiry does not fit the format, a commit that this host's clock cannot stamp. Each check reads at most
the store's newest manifest (read-only: nobody is fenced) and raises the error the engine would raise
after the open, with the same message.

- `commit_floor(path)`: the earliest time a commit made from this process can get on the store.
- `check_put(key, value, ttl, floor)`, `check_delete(key)`: a row the engine would refuse.
"""

from __future__ import annotations

import time

from lsm.clock import I64_MAX
from lsm.errors import ClockError, NotADatabaseError


def commit_floor(path: str) -> int:
    """The earliest commit time a write from this process (on the system clock) can get on the store at
    `path`: the host's clock now, or the store's clock watermark if later (a new store: now).

    ClockError if the watermark lies after the host's clock: the engine would refuse every write from
    here ("clock went back") once it had opened the store, fencing its writer for nothing."""
    from lsm.inspect import latest_manifest

    now = time.time_ns() // 1_000_000
    try:
        watermark = latest_manifest(path)[1].clock_watermark
    except NotADatabaseError:
        return now  # no store yet (--create), or not one: the open says which
    if watermark > now:
        raise ClockError(
            f"{path}: the store's clock watermark {watermark} ms lies after this host's clock ({now} ms): "
            "a write from here would be refused (clock went back); nothing was written (a store whose "
            "watermark is in the future is mended by 'lsm repair-clock')"
        )
    return now


def check_put(key: bytes, value: bytes, ttl: int | None, floor: int) -> None:
    """The engine's checks of a put of `key` = `value` with `ttl`, committed at `floor` or later: a key
    that is empty, too long or reserved, a value too long, a TTL out of range, an expiry beyond the
    format's i64 (ValueError, as `DB.put` raises)."""
    from formats.row import check_value
    from lsm.options import check_ttl
    from lsm.syskeys import check_user_key

    check_user_key(key)
    check_value(value)
    if ttl is not None:
        check_ttl(ttl)
        if floor + ttl > I64_MAX:
            raise ValueError(
                f"expiry {floor} + ttl {ttl} = {floor + ttl} ms does not fit a signed 64-bit integer; "
                "nothing was written"
            )


def check_delete(key: bytes) -> None:
    """The engine's checks of a delete of `key` (ValueError, as `DB.delete` raises)."""
    from lsm.syskeys import check_user_key

    check_user_key(key)


__all__ = ["check_delete", "check_put", "commit_floor"]
