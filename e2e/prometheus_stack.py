"""kube-prometheus-stack's monitoring on the local cluster: a real prometheus-operator and its Prometheus.

What a platform team runs, and what turns the operator's ServiceMonitors and PrometheusRules into
Prometheus configuration:

- prometheus-operator, built from its Go module at PROMETHEUS_OPERATOR_VERSION
  (`e2e/build-binaries.sh`), runs as a Deployment from the module's own manifests
  (`example/rbac/prometheus-operator/`: its ServiceAccount, ClusterRole, binding and Deployment),
  with the flags kube-prometheus-stack gives it (`operator_args`), watching every namespace;
- a `Prometheus` object configured as kube-prometheus-stack's values configure it
  (`prometheus_object`): ServiceMonitors and PrometheusRules selected by the `release` label
  (`serviceMonitorSelectorNilUsesHelmValues` / `ruleSelectorNilUsesHelmValues`), its ServiceAccount
  bound to the module's `prometheus` ClusterRole. The operator renders the selected objects into the
  configuration Secret and rule ConfigMaps that its StatefulSet's Prometheus and config reloader read.

All of it runs as pods on the node agent's node (`local-0`), the images played by their upstream
binaries (`agent_images`). The tests' operator labels what it generates with
`--monitoring-label release=<release>`, as the chart's `prometheus.monitoringLabels` does.

Where this differs from a cluster (the named seams):
- Alertmanager runs beside the cluster (`LocalAlertmanager`, a process on 127.0.0.1) and Prometheus
  reaches it through `additionalAlertManagerConfigs` (a static target), not through an Alertmanager
  object's Service: an Endpoints address may not be a loopback one.
- The Prometheus object's ServiceMonitor, PodMonitor, rule and probe namespace selectors name the one
  namespace the stack serves (kube-prometheus-stack's default is every namespace), so tests that run
  one after another never scrape each other's leftovers.
- The operator's web server is plain HTTP (kube-prometheus-stack serves it over TLS for its admission
  webhook, which is not installed here) and no kubelet Service is synced (no kubelet to scrape).
- `--rules.alert.resend-delay` is the evaluation interval (`additionalArgs`): Prometheus re-discovers
  its Alertmanagers on every configuration reload, and an alert that fires meanwhile waits for the
  resend delay (default 1m) before it is sent again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import httpx
import psutil
import yaml
from kubernetes import client

from tailpilot_e2e.agent_images import (
    CONFIG_RELOADER_REPOSITORY,
    PROMETHEUS_OPERATOR_REPOSITORY,
    PROMETHEUS_REPOSITORY,
)
from tailpilot_e2e.agent_node import NODE_NAME
from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.config import read_versions
from tailpilot_e2e.kube import api_client, is_ready
from tailpilot_e2e.monitoring import PrometheusApi
from tailpilot_e2e.monitoring_crds import ALL_CRD_FILES, crd_files, module_files
from tailpilot_e2e.operator_harness import install_crds
from tailpilot_e2e.wait import eventually

#: The label kube-prometheus-stack's Prometheus selects ServiceMonitors and PrometheusRules by.
RELEASE_LABEL = "release"
#: The release name kube-prometheus-stack's documentation installs under.
DEFAULT_RELEASE = "kube-prometheus-stack"
PROMETHEUS_NAME = "prometheus"
ALERTMANAGER_SECRET_KEY = "additional-alertmanager-configs.yaml"
_OPERATOR_RBAC = (
    "example/rbac/prometheus-operator/prometheus-operator-service-account.yaml",
    "example/rbac/prometheus-operator/prometheus-operator-cluster-role.yaml",
    "example/rbac/prometheus-operator/prometheus-operator-cluster-role-binding.yaml",
    "example/rbac/prometheus-operator/prometheus-operator-deployment.yaml",
)
_PROMETHEUS_RBAC = (
    "example/rbac/prometheus/prometheus-service-account.yaml",
    "example/rbac/prometheus/prometheus-cluster-role.yaml",
    "example/rbac/prometheus/prometheus-cluster-role-binding.yaml",
)


def operator_args(version: str) -> list[str]:
    """prometheus-operator's flags as kube-prometheus-stack gives them (less TLS and kubelet sync)."""
    return [
        # The config reloader reaches Prometheus over the pod's loopback.
        "--localhost=127.0.0.1",
        f"--prometheus-config-reloader={CONFIG_RELOADER_REPOSITORY}:{version}",
        # Secrets the operator never needs to watch (Helm's release records, tokens, old pull secrets).
        "--secret-field-selector=type!=kubernetes.io/dockercfg,type!=kubernetes.io/service-account-token,"
        "type!=helm.sh/release.v1",
    ]


