"""Size-tiered picking (compaction/scheduler.py), on LSM shapes built from SsTableInfo records.

L0 and the runs are newest first, as in the manifest. The rules under test: L0 becomes a new run at the
top once it holds ``l0_compaction_threshold`` SSTs (taking along the newest runs no bigger than
``size_ratio`` x the job so far); otherwise adjacent runs of similar size merge; a plan takes the oldest
L0 SSTs and adjacent runs only, and is_last_run holds exactly when the output is the oldest run.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction import scheduler
from compaction.filter import Reason
from compaction.scheduler import SchedulerOptions, pick, pick_full, pick_size_tiered
from formats.manifest import SortedRun
from tests.compaction._util import fake_sst

sst = fake_sst


def run(rid: int, *sizes: int) -> SortedRun:
    return SortedRun(rid, tuple(sst(s) for s in sizes))


OPTS = SchedulerOptions(l0_compaction_threshold=4, size_ratio=2.0, max_merge_inputs=8)


def test_nothing_due_on_empty_lsm():
    assert pick([], [], 0, OPTS) is None
    assert pick_full([], []) is None


def test_l0_below_threshold_is_left_alone():
    l0 = [sst(100) for _ in range(3)]
    assert pick_size_tiered(l0, [], OPTS) is None


def test_l0_at_threshold_becomes_new_run_on_empty_lsm():
    l0 = [sst(100) for _ in range(4)]
    plan = pick_size_tiered(l0, [], OPTS)
    assert plan is not None
    assert plan.reason is Reason.SIZE_TIERED
    assert plan.l0 == tuple(e.name for e in l0)
    assert plan.runs == ()
    assert plan.is_last_run  # no run beneath: the new run is the oldest


def test_l0_threshold_is_configurable():
    l0 = [sst(100) for _ in range(2)]
    assert pick_size_tiered(l0, [], OPTS) is None
    assert pick_size_tiered(l0, [], SchedulerOptions(l0_compaction_threshold=2)) is not None


def test_l0_job_above_a_big_run_is_not_last_run():
    l0 = [sst(100) for _ in range(4)]  # 400 bytes
    runs = [run(1, 10_000)]
    plan = pick_size_tiered(l0, runs, OPTS)
    assert plan.runs == ()  # 10_000 > 2 x 400: the big run stays
    assert not plan.is_last_run


def test_l0_job_takes_newest_small_runs_along():
    l0 = [sst(100) for _ in range(4)]  # 400
    runs = [run(7, 500), run(6, 1_500), run(5, 100_000)]  # 500 <= 800; 1500 <= 2*900; 100k too big
    plan = pick_size_tiered(l0, runs, OPTS)
    assert plan.runs == (7, 6)
    assert not plan.is_last_run
    runs = [run(7, 500), run(6, 1_500)]
    plan = pick_size_tiered(l0, runs, OPTS)
    assert plan.runs == (7, 6) and plan.is_last_run


def test_l0_job_respects_cap_on_runs():
    l0 = [sst(1_000) for _ in range(4)]
    runs = [run(10 - i, 10) for i in range(6)]
    plan = pick_size_tiered(l0, runs, SchedulerOptions(l0_compaction_threshold=4, max_merge_inputs=3))
    assert plan.runs == (10, 9, 8)
    assert not plan.is_last_run


def test_similar_adjacent_runs_merge():
    runs = [run(3, 1_000), run(2, 1_500), run(1, 100_000)]
    plan = pick_size_tiered([], runs, OPTS)
    assert plan is not None and plan.reason is Reason.SIZE_TIERED
    assert plan.l0 == ()
    assert plan.runs == (3, 2)
    assert not plan.is_last_run


def test_runs_of_geometric_sizes_do_not_merge():
    runs = [run(3, 1_000), run(2, 2_500), run(1, 6_000)]  # each more than 2 x everything above it
    assert pick_size_tiered([], runs, OPTS) is None


def test_size_ratio_decides_similarity():
    runs = [run(2, 1_000), run(1, 2_500)]
    assert pick_size_tiered([], runs, SchedulerOptions(size_ratio=2.0)) is None
    plan = pick_size_tiered([], runs, SchedulerOptions(size_ratio=3.0))
    assert plan.runs == (2, 1) and plan.is_last_run


def test_window_grows_while_older_run_is_small_enough():
    runs = [run(4, 100), run(3, 150), run(2, 400), run(1, 10_000)]  # 150<=200, 400<=500, 10k>1300
    plan = pick_size_tiered([], runs, OPTS)
    assert plan.runs == (4, 3, 2)
    assert not plan.is_last_run


def test_window_can_start_below_the_newest_run():
    runs = [run(4, 10), run(3, 1_000), run(2, 1_200), run(1, 1_500)]  # 1000 > 2*10: start at run 3
    plan = pick_size_tiered([], runs, OPTS)
    assert plan.runs == (3, 2, 1)
    assert plan.is_last_run


def test_run_merge_respects_cap_on_inputs():
    runs = [run(10 - i, 100) for i in range(6)]
    plan = pick_size_tiered([], runs, SchedulerOptions(max_merge_inputs=4))
    assert plan.runs == (10, 9, 8, 7)
    assert not plan.is_last_run


def test_l0_is_checked_before_runs():
    l0 = [sst(10_000) for _ in range(4)]
    runs = [run(2, 100), run(1, 100)]
    plan = pick(l0, runs, 0, OPTS)
    assert plan.l0 == tuple(e.name for e in l0)


def test_pick_full_takes_everything_into_the_oldest_run():
    l0 = [sst(1)]
    runs = [run(2, 5), run(1, 50)]
    plan = pick_full(l0, runs)
    assert plan.reason is Reason.MANUAL
    assert plan.l0 == (l0[0].name,) and plan.runs == (2, 1) and plan.is_last_run


def test_input_entries_are_sources_newest_first():
    l0 = [sst(1), sst(2), sst(3)]
    runs = [run(2, 5, 6), run(1, 50)]
    plan = scheduler.Plan(Reason.MANUAL, (l0[1].name, l0[2].name), (2,), None, False)
    sources = plan.input_entries(l0, runs)
    assert [[e.name for e in s] for s in sources] == [[l0[1].name], [l0[2].name], [e.name for e in runs[0].ssts]]


@st.composite
def shapes(draw):
    n_l0 = draw(st.integers(0, 7))
    l0 = [sst(draw(st.integers(1, 5_000))) for _ in range(n_l0)]
    n_runs = draw(st.integers(0, 7))
    runs = [run(100 - i, *draw(st.lists(st.integers(1, 50_000), min_size=1, max_size=3))) for i in range(n_runs)]
    opts = SchedulerOptions(
        l0_compaction_threshold=draw(st.integers(2, 5)),
        size_ratio=draw(st.sampled_from([1.0, 1.5, 2.0, 4.0])),
        max_merge_inputs=draw(st.integers(2, 5)),
    )
    return l0, runs, opts


@settings(max_examples=300, deadline=None)
@given(shapes())
def test_plans_take_oldest_l0_and_adjacent_runs(shape):
    """Any plan keeps the shape ordered: oldest L0 SSTs, a contiguous window of runs starting right
    below them when L0 is taken, and is_last_run exactly when the window reaches the oldest run."""
    l0, runs, opts = shape
    plan = pick_size_tiered(l0, runs, opts)
    if plan is None:
        assert len(l0) < opts.l0_compaction_threshold
        return
    names = [e.name for e in l0]
    if plan.l0:
        assert len(l0) >= opts.l0_compaction_threshold
        assert list(plan.l0) == names[len(names) - len(plan.l0) :]  # a suffix: the oldest ones
    ids = [r.id for r in runs]
    taken = [ids.index(r) for r in plan.runs]
    assert taken == list(range(taken[0], taken[0] + len(taken))) if taken else True  # adjacent
    if plan.l0 and taken:
        assert taken[0] == 0  # L0 output goes on top, so only the newest runs may join it
    if not plan.l0:
        assert 2 <= len(taken) <= opts.max_merge_inputs
    else:
        assert len(taken) <= opts.max_merge_inputs
    reaches_bottom = (taken and taken[-1] == len(runs) - 1) or (not runs)
    assert plan.is_last_run == bool(reaches_bottom)
