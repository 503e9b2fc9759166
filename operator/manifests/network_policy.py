"""The NetworkPolicy over a service's Triton pods: who may reach which port, and nothing else.

Serving pods (stable and canary; the selector's labels are on both, not on profile pods) admit:

- the inference ports (HTTP 8000, gRPC 8001) from the clients: every source unless the operator is
  configured with client peers (`NetworkPolicySettings.clients`, the chart's
  `networkPolicy.tritonClients`), since the operator cannot know who calls a service;
- the metrics port (8002) from Prometheus only (the chart's `networkPolicy.prometheus` selectors);
- the operator's pods on HTTP and metrics: its live batching reloads and statistics reads go to
  8000, its fast loop reads the metrics pages on 8002;
- nothing else. Egress is closed too: serving reads the model from volumes, answers go back on the
  connections clients opened (which a NetworkPolicy never cuts), and a Triton that runs model code
  (the Python backend) has no business opening connections.

An empty peer list in a rule would mean "every source" to the API server, so a rule whose peers are
not configured is left out instead (closed), except the clients' rule, where every source is meant.
The admin APIs on 8000/8001 are guarded by the admin key (`triton_access`), not by this policy:
clients and the operator share those ports.

Build and profile Job pods are not serving pods; their own policy (`engine_jobs_network_policy`,
`<service>-engine-jobs`) admits ingress only from the service's profile pods themselves (the
profiler reaches its sidecar Triton at its own pod address) and leaves egress open: a build fetches
its model from wherever `spec.model.uri` names. The operator creates it before any Job, so no Job pod
runs unguarded.

Enforcement is the CNI's: on a cluster whose network plugin ignores NetworkPolicies (the local test
cluster has none), the object exists and stops nothing.
"""

from __future__ import annotations

from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.manifests.meta import object_meta, selector_labels
from tailpilot.manifests.settings import NetworkPolicySettings, Peer


def network_policy_name(isvc_name: str) -> str:
    """Name of the service's NetworkPolicy (the service's own: no other child is a NetworkPolicy)."""
    return isvc_name


def engine_jobs_network_policy_name(isvc_name: str) -> str:
    """Name of the NetworkPolicy over the service's build and profile Job pods."""
    return f"{isvc_name}{c.ENGINE_JOBS_POLICY_SUFFIX}"


def _ports(*numbers: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": n} for n in numbers]


def _rule(ports: list[dict[str, Any]], peers: tuple[Peer, ...]) -> dict[str, Any]:
    return {"from": [dict(p) for p in peers], "ports": ports}


def triton_network_policy(*, isvc: InferenceService, settings: NetworkPolicySettings) -> dict[str, Any]:
    """Build the networking.k8s.io/v1 NetworkPolicy over the service's Triton pods."""
    inference = _ports(c.TRITON_HTTP_PORT, c.TRITON_GRPC_PORT)
    clients: dict[str, Any] = {"ports": inference}
    if settings.clients:
        clients["from"] = [dict(p) for p in settings.clients]
    ingress = [clients]
    if settings.operator:
        ingress.append(_rule(_ports(c.TRITON_HTTP_PORT, c.TRITON_METRICS_PORT), settings.operator))
    if settings.prometheus:
        ingress.append(_rule(_ports(c.TRITON_METRICS_PORT), settings.prometheus))
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(isvc=isvc, name=network_policy_name(isvc.name), component=c.COMPONENT_SERVER),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(isvc.name)},
            # Egress listed with no egress rules: none allowed. (An `egress: []` would read back
            # without the key, the API server omits empty lists, and look like drift every pass.)
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
        },
    }


def engine_jobs_network_policy(*, isvc: InferenceService) -> dict[str, Any]:
    """Build the NetworkPolicy over the service's build and profile Job pods (ingress only).

    Its pods are selected by the service's label and a Job component; the only peers admitted are
    the service's profile pods (a profile pod's client calls its own Triton sidecar at the pod's
    address, which a policy may treat as any other source). The kubelet's probes come from the node,
    which NetworkPolicies do not cut.
    """
    jobs = {
        "matchLabels": {c.LABEL_ISVC: isvc.name},
        "matchExpressions": [
            {"key": c.LABEL_COMPONENT, "operator": "In", "values": [c.COMPONENT_BUILD, c.COMPONENT_PROFILE]}
        ],
    }
    profile_pods = {
        "podSelector": {"matchLabels": {c.LABEL_ISVC: isvc.name, c.LABEL_COMPONENT: c.COMPONENT_PROFILE}}
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(
            isvc=isvc, name=engine_jobs_network_policy_name(isvc.name), component=c.COMPONENT_BUILD
        ),
        "spec": {
            "podSelector": jobs,
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [profile_pods],
                    "ports": _ports(c.TRITON_HTTP_PORT, c.TRITON_GRPC_PORT, c.TRITON_METRICS_PORT),
                }
            ],
        },
    }