def _scoped(
    obj: dict[str, Any], *, namespace: str, cluster_name: str, service_accounts: Mapping[str, str]
) -> dict[str, Any]:
    """An upstream example object moved into `namespace`; cluster-wide names made unique to the stack."""
    obj = json.loads(json.dumps(obj))
    meta = obj["metadata"]
    if obj["kind"] in ("ClusterRole", "ClusterRoleBinding"):
        meta["name"] = f"{cluster_name}-{meta['name']}"
    else:
        meta["namespace"] = namespace
    if obj["kind"] == "ClusterRoleBinding":
        obj["roleRef"]["name"] = f"{cluster_name}-{obj['roleRef']['name']}"
        for subject in obj["subjects"]:
            subject["namespace"] = namespace
            subject["name"] = service_accounts.get(subject["name"], subject["name"])
    return obj


def _upstream(paths: Sequence[str]) -> list[dict[str, Any]]:
    return [cast("dict[str, Any]", yaml.safe_load(path.read_text())) for path in module_files(paths)]


def alertmanager_config(alertmanager_url: str) -> str:
    """The `additionalAlertManagerConfigs` entry: Alertmanager as a static target."""
    parts = urlsplit(alertmanager_url)
    entry: dict[str, Any] = {
        "scheme": parts.scheme or "http",
        "static_configs": [{"targets": [parts.netloc]}],
    }
    if parts.path.strip("/"):
        entry["path_prefix"] = parts.path
    return yaml.safe_dump([entry])


def prometheus_object(
    *,
    namespace: str,
    release: str,
    version: str,
    scrape_interval_s: float,
    alertmanager_secret: str | None,
) -> dict[str, Any]:
    """The Prometheus object as kube-prometheus-stack's defaults render it (the seams: module doc)."""
    interval = f"{scrape_interval_s:g}s"
    by_release = {"matchLabels": {RELEASE_LABEL: release}}
    this_namespace = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    spec: dict[str, Any] = {
        "image": f"{PROMETHEUS_REPOSITORY}:{version}",
        "version": version,
        "replicas": 1,
        "serviceAccountName": PROMETHEUS_NAME,
        "portName": "http-web",
        "scrapeInterval": interval,
        "evaluationInterval": interval,
        "retention": "10d",
        "serviceMonitorSelector": by_release,
        "serviceMonitorNamespaceSelector": this_namespace,
        "podMonitorSelector": by_release,
        "podMonitorNamespaceSelector": this_namespace,
        "probeSelector": by_release,
        "probeNamespaceSelector": this_namespace,
        "ruleSelector": by_release,
        "ruleNamespaceSelector": this_namespace,
        "scrapeConfigSelector": by_release,
        "scrapeConfigNamespaceSelector": this_namespace,
        "securityContext": {"fsGroup": 2000, "runAsGroup": 2000, "runAsNonRoot": True, "runAsUser": 1000},
        "nodeSelector": {"kubernetes.io/hostname": NODE_NAME},
        "additionalArgs": [{"name": "rules.alert.resend-delay", "value": interval}],
    }
    if alertmanager_secret is not None:
        spec["additionalAlertManagerConfigs"] = {"name": alertmanager_secret, "key": ALERTMANAGER_SECRET_KEY}
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Prometheus",
        "metadata": {"name": PROMETHEUS_NAME, "namespace": namespace, "labels": {RELEASE_LABEL: release}},
        "spec": spec,
    }


