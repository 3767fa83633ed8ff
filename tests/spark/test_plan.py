"""The driver's side of a Spark compaction: key ranges from block indexes, and the output checks.

`plan_ranges` and `check_outputs` run without Spark; one test runs a job to see the task count honoured.
"""

from __future__ import annotations

import bisect
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction.filter import Reason
from compaction.merge import CompactionJob, OutputSpec, run_job
from compaction.spark import SparkExecutor, SparkJobError, check_outputs, observe_jobs, plan_ranges
from formats.sst import write_sst
from storage.ssts import open_sst
from tests.spark._util import task_marks


def make_inputs(
    directory: str, seed: int, n_ssts: int = 3, rows: int = 300, block_bytes: int = 128
) -> CompactionJob:
    """Overlapping SSTs (newest first) with several versions per key, as L0 would hold them."""
    rng = random.Random(seed)
    os.makedirs(os.path.join(directory, "out"), exist_ok=True)
    paths, infos = [], []
    seq = 10_000
    for i in range(n_ssts):
        keys = sorted({b"k%05d" % rng.randrange(rows * 2) for _ in range(rows)})
        data = []
        for k in keys:
            for _ in range(rng.choice([1, 1, 2, 3])):  # versions, newest first
                data.append((k, seq, 1_000 + seq, None, b"x" * rng.randrange(1, 60)))
                seq -= 1
        path = os.path.join(directory, f"in-{i}.sst")
        infos.append(write_sst(path, data, block_bytes=block_bytes, sync=False))
        paths.append(path)
    return CompactionJob(
        sources=tuple((p,) for p in paths),
        inputs=tuple(infos),
        is_last_run=True,
        tick=5_000,
        reason=Reason.MANUAL,
        output=OutputSpec(
            directory=os.path.join(directory, "out"), prefix="job", block_bytes=block_bytes, sync=False
        ),
    )


def blocks_of(job: CompactionJob) -> list[tuple[bytes, bytes, int]]:
    out = []
    for paths in job.sources:
        for p in paths:
            with open_sst(p) as r:
                out += [(b.first_key, b.last_key, b.size) for b in r.blocks]
    return out


def read_rows(directory: str, names) -> list[tuple]:
    rows = []
    for n in names:
        with open_sst(os.path.join(directory, n)) as r:
            rows += list(r)
    return rows


def range_of(ranges, key: bytes) -> int:
    cuts = [r[0] for r in ranges[1:]]
    return bisect.bisect_right(cuts, key)


def check_plan(job: CompactionJob, k: int) -> list:
    ranges = plan_ranges(job, k)
    blocks = blocks_of(job)
    # contiguous, non-overlapping, covering the whole key space
    assert 0 < len(ranges) <= k
    assert ranges[0][0] is None and ranges[-1][1] is None
    for (_, end), (start, _) in zip(ranges, ranges[1:], strict=False):
        assert end is not None and end == start
    cuts = [r[0] for r in ranges[1:]]
    assert cuts == sorted(set(cuts))
    # cut at keys: every cut is the first key of a block, so no key is split (all versions of a key
    # sit in one block), and the first range is not empty
    first_keys = {b[0] for b in blocks}
    assert set(cuts) <= first_keys
    assert all(c > min(first_keys) for c in cuts)
    # balanced by bytes: each range holds about total / k, within the cut granularity (the blocks that
    # start with one key cannot be separated)
    total = sum(b[2] for b in blocks)
    groups: dict[bytes, int] = {}
    for first, _last, size in blocks:
        groups[first] = groups.get(first, 0) + size
    granule = max(groups.values())
    per_range = [0] * len(ranges)
    for first, size in groups.items():
        per_range[range_of(ranges, first)] += size
    assert sum(per_range) == total
    for got in per_range:
        assert got <= total / k + granule
    return ranges


@pytest.mark.parametrize("k", [1, 2, 3, 7])
def test_plan_ranges_balanced_contiguous_cut_at_keys(tmp_path, k):
    job = make_inputs(str(tmp_path), seed=k)
    ranges = check_plan(job, k)
    assert len(ranges) == k  # plenty of blocks: exactly k ranges, none of them small
    sizes = [sum(b[2] for b in blocks_of(job) if range_of(ranges, b[0]) == i) for i in range(k)]
    assert min(sizes) >= sum(sizes) / k - 2 * max(b[2] for b in blocks_of(job))
    # all versions of every key fall in one range; running the job range by range gives the whole job
    whole = run_job(job)
    pieces = []
    for i, (start, end) in enumerate(ranges):
        part = OutputSpec(**{**job.output.__dict__, "prefix": f"part{i}"})
        res = run_job(CompactionJob(**{**job.__dict__, "start": start, "end": end, "output": part}))
        for _, info in res.outputs:
            assert start is None or info.first_key >= start
            assert end is None or info.last_key < end
        pieces += read_rows(part.directory, [name for name, _ in res.outputs])
    assert pieces == read_rows(job.output.directory, [name for name, _ in whole.outputs])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), k=st.integers(1, 12), n=st.integers(1, 4), rows=st.integers(1, 200))
