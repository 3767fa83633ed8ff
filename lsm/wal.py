"""WAL segments on disk: ``wal/%020d.wal``, one per memtable, records as in `formats.wal`. (An
object-store database writes the same records as immutable WAL objects instead: `lsm.wal_object`.)

Failure rule: an append that fails (a short write, ENOSPC, EIO, a failed fdatasync) breaks the writer
for good. Nothing is ever appended after a record that may be partial: the half record stays the
segment's torn tail, which recovery drops, instead of becoming a damaged record in the middle of the log.

Fencing (see `lsm.db`): a writer holds a shared ``flock`` on its active segment whenever it checks the
fence and appends (`WalWriter.hold`, kept across writes and dropped as `lsm.wal_lock` describes); an
opener publishes its new writer epoch first and then takes an exclusive ``flock`` on each segment before
reading it (`replay_segment(..., exclusive=True)`). So an append the opener could miss is one whose fence
check ran after the publish, and that check fails.
"""

from __future__ import annotations

import fcntl
import os

from formats import fileio
from formats.errors import CorruptionError
from formats.storage import is_url, storage_for
from formats.wal import WalRecord, decode_segment
from lsm.fsutil import fsync_dir, numbered_files

SUFFIX = ".wal"
# DbOptions.wal_recovery_mode values (RocksDB's WALRecoveryMode, named for what they accept)
TOLERATE_TRUNCATED_TAIL = "tolerate_truncated_tail"  # default: only an incomplete last record is dropped
TOLERATE_CORRUPTED_TAIL = "tolerate_corrupted_tail"  # also a complete last record with a bad checksum
ABSOLUTE_CONSISTENCY = "absolute_consistency"  # any damaged or incomplete record is CorruptionError
POINT_IN_TIME = "point_in_time"  # replay up to the first damaged record; ignore all that follows
RECOVERY_MODES = (TOLERATE_TRUNCATED_TAIL, TOLERATE_CORRUPTED_TAIL, ABSOLUTE_CONSISTENCY, POINT_IN_TIME)


def segment_path(wal_dir: str, segment_id: int) -> str:
    """The file of WAL segment `segment_id` in `wal_dir`."""
    return os.path.join(wal_dir, f"{segment_id:020d}{SUFFIX}")


def list_segments(wal_dir: str) -> list[tuple[int, str]]:
    """(segment id, path) of every WAL segment in `wal_dir`, ascending."""
    return numbered_files(wal_dir, SUFFIX)


def live_segments(wal_dir: str, replay_from: int) -> list[tuple[int, str]]:
    """(segment id, path) of the WAL segments in `wal_dir` that are not yet flushed: those with id >=
    `replay_from` (a manifest's ``wal_replay_from``), ascending. Older segments may still lie there
    until the flush that covered them deletes them; nothing reads them."""
    return [(i, p) for i, p in list_segments(wal_dir) if i >= replay_from]


def read_segment(
    path: str, drop_corrupted_tail: bool = False, exclusive: bool = False
) -> tuple[list[WalRecord], int | None]:
    """Records of one segment and the offset of a torn tail (None when intact).

    exclusive=True first waits for an exclusive flock (no append of a writer that passed its fence
    check before we published our epoch is still in flight)."""
    return decode_segment(_read(path, exclusive), path, drop_corrupted_tail)


def _read(path: str, exclusive: bool) -> bytes:
    """A segment's bytes: a WAL object is immutable (no flock needed); a local segment file is read
    under an exclusive flock when asked."""
    if is_url(path):
        return storage_for(path).read(path)
    with open(path, "rb") as f:
        if exclusive:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        return f.read()


def replay_segment(path: str, mode: str, exclusive: bool = False) -> tuple[list[WalRecord], bool]:
    """Records of one segment under a recovery mode, and whether replay must stop after them
    (point_in_time found damage: later records and segments are not replayed)."""
    buf = _read(path, exclusive)
    try:
        records, torn = decode_segment(buf, path, mode == TOLERATE_CORRUPTED_TAIL)
    except CorruptionError as e:
        if mode != POINT_IN_TIME:
            raise
        records, _ = decode_segment(buf[: e.offset], path)
        return records, True
    if torn is not None and mode == ABSOLUTE_CONSISTENCY:
        raise CorruptionError(path, torn, "incomplete WAL record (wal_recovery_mode='absolute_consistency')")
    return records, torn is not None and mode == POINT_IN_TIME


class WalWriter:
    """Appends records to one segment. Each append is one write(2): it survives a killed process;
    `sync=True` also fsyncs, which makes it survive a machine crash."""

    def __init__(self, wal_dir: str, segment_id: int) -> None:
        self.segment_id = segment_id
        self.path = segment_path(wal_dir, segment_id)
        self.broken: OSError | None = None  # the error that broke this writer (see module docstring)
        self.held = False  # the shared flock of the fencing protocol
        # O_EXCL: a segment belongs to exactly one handle; finding it already there means another
        # handle (the one that fenced us, or one we fenced) created it, and two writers must never
        # append to one file
        self.fd = fileio.create(self.path, os.O_WRONLY | os.O_EXCL | os.O_APPEND)
        try:
            fsync_dir(wal_dir)
        except OSError:
            os.close(self.fd)
            self.fd = -1
            raise

    def hold(self) -> None:
        """Take the shared flock (it may wait for an opener that is reading this segment)."""
        fcntl.flock(self.fd, fcntl.LOCK_SH)
        self.held = True

    def release(self) -> None:
        """Drop the shared flock if this writer holds it."""
        if self.held:
            self.held = False
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def append(self, record: bytes, sync: bool = False, seq: int = 0) -> None:
        """Append one encoded record (of commit `seq`) with one write(2); fdatasync it too when `sync`.
        Any failure breaks the writer: later appends raise the same error (nothing follows a possibly
        partial record)."""
        if self.broken is not None:
            raise self.broken
        try:
            fileio.write(self.fd, record, self.path)
            if sync:
                fileio.fdatasync(self.fd, self.path)
        except OSError as e:
            self.broken = e
            raise

    def sync(self) -> None:
        """fdatasync everything appended so far (a failure breaks the writer, as in `append`)."""
        if self.broken is not None:
            raise self.broken
        try:
            fileio.fdatasync(self.fd, self.path)
        except OSError as e:
            self.broken = e
            raise

    def close(self) -> None:
        """Close the segment file; idempotent."""
        if self.fd >= 0:
            os.close(self.fd)  # drops the flock too
            self.fd = -1
        self.held = False
