"""What every stage of a pass may call: the REST client, the operator's settings, the clock."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tailpilot.controllers.core.clock import Clock, utc_now
from tailpilot.controllers.core.seams import ReconcilerKube
from tailpilot.controllers.core.settings import OperatorSettings


@dataclass(frozen=True)
class PassDeps:
    """The reconciler's collaborators, shared by its stages."""

    kube: ReconcilerKube
    settings: OperatorSettings
    clock: Clock

    def now(self) -> datetime:
        """The clock's time as an aware UTC datetime."""
        return utc_now(self.clock)
