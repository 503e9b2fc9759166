from __future__ import annotations

from tailpilot.manifests.children import Children, ClusterCapabilities, plan_children

from .fixtures import SETTINGS, build_result, make_isvc

BOTH = ClusterCapabilities(service_monitors=True, prometheus_rules=True)


def _plan(builder, capabilities: ClusterCapabilities = BOTH, **kwargs) -> Children:  # type: ignore[no-untyped-def]
    isvc = builder.obj()
    return plan_children(
        isvc=isvc,
        result=build_result(),
        batching=isvc.spec.batching.to_config(),
        replicas=2,
        settings=SETTINGS,
        capabilities=capabilities,
        **kwargs,
    )


def _kinds(objs: tuple[dict, ...]) -> list[str]:
    return [f"{o['kind']}/{o['metadata']['name']}" for o in objs]


def test_monitoring_only_when_wanted_and_available() -> None:
    core = ["ConfigMap/a-model-config", "Deployment/a", "Service/a", "PodDisruptionBudget/a"]
    bare = _plan(make_isvc("a"), ClusterCapabilities())
    assert _kinds(bare.wanted) == core
    assert _kinds(bare.turned_off) == ["Service/a-metrics"]  # no CRDs: the monitoring is neither
    both = _plan(make_isvc("a"))
    assert _kinds(both.wanted) == [*core, "ServiceMonitor/a", "PrometheusRule/a-slo"]
    off = _plan(make_isvc("a").monitoring(serviceMonitor=False))
    assert _kinds(off.wanted) == [*core, "PrometheusRule/a-slo"]
    assert _kinds(off.turned_off) == ["Service/a-metrics", "ServiceMonitor/a"]
    for child in (*both.wanted, *both.turned_off):
        assert child["metadata"]["ownerReferences"][0]["controller"] is True


def test_the_metrics_service_goes_with_the_service_before_the_pdb() -> None:
    rotating = _plan(make_isvc("a").autoscaling(backlogRotation=True), select_rotation=True)
    assert _kinds(rotating.wanted)[2:5] == ["Service/a", "Service/a-metrics", "PodDisruptionBudget/a"]
    assert "tailpilot.io/rotation" in rotating.wanted[2]["spec"]["selector"]
    assert _kinds(rotating.turned_off) == []


def test_batching_only_change_keeps_the_deployment() -> None:
    before = _plan(make_isvc("a").max_batch(16).preferred(8)).wanted
    after = _plan(make_isvc("a").max_batch(16).preferred(4, 16).queue_delay(50)).wanted
    assert before[0]["data"] != after[0]["data"]  # the ConfigMap follows the batching
    assert before[1] == after[1]  # the Deployment does not roll
