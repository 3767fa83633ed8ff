"""The compaction policy seam: what to compact next, and how a job's result changes the LSM shape.

A policy is one module with a class implementing `CompactionPolicy` and one entry in `POLICIES` (name
-> ``"module:Class"``, or the class itself); ``DbOptions(compaction_policy=name)`` selects it. The DB's compactor
(`lsm.compactor`) asks the policy for a `Plan` (`pick`), runs the plan's merge (or carries it out as a
trivial move, or a drop of whole SSTs: `compaction.drop`) and commits ``policy.apply(manifest, plan, outputs, ...)`` as one manifest edit.

The shape is the manifest's: L0 (overlapping SSTs, newest first) and sorted runs (newest first). A
policy gives the runs its own meaning (size tiers, levels) but never stores anything else, so a store
written under one policy opens under any other, which simply goes on from the shape it finds.

Periodic compaction (`compaction.scheduler.pick_periodic`) and the TTL filter (in every merge) are not
policies: each policy checks its own jobs first and then asks for a periodic one, so both compose with
any policy.

A policy class is built from the DB's options (``Policy(options)``; `SchedulerOptions.from_options`
copies the fields it knows) and must be cheap to call: `pick` runs on every scheduler pass, on the
manifest's metadata only (it never reads an SST).
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from compaction.scheduler import Plan, apply_plan
from formats.manifest import Manifest, SstEntry

# name -> "module:Class" (imported when first used) or the class. Adding a policy: write the module,
# add its line here (docs/compaction.md)
POLICIES: dict[str, str | type] = {
    "tiered": "compaction.tiered:TieredPolicy",
    "fifo": "compaction.fifo:FifoPolicy",
    "leveled": "compaction.leveled:LeveledPolicy",
}
DEFAULT_POLICY = "tiered"


class CompactionPolicy(Protocol):
    """What the compactor asks of a policy."""

    name: str

    def pick(self, m: Manifest, tick: int, expired_before: int | None = None) -> Plan | None:
        """The next job for manifest `m` at compaction tick `tick` (ms), or None when nothing is due.
        `expired_before`: rows whose expire_ts is before it are expired for every reader (the tick, or
        the history-retention cutoff when earlier; None means the tick)."""

    def apply(
        self, m: Manifest, plan: Plan, outputs: tuple[SstEntry, ...], tick: int, history_floor: int = 0
    ) -> Manifest:
        """The manifest after `plan` produced `outputs` (CompactionError if its inputs are gone)."""

    def poll_seconds(self) -> float | None:
        """How often background compaction looks for work when no flush wakes it (None: only flushes)."""


class BasePolicy:
    """What most policies share: the generic manifest edit of `compaction.scheduler.apply_plan`, and a
    background poll when periodic compaction is on (a quarter of its interval, 50 ms to 60 s)."""

    name = "base"

    def __init__(self, options: Any) -> None:
        from compaction.scheduler import SchedulerOptions

        self.options = SchedulerOptions.from_options(options)

    def apply(
        self, m: Manifest, plan: Plan, outputs: tuple[SstEntry, ...], tick: int, history_floor: int = 0
    ) -> Manifest:
        """`compaction.scheduler.apply_plan`: every plan shape the scheduler knows."""
        return apply_plan(m, plan, outputs, tick, history_floor)

    def poll_seconds(self) -> float | None:
        """A quarter of the periodic interval (50 ms to 60 s), or None without periodic compaction."""
        interval = self.options.periodic_compaction_interval
        if interval is None:
            return None
        return min(60.0, max(0.05, interval / 4000))


def policy_class(name: str) -> type:
    """The class registered as `name` (ValueError naming the known policies if there is none)."""
    target = POLICIES.get(name) if isinstance(name, str) else None
    if target is None:
        raise ValueError(f"unknown compaction policy {name!r}: use one of {', '.join(sorted(POLICIES))}")
    if isinstance(target, type):  # registered as the class itself (a policy defined in a program)
        return target
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)


def make_policy(options: Any) -> CompactionPolicy:
    """The policy `options.compaction_policy` names, built from `options` (a `lsm.DbOptions`)."""
    return policy_class(getattr(options, "compaction_policy", DEFAULT_POLICY))(options)


__all__ = ["DEFAULT_POLICY", "POLICIES", "BasePolicy", "CompactionPolicy", "make_policy", "policy_class"]
