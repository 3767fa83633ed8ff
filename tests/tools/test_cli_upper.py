"""`lsm remap --as-of` and `lsm scan --as-of` for a time the store is not complete for yet: one line,
exit 2, and the same question below the upper is answered (real subprocesses on a store `lsm ingest`
wrote)."""

from __future__ import annotations

from lsm.sources import LogWriter
from tests.tools._cli import one_line_error, run_lsm


def test_a_time_at_or_after_the_upper_is_refused_in_one_line(tmp_path) -> None:
    log, db = tmp_path / "log", tmp_path / "db"
    with LogWriter(log) as w:
        for i in range(5):
            w.append(0, b"k%d" % i, b"v")
    assert run_lsm("ingest", db, log, "--name", "ev").code == 0
    line = one_line_error(run_lsm("remap", db, "ev", "--as-of", "2099-01-01T00:00:00Z"), 2)
    assert "remap 'ev': cannot answer as of 4070908800000 ms yet: the remap is complete for times before" in line
    line = one_line_error(
        run_lsm("scan", db, "--as-of", "2099-01-01T00:00:00Z", "--history-retention", 10**12), 2
    )
    assert "cannot read as of 4070908800000 ms yet: the store is complete for times before" in line
    ts = run_lsm("remap", db, "ev", "--json").json()["rows"][-1]["ts"]
    # the writer's close recorded its clock after the flush, a later time than the batch's
    b = run_lsm("remap", db, "ev", "--as-of", ts, "--json").json()
    assert b["binding"]["frontier"] == {"0": 5}
    scan = run_lsm("scan", db, "--as-of", ts, "--history-retention", 10**12, "--json").json()
    assert len(scan) == 5
