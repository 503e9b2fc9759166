"""Real Prometheus and Alertmanager on 127.0.0.1 for tests and the demo.

Both run as child processes with their own data directories and are stopped by
PID. Prometheus finds scrape targets two ways, both always configured:

- file_sd (`set_targets`): a JSON file a test rewrites, so it can point
  Prometheus at real Triton processes with the labels the operator's
  ServiceMonitor would give a Triton pod (`namespace`, `pod`,
  `inferenceservice`);
- kubernetes_sd (`kubernetes=KubernetesDiscovery(kubeconfig)`): pods watched
  through the API server, as a Prometheus in a real cluster does. The
  relabelling (`pod_relabel_configs`) is the equivalent of the generated
  ServiceMonitor for pods: keep Triton pods (`app.kubernetes.io/component=
  inference-server`, a `tailpilot.io/inferenceservice` label) on their
  container port named `metrics`, drop finished pods (phase Succeeded/Failed,
  what prometheus-operator's `filterRunning` does), and copy `namespace`, `pod`
  and `inferenceservice` onto every series. Pods that are not Ready are kept,
  as the ServiceMonitor's endpoints discovery keeps notReadyAddresses: a Triton
  failing its readiness probe under load is the pod whose queue matters.

Rules: `load_rules` writes PrometheusRule objects (their `spec.groups`) as rule
files, reloads Prometheus (`--web.enable-lifecycle`, POST /-/reload) and waits
until /api/v1/rules lists their groups; `load_cluster_rules` does the same
with the PrometheusRules of a namespace, as prometheus-operator would.
With `alertmanager_url`, Prometheus sends its alerts to that Alertmanager.

Alertmanager routes every alert to one webhook with a bearer token, the
receiver configuration the chart documents.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import httpx
from kubernetes import client

from tailpilot.api import constants as c
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


def _pod_meta_label(label_key: str, *, kind: str = "label") -> str:
    """Prometheus' pod-discovery name of a pod label (`label`) or of its presence (`labelpresent`)."""
    return f"__meta_kubernetes_pod_{kind}_" + "".join(ch if ch.isalnum() else "_" for ch in label_key)


def pod_relabel_configs() -> list[dict[str, Any]]:
    """Relabelling of a `role: pod` job equivalent to the operator's ServiceMonitor (see the module doc)."""
    return [
        {
            "action": "keep",
            "source_labels": [
                _pod_meta_label(c.LABEL_COMPONENT),
                _pod_meta_label(c.LABEL_ISVC, kind="labelpresent"),
            ],
            "regex": f"{c.COMPONENT_SERVER};true",
        },
        {
            "action": "keep",
            "source_labels": ["__meta_kubernetes_pod_container_port_name"],
            "regex": c.PORT_NAME_METRICS,
        },
        {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "Succeeded|Failed"},
        # __address__ is already podIP:containerPort for a pod target with a port.
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": c.METRIC_LABEL_NAMESPACE},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"source_labels": [_pod_meta_label(c.LABEL_ISVC)], "target_label": c.METRIC_LABEL_ISVC},
    ]


@dataclass(frozen=True)
class KubernetesDiscovery:
    """Where kubernetes_sd watches pods: an API server's kubeconfig, optionally some namespaces."""

    kubeconfig: Path
    namespaces: tuple[str, ...] = ()

    def scrape_config(self, *, interval: str) -> dict[str, Any]:
        """The `role: pod` scrape job with the ServiceMonitor-equivalent relabelling."""
        sd: dict[str, Any] = {"role": "pod", "kubeconfig_file": str(self.kubeconfig)}
        if self.namespaces:
            sd["namespaces"] = {"names": list(self.namespaces)}
        return {
            "job_name": "kubernetes-pods",
            "scrape_interval": interval,
            "kubernetes_sd_configs": [sd],
            "relabel_configs": pod_relabel_configs(),
        }


