"""A real full disk (issue 12 item 1): fill a small tmpfs while writing, crash, give the space back,
reopen, and check every acknowledged write. Needs permission to mount a tmpfs (root in a VM); skipped with
the reason otherwise."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess

import pytest

import lsm
from tests.lsm.test_fault_injection import crash

T0 = 1_700_000_000_000


@pytest.fixture
def small_tmpfs(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)], capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("no mount command")
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def resize(mnt, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mnt)], check=True)


@pytest.mark.parametrize("sync", [False, True], ids=["nosync", "sync"])
def test_filling_a_real_disk_loses_no_acknowledged_write(small_tmpfs, sync):
    trials = 0
    for value_bytes in (100, 700, 3000, 9000):
        resize(small_tmpfs, "512k")
        path = small_tmpfs / f"db-{value_bytes}"
        db = lsm.DB.open(path, lsm.DbOptions(clock=lsm.ManualClock(T0), memtable_bytes=32 << 10,
                                             background_compaction=False))
        acked: dict[bytes, int] = {}
        failure = None
        for i in range(100_000):
            key = b"k%06d" % i
            try:
                acked[key] = db.put(key, b"%06d" % i * (value_bytes // 6), options=lsm.WriteOptions(sync=sync))
            except lsm.DbFailedError as e:
                failure = e
                break
        assert failure is not None, "the disk never filled"
        assert failure.__cause__.errno == errno.ENOSPC and failure.file, failure
        with pytest.raises(lsm.DbFailedError):  # refused from then on, even for a tiny write
            db.put(b"z", b"")
        assert db.get(next(iter(acked))) is not None  # reads go on
        crash(db)
        resize(small_tmpfs, "64m")  # space comes back
        with lsm.DB.open(path, lsm.DbOptions(clock=lsm.ManualClock(T0), background_compaction=False)) as db2:
            for key, seq in acked.items():
                e = db2.get_entry(key)
                assert e is not None and e.seq == seq, (value_bytes, key, seq, e)
            assert db2.put(b"after", b"x") > max(acked.values())
        assert not [n for n in os.listdir(path / "manifest") if n.startswith(".tmp-")]
        shutil.rmtree(path)
        trials += 1
    assert trials == 4
