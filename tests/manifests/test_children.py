from __future__ import annotations

from tailpilot.api import constants as c
from tailpilot.manifests.children import ClusterCapabilities, desired_children
from tailpilot.manifests.meta import desired_hash

from .fixtures import SETTINGS, build_result, make_isvc


def _kinds(builder, capabilities: ClusterCapabilities) -> list[str]:  # type: ignore[no-untyped-def]
    isvc = builder.obj()
    children = desired_children(
        isvc=isvc,
        result=build_result(),
        batching=isvc.spec.batching.to_config(),
        replicas=2,
        settings=SETTINGS,
        capabilities=capabilities,
    )
    for child in children:
        assert child["metadata"]["annotations"][c.ANNOTATION_DESIRED_HASH] == desired_hash(child)
        assert child["metadata"]["ownerReferences"][0]["controller"] is True
    return [child["kind"] for child in children]


def test_monitoring_only_when_wanted_and_available() -> None:
    core = ["ConfigMap", "Deployment", "Service", "PodDisruptionBudget"]
    assert _kinds(make_isvc("a"), ClusterCapabilities()) == core
    both = ClusterCapabilities(service_monitors=True, prometheus_rules=True)
    assert _kinds(make_isvc("a"), both) == [*core, "ServiceMonitor", "PrometheusRule"]
    off = make_isvc("a").monitoring(serviceMonitor=False)
    assert _kinds(off, both) == [*core, "PrometheusRule"]


def test_batching_only_change_keeps_the_deployment() -> None:
    def children(builder):  # type: ignore[no-untyped-def]
        isvc = builder.obj()
        return desired_children(
            isvc=isvc,
            result=build_result(),
            batching=isvc.spec.batching.to_config(),
            replicas=2,
            settings=SETTINGS,
            capabilities=ClusterCapabilities(),
        )

    before = children(make_isvc("a").max_batch(16).preferred(8))
    after = children(make_isvc("a").max_batch(16).preferred(4, 16).queue_delay(50))
    assert before[0]["data"] != after[0]["data"]  # the ConfigMap follows the batching
    assert before[1] == after[1]  # the Deployment does not roll
