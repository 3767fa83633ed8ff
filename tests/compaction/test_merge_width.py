"""min_merge_width (compaction/scheduler.py): the fan-in of size-tiered merging. A window of runs merges
only when it holds at least w runs, and an L0 job takes runs along only when at least w - 1 fit; w = 2
is the scheduler as it was (pairs merge at once)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lsm
from compaction.scheduler import SchedulerOptions, pick_size_tiered
from formats.manifest import SortedRun
from tests.compaction._util import fake_sst


def run(rid: int, *sizes: int) -> SortedRun:
    return SortedRun(rid, tuple(fake_sst(s) for s in sizes))


def opts(w: int, **kw) -> SchedulerOptions:
    return SchedulerOptions(
        l0_compaction_threshold=4, size_ratio=2.0, max_merge_inputs=8, min_merge_width=w, **kw
    )


L0 = [fake_sst(100) for _ in range(4)]  # 400 bytes


def test_l0_job_leaves_a_lone_similar_run_alone_until_enough_gather():
    runs = [run(9, 400), run(8, 10_000)]
    assert pick_size_tiered(L0, runs, opts(2)).runs == (9,)  # as before: the pair merges
    plan = pick_size_tiered(L0, runs, opts(4))
    assert plan.l0 == tuple(e.name for e in L0) and plan.runs == () and not plan.is_last_run
    runs = [run(9, 400), run(8, 400), run(7, 400), run(6, 10_000)]
    plan = pick_size_tiered(L0, runs, opts(4))
    assert plan.runs == (9, 8, 7) and not plan.is_last_run  # three fit: L0 + 3 runs = 4 merge as one


def test_l0_job_on_an_empty_lsm_is_unaffected():
    plan = pick_size_tiered(L0, [], opts(4))
    assert plan.runs == () and plan.is_last_run


def test_run_windows_need_w_runs():
    three = [run(3, 400), run(2, 400), run(1, 400)]
    assert pick_size_tiered([], three, opts(3)).runs == (3, 2, 1)
    assert pick_size_tiered([], three, opts(4)) is None
    four = [run(4, 400)] + three
    assert pick_size_tiered([], four, opts(4)).runs == (4, 3, 2, 1)


def test_a_window_may_start_below_a_run_that_cannot_join():
    runs = [run(5, 10), run(4, 400), run(3, 400), run(2, 400), run(1, 400)]
    assert pick_size_tiered([], runs, opts(4)).runs == (4, 3, 2, 1)


@st.composite
def shapes(draw):
    l0 = [fake_sst(draw(st.integers(1, 5_000))) for _ in range(draw(st.integers(0, 7)))]
    runs = [run(100 - i, draw(st.integers(1, 50_000))) for i in range(draw(st.integers(0, 9)))]
    mm = draw(st.integers(2, 8))
    o = SchedulerOptions(
        l0_compaction_threshold=draw(st.integers(2, 5)),
        size_ratio=draw(st.sampled_from([1.0, 2.0, 4.0])),
        max_merge_inputs=mm,
        min_merge_width=draw(st.integers(2, mm)),
    )
    return l0, runs, o


@settings(max_examples=300, deadline=None)
@given(shapes())
def test_plans_respect_the_width_and_keep_the_shape_ordered(shape):
    l0, runs, o = shape
    plan = pick_size_tiered(l0, runs, o)
    if plan is None:
        assert len(l0) < o.l0_compaction_threshold
        return
    ids = [r.id for r in runs]
    taken = [ids.index(r) for r in plan.runs]
    assert taken == list(range(taken[0], taken[0] + len(taken))) if taken else True
    if plan.l0:
        assert not taken or (taken[0] == 0 and len(taken) >= o.min_merge_width - 1)
    else:
        assert o.min_merge_width <= len(taken) <= o.max_merge_inputs
    assert plan.is_last_run == ((bool(taken) and taken[-1] == len(runs) - 1) or not runs)
    # the width only ever removes merges: a plan under w is one under w = 2, or a plain L0 job
    base = pick_size_tiered(l0, runs, SchedulerOptions(**{**o.__dict__, "min_merge_width": 2}))
    if plan.l0:
        assert base.l0 == plan.l0 and (plan.runs == base.runs or plan.runs == ())


def test_jobs_below_the_wide_merge_size_merge_pairwise():
    runs = [run(9, 400), run(8, 10_000)]
    o = opts(4, wide_merge_min_bytes=10_000)
    assert pick_size_tiered(L0, runs, o).runs == (9,)  # 800 bytes of job: cheap, the pair merges
    three = [run(3, 400), run(2, 400), run(1, 400)]
    assert pick_size_tiered([], three, o).runs == (3, 2, 1)
    # all three (1200 bytes) would be a wide job of too few runs; the older pair alone is cheap
    assert pick_size_tiered([], three, opts(4, wide_merge_min_bytes=1_200)).runs == (2, 1)


def test_options_validate_the_width():
    with pytest.raises(ValueError, match="min_merge_width"):
        lsm.DbOptions(min_merge_width=1)
    with pytest.raises(ValueError, match="min_merge_width"):
        lsm.DbOptions(min_merge_width=5, max_merge_inputs=4)


def test_db_gathers_runs_before_merging(open_db, new_root):
    def l0_job(db, r):
        for n in range(2):
            for i in range(r * 7 + n, 300, 3):  # overlapping flushes: merged, never moved
                db.put(b"k%04d" % i, b"r%d" % r)
            db.flush()
        db.compact()

    small = dict(target_sst_bytes=1024)  # the width applies to jobs of at least target_sst_bytes
    with open_db(l0_compaction_threshold=2, min_merge_width=3, size_ratio=4.0, **small) as db:
        l0_job(db, 0)
        l0_job(db, 1)
        assert len(db.manifest.runs) == 2  # w = 3: a second run of the same size waits
        l0_job(db, 2)
        assert len(db.manifest.runs) == 1  # L0 + two runs: one merge
        assert dict(db.scan())[b"k0014"] == b"r2"
    with open_db(path=new_root("db2"), l0_compaction_threshold=2, min_merge_width=2, size_ratio=4.0, **small) as db:
        l0_job(db, 0)
        l0_job(db, 1)
        assert len(db.manifest.runs) == 1  # w = 2: the pair merges at once