def test_plan_ranges_property(tmp_path_factory, seed, k, n, rows):
    job = make_inputs(str(tmp_path_factory.mktemp("plan")), seed, n_ssts=n, rows=rows)
    check_plan(job, k)


def test_plan_ranges_single_block_is_one_range(tmp_path):
    job = make_inputs(str(tmp_path), seed=1, n_ssts=1, rows=2, block_bytes=4096)
    assert plan_ranges(job, 8) == [(None, None)]


# -- check_outputs ---------------------------------------------------------------------------------------
def _output(tmp_path, name: str, keys: list[bytes]) -> tuple[str, dict]:
    rows = [(k, 1, 1, None, b"v") for k in keys]
    return name, write_sst(os.path.join(tmp_path, name), rows, sync=False).to_dict()


def test_check_outputs_accepts_ordered_outputs_inside_their_ranges(tmp_path):
    ranges = [(None, b"m"), (b"m", None)]
    results = [  # in any order: the driver sorts them by task index
        {
            "index": 1,
            "outputs": [_output(tmp_path, "b1", [b"m", b"p"]), _output(tmp_path, "b2", [b"q", b"z"])],
        },
        {"index": 0, "outputs": [_output(tmp_path, "a1", [b"a", b"lzzz"])]},
    ]
    assert [name for name, _ in check_outputs(ranges, results)] == ["a1", "b1", "b2"]
    assert check_outputs(ranges, [{"index": 0, "outputs": []}, {"index": 1, "outputs": []}]) == []


@pytest.mark.parametrize(
    "index,keys",
    [
        (0, [b"a", b"m"]),  # the end is exclusive
        (0, [b"x", b"y"]),
        (1, [b"a", b"n"]),  # starts before its range
    ],
)
def test_check_outputs_rejects_outputs_outside_their_range(tmp_path, index, keys):
    ranges = [(None, b"m"), (b"m", None)]
    results = [{"index": index, "outputs": [_output(tmp_path, "bad", keys)]}]
    with pytest.raises(SparkJobError, match="outside its key range"):
        check_outputs(ranges, results)


def test_check_outputs_rejects_overlapping_outputs(tmp_path):
    ranges = [(None, b"m"), (b"m", None)]
    results = [
        {
            "index": 0,
            "outputs": [_output(tmp_path, "a1", [b"a", b"f"]), _output(tmp_path, "a2", [b"f", b"g"])],
        }
    ]
    with pytest.raises(SparkJobError, match="overlap"):
        check_outputs(ranges, results)
    results = [
        {
            "index": 1,
            "outputs": [_output(tmp_path, "b1", [b"p", b"s"]), _output(tmp_path, "b2", [b"n", b"o"])],
        }
    ]
    with pytest.raises(SparkJobError, match="overlap"):
        check_outputs(ranges, results)


# -- the task count, through Spark -------------------------------------------------------------------------
def test_executor_runs_one_task_per_planned_range(spark, tmp_path):
    job = make_inputs(str(tmp_path), seed=7)
    ex = SparkExecutor(spark, tasks=5)
    with observe_jobs() as reports:
        result = ex(job)
    assert len(ex.last_ranges) == 5
    # the job's report: its ranges, each task's outputs and stats, timings that add up
    (report,) = reports
    assert report.ranges == ex.last_ranges and [t.index for t in report.tasks] == list(range(5))
    assert sorted(n for t in report.tasks for n, _ in t.outputs) == sorted(n for n, _ in result.outputs)
    assert sum(t.stats.rows_in for t in report.tasks) == result.stats.rows_in
    assert 0 < report.plan_seconds + report.job_seconds <= report.seconds == result.stats.seconds
    names = [name for name, _ in result.outputs]
    assert task_marks(names) == set(range(5))
    assert sorted(os.listdir(job.output.directory)) == sorted(names)
    local = run_job(
        CompactionJob(**{**job.__dict__, "output": OutputSpec(**{**job.output.__dict__, "prefix": "local"})})
    )
    assert read_rows(job.output.directory, names) == read_rows(
        job.output.directory, [n for n, _ in local.outputs]
    )
    assert result.stats.rows_out == local.stats.rows_out and result.stats.rows_in == local.stats.rows_in
