"""Which SLO alerts fire for one service, from Alertmanager's notifications, and what to tell the user.

A service has up to four burn-rate alerts (P99 and queue, fast and slow burn: the PrometheusRule in
`tailpilot.manifests.prometheus_rule`), each notified separately, so "an alert fires" is the set of
alert names last notified as firing: one alert resolving leaves another firing. A change of that set
(an alert starts or stops firing; not a repeat notification) is what the user is told, with an Event
on the InferenceService, because an alert changes how the autoscaler decides (at once, with a wider
margin, no scale-down while it fires).

A firing alert that is not notified again within `EXPIRE_AFTER_S` is taken as resolved: an
Alertmanager that lost the resolution (a restart without its storage, a route changed) would
otherwise keep the operator in its alert mode, with no scale-down, for ever. Alertmanager repeats a
firing alert every `repeat_interval` of its route, so that route's interval must be shorter (the
receiver configuration in docs/autoscaling.md sets 30 minutes).

Pure: the service's loop (`tailpilot.controllers.process.handlers.ServiceLoops`) keeps one `FiringAlerts`
per service and posts what `update` and `expire` return.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from tailpilot.api import constants as c
from tailpilot.controllers.alerting.alert_webhook import AlertNotification
from tailpilot.controllers.core.events import EventRecord

#: Seconds after its last notification a firing alert is taken as resolved.
EXPIRE_AFTER_S = 3600.0


@dataclass
class FiringAlerts:
    """The alerts firing now for one service, by alert name, and when each was last notified."""

    firing: dict[str, AlertNotification] = field(default_factory=dict)
    notified_at: dict[str, float] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        """Whether any alert fires (the autoscaler's aggressive mode)."""
        return bool(self.firing)

    def update(self, alert: AlertNotification, *, now_s: float) -> EventRecord | None:
        """Take one notification (at monotonic `now_s`); the Event to post when it changes what fires."""
        name = alert.alertname or "unnamed alert"
        if alert.status == "firing":
            new = name not in self.firing
            self.firing[name] = alert
            self.notified_at[name] = now_s
            if not new:
                return None  # Alertmanager repeats firing alerts: told once
            return EventRecord(
                "Warning",
                c.EVENT_SLO_ALERT_FIRING,
                f"{name} ({alert.severity or 'no severity'}) fires"
                + (f" since {alert.starts_at}" if alert.starts_at else "")
                + ": deciding now, with the alert's wider margin and no scale-down while it fires",
            )
        self.notified_at.pop(name, None)
        if self.firing.pop(name, None) is None:
            return None  # resolved before it was seen firing (or told already)
        still = ", ".join(sorted(self.firing)) or "none"
        return EventRecord(
            "Normal",
            c.EVENT_SLO_ALERT_RESOLVED,
            f"{name} resolved; still firing: {still}",
        )

    def expire(self, *, now_s: float, after_s: float = EXPIRE_AFTER_S) -> list[EventRecord]:
        """Take as resolved the alerts not notified within `after_s` of `now_s`; an Event for each."""
        stale = sorted(name for name, at in self.notified_at.items() if now_s - at > after_s)
        events = []
        for name in stale:
            del self.firing[name], self.notified_at[name]
            events.append(
                EventRecord(
                    "Normal",
                    c.EVENT_SLO_ALERT_RESOLVED,
                    f"{name} taken as resolved: not notified again for {timedelta(seconds=round(after_s))} "
                    "(Alertmanager repeats a firing alert every repeat_interval of its route)",
                )
            )
        return events
