"""Which SLO alerts fire for a service: told when that changes, let go when no longer notified."""

from __future__ import annotations

from tailpilot.controllers.alerting.alerts import EXPIRE_AFTER_S, FiringAlerts
from tests.controllers.test_ctrl_loops import firing


def test_a_firing_alert_not_notified_again_is_taken_as_resolved_once() -> None:
    alerts = FiringAlerts()
    assert alerts.update(firing("ns", "svc"), now_s=0.0) is not None
    assert alerts.update(firing("ns", "svc", alert="TailPilotP99BurnSlow"), now_s=0.0) is not None
    # Alertmanager repeats the slow burn (its route's repeat_interval); the fast burn goes silent.
    assert alerts.update(firing("ns", "svc", alert="TailPilotP99BurnSlow"), now_s=EXPIRE_AFTER_S - 60) is None
    assert alerts.expire(now_s=EXPIRE_AFTER_S) == [] and alerts.active  # not silent long enough yet
    (told,) = alerts.expire(now_s=EXPIRE_AFTER_S + 1)
    assert (told.type, told.reason) == ("Normal", "SLOAlertResolved")
    assert told.message.startswith("TailPilotP99BurnFast taken as resolved: not notified again for 1:00:00")
    assert sorted(alerts.firing) == ["TailPilotP99BurnSlow"] and alerts.active
    assert alerts.expire(now_s=EXPIRE_AFTER_S + 2) == []  # told once
    # Its own resolution, later, finds nothing left to tell; the slow burn expires in its turn.
    assert alerts.update(firing("ns", "svc", status="resolved"), now_s=EXPIRE_AFTER_S + 3) is None
    assert len(alerts.expire(now_s=2 * EXPIRE_AFTER_S)) == 1 and not alerts.active
