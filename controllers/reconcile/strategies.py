"""The rollout strategies, by the value of `spec.rollout.strategy`.

A new strategy is one module with a class that is a `strategy.Strategy`, and one entry in
`_BUILT_IN` (docs/architecture.md, "Adding a rollout strategy").
"""

from __future__ import annotations

from collections.abc import Mapping

from tailpilot.api.v1alpha1 import InferenceService, InferenceServiceStatus, RolloutStrategy
from tailpilot.controllers.reconcile.canary import CanaryStrategy
from tailpilot.controllers.reconcile.rolling import RollingStrategy
from tailpilot.controllers.reconcile.strategy import Strategy

#: The strategies the operator ships, by the spec's value.
_BUILT_IN: Mapping[str, Strategy] = {
    RolloutStrategy.ROLLING.value: RollingStrategy(),
    RolloutStrategy.CANARY.value: CanaryStrategy(),
}


class StrategyRegistry:
    """Which `Strategy` carries out each value of `spec.rollout.strategy`."""

    def __init__(self, strategies: Mapping[str, Strategy] | None = None) -> None:
        self._strategies: dict[str, Strategy] = dict(_BUILT_IN if strategies is None else strategies)

    def register(self, name: str, strategy: Strategy, *, replace: bool = False) -> None:
        """Carry out `spec.rollout.strategy: name` by `strategy`; `replace` one registered already."""
        if name in self._strategies and not replace:
            raise ValueError(f"a rollout strategy {name!r} is registered already")
        self._strategies[name] = strategy

    def names(self) -> list[str]:
        """The strategies' names, as the spec spells them."""
        return sorted(self._strategies)

    def of(self, isvc: InferenceService) -> Strategy:
        """The strategy the spec names."""
        name = str(isvc.spec.rollout.strategy)
        strategy = self._strategies.get(name)
        if strategy is None:
            raise LookupError(f"no rollout strategy {name!r} is registered")
        return strategy

    def in_charge(self, isvc: InferenceService, status: InferenceServiceStatus) -> Strategy:
        """The strategy whose rollout is in flight on the status, else the one the spec names.

        A rollout under way is finished by the strategy that started it (a spec changed from canary
        to rolling lets the canary in flight end by the canary's rules).
        """
        for strategy in self._strategies.values():
            if strategy.in_flight(status):
                return strategy
        return self.of(isvc)
