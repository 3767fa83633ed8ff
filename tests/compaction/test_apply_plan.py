"""apply_plan (compaction/scheduler.py): the manifest edit a finished compaction job commits, on plain
manifests (no DB, no files).

Rules under test: L0 inputs leave L0 and the output becomes a new run where the newest merged run was
(or at the top); merged adjacent runs are replaced by one run at their position; a partial periodic
rewrite replaces some SSTs of one run in place (key order kept, the run dropped if nothing remains);
inputs that are no longer in the manifest raise CompactionError; the job's history_floor is folded in
(never lowered).
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.filter import Reason
from compaction.scheduler import Plan, apply_plan, pick_full
from formats.errors import CompactionError
from formats.manifest import Manifest, SortedRun, SstEntry
from lsm.errors import CompactionError as LsmCompactionError
from tests.compaction._util import fake_sst


def keyed(first: bytes, last: bytes, size: int = 100) -> SstEntry:
    e = fake_sst(size)
    return SstEntry(e.name, dataclasses.replace(e.info, first_key=first, last_key=last))


def names(entries) -> list[str]:
    return [e.name for e in entries]


def test_l0_becomes_a_new_run_on_top():
    l0 = (fake_sst(), fake_sst(), fake_sst())  # newest first
    old = SortedRun(1, (fake_sst(1000),))
    m = Manifest(l0=l0, runs=(old,), next_run_id=2)
    out = (fake_sst(250),)
    plan = Plan(Reason.SIZE_TIERED, l0=tuple(e.name for e in l0[1:]))  # the two oldest
    new = apply_plan(m, plan, out, tick=5)
    assert names(new.l0) == [l0[0].name]  # the newest L0 SST stays
    assert [r.id for r in new.runs] == [2, 1]  # the output run sits above the older run
    assert new.runs[0].ssts == out
    assert new.next_run_id == 3
    assert new.runs[1] is old


def test_merge_of_adjacent_runs_replaces_them_in_place():
    r1, r2, r3, r4 = (SortedRun(i, (fake_sst(100 * i),)) for i in (4, 3, 2, 1))  # newest first
    m = Manifest(runs=(r1, r2, r3, r4), next_run_id=5)
    out = (fake_sst(500), fake_sst(500))
    new = apply_plan(m, Plan(Reason.SIZE_TIERED, runs=(3, 2)), out, tick=0)
    assert [r.id for r in new.runs] == [4, 5, 1]
    assert new.runs[1].ssts == out
    assert new.next_run_id == 6


def test_a_job_with_no_output_removes_its_inputs():
    """Everything expired or deleted: no new run, and the run id is not consumed."""
    r1, r2 = SortedRun(2, (fake_sst(),)), SortedRun(1, (fake_sst(),))
    m = Manifest(l0=(fake_sst(),), runs=(r1, r2), next_run_id=3)
    new = apply_plan(m, pick_full(m.l0, m.runs), (), tick=0)
    assert new.l0 == () and new.runs == ()
    assert new.next_run_id == 3


def test_full_compaction_leaves_one_run():
    m = Manifest(l0=(fake_sst(), fake_sst()), runs=(SortedRun(1, (fake_sst(),)),), next_run_id=2)
    out = (fake_sst(),)
    new = apply_plan(m, pick_full(m.l0, m.runs), out, tick=0)
    assert new.l0 == ()
    assert new.runs == (SortedRun(2, out),)


def test_partial_periodic_rewrite_keeps_the_run_in_key_order():
    a, b, c, d = keyed(b"a", b"c"), keyed(b"d", b"f"), keyed(b"g", b"i"), keyed(b"j", b"l")
    top = SortedRun(2, (fake_sst(),))
    bottom = SortedRun(1, (a, b, c, d))
    m = Manifest(runs=(top, bottom), next_run_id=3)
    rewritten = (keyed(b"d", b"e"), keyed(b"f", b"i"))  # b and c rewritten into two new SSTs
    plan = Plan(Reason.PERIODIC, partial=(1, (b.name, c.name)), is_last_run=True)
    new = apply_plan(m, plan, rewritten, tick=0)
    assert new.runs[0] is top
    assert new.runs[1].id == 1  # rewritten in place: same run, same id
    assert names(new.runs[1].ssts) == [a.name, rewritten[0].name, rewritten[1].name, d.name]
    assert new.next_run_id == 3


def test_partial_rewrite_that_empties_the_run_drops_it():
    only = keyed(b"a", b"z")
    m = Manifest(runs=(SortedRun(2, (fake_sst(),)), SortedRun(1, (only,))), next_run_id=3)
    new = apply_plan(m, Plan(Reason.PERIODIC, partial=(1, (only.name,)), is_last_run=True), (), tick=0)
    assert [r.id for r in new.runs] == [2]


@pytest.mark.parametrize(
    "plan",
    [
        Plan(Reason.SIZE_TIERED, l0=("gone.sst",)),
        Plan(Reason.SIZE_TIERED, runs=(99,)),
        Plan(Reason.PERIODIC, partial=(99, ("x.sst",)), is_last_run=True),
        Plan(Reason.PERIODIC, partial=(1, ("rewritten-meanwhile.sst",)), is_last_run=True),
    ],
    ids=["l0-sst-gone", "run-gone", "partial-run-gone", "partial-sst-gone"],
)
def test_inputs_gone_raise_compaction_error_and_change_nothing(plan):
    m = Manifest(l0=(fake_sst(),), runs=(SortedRun(1, (fake_sst(),)),), next_run_id=2)
    before = m.replace()
    with pytest.raises(CompactionError, match="inputs changed"):
        apply_plan(m, plan, (fake_sst(),), tick=0)
    assert m == before
    assert CompactionError is LsmCompactionError  # one class, importable from lsm.errors too


def test_history_floor_is_folded_in_and_never_lowered():
    m = Manifest(l0=(fake_sst(),), history_floor=40)
    plan = Plan(Reason.SIZE_TIERED, l0=(m.l0[0].name,))
    assert apply_plan(m, plan, (fake_sst(),), tick=0, history_floor=70).history_floor == 70
    assert apply_plan(m, plan, (fake_sst(),), tick=0, history_floor=10).history_floor == 40
    assert apply_plan(m, plan, (fake_sst(),), tick=0).history_floor == 40


@settings(max_examples=60, deadline=None)
@given(
    n_l0=st.integers(0, 4),
    n_runs=st.integers(0, 5),
    data=st.data(),
)
def test_every_input_leaves_and_every_output_arrives(n_l0, n_runs, data):
    """Invariant: after apply_plan the manifest holds exactly (before - inputs) + outputs, and the runs
    keep their relative order."""
    l0 = tuple(fake_sst() for _ in range(n_l0))
    runs = tuple(SortedRun(n_runs - i, (fake_sst(),)) for i in range(n_runs))
    m = Manifest(l0=l0, runs=runs, next_run_id=n_runs + 1)
    take_l0 = data.draw(st.integers(0, n_l0))
    lo = data.draw(st.integers(0, n_runs))
    hi = data.draw(st.integers(lo, n_runs))
    plan = Plan(Reason.SIZE_TIERED, tuple(e.name for e in l0[n_l0 - take_l0 :]), tuple(r.id for r in runs[lo:hi]))
    outputs = tuple(fake_sst() for _ in range(data.draw(st.integers(0, 2))))
    new = apply_plan(m, plan, outputs, tick=0)
    inputs = {e.name for s in plan.input_entries(m.l0, m.runs) for e in s}
    assert {e.name for e in new.all_ssts()} == ({e.name for e in m.all_ssts()} - inputs) | {
        e.name for e in outputs
    }
    kept = [r.id for r in new.runs if r.id in {x.id for x in runs}]
    assert kept == [r.id for r in runs if r.id not in plan.runs]
