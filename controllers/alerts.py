"""Which SLO alerts fire for one service, from Alertmanager's notifications, and what to tell the user.

A service has up to four burn-rate alerts (P99 and queue, fast and slow burn: the PrometheusRule in
`tailpilot.manifests.prometheus_rule`), each notified separately, so "an alert fires" is the set of
alert names last notified as firing: one alert resolving leaves another firing. A change of that set
(an alert starts or stops firing; not a repeat notification) is what the user is told, with an Event
on the InferenceService, because an alert changes how the autoscaler decides (at once, with a wider
margin, no scale-down while it fires).

Pure: the service's loop (`tailpilot.controllers.handlers.ServiceLoops`) keeps one `FiringAlerts`
per service and posts what `update` returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tailpilot.api import constants as c
from tailpilot.controllers.alert_webhook import AlertNotification
from tailpilot.controllers.events import EventRecord


@dataclass
class FiringAlerts:
    """The alerts firing now for one service, by alert name."""

    firing: dict[str, AlertNotification] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        """Whether any alert fires (the autoscaler's aggressive mode)."""
        return bool(self.firing)

    def update(self, alert: AlertNotification) -> EventRecord | None:
        """Take one notification; the Event to post when it changes what fires, else None."""
        name = alert.alertname or "unnamed alert"
        if alert.status == "firing":
            new = name not in self.firing
            self.firing[name] = alert
            if not new:
                return None  # Alertmanager repeats firing alerts: told once
            return EventRecord(
                "Warning",
                c.EVENT_SLO_ALERT_FIRING,
                f"{name} ({alert.severity or 'no severity'}) fires"
                + (f" since {alert.starts_at}" if alert.starts_at else "")
                + ": deciding now, with the alert's wider margin and no scale-down while it fires",
            )
        if self.firing.pop(name, None) is None:
            return None  # resolved before it was seen firing (or told already)
        still = ", ".join(sorted(self.firing)) or "none"
        return EventRecord(
            "Normal",
            c.EVENT_SLO_ALERT_RESOLVED,
            f"{name} resolved; still firing: {still}",
        )
