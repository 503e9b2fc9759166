"""The generated PrometheusRule, checked and unit-tested with the real `promtool` (Debian prometheus 2.42).

`promtool test rules` replays synthetic Triton series through the recording
rules and the burn-rate alerts, so these tests show the alerts fire on a
sustained SLO violation and stay quiet on healthy traffic and on a short blip.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tailpilot.manifests.prometheus_rule import prometheus_rule
from tailpilot_e2e.config import tool

from .fixtures import SETTINGS, make_isvc

pytestmark = pytest.mark.prometheus

P99 = (
    'nv_inference_request_summary_us{namespace="ml",inferenceservice="a",pod="a-1",model="a",quantile="0.99"}'
)
QUEUE = 'nv_inference_pending_request_count{namespace="ml",inferenceservice="a",pod="a-1",model="a"}'


def _promtool() -> str:
    path = tool("promtool")
    assert path, "promtool missing: `make binaries` builds it from upstream with Prometheus (cached)"
    return path


def _write_rules(tmp_path: Path, max_queue_depth: int | None = None) -> tuple[Path, dict[str, Any]]:
    rule = prometheus_rule(isvc=make_isvc("a", "ml").slo(25, max_queue_depth).obj(), settings=SETTINGS)
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    alerts = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"] if "alert" in r}
    return path, alerts


def _expected(alert: dict[str, Any]) -> dict[str, Any]:
    return {
        "exp_labels": {"namespace": "ml", "inferenceservice": "a", **alert["labels"]},
        "exp_annotations": alert["annotations"],
    }


def _run_tests(tmp_path: Path, rules: Path, tests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    spec = tmp_path / "tests.yaml"
    spec.write_text(
        yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "30s", "tests": tests})
    )
    return subprocess.run(
        [_promtool(), "test", "rules", str(spec)], capture_output=True, text=True, timeout=60
    )


def test_rules_are_valid(tmp_path: Path) -> None:
    rules, _ = _write_rules(tmp_path, max_queue_depth=16)
    out = subprocess.run(
        [_promtool(), "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_sustained_violation_fires_both_latency_alerts(tmp_path: Path) -> None:
    rules, alerts = _write_rules(tmp_path)
    test = {
        "interval": "30s",
        # 30 ms P99 against a 25 ms SLO for 2 hours.
        "input_series": [{"series": P99, "values": "30000+0x240"}],
        "alert_rule_test": [
            {"eval_time": "1h", "alertname": name, "exp_alerts": [_expected(alerts[name])]}
            for name in ("TailPilotP99BurnFast", "TailPilotP99BurnSlow")
        ],
    }
    out = _run_tests(tmp_path, rules, [test])
    assert out.returncode == 0, out.stdout + out.stderr


def test_healthy_and_blip_stay_quiet(tmp_path: Path) -> None:
    rules, _ = _write_rules(tmp_path)
    healthy = {
        "interval": "30s",
        "input_series": [{"series": P99, "values": "20000+0x480"}],
        "alert_rule_test": [
            {"eval_time": "3h", "alertname": name, "exp_alerts": []}
            for name in ("TailPilotP99BurnFast", "TailPilotP99BurnSlow")
        ],
    }
    # 10 minutes above the SLO at the start of 2 healthy hours: neither the 5m nor the 30m window sees it.
    blip = {
        "interval": "30s",
        "input_series": [{"series": P99, "values": "40000+0x20 20000+0x220"}],
        "alert_rule_test": [
            {"eval_time": "2h", "alertname": name, "exp_alerts": []}
            for name in ("TailPilotP99BurnFast", "TailPilotP99BurnSlow")
        ],
    }
    out = _run_tests(tmp_path, rules, [healthy, blip])
    assert out.returncode == 0, out.stdout + out.stderr


def test_queue_alert_fires_above_the_bound(tmp_path: Path) -> None:
    rules, alerts = _write_rules(tmp_path, max_queue_depth=16)
    test = {
        "interval": "30s",
        "input_series": [
            {"series": QUEUE, "values": "20+0x240"},
            {"series": P99, "values": "20000+0x240"},
        ],
        "alert_rule_test": [
            {
                "eval_time": "1h",
                "alertname": "TailPilotQueueBurnFast",
                "exp_alerts": [_expected(alerts["TailPilotQueueBurnFast"])],
            },
            {"eval_time": "1h", "alertname": "TailPilotP99BurnFast", "exp_alerts": []},
        ],
    }
    out = _run_tests(tmp_path, rules, [test])
    assert out.returncode == 0, out.stdout + out.stderr
