"""The compaction policy seam: the registry, the option, and a policy added from outside (used by a
database on every backend)."""

from __future__ import annotations

import pytest

import lsm
from compaction import scheduler
from compaction.policy import POLICIES, BasePolicy, make_policy
from compaction.scheduler import Plan
from compaction.tiered import TieredPolicy
from formats.manifest import Manifest, SortedRun
from tests.compaction._util import fake_sst


def test_default_policy_is_tiered_and_picks_what_the_scheduler_picks() -> None:
    o = lsm.DbOptions(l0_compaction_threshold=2, periodic_compaction_interval=10)
    p = make_policy(o)
    assert isinstance(p, TieredPolicy) and p.name == "tiered" == o.compaction_policy
    l0 = (fake_sst(10), fake_sst(10, expiring=1))
    runs = (SortedRun(1, (fake_sst(30),)),)
    for m in (Manifest(l0=l0, runs=runs), Manifest(l0=l0[:1], runs=runs), Manifest()):
        assert p.pick(m, 100) == scheduler.pick(m.l0, m.runs, 100, p.options)
    assert p.options.wide_merge_min_bytes == o.target_sst_bytes
    assert p.poll_seconds() == 0.05 and make_policy(lsm.DbOptions()).poll_seconds() is None


def test_unknown_policy_is_refused_with_the_known_names() -> None:
    with pytest.raises(ValueError, match=r"DbOptions.compaction_policy must be one of .*tiered.*got 'lazy'"):
        lsm.DbOptions(compaction_policy="lazy")


class NeverPolicy(BasePolicy):
    """A policy that never compacts (what one registry entry adds)."""

    name = "never"
    picks = 0

    def pick(self, m: Manifest, tick: int, expired_before: int | None = None) -> Plan | None:
        NeverPolicy.picks += 1
        return None


def test_a_registered_policy_is_used_by_the_db(open_db, monkeypatch) -> None:
    monkeypatch.setitem(POLICIES, "never", f"{__name__}:NeverPolicy")
    db = open_db(compaction_policy="never", l0_compaction_threshold=2)
    for i in range(3):
        db.put(b"k%d" % i, b"v")
        db.flush()
    stats = db.compact()
    assert stats.jobs == 0 and NeverPolicy.picks >= 1
    assert len(db.manifest.l0) == 3  # tiered would have made a run of them
    db.close()
    db = open_db(l0_compaction_threshold=2)  # the same store, the default policy
    assert db.compact().jobs == 1 and db.get(b"k2") == b"v"
    db.close()
