"""Real Prometheus and Alertmanager on 127.0.0.1, for the simulated-node tier's tests.

Both run as child processes with their own data directories and are stopped by PID.

Prometheus finds its scrape targets through file_sd (`set_targets`): a JSON file a test rewrites, so
it can point Prometheus at real Triton processes with the labels the operator's ServiceMonitor gives
a Triton pod's series (`namespace`, `pod`, `inferenceservice`). That is this tier's seam: its pods
are KWOK's and run nothing, the Triton processes serving for them run beside the cluster, and no
Service address leads to them. Where pods really run (the real-pods tests, the benchmarks with a
real node, `make demo`), Prometheus is prometheus-operator's, configured from the generated
ServiceMonitor and PrometheusRule (`tailpilot_e2e.prometheus_stack`); `PrometheusApi` holds the
reads of a Prometheus' HTTP API both use.

Alertmanager (`LocalAlertmanager`, also used beside prometheus-operator's Prometheus) routes every
alert to one webhook with a bearer token, the receiver configuration the chart documents.
"""

from __future__ import annotations

import json
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tailpilot_e2e.config import tool
from tailpilot_e2e.operator_harness import free_port
from tailpilot_e2e.wait import eventually


@dataclass
class _Process:
    name: str
    argv: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self, ready_url: str, timeout: float = 30) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,  # noqa: S603
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

        def ready() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}; log: {self.log}")
            return httpx.get(ready_url, timeout=1).status_code == 200

        try:
            eventually(ready, timeout=timeout, description=f"{self.name} ready (log {self.log})")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


class PrometheusApi:
    """Reads of a running Prometheus' HTTP API at `url` (what tests ask of any Prometheus)."""

    @property
    def url(self) -> str:
        """Base URL of the HTTP API."""
        raise NotImplementedError

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Instant query; the result vector."""
        body = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5).json()
        return list(body["data"]["result"])

    def targets(self, *, job: str | None = None) -> list[dict[str, Any]]:
        """The active targets (/api/v1/targets), optionally of one scrape job (pool)."""
        response = httpx.get(f"{self.url}/api/v1/targets", params={"state": "active"}, timeout=5)
        response.raise_for_status()
        active = response.json()["data"]["activeTargets"]
        return [t for t in active if job is None or t["scrapePool"] == job]

    def alertmanagers(self) -> list[str]:
        """URLs of the Alertmanagers Prometheus sends alerts to (/api/v1/alertmanagers)."""
        response = httpx.get(f"{self.url}/api/v1/alertmanagers", timeout=5)
        response.raise_for_status()
        return [a["url"] for a in response.json()["data"]["activeAlertmanagers"]]

    def rule_groups(self) -> list[dict[str, Any]]:
        """The loaded rule groups (/api/v1/rules): each with `name`, `file` and `rules`."""
        response = httpx.get(f"{self.url}/api/v1/rules", timeout=5)
        response.raise_for_status()
        return list(response.json()["data"]["groups"])


@dataclass
class LocalPrometheus(PrometheusApi):
    """Prometheus scraping file-discovered targets."""

    work_dir: Path
    scrape_interval_s: float = 1.0
    port: int = field(default_factory=free_port)
    _proc: _Process | None = None

    @property
    def url(self) -> str:  # noqa: D102
        return f"http://127.0.0.1:{self.port}"

    @property
    def targets_file(self) -> Path:  # noqa: D102
        return self.work_dir / "targets.json"

    def config(self) -> dict[str, Any]:
        """The prometheus.yml this instance runs with (JSON is valid YAML)."""
        interval = f"{self.scrape_interval_s:g}s"
        scrape_configs: list[dict[str, Any]] = [
            {
                "job_name": "triton",
                "file_sd_configs": [{"files": [str(self.targets_file)], "refresh_interval": interval}],
            }
        ]
        return {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": scrape_configs,
        }

    def start(self) -> LocalPrometheus:
        """Write the config and start; wait until /-/ready."""
        binary = tool("prometheus")
        if binary is None:
            raise RuntimeError("prometheus not found: run `make binaries` (builds it from upstream, cached)")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.targets_file.write_text("[]")
        (self.work_dir / "prometheus.yml").write_text(json.dumps(self.config()))
        self._proc = _Process(
            "prometheus",
            [
                binary,
                f"--config.file={self.work_dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.work_dir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            self.work_dir / "prometheus.log",
        )
        self._proc.start(f"{self.url}/-/ready")
        return self

    @property
    def pid(self) -> int:
        """The running server's process id."""
        assert self._proc is not None and self._proc.process is not None
        return self._proc.process.pid

    def set_targets(self, targets: list[tuple[str, dict[str, str]]]) -> None:
        """Scrape exactly these `host:port` targets with these labels (atomic file replace)."""
        groups = [{"targets": [address], "labels": labels} for address, labels in targets]
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups))
        tmp.replace(self.targets_file)

    def stop(self) -> None:  # noqa: D102
        if self._proc:
            self._proc.stop()


@dataclass
class LocalAlertmanager:
    """Alertmanager routing every alert at once to `webhook_url` with a bearer token."""

    work_dir: Path
    webhook_url: str
    token_file: Path
    port: int = field(default_factory=free_port)
    _proc: _Process | None = None

    @property
    def url(self) -> str:  # noqa: D102
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LocalAlertmanager:
        """Write the config and start; wait until /-/ready."""
        binary = tool("prometheus-alertmanager") or tool("alertmanager")
        if binary is None:
            raise RuntimeError("alertmanager not found: apt-get install prometheus-alertmanager")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config = {
            "route": {
                "receiver": "tailpilot",
                "group_by": ["namespace", "inferenceservice", "alertname"],
                "group_wait": "0s",
                "group_interval": "1s",
                # Under the operator's one hour after which a firing alert not notified again is
                # taken as resolved (controllers/alerting/alerts.py), as docs/autoscaling.md configures it.
                "repeat_interval": "30m",
            },
            "receivers": [
                {
                    "name": "tailpilot",
                    "webhook_configs": [
                        {
                            "url": self.webhook_url,
                            "send_resolved": True,
                            "http_config": {
                                "authorization": {"type": "Bearer", "credentials_file": str(self.token_file)}
                            },
                        }
                    ],
                }
            ],
        }
        (self.work_dir / "alertmanager.yml").write_text(json.dumps(config))
        cluster_port = free_port()
        self._proc = _Process(
            "alertmanager",
            [
                binary,
                f"--config.file={self.work_dir / 'alertmanager.yml'}",
                f"--storage.path={self.work_dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                f"--cluster.listen-address=127.0.0.1:{cluster_port}",
            ],
            self.work_dir / "alertmanager.log",
        )
        self._proc.start(f"{self.url}/-/ready")
        return self

    def fire(self, labels: dict[str, str], *, resolved: bool = False) -> None:
        """Post an alert to Alertmanager's API (what Prometheus' rule evaluation does)."""
        alert: dict[str, Any] = {"labels": labels, "annotations": {"summary": "test alert"}}
        if resolved:
            alert["endsAt"] = "2000-01-01T00:00:00Z"
        response = httpx.post(f"{self.url}/api/v2/alerts", json=[alert], timeout=5)
        response.raise_for_status()

    def stop(self) -> None:  # noqa: D102
        if self._proc:
            self._proc.stop()