def _rule_file_name(rule: Mapping[str, Any]) -> str:
    meta = rule.get("metadata", {})
    return f"{meta.get('namespace', 'default')}-{meta['name']}.yaml"


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
    """Prometheus scraping file-discovered (and optionally Kubernetes pod) targets."""

    work_dir: Path
    scrape_interval_s: float = 1.0
    port: int = field(default_factory=free_port)
    kubernetes: KubernetesDiscovery | None = None
    alertmanager_url: str | None = None
    _proc: _Process | None = None

    @property
    def url(self) -> str:  # noqa: D102
        return f"http://127.0.0.1:{self.port}"

    @property
    def targets_file(self) -> Path:  # noqa: D102
        return self.work_dir / "targets.json"

    @property
    def rules_dir(self) -> Path:  # noqa: D102
        return self.work_dir / "rules"

    def config(self) -> dict[str, Any]:
        """The prometheus.yml this instance runs with (JSON is valid YAML)."""
        interval = f"{self.scrape_interval_s:g}s"
        scrape_configs: list[dict[str, Any]] = [
            {
                "job_name": "triton",
                "file_sd_configs": [{"files": [str(self.targets_file)], "refresh_interval": interval}],
            }
        ]
        if self.kubernetes is not None:
            scrape_configs.append(self.kubernetes.scrape_config(interval=interval))
        config: dict[str, Any] = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(self.rules_dir / "*.yaml")],
            "scrape_configs": scrape_configs,
        }
        if self.alertmanager_url is not None:
            parts = urlsplit(self.alertmanager_url)
            alertmanager: dict[str, Any] = {
                "scheme": parts.scheme or "http",
                "static_configs": [{"targets": [parts.netloc]}],
            }
            if parts.path.strip("/"):
                alertmanager["path_prefix"] = parts.path
            config["alerting"] = {"alertmanagers": [alertmanager]}
        return config

    def start(self) -> LocalPrometheus:
        """Write the config and start; wait until /-/ready."""
        binary = tool("prometheus")
        if binary is None:
            raise RuntimeError("prometheus not found: run `make binaries` (builds it from upstream, cached)")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.rules_dir.mkdir(exist_ok=True)
        self.targets_file.write_text("[]")
        interval = f"{self.scrape_interval_s:g}s"
        (self.work_dir / "prometheus.yml").write_text(json.dumps(self.config()))
        self._proc = _Process(
            "prometheus",
            [
                binary,
                f"--config.file={self.work_dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.work_dir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
                # Every start or reload re-discovers the Alertmanagers (a few seconds); an alert that
                # fires meanwhile is dropped and re-sent only after this delay (default 1m).
                f"--rules.alert.resend-delay={interval}",
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

    def load_rules(self, rules: Sequence[Mapping[str, Any]], *, timeout: float = 30) -> None:
        """Load exactly these PrometheusRule objects (replacing earlier ones), reload, wait until served.

        Each object becomes one rule file `<namespace>-<name>.yaml` holding its
        `spec.groups` (group names need only be unique per file, as with
        prometheus-operator).

        Raises:
            RuntimeError: When Prometheus refuses the reload (e.g. an invalid rule); its message says why.
        """
        wanted: set[tuple[str, str]] = set()
        files: dict[Path, str] = {}
        for rule in rules:
            path = self.rules_dir / _rule_file_name(rule)
            groups = list(rule["spec"]["groups"])
            files[path] = json.dumps({"groups": groups})
            wanted |= {(str(path), g["name"]) for g in groups}
        self.rules_dir.mkdir(parents=True, exist_ok=True)
        for stale in set(self.rules_dir.glob("*.yaml")) - set(files):
            stale.unlink()
        for path, text in files.items():
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(path)
        response = httpx.post(f"{self.url}/-/reload", timeout=30)
        if response.status_code != 200:
            raise RuntimeError(f"Prometheus refused the reload ({response.status_code}): {response.text!r}")

        def served() -> bool:
            return {(g["file"], g["name"]) for g in self.rule_groups()} == wanted

        eventually(served, timeout=timeout, description=f"Prometheus serving rule groups {sorted(wanted)}")

    def load_cluster_rules(self, api: client.ApiClient, namespace: str, *, timeout: float = 30) -> list[str]:
        """Load the namespace's PrometheusRule objects (monitoring.coreos.com/v1); return their names."""
        answer = client.CustomObjectsApi(api).list_namespaced_custom_object(
            "monitoring.coreos.com", "v1", namespace, "prometheusrules"
        )
        items: list[dict[str, Any]] = cast("dict[str, Any]", answer)["items"]
        self.load_rules(items, timeout=timeout)
        return sorted(item["metadata"]["name"] for item in items)

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