def stack_objects(
    *,
    namespace: str,
    release: str,
    scrape_interval_s: float,
    alertmanager_url: str | None,
    versions: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Every object of the stack, in the order they are applied."""
    v = versions or read_versions()
    operator_version, prometheus_version = v["PROMETHEUS_OPERATOR_VERSION"], v["PROMETHEUS_VERSION"]
    cluster_name = f"{release}-{namespace}"
    accounts = {"prometheus-operator": "prometheus-operator", "prometheus": PROMETHEUS_NAME}
    objects = [
        _scoped(o, namespace=namespace, cluster_name=cluster_name, service_accounts=accounts)
        for o in _upstream([*_OPERATOR_RBAC, *_PROMETHEUS_RBAC])
    ]
    for obj in objects:
        if obj["kind"] == "Deployment":
            pod = obj["spec"]["template"]["spec"]
            container = pod["containers"][0]
            if container["image"] != f"{PROMETHEUS_OPERATOR_REPOSITORY}:{operator_version}":
                raise RuntimeError(
                    f"the module's Deployment runs {container['image']}, not {operator_version}"
                )
            container["args"] = operator_args(operator_version)
            pod["nodeSelector"] = {"kubernetes.io/hostname": NODE_NAME}
    secret_name = None
    if alertmanager_url is not None:
        secret_name = f"{PROMETHEUS_NAME}-additional-alertmanagers"
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": secret_name, "namespace": namespace},
                "stringData": {ALERTMANAGER_SECRET_KEY: alertmanager_config(alertmanager_url)},
            }
        )
    objects.append(
        prometheus_object(
            namespace=namespace,
            release=release,
            version=prometheus_version,
            scrape_interval_s=scrape_interval_s,
            alertmanager_secret=secret_name,
        )
    )
    return objects


@dataclass
class PrometheusStack(PrometheusApi):
    """prometheus-operator and its Prometheus serving one namespace; `start`, then `url`, then `stop`."""

    cluster: LocalCluster
    namespace: str
    work_dir: Path
    release: str = DEFAULT_RELEASE
    scrape_interval_s: float = 2.0
    alertmanager_url: str | None = None
    pod_ip: str = ""
    _manifest: Path | None = field(default=None, repr=False)
    _client: client.ApiClient | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """Prometheus' HTTP API at its pod's address."""
        return f"http://{self.pod_ip}:9090"

    @property
    def labels(self) -> dict[str, str]:
        """The labels its Prometheus selects ServiceMonitors and PrometheusRules by."""
        return {RELEASE_LABEL: self.release}

    @property
    def operator_args(self) -> list[str]:
        """The operator's flags that label what it generates so this Prometheus selects it."""
        return [f"--monitoring-label={key}={value}" for key, value in self.labels.items()]

    def start(self, timeout: float = 180) -> PrometheusStack:
        """Apply the CRDs and the stack; wait until the operator's Prometheus pod is ready and configured."""
        install_crds(self.cluster, crd_files(ALL_CRD_FILES))  # every kind the operator serves
        self.work_dir.mkdir(parents=True, exist_ok=True)
        objects = stack_objects(
            namespace=self.namespace,
            release=self.release,
            scrape_interval_s=self.scrape_interval_s,
            alertmanager_url=self.alertmanager_url,
        )
        self._manifest = self.work_dir / "prometheus-stack.json"
        self._manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
        self.cluster.kubectl("apply", "--server-side", "-f", str(self._manifest), timeout=60)
        self.pod_ip = eventually(
            self.ready_pod_ip,
            timeout=timeout,
            interval=1.0,
            description=f"prometheus-operator's Prometheus pod {self.namespace}/{self.pod_name} ready",
        )
        # Ready means the TSDB is open and a configuration loaded: the operator's, whose external
        # labels name this Prometheus object (the config reloader wrote it before Prometheus started).
        generated = f"prometheus: {self.namespace}/{PROMETHEUS_NAME}"
        eventually(
            lambda: generated in self.config(),
            timeout=60,
            description="Prometheus running the operator's configuration",
        )
        return self

    @property
    def pod_name(self) -> str:
        """The Prometheus pod of the operator's StatefulSet (one replica)."""
        return f"prometheus-{PROMETHEUS_NAME}-0"

    def ready_pod_ip(self) -> str | None:
        """The address of its Prometheus pod when that pod is Ready (None: missing or not Ready).

        prometheus-operator replaces the pod when its StatefulSet changes (more rule ConfigMaps);
        `url` keeps the address `start` found, so a caller can check the pod still serves there.
        """
        core = client.CoreV1Api(self._api())
        try:
            pod = core.read_namespaced_pod(self.pod_name, self.namespace)
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        ip = pod.status.pod_ip if pod.status is not None else None
        return str(ip) if ip and is_ready(pod) else None

    @property
    def pid(self) -> int:
        """The process id of its Prometheus: the node agent runs the pod's container as a local process.

        Found by the listen address the agent gives it (its pod IP), for the benchmarks' CPU meters.
        """
        flag = f"--web.listen-address={self.pod_ip}:9090"
        for process in psutil.process_iter(["cmdline"]):
            cmdline = process.info["cmdline"] or []
            if flag in cmdline and Path(cmdline[0]).name == "prometheus":
                return int(process.pid)
        raise RuntimeError(f"no prometheus process listening on {self.pod_ip}:9090")

    def _api(self) -> client.ApiClient:
        if self._client is None:
            self._client = api_client(self.cluster.paths.kubeconfig)
        return self._client

    def config(self) -> str:
        """The configuration Prometheus runs (/api/v1/status/config)."""
        response = httpx.get(f"{self.url}/api/v1/status/config", timeout=5)
        response.raise_for_status()
        return str(response.json()["data"]["yaml"])

    def load_cluster_rules(self, api: client.ApiClient, namespace: str, *, timeout: float = 90) -> list[str]:
        """Wait until Prometheus evaluates every group of the namespace's PrometheusRules; their names.

        Nothing is loaded by hand: the operator renders the PrometheusRules into a ConfigMap, the
        node agent refreshes the pod's volume (as a kubelet does), the config reloader reloads
        Prometheus.
        """
        answer = client.CustomObjectsApi(api).list_namespaced_custom_object(
            "monitoring.coreos.com", "v1", namespace, "prometheusrules"
        )
        items: list[dict[str, Any]] = cast("dict[str, Any]", answer)["items"]
        wanted = {g["name"] for item in items for g in item["spec"]["groups"]}
        eventually(
            lambda: wanted <= {g["name"] for g in self.rule_groups()},
            timeout=timeout,
            interval=1.0,
            description=f"Prometheus evaluating the rule groups {sorted(wanted)} (via prometheus-operator)",
        )
        return sorted(item["metadata"]["name"] for item in items)

    def stop(self, timeout: float = 60) -> None:
        """Delete the stack and wait until its pods are gone (the namespace may outlive the test)."""
        if self._manifest is None:
            return
        self.cluster.kubectl(
            "delete", "--ignore-not-found", "--wait=false", "-f", str(self._manifest), timeout=60
        )
        core = client.CoreV1Api(self._api())
        selector = "app.kubernetes.io/name in (prometheus, prometheus-operator)"
        eventually(
            lambda: not core.list_namespaced_pod(self.namespace, label_selector=selector).items,
            timeout=timeout,
            interval=1.0,
            description=f"the monitoring pods of {self.namespace} gone",
        )
        self._manifest = None
        if self._client is not None:
            self._client.close()
            self._client = None
