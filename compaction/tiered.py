"""The size-tiered policy (``compaction_policy="tiered"``, the default).

L0 becomes a new sorted run on top once it holds ``l0_compaction_threshold`` SSTs, and adjacent runs of
similar size merge; the rules, and periodic compaction, are `compaction.scheduler`'s (this policy is
the scheduler as it was before policies existed, so its jobs and results are unchanged).
"""

from __future__ import annotations

from compaction import scheduler
from compaction.policy import BasePolicy
from compaction.scheduler import Plan
from formats.manifest import Manifest


class TieredPolicy(BasePolicy):
    """Size-tiered first, then periodic (`compaction.scheduler.pick`)."""

    name = "tiered"

    def pick(self, m: Manifest, tick: int, expired_before: int | None = None) -> Plan | None:
        """A size-tiered job, else a periodic one, else None."""
        return scheduler.pick(m.l0, m.runs, tick, self.options)


__all__ = ["TieredPolicy"]
