"""The Helm chart: lint, template, values schema, RBAC, CRD copy, README drift."""

from __future__ import annotations

import argparse
import base64
import importlib.util
import re
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tailpilot import crdgen

REPO = crdgen.REPO_ROOT
CHART = REPO / "charts" / "tailpilot"


@pytest.fixture(scope="session")
def helm() -> str:
    """The pinned helm (installed once into the cache by e2e/install-helm.sh)."""
    out = subprocess.run(
        ["bash", str(REPO / "e2e" / "install-helm.sh")],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    path = out.stdout.strip().splitlines()[-1]
    assert Path(path).is_file()
    return path


def _run(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=60, check=False)


def template(helm: str, *sets: str) -> list[dict[str, Any]]:
    args = ["template", "rel", str(CHART), "--namespace", "tp-system"]
    for s in sets:
        args += ["--set", s]
    out = _run(helm, *args)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def _component(doc: dict[str, Any]) -> str | None:
    return (doc["metadata"].get("labels") or {}).get("app.kubernetes.io/component")


def _operators(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The objects of `kind` that are not the activator's (the operator's, and the chart's others)."""
    return [d for d in _by_kind(docs, kind) if _component(d) != "activator"]


def _activators(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The activator's objects of `kind`."""
    return [d for d in _by_kind(docs, kind) if _component(d) == "activator"]


def _load_gen_readme() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_readme", CHART / "gen_readme.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_install_helm_is_idempotent_and_pinned(helm: str) -> None:
    again = subprocess.run(
        ["bash", str(REPO / "e2e" / "install-helm.sh")], capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0 and again.stdout.strip() == helm
    assert _run(helm, "version", "--short").stdout.startswith("v4.1.4")


def test_lint_strict(helm: str) -> None:
    out = _run(helm, "lint", "--strict", str(CHART))
    assert out.returncode == 0, out.stdout + out.stderr


def test_default_render(helm: str) -> None:
    docs = template(helm)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == [
        "ClusterRole",
        "ClusterRole",  # the activator's
        "ClusterRoleBinding",
        "ClusterRoleBinding",  # the activator's
        "Deployment",
        "Deployment",  # the activator's
        "NetworkPolicy",
        "NetworkPolicy",  # the activator's
        "PodDisruptionBudget",  # the activator's
        "Role",
        "Role",
        "Role",  # the operator's read of the activator's EndpointSlices
        "RoleBinding",
        "RoleBinding",
        "RoleBinding",
        "Secret",
        "Service",
        "Service",
        "Service",  # the activator's
        "ServiceAccount",
        "ServiceAccount",  # the activator's
    ]
    (dep,) = _operators(docs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (ctr,) = pod["containers"]
    sc = ctr["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert ctr["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
    assert ports == {"health": 8080, "metrics": 9090, "webhook": 8081}
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["TAILPILOT_LIVENESS"] == "http://0.0.0.0:8080/healthz"
    assert ctr["args"] == ["operator"]
    assert env["TAILPILOT_BUILDER_IMAGE"] == "ghcr.io/tailpilot/tailpilot-builder:0.1.0"
    assert ctr["image"] == "ghcr.io/tailpilot/tailpilot-operator:0.1.0"
    assert dep["spec"]["replicas"] == 2  # a leader and a standby


def test_crds_opt_in_and_kept(helm: str) -> None:
    assert not _by_kind(template(helm), "CustomResourceDefinition")
    assert not _by_kind(template(helm, "crds.enabled=false"), "CustomResourceDefinition")
    (crd,) = _by_kind(template(helm, "crds.enabled=true"), "CustomResourceDefinition")
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert crd["spec"] == crdgen.crd_spec()
    (unkept,) = _by_kind(template(helm, "crds.enabled=true", "crds.keep=false"), "CustomResourceDefinition")
    assert "annotations" not in unkept["metadata"]


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("logLevel=verbose", "logLevel"),
        ("crds.enabled=yes", "crds"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("containerSecurityContext.allowPrivilegeEscalation=true", "allowPrivilegeEscalation"),
        ("podSecurityContext.runAsUser=0", "runAsUser"),
        ("webhook.port=70000", "port"),
        ("engineStore.claimName=Not_A_Name", "claimName"),
        ("webhook.tokenSecret.name=Not_A_Name", "name"),
        ("webhook.tokenSecret.key=a/b", "key"),
        ("webhook.tokenSecret.keep=yes", "keep"),
        ("typoValue=1", "typoValue"),
        ("gpuPrices.NVIDIA-L4=-1", "gpuPrices"),
        ("activator.enabled=maybe", "enabled"),
        ("activator.holdTimeoutSeconds=0", "holdTimeoutSeconds"),
        ("activator.maxHeldBytes=-1", "maxHeldBytes"),
        ("activator.replicas=3", "replicas"),
        ("activator.maxBodyBytes=300000000", "maxBodyBytes must not exceed maxHeldBytes"),
        ("networkPolicy.apiServer.ports={}", "ports"),
    ],
)
def test_values_schema_rejects(helm: str, setting: str, complaint: str) -> None:
    out = _run(helm, "template", "rel", str(CHART), "--set", setting)
    assert out.returncode != 0
    assert complaint in out.stderr, out.stderr


def _secret_role(docs: list[dict[str, Any]]) -> str:
    """The one Secret the namespaced Role lets the operator's ServiceAccount `get`."""
    (role,) = [r for r in _by_kind(docs, "Role") if r["metadata"]["name"] == "rel-tailpilot"]
    (rule,) = role["rules"]
    assert rule == {
        "apiGroups": [""],
        "resources": ["secrets"],
        "resourceNames": rule["resourceNames"],
        "verbs": ["get"],
    }
    (binding,) = [b for b in _by_kind(docs, "RoleBinding") if b["roleRef"]["name"] == "rel-tailpilot"]
    (subject,) = binding["subjects"]
    assert subject == {"kind": "ServiceAccount", "name": "rel-tailpilot", "namespace": "tp-system"}
    (name,) = rule["resourceNames"]
    return str(name)


def test_webhook_token_secret_is_generated_by_default(helm: str) -> None:
    docs = template(helm)
    (secret,) = _by_kind(docs, "Secret")
    assert secret["metadata"]["name"] == "rel-tailpilot-webhook-token"
    assert secret["metadata"]["namespace"] == "tp-system"
    assert "annotations" not in secret["metadata"]  # `helm uninstall` deletes it with the release
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert re.fullmatch(r"[A-Za-z0-9]{48}", token), token
    assert _secret_role(docs) == "rel-tailpilot-webhook-token"
    (kept,) = _by_kind(template(helm, "webhook.tokenSecret.keep=true"), "Secret")
    assert kept["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    (other_key,) = _by_kind(template(helm, "webhook.tokenSecret.key=bearer"), "Secret")
    assert set(other_key["data"]) == {"bearer"}


def test_a_users_token_secret_is_used_and_none_generated(helm: str) -> None:
    docs = template(helm, "webhook.tokenSecret.name=am-token")
    assert not _by_kind(docs, "Secret")
    assert _secret_role(docs) == "am-token"


def test_webhook_disabled_renders_none_of_it(helm: str) -> None:
    docs = template(helm, "webhook.enabled=false")
    assert not _by_kind(docs, "Secret")
    # The one Role left is the Lease's: nothing grants a Secret.
    # The Roles left are the Lease's and the activator's EndpointSlices' reads.
    lease_and_slices = ["rel-tailpilot-activator-endpoints", "rel-tailpilot-leader-election"]
    assert sorted(r["metadata"]["name"] for r in _by_kind(docs, "Role")) == lease_and_slices
    assert sorted(b["metadata"]["name"] for b in _by_kind(docs, "RoleBinding")) == lease_and_slices
    assert [s["metadata"]["name"] for s in _operators(docs, "Service")] == ["rel-tailpilot-metrics"]
    (dep,) = _operators(docs, "Deployment")
    (ctr,) = dep["spec"]["template"]["spec"]["containers"]
    assert {p["name"] for p in ctr["ports"]} == {"health", "metrics"}
    assert not [e for e in ctr["env"] if "WEBHOOK" in e["name"]]


EXPECTED_RULES = {
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"get", "list", "watch"},
    ("", "namespaces"): {"list", "watch"},
    ("", "events"): {"create", "patch"},
    ("tailpilot.io", "inferenceservices"): {"get", "list", "watch", "patch"},
    ("tailpilot.io", "inferenceservices/status"): {"patch"},
    ("tailpilot.io", "inferenceservices/finalizers"): {"update"},  # blockOwnerDeletion on children
    ("batch", "jobs"): {"create", "get", "list", "watch", "delete"},
    ("", "pods"): {"get", "list", "watch", "patch"},  # patch: the rotation label
    ("", "nodes"): {"list"},  # free GPUs per product, for services listing several
    ("", "configmaps"): {"create", "get", "list", "watch", "patch", "update", "delete"},
    ("", "services"): {"create", "get", "list", "watch", "patch", "update", "delete"},
    ("apps", "deployments"): {"create", "get", "list", "watch", "patch", "update", "delete"},
    ("apps", "replicasets"): {"list", "patch", "delete"},  # a GPU product move's hand-over
    ("policy", "poddisruptionbudgets"): {"create", "get", "list", "watch", "patch", "update", "delete"},
    ("", "secrets"): {"create", "get"},  # the admin-key Secrets: immutable, deleted by their owner references
    ("networking.k8s.io", "networkpolicies"): {"create", "get", "list", "watch", "patch", "delete"},
    ("monitoring.coreos.com", "servicemonitors"): {"create", "get", "list", "watch", "patch", "delete"},
    ("monitoring.coreos.com", "prometheusrules"): {"create", "get", "list", "watch", "patch", "delete"},
    # Scale to zero (with the activator): the EndpointSlice routing a cold service's Service to it.
    ("discovery.k8s.io", "endpointslices"): {"create", "get", "list", "watch", "patch", "delete"},
}


def _grants(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    grants: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                grants.setdefault((group, resource), set()).update(rule["verbs"])
    return grants


def test_cluster_role_is_least_privilege(helm: str) -> None:
    (role,) = _operators(template(helm), "ClusterRole")
    text = (CHART / "templates" / "operator-clusterrole.yaml").read_text()
    assert "*" not in text
    assert _grants(role) == EXPECTED_RULES
    # Every rule is preceded by a comment saying why.
    rules = text.split("rules:", 1)[1]
    assert rules.count("- apiGroups:") == rules.count("  # ") == len(role["rules"])


def _child_kinds() -> set[tuple[str, str]]:
    """(apiVersion, kind) of every object the manifest builders make for a GPU service."""
    from tailpilot.api.engine import BuildOutcome, BuildResult, TensorSpec
    from tailpilot.api.v1alpha1 import InferenceService
    from tailpilot.manifests import (
        build_job,
        deployment,
        network_policy,
        pdb,
        prometheus_rule,
        service,
        service_monitor,
        triton_access,
        triton_configmap,
    )
    from tailpilot.manifests.settings import ManifestSettings, NetworkPolicySettings

    obj = yaml.safe_load((REPO / "examples" / "gpu-tensorrt-h100.yaml").read_text())
    obj["metadata"]["uid"] = "u1"
    isvc = InferenceService.model_validate(obj)
    settings = ManifestSettings(builder_image="b:1")
    tensor = TensorSpec(name="data", data_type="TYPE_FP32", dims=(3, 224, 224))
    result = BuildResult(
        outcome=BuildOutcome.SUCCEEDED,
        engine_key="0123456789abcdef0123456789abcdef",
        triton_backend="tensorrt",
        inputs=(tensor,),
        outputs=(tensor,),
    )
    children = [
        build_job.build_job(isvc=isvc, request=build_job.make_build_request(isvc=isvc), settings=settings),
        triton_configmap.triton_configmap(isvc=isvc, result=result, batching=isvc.spec.batching.to_config()),
        deployment.triton_deployment(
            isvc=isvc,
            engine_key="0123456789abcdef0123456789abcdef",
            rollout_hash="h",
            replicas=1,
            settings=settings,
            admin_key=triton_access.admin_key_ref(isvc.name),
        ),
        triton_access.admin_key_secret(isvc=isvc, key="k"),
        network_policy.triton_network_policy(isvc=isvc, settings=NetworkPolicySettings()),
        service.triton_service(isvc=isvc),
        pdb.triton_pdb(isvc=isvc),
        service_monitor.service_monitor(isvc=isvc, settings=settings),
        prometheus_rule.prometheus_rule(isvc=isvc, settings=settings),
    ]
    return {(child["apiVersion"], child["kind"]) for child in children}


def test_cluster_role_covers_every_child_the_builders_make(helm: str) -> None:
    (role,) = _operators(template(helm), "ClusterRole")
    grants = _grants(role)
    plural = {"Job": "jobs", "ConfigMap": "configmaps", "Deployment": "deployments", "Service": "services"}
    plural |= {"PodDisruptionBudget": "poddisruptionbudgets", "ServiceMonitor": "servicemonitors"}
    plural |= {"PrometheusRule": "prometheusrules", "Secret": "secrets", "NetworkPolicy": "networkpolicies"}
    for api_version, kind in _child_kinds():
        group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
        # The admin-key Secret is never deleted by the operator (its owner reference does that).
        verbs = {"create", "get"} if kind == "Secret" else {"create", "get", "delete"}
        assert verbs <= grants[(group, plural[kind])], kind


def test_templates_are_named_component_kind() -> None:
    for path in (CHART / "templates").glob("*.yaml"):
        assert re.fullmatch(r"[a-z]+-[a-z]+\.yaml", path.name), path.name


def test_every_value_is_documented() -> None:
    gen = _load_gen_readme()
    text = (CHART / "values.yaml").read_text()
    docs = gen.documented_keys(text)
    values = yaml.safe_load(text)
    for leaf in gen.leaf_paths(values):
        parts = leaf.split(".")
        assert any(".".join(parts[:i]) in docs for i in range(len(parts), 0, -1)), f"{leaf} is undocumented"


def test_readme_matches_generator() -> None:
    gen = _load_gen_readme()
    assert (CHART / "README.md").read_text() == gen.render((CHART / "values.yaml").read_text()), (
        "run `python charts/tailpilot/gen_readme.py --write`"
    )


class _ReadRecorder(Mapping[str, str]):
    """An environment that records which variables were looked up."""

    def __init__(self, env: dict[str, str]):
        self._env = env
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return self._env[key]

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("the operator looks variables up by name, it never lists the environment")

    def __len__(self) -> int:
        return len(self._env)


def _operator_parse(helm: str, *sets: str) -> tuple[argparse.Namespace, Any, set[str]]:
    """Render the chart, feed its Deployment's args and env through the operator's own parsing.

    Returns the parsed flags, the `OperatorSettings`, and the variables the chart sets that the
    operator never read.
    """
    from tailpilot.controllers.process.main import build_settings, parse_args

    (dep,) = _operators(template(helm, *sets), "Deployment")
    (ctr,) = dep["spec"]["template"]["spec"]["containers"]
    # Every variable is a literal (no valueFrom), so this test sees exactly what the operator sees.
    assert all(set(e) == {"name", "value"} for e in ctr["env"]), ctr["env"]
    env = {e["name"]: e["value"] for e in ctr["env"]}
    assert len(env) == len(ctr["env"]), "a variable is set twice"
    assert ctr["args"][0] == "operator"
    recorder = _ReadRecorder(env)
    args = parse_args(ctr["args"][1:], environ=recorder)
    return args, build_settings(args), set(env) - recorder.read


def test_defaults_reach_the_operator_settings(helm: str) -> None:
    args, settings, unread = _operator_parse(helm)
    assert unread == set()
    m = settings.manifests
    assert m.builder_image == "ghcr.io/tailpilot/tailpilot-builder:0.1.0"
    assert m.triton_image == "nvcr.io/nvidia/tritonserver:24.10-py3"
    assert m.engine_store_claim == "tailpilot-engines"
    assert dict(m.monitoring_labels) == {}
    assert settings.prometheus_url == "http://prometheus-operated.monitoring.svc:9090"
    assert args.liveness == "http://0.0.0.0:8080/healthz"
    assert args.metrics_port == 9090
    # The webhook is served, authenticated by the generated Secret (rendered above).
    assert args.webhook_port == 8081
    assert args.webhook_token_secret == "tp-system/rel-tailpilot-webhook-token/token"
    assert args.webhook_token_file == ""
    assert args.namespace == [] and args.verbose is False


def test_a_users_token_secret_reaches_the_operator(helm: str) -> None:
    args, _, unread = _operator_parse(
        helm, "webhook.tokenSecret.name=am-token", "webhook.tokenSecret.key=bearer"
    )
    assert unread == set()
    assert args.webhook_port == 8081
    assert args.webhook_token_secret == "tp-system/am-token/bearer"


def test_webhook_disabled_reaches_the_operator(helm: str) -> None:
    args, _, unread = _operator_parse(helm, "webhook.enabled=false")
    assert unread == set()
    assert args.webhook_port == 0 and args.webhook_token_secret == ""


def test_monitoring_labels_reach_the_generated_monitoring_objects(helm: str) -> None:
    from tailpilot.api.v1alpha1 import InferenceService
    from tailpilot.manifests import prometheus_rule, service_monitor

    _, settings, unread = _operator_parse(
        helm, "prometheus.monitoringLabels.release=prom", "prometheus.monitoringLabels.team=ml"
    )
    assert unread == set()
    assert dict(settings.manifests.monitoring_labels) == {"release": "prom", "team": "ml"}
    obj = yaml.safe_load((REPO / "examples" / "gpu-tensorrt-h100.yaml").read_text())
    obj["metadata"]["uid"] = "u1"
    isvc = InferenceService.model_validate(obj)
    for made in (
        service_monitor.service_monitor(isvc=isvc, settings=settings.manifests),
        prometheus_rule.prometheus_rule(isvc=isvc, settings=settings.manifests),
    ):
        assert {"release": "prom", "team": "ml"}.items() <= made["metadata"]["labels"].items(), made["kind"]


def test_watch_namespaces_and_images_reach_the_operator(helm: str) -> None:
    args, settings, unread = _operator_parse(
        helm,
        "watchNamespaces={ml,prod}",
        "logLevel=debug",
        "builder.image.tag=9.9",
        "triton.image=registry.local/triton:1",
        "engineStore.claimName=engines",
        "prometheus.url=http://prom.local:9090",
        "metrics.port=9191",
    )
    assert unread == set()
    assert args.namespace == ["ml", "prod"] and args.verbose is True
    assert settings.manifests.builder_image == "ghcr.io/tailpilot/tailpilot-builder:9.9"
    assert settings.manifests.triton_image == "registry.local/triton:1"
    assert settings.manifests.engine_store_claim == "engines"
    assert settings.prometheus_url == "http://prom.local:9090"
    assert args.metrics_port == 9191


def test_gpu_prices_reach_the_operator(helm: str) -> None:
    _, settings, unread = _operator_parse(
        helm, "gpuPrices.NVIDIA-L4=0.8", "gpuPrices.NVIDIA-H100-80GB-HBM3=4"
    )
    assert unread == set()
    assert dict(settings.gpu_prices) == {"NVIDIA-L4": 0.8, "NVIDIA-H100-80GB-HBM3": 4.0}
    _, defaults, _ = _operator_parse(helm)
    assert dict(defaults.gpu_prices) == {}


def test_the_allowed_prometheus_endpoints_and_tenant_queries_reach_the_operator(helm: str) -> None:
    from tailpilot.controllers.process.main import prometheus_access

    args, _, unread = _operator_parse(
        helm,
        "prometheus.allowedUrls={https://prom.team-a.example:9443,http://prom.b:9090/prometheus}",
        "prometheus.clientLatencyQueries=true",
    )
    assert unread == set()
    access = prometheus_access(args)
    assert access.allows("https://prom.team-a.example:9443") and access.allows(
        "http://prom.b:9090/prometheus"
    )
    assert access.allows("http://prometheus-operated.monitoring.svc:9090")  # the chart's url, always
    assert access.client_queries is True
    defaults, _, _ = _operator_parse(helm)
    default_access = prometheus_access(defaults)
    assert default_access.allowed_urls == () and default_access.client_queries is False
    assert not default_access.allows("http://169.254.169.254")
    # The schema refuses an entry that could never match (a query) before the operator would.
    out = _run(helm, "template", "rel", str(CHART), "--set", "prometheus.allowedUrls={http://p:9090/?x=1}")
    assert out.returncode != 0 and "allowedUrls" in out.stderr


def test_build_pod_limits_and_the_stores_gc_reach_the_operator(helm: str) -> None:
    _, settings, unread = _operator_parse(
        helm,
        "builder.memoryRequest=2Gi",
        "builder.memoryLimit=16Gi",
        "builder.tmpSize=20Gi",
        "engineStore.retentionHours=48",
        "engineStore.budget=500Gi",
    )
    assert unread == set()
    m = settings.manifests
    assert (m.build_memory_request, m.build_memory_limit, m.build_tmp_size) == ("2Gi", "16Gi", "20Gi")
    assert (m.store_retention_hours, m.store_budget_bytes) == (48.0, 500 * 1024**3)
    _, defaults, _ = _operator_parse(helm)
    d = defaults.manifests
    assert (d.build_memory_limit, d.build_tmp_size, d.store_retention_hours, d.store_budget_bytes) == (
        "8Gi",
        "4Gi",
        720.0,
        None,
    )
    # The schema refuses what is not a quantity before the operator would.
    out = _run(helm, "template", "rel", str(CHART), "--set", "builder.tmpSize=lots")
    assert out.returncode != 0 and "tmpSize" in out.stderr


def test_an_unread_variable_is_noticed(helm: str) -> None:
    # The check above has teeth: a variable the operator does not read (here via extraEnv) shows up.
    _, _, unread = _operator_parse(helm, "extraEnv[0].name=TAILPILOT_NAMESPACE", "extraEnv[0].value=x")
    assert unread == {"TAILPILOT_NAMESPACE"}


def test_namespaces_and_verbosity_become_operator_flags(helm: str) -> None:
    (dep,) = _operators(template(helm, "watchNamespaces={ml,prod}", "logLevel=debug"), "Deployment")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["operator", "--namespace=ml", "--namespace=prod", "--verbose"]


# High availability: leader election, the Lease's Role, the budget and the spread -------------------


def test_leader_election_by_default_reaches_the_operator(helm: str) -> None:
    args, _, unread = _operator_parse(helm)
    assert unread == set()
    assert args.leader_election is True
    assert args.leader_election_namespace == "tp-system" and args.leader_election_lease == "rel-tailpilot"
    timing = args.election_timing
    assert (timing.lease_duration_s, timing.renew_deadline_s, timing.retry_period_s) == (15, 10, 2)
    args, _, unread = _operator_parse(
        helm,
        "leaderElection.leaseDuration=30",
        "leaderElection.renewDeadline=20",
        "leaderElection.retryPeriod=4",
    )
    assert unread == set()
    timing = args.election_timing
    assert (timing.lease_duration_s, timing.renew_deadline_s, timing.retry_period_s) == (30, 20, 4)


def test_leader_election_deployment_rolls_and_only_the_leader_is_ready(helm: str) -> None:
    (dep,) = _operators(template(helm), "Deployment")
    rolling = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    assert dep["spec"]["strategy"] == rolling
    pod = dep["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    assert ctr["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert ctr["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    # A user's affinity replaces the default spread.
    (own,) = _operators(template(helm, "affinity.nodeAffinity.x=y"), "Deployment")
    assert own["spec"]["template"]["spec"]["affinity"] == {"nodeAffinity": {"x": "y"}}


def test_the_lease_role_grants_one_lease_in_the_release_namespace(helm: str) -> None:
    docs = template(helm)
    (role,) = [r for r in _by_kind(docs, "Role") if r["metadata"]["name"] == "rel-tailpilot-leader-election"]
    assert role["metadata"]["namespace"] == "tp-system"
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["rel-tailpilot"],
            "verbs": ["get", "update"],
        },
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    ]
    (binding,) = [
        b for b in _by_kind(docs, "RoleBinding") if b["roleRef"]["name"] == role["metadata"]["name"]
    ]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "rel-tailpilot", "namespace": "tp-system"}
    ]


def test_disruption_budget_is_opt_in_keeps_one_ready_operator_and_lets_standbys_go(helm: str) -> None:
    # Off by default: the standby is never Ready, so a budget would hold every drain of the leader's node.
    assert not _operators(template(helm), "PodDisruptionBudget")
    (pdb,) = _operators(template(helm, "podDisruptionBudget.enabled=true"), "PodDisruptionBudget")
    (dep,) = _operators(template(helm), "Deployment")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    # One replica: a budget of one would forbid every eviction.
    assert not _operators(
        template(helm, "podDisruptionBudget.enabled=true", "replicaCount=1"), "PodDisruptionBudget"
    )


def test_without_leader_election_one_replica_recreated_and_no_lease(helm: str) -> None:
    docs = template(helm, "leaderElection.enabled=false", "replicaCount=1")
    (dep,) = _operators(docs, "Deployment")
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    (ctr,) = dep["spec"]["template"]["spec"]["containers"]
    assert ctr["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert not [r for r in _by_kind(docs, "Role") if "leader" in r["metadata"]["name"]]
    args, _, unread = _operator_parse(helm, "leaderElection.enabled=false", "replicaCount=1")
    assert unread == set() and args.leader_election is False


@pytest.mark.parametrize(
    ("sets", "complaint"),
    [
        (("leaderElection.enabled=false",), "replicaCount"),  # the default 2, without an election
        (("leaderElection.enabled=false", "replicaCount=3"), "replicaCount"),
        (("leaderElection.renewDeadline=15",), "leaseDuration > renewDeadline"),
        (("leaderElection.retryPeriod=9",), "1.2 x retryPeriod"),
        (("leaderElection.leaseDuration=1.5",), "leaseDuration"),
    ],
)
def test_replicas_without_an_election_and_unsafe_timings_are_refused(
    helm: str, sets: tuple[str, ...], complaint: str
) -> None:
    out = _run(helm, "template", "rel", str(CHART), *[a for s in sets for a in ("--set", s)])
    assert out.returncode != 0
    assert complaint in out.stderr, out.stderr


# RBAC scoped to the watched namespaces -------------------------------------------------------------

CLUSTERWIDE_RULES = {
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"get", "list", "watch"},
    ("", "namespaces"): {"list", "watch"},
    ("", "nodes"): {"list"},
    ("", "pods"): {"list"},
}


def test_all_namespaces_bind_the_cluster_role_cluster_wide(helm: str) -> None:
    docs = template(helm)
    (binding,) = _operators(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == "rel-tailpilot"
    assert not [b for b in _by_kind(docs, "RoleBinding") if b["roleRef"]["kind"] == "ClusterRole"]


def test_watched_namespaces_bind_the_namespaced_rules_there_only(helm: str) -> None:
    docs = template(helm, "watchNamespaces={ml,prod}")
    roles = {r["metadata"]["name"]: r for r in _operators(docs, "ClusterRole")}
    assert set(roles) == {"rel-tailpilot", "rel-tailpilot-clusterwide"}
    # Cluster-wide: what no namespace holds, read-only, and listing pods (free GPUs per node).
    (binding,) = _operators(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "rel-tailpilot-clusterwide",
    }
    clusterwide = roles["rel-tailpilot-clusterwide"]
    assert _grants(clusterwide) == CLUSTERWIDE_RULES
    assert not {"create", "update", "patch", "delete"} & set().union(*CLUSTERWIDE_RULES.values())
    text = (CHART / "templates" / "clusterwide-clusterrole.yaml").read_text()
    rules = text.split("rules:", 1)[1]
    assert rules.count("- apiGroups:") == rules.count("  # ") == len(clusterwide["rules"])
    # Namespaced: the operator's ClusterRole, bound in each watched namespace by a RoleBinding.
    watched = [b for b in _by_kind(docs, "RoleBinding") if b["roleRef"]["kind"] == "ClusterRole"]
    assert sorted(b["metadata"]["namespace"] for b in watched) == ["ml", "prod"]
    for b in watched:
        assert b["roleRef"]["name"] == "rel-tailpilot"
        assert b["subjects"] == [
            {"kind": "ServiceAccount", "name": "rel-tailpilot", "namespace": "tp-system"}
        ]
    # The release namespace may be watched too: no two RoleBindings of one name there.
    both = template(helm, "watchNamespaces={tp-system}")
    names = [(b["metadata"]["namespace"], b["metadata"]["name"]) for b in _by_kind(both, "RoleBinding")]
    assert len(names) == len(set(names)), names


def test_the_operators_network_policy_admits_alertmanager_and_prometheus_only(helm: str) -> None:
    (dep,) = _operators(template(helm), "Deployment")
    (policy,) = _operators(template(helm), "NetworkPolicy")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    webhook, metrics = policy["spec"]["ingress"]
    assert webhook["ports"] == [{"protocol": "TCP", "port": 8081}]
    assert webhook["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "alertmanager"}},
        }
    ]
    assert metrics["ports"] == [{"protocol": "TCP", "port": 9090}]
    assert metrics["from"][0]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}
    # Without the webhook, only the metrics port is open.
    (no_webhook,) = _operators(template(helm, "webhook.enabled=false"), "NetworkPolicy")
    assert [r["ports"][0]["port"] for r in no_webhook["spec"]["ingress"]] == [9090]


def test_the_services_network_policies_get_the_charts_peers_and_the_operators_pods(helm: str) -> None:
    from tailpilot.manifests.settings import NetworkPolicySettings

    (dep,) = _operators(template(helm), "Deployment")
    _, settings, unread = _operator_parse(
        helm,
        "networkPolicy.tritonClients[0].podSelector.matchLabels.role=frontend",
        "networkPolicy.prometheus.namespaceSelector.matchLabels.team=obs",
    )
    assert unread == set()
    policy = settings.manifests.network_policy
    assert isinstance(policy, NetworkPolicySettings)
    # The activator forwards the clients' requests: it is one of the listed clients.
    (activator,) = _activators(template(helm), "Deployment")
    assert policy.clients == (
        {"podSelector": {"matchLabels": {"role": "frontend"}}},
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tp-system"}},
            "podSelector": {"matchLabels": activator["spec"]["selector"]["matchLabels"]},
        },
    )
    (prometheus,) = policy.prometheus
    assert prometheus["namespaceSelector"]["matchLabels"]["team"] == "obs"
    (operator,) = policy.operator
    assert operator["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "tp-system"}}
    # The operator's own pods are what the peer selects: its reloads and reads reach the Triton pods.
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert operator["podSelector"]["matchLabels"].items() <= pod_labels.items()
    _, defaults, _ = _operator_parse(helm)
    assert defaults.manifests.network_policy is not None
    assert defaults.manifests.network_policy.clients == ()  # every source, by default


def test_network_policies_off(helm: str) -> None:
    docs = template(helm, "networkPolicy.enabled=false")
    assert not _by_kind(docs, "NetworkPolicy")
    _, settings, unread = _operator_parse(helm, "networkPolicy.enabled=false")
    assert unread == set()
    assert settings.manifests.network_policy is None


# The activator (docs/activator.md) -----------------------------------------------------------------

ACTIVATOR = "rel-tailpilot-activator"
#: The activator's RBAC, exactly: which services exist and their replicas (cluster-wide), and the wake.
ACTIVATOR_RULES = {
    ("", "services"): {"list", "watch"},
    ("discovery.k8s.io", "endpointslices"): {"list", "watch"},
    ("tailpilot.io", "inferenceservices"): {"patch"},
}
MIB = 1024 * 1024


def _mib(quantity: str) -> float:
    """A memory quantity in Mi or Gi, in MiB."""
    units = {"Mi": 1, "Gi": 1024}
    return float(quantity[:-2]) * units[quantity[-2:]]


def _activator_pod(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The activator's Deployment, its pod spec and its one container."""
    (dep,) = _activators(docs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    return dep, pod, ctr


def test_the_activator_runs_two_restricted_replicas_of_the_operators_image(helm: str) -> None:
    from tailpilot.activator.holding import HoldLimits
    from tailpilot.activator.main import parse_args, settings_from

    from ..manifests.fixtures import assert_restricted

    docs = template(helm)
    dep, pod, ctr = _activator_pod(docs)
    (operator,) = _operators(docs, "Deployment")
    assert (dep["metadata"]["name"], dep["metadata"]["namespace"]) == (ACTIVATOR, "tp-system")
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    assert pod["serviceAccountName"] == ACTIVATOR
    assert_restricted(pod)
    assert ctr["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    # The operator's image, which holds the whole package, run as the activator's module.
    assert ctr["image"] == operator["spec"]["template"]["spec"]["containers"][0]["image"]
    assert ctr["command"] == ["python", "-P", "-m", "tailpilot.activator"]
    # Its flags through the activator's own parsing: every one is a flag it has, and the chart's
    # defaults are the activator's.
    settings = settings_from(parse_args(ctr["args"]))
    assert (settings.bind_address, settings.http_port, settings.grpc_port, settings.admin_port) == (
        "0.0.0.0",
        8000,
        8001,
        9090,
    )
    assert settings.limits == HoldLimits()
    assert (settings.retry_after_s, settings.forward_timeout_s, settings.grpc_max_concurrent_rpcs) == (
        5,
        300.0,
        1024,
    )
    assert {p["name"]: p["containerPort"] for p in ctr["ports"]} == {
        "http": 8000,
        "grpc": 8001,
        "metrics": 9090,
    }
    assert ctr["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert ctr["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    # A drain outlasts the preStop sleep plus the hold timeout: the kubelet never cuts one short.
    pre_stop = ctr["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert 0 < pre_stop <= 10
    assert pod["terminationGracePeriodSeconds"] > pre_stop + settings.limits.hold_timeout_s
    # Memory: about 70 MiB at rest plus 2 times the held-bytes bound (gRPC's worst case,
    # docs/activator.md); the limit covers it.
    resources = ctr["resources"]
    assert _mib(resources["limits"]["memory"]) >= 70 + 2 * settings.limits.max_held_bytes / MIB
    assert _mib(resources["requests"]["memory"]) >= 70 and resources["requests"]["cpu"]
    # Different nodes preferred; and the operator's selectors never catch an activator pod.
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert not operator["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert (
        not dep["spec"]["selector"]["matchLabels"].items()
        <= operator["spec"]["template"]["metadata"]["labels"].items()
    )


def test_the_activators_bounds_are_values(helm: str) -> None:
    from tailpilot.activator.main import parse_args, settings_from

    _, pod, ctr = _activator_pod(
        template(
            helm,
            "activator.maxHeldPerService=50",
            "activator.maxHeldBytes=1073741824",
            "activator.maxBodyBytes=1048576",
            "activator.holdTimeoutSeconds=600",
            "activator.retryAfterSeconds=2",
            "activator.forwardTimeoutSeconds=60",
            "activator.grpcMaxConcurrentRpcs=256",
            "activator.preStopSleepSeconds=3",
            "logLevel=debug",
        )
    )
    settings = settings_from(parse_args(ctr["args"]))
    limits = settings.limits
    assert (limits.max_held_per_service, limits.max_held_bytes, limits.max_body_bytes) == (
        50,
        1 << 30,
        1 << 20,
    )
    assert limits.hold_timeout_s == 600.0
    assert (settings.retry_after_s, settings.forward_timeout_s, settings.grpc_max_concurrent_rpcs) == (
        2,
        60.0,
        256,
    )
    assert parse_args(ctr["args"]).log_level == "DEBUG"
    assert pod["terminationGracePeriodSeconds"] == 600 + 3 + 25
    assert ctr["lifecycle"]["preStop"]["sleep"]["seconds"] == 3


def test_the_activators_service_names_the_ports_the_operator_routes_by(helm: str) -> None:
    docs = template(helm)
    dep, _, _ = _activator_pod(docs)
    (service,) = _activators(docs, "Service")
    assert (service["metadata"]["name"], service["metadata"]["namespace"]) == (ACTIVATOR, "tp-system")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    ports = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert ports == {"http": (8000, "http"), "grpc": (8001, "grpc"), "metrics": (9090, "metrics")}


def test_the_activators_rbac_is_exactly_what_it_uses(helm: str) -> None:
    docs = template(helm)
    (role,) = _activators(docs, "ClusterRole")
    assert role["metadata"]["name"] == ACTIVATOR
    assert _grants(role) == ACTIVATOR_RULES
    assert not any("resourceNames" in rule for rule in role["rules"])
    text = (CHART / "templates" / "activator-clusterrole.yaml").read_text()
    assert "*" not in text
    rules = text.split("rules:", 1)[1]
    assert rules.count("- apiGroups:") == rules.count("  # ") == len(role["rules"])
    (binding,) = _activators(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": ACTIVATOR,
    }
    account = {"kind": "ServiceAccount", "name": ACTIVATOR, "namespace": "tp-system"}
    assert binding["subjects"] == [account]
    (service_account,) = _activators(docs, "ServiceAccount")
    assert service_account["metadata"]["name"] == ACTIVATOR
    assert service_account["automountServiceAccountToken"] is True
    # Nothing else is bound to the activator's account.
    bindings = _by_kind(docs, "RoleBinding") + _by_kind(docs, "ClusterRoleBinding")
    assert [b["metadata"]["name"] for b in bindings if account in b["subjects"]] == [ACTIVATOR]
    # The same rules cluster-wide with watched namespaces: the activator has no namespace list.
    (scoped,) = _activators(template(helm, "watchNamespaces={ml}"), "ClusterRole")
    assert _grants(scoped) == ACTIVATOR_RULES


def test_the_operator_may_route_to_the_activator(helm: str) -> None:
    docs = template(helm)
    # Where services live: the operator's ClusterRole (EXPECTED_RULES) writes their EndpointSlices.
    (role,) = _operators(docs, "ClusterRole")
    assert _grants(role)[("discovery.k8s.io", "endpointslices")] == {
        "create",
        "get",
        "list",
        "watch",
        "patch",
        "delete",
    }
    # In the release namespace: reading the activator's EndpointSlices.
    (reads,) = [r for r in _by_kind(docs, "Role") if r["metadata"]["name"] == f"{ACTIVATOR}-endpoints"]
    assert reads["metadata"]["namespace"] == "tp-system"
    assert reads["rules"] == [
        {
            "apiGroups": ["discovery.k8s.io"],
            "resources": ["endpointslices"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    (binding,) = [
        b for b in _by_kind(docs, "RoleBinding") if b["roleRef"]["name"] == f"{ACTIVATOR}-endpoints"
    ]
    assert binding["metadata"]["namespace"] == "tp-system"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "rel-tailpilot", "namespace": "tp-system"}
    ]
    # With watched namespaces: the writes where the services are (the ClusterRole bound there), not
    # cluster-wide; the reads of the activator's slices stay in the release namespace.
    scoped = template(helm, "watchNamespaces={ml,prod}")
    roles = {r["metadata"]["name"]: r for r in _operators(scoped, "ClusterRole")}
    assert ("discovery.k8s.io", "endpointslices") in _grants(roles["rel-tailpilot"])
    assert ("discovery.k8s.io", "endpointslices") not in _grants(roles["rel-tailpilot-clusterwide"])
    watched = [b for b in _by_kind(scoped, "RoleBinding") if b["roleRef"]["kind"] == "ClusterRole"]
    assert sorted(b["metadata"]["namespace"] for b in watched) == ["ml", "prod"]
    assert [
        r["metadata"]["namespace"]
        for r in _by_kind(scoped, "Role")
        if r["metadata"]["name"] == f"{ACTIVATOR}-endpoints"
    ] == ["tp-system"]


def test_the_operator_is_told_where_the_activator_is(helm: str) -> None:
    args, settings, unread = _operator_parse(helm)
    assert unread == set()
    assert args.activator_service == f"tp-system/{ACTIVATOR}"
    assert settings.activator_service == ("tp-system", ACTIVATOR)
    (service,) = _activators(template(helm), "Service")
    assert (service["metadata"]["namespace"], service["metadata"]["name"]) == settings.activator_service


def test_the_activators_disruption_budget_keeps_one_serving(helm: str) -> None:
    docs = template(helm)
    dep, _, _ = _activator_pod(docs)
    (pdb,) = _activators(docs, "PodDisruptionBudget")
    assert pdb["metadata"]["name"] == ACTIVATOR
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    # One replica: a budget of one would forbid every eviction.
    assert not _activators(template(helm, "activator.replicaCount=1"), "PodDisruptionBudget")


def test_the_activators_network_policy(helm: str) -> None:
    from tailpilot.api import constants as c
    from tailpilot.api.v1alpha1 import InferenceService
    from tailpilot.manifests import deployment, triton_access
    from tailpilot.manifests.settings import ManifestSettings

    docs = template(helm)
    dep, _, _ = _activator_pod(docs)
    (policy,) = _activators(docs, "NetworkPolicy")
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    clients, metrics, operator = spec["ingress"]
    # The models' clients, from anywhere: no `from`.
    assert clients == {"ports": [{"protocol": "TCP", "port": 8000}, {"protocol": "TCP", "port": 8001}]}
    # Metrics from where the operator's metrics are allowed.
    (operator_policy,) = _operators(docs, "NetworkPolicy")
    assert metrics["from"] == operator_policy["spec"]["ingress"][-1]["from"]
    assert metrics["ports"] == [{"protocol": "TCP", "port": 9090}]
    # And from the operator's own pods (it reads the requests held there to size a wake), only those.
    (operator_dep,) = _operators(docs, "Deployment")
    (from_operator,) = operator["from"]
    assert set(from_operator) == {"podSelector"}  # the release's namespace, where the operator runs
    assert from_operator["podSelector"]["matchLabels"] == operator_dep["spec"]["selector"]["matchLabels"]
    assert operator["ports"] == [{"protocol": "TCP", "port": 9090}]
    models, dns, api_server = spec["egress"]
    (peer,) = models["to"]
    assert peer["namespaceSelector"] == {}  # serving pods in every namespace
    assert peer["podSelector"]["matchLabels"] == {
        c.LABEL_MANAGED_BY: c.MANAGED_BY,
        c.LABEL_COMPONENT: c.COMPONENT_SERVER,
    }
    assert models["ports"] == [{"protocol": "TCP", "port": 8000}, {"protocol": "TCP", "port": 8001}]
    # Those labels are on the serving pods the operator makes.
    obj = yaml.safe_load((REPO / "examples" / "gpu-tensorrt-h100.yaml").read_text())
    obj["metadata"]["uid"] = "u1"
    isvc = InferenceService.model_validate(obj)
    serving = deployment.triton_deployment(
        isvc=isvc,
        engine_key="0123456789abcdef0123456789abcdef",
        rollout_hash="h",
        replicas=1,
        settings=ManifestSettings(builder_image="b:1"),
        admin_key=triton_access.admin_key_ref(isvc.name),
    )
    assert (
        peer["podSelector"]["matchLabels"].items()
        <= serving["spec"]["template"]["metadata"]["labels"].items()
    )
    assert "to" not in dns and {(p["protocol"], p["port"]) for p in dns["ports"]} == {
        ("UDP", 53),
        ("TCP", 53),
    }
    assert "to" not in api_server
    assert api_server["ports"] == [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]
    # The API server's addresses, where the platform names them.
    (narrow,) = _activators(
        template(
            helm,
            "networkPolicy.apiServer.peers[0].ipBlock.cidr=10.0.0.1/32",
            "networkPolicy.apiServer.ports={6443}",
        ),
        "NetworkPolicy",
    )
    assert narrow["spec"]["egress"][2] == {
        "ports": [{"protocol": "TCP", "port": 6443}],
        "to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}],
    }
    assert not _by_kind(template(helm, "networkPolicy.enabled=false"), "NetworkPolicy")


def test_activator_disabled_renders_none_of_it(helm: str) -> None:
    docs = template(helm, "activator.enabled=false")
    assert not [d for d in docs if _component(d) == "activator" or "activator" in d["metadata"]["name"]]
    assert not _by_kind(docs, "PodDisruptionBudget")
    # The operator: not told of an activator, and no EndpointSlice rights anywhere.
    args, settings, unread = _operator_parse(helm, "activator.enabled=false")
    assert unread == set()
    assert args.activator_service is None and settings.activator_service is None
    (dep,) = _by_kind(docs, "Deployment")
    assert not [
        e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"] if "ACTIVATOR" in e["name"]
    ]
    (role,) = _by_kind(docs, "ClusterRole")
    assert _grants(role) == {k: v for k, v in EXPECTED_RULES.items() if k[1] != "endpointslices"}
    assert not [
        r for r in _by_kind(docs, "Role") if any("endpointslices" in rule["resources"] for rule in r["rules"])
    ]
    # The services' clients are the chart's alone.
    _, listed, _ = _operator_parse(
        helm,
        "activator.enabled=false",
        "networkPolicy.tritonClients[0].podSelector.matchLabels.role=frontend",
    )
    assert listed.manifests.network_policy is not None
    assert listed.manifests.network_policy.clients == (
        {"podSelector": {"matchLabels": {"role": "frontend"}}},
    )


def test_the_activators_name_fits_a_label_whatever_the_release(helm: str) -> None:
    docs = template(helm, f"fullnameOverride={'x' * 63}")
    names = {d["metadata"]["name"] for d in docs if _component(d) == "activator"}
    assert names and all(len(name) <= 63 and name.endswith("-activator") for name in names), names
