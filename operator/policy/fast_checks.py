"""The cadence of the fast checks between decisions: one source for the operator and the simulator.

The rotation rule (`tailpilot.policy.rotation`) and the surge check (`tailpilot.policy.surge`)
read the pods' own queues and counters every few seconds; the simulator's measurements of both
(docs/autoscaling.md) used these values, so the operator runs its checks at the same cadence.
"""

from __future__ import annotations

from typing import Final

#: Seconds between two fast checks of one service.
FAST_CHECK_PERIOD_S: Final = 3.0
#: Seconds of arrivals a fast check measures its rate over: a burst must show at once.
ARRIVAL_SPAN_S: Final = 5.0
