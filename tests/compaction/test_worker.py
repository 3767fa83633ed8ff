"""The compaction worker process: same results as in-process, errors come back, deaths are survived.

The jobs here read SSTs in a local directory: the process is the subject, not the store; where what a job
leaves in its output directory is checked, that is a database's sst/ on each store another process can
open (`shared_root`: a directory and S3), as is the embedding script's database."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap

import pytest

from compaction import local
from compaction.filter import CompactionFilter, CompactionFilterFactory, Decision, Reason
from compaction.merge import CompactionJob, OutputSpec, run_job
from compaction.worker import Worker, WorkerDied
from formats.sst import write_sst
from storage import storage_for
from storage.ssts import open_sst
from tests import _store


class Boom(CompactionFilter):
    def filter(self, entry):
        raise KeyError(f"boom on {entry.key!r}")


class BoomFactory(CompactionFilterFactory):
    def create(self, ctx):
        return Boom()


class Exit(CompactionFilter):
    def filter(self, entry):
        os._exit(3)  # the worker process dies in the middle of the job


class ExitFactory(CompactionFilterFactory):
    def create(self, ctx):
        return Exit()


class Upper(CompactionFilter):
    def filter(self, entry):
        return Decision.change_value(entry.value.upper())


class UpperFactory(CompactionFilterFactory):
    def create(self, ctx):
        return Upper()


def _job(tmp_path, name: str, filters=()) -> CompactionJob:
    src = tmp_path / "in"
    src.mkdir(exist_ok=True)
    paths = []
    for j in range(3):
        p = src / f"{j}.sst"
        if not p.exists():
            rows = [(b"k%04d" % i, 100 - j, 1_000, 5_000 if i % 3 else None, b"v%d-%d" % (j, i)) for i in range(j, 300, 2)]
            write_sst(p, rows)
        paths.append(str(p))
    out = tmp_path / name
    out.mkdir()
    infos = tuple(open_sst(p).info for p in paths)
    return CompactionJob(
        tuple((p,) for p in paths), infos, True, 10_000, Reason.MANUAL, OutputSpec(str(out), "o", target_bytes=4096), filters
    )


def _rows(outputs, directory) -> list[tuple]:
    rows = []
    for name, _info in outputs:
        with open_sst(f"{directory}/{name}") as r:
            rows += list(r)
    return rows


def _into(job: CompactionJob, root: str, name: str) -> CompactionJob:
    """`job` with its outputs going to the sst/ of a database `name` beside `root` (a path or URL)."""
    store = _store.store(f"{root}-{name}")
    store.storage.makedirs(store.paths.sst_dir)
    return dataclasses.replace(job, output=dataclasses.replace(job.output, directory=store.paths.sst_dir))


def test_worker_output_equals_in_process(tmp_path, shared_root):
    a_job = _into(_job(tmp_path, "a", (UpperFactory(),)), shared_root, "a")
    a = run_job(a_job)
    w = Worker()
    try:
        b_job = _into(_job(tmp_path, "b", (UpperFactory(),)), shared_root, "b")
        b = w.run(b_job)
    finally:
        w.close()
    assert [n for n, _ in a.outputs] == [n for n, _ in b.outputs]
    assert _rows(a.outputs, a_job.output.directory) == _rows(b.outputs, b_job.output.directory)
    assert a.stats.rows_out == b.stats.rows_out
    assert a.stats.filters["ttl"].removed == b.stats.filters["ttl"].removed > 0


def test_filter_error_comes_back_with_its_type_and_leaves_no_files(tmp_path, shared_root):
    w = Worker()
    try:
        job = _into(_job(tmp_path, "c", (BoomFactory(),)), shared_root, "c")
        with pytest.raises(KeyError, match="boom"):
            w.run(job)
        assert storage_for(job.output.directory).list_names(job.output.directory) == []  # temporaries too
        assert w.run(_job(tmp_path, "d")).stats.rows_out > 0  # the worker is still usable
    finally:
        w.close()


def test_a_worker_dying_mid_job_is_reported_and_replaced(tmp_path):
    w = Worker()
    try:
        w.run(_job(tmp_path, "e"))
        first = w._proc.pid
        with pytest.raises(WorkerDied):
            w.run(_job(tmp_path, "f", (ExitFactory(),)))
        assert w.run(_job(tmp_path, "g")).stats.rows_out > 0
        assert w._proc.pid != first
        w._proc.kill()  # an idle worker that died is replaced without an error
        w._proc.wait()
        assert w.run(_job(tmp_path, "h2")).stats.rows_out > 0
    finally:
        w.close()


def test_unpicklable_filters_run_in_process(tmp_path):
    import threading

    class Local(CompactionFilterFactory):  # a local class with a lock: cannot be pickled
        lock = threading.Lock()

        def create(self, ctx):
            return Upper()

    res = local.run_in_worker(_job(tmp_path, "h", (Local(),)))
    assert all(v is None or v == v.upper() for *_, v in _rows(res.outputs, tmp_path / "h"))


def test_embedding_script_without_main_guard_runs_once(tmp_path, shared_root):
    """A worker started with multiprocessing's spawn would re-run an unguarded main module. The script's
    background compaction runs in the worker process, which opens the store itself: a directory or S3 (a
    memory store is compacted in the calling process)."""
    script = tmp_path / "app.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import lsm
            from lsm.events import EventListener

            class Executors(EventListener):
                def on_compaction_end(self, info):
                    if info.error is None:
                        print("executor", info.executor, flush=True)

            print("main ran", flush=True)
            options = lsm.DbOptions(memtable_bytes=4096, l0_compaction_threshold=2, event_listeners=[Executors()])
            db = lsm.DB.open({shared_root!r}, options)
            for i in range(600):  # ~40 KiB through 4 KiB memtables: L0 over its threshold
                db.put(b"k%05d" % i, b"v" * 50)
            db.flush()
            import time
            deadline = time.time() + 60
            while db.compaction_stats.jobs == 0 and time.time() < deadline:
                time.sleep(0.05)
            print("jobs", db.compaction_stats.jobs, flush=True)
            db.close()
            """
        )
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("main ran") == 1
    jobs = int(out.stdout.split("jobs")[1].split()[0])
    assert jobs >= 1
    assert "executor worker" in out.stdout  # the worker process read and wrote the store


def test_an_orphaned_worker_exits_quietly(tmp_path):
    """Issue 12 item 9: a worker whose parent is gone (its reply pipe closed) must not print a
    BrokenPipeError traceback into the stderr it shares with the application."""
    from compaction.worker import _send

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    p = subprocess.Popen(
        [sys.executable, "-m", "compaction.worker"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )
    p.stdout.close()  # the parent "dies": nobody will read the reply
    _send(p.stdin, (_job(tmp_path, "orphan"), None))
    p.stdin.close()
    err = p.stderr.read()
    assert p.wait(timeout=60) == 0
    assert err == b"", err.decode()
