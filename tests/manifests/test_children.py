from __future__ import annotations

from tailpilot.manifests.children import (
    CanaryPlan,
    Children,
    ClusterCapabilities,
    is_canary_child,
    plan_children,
)

from .fixtures import SETTINGS, admin_key, build_result, make_isvc

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
        admin_key=admin_key(isvc.name),
        **kwargs,
    )


def _kinds(objs: tuple[dict, ...]) -> list[str]:
    return [f"{o['kind']}/{o['metadata']['name']}" for o in objs]


def test_monitoring_only_when_wanted_and_available() -> None:
    core = ["ConfigMap/a-model-config", "Deployment/a", "Service/a", "PodDisruptionBudget/a"]
    bare = _plan(make_isvc("a"), ClusterCapabilities())
    assert _kinds(bare.wanted) == core
    # No CRDs: the monitoring is neither; no NetworkPolicy settings: the policy is turned off.
    assert _kinds(bare.turned_off) == ["Service/a-metrics", "NetworkPolicy/a"]
    both = _plan(make_isvc("a"))
    assert _kinds(both.wanted) == [*core, "ServiceMonitor/a", "PrometheusRule/a-slo"]
    off = _plan(make_isvc("a").monitoring(serviceMonitor=False))
    assert _kinds(off.wanted) == [*core, "PrometheusRule/a-slo"]
    assert _kinds(off.turned_off) == ["Service/a-metrics", "NetworkPolicy/a", "ServiceMonitor/a"]
    for child in (*both.wanted, *both.turned_off):
        assert child["metadata"]["ownerReferences"][0]["controller"] is True


def test_the_metrics_service_goes_with_the_service_before_the_pdb() -> None:
    rotating = _plan(make_isvc("a").autoscaling(backlogRotation=True), select_rotation=True)
    assert _kinds(rotating.wanted)[2:5] == ["Service/a", "Service/a-metrics", "PodDisruptionBudget/a"]
    assert "tailpilot.io/rotation" in rotating.wanted[2]["spec"]["selector"]
    assert _kinds(rotating.turned_off) == ["NetworkPolicy/a"]


def test_batching_only_change_keeps_the_deployment() -> None:
    before = _plan(make_isvc("a").max_batch(16).preferred(8)).wanted
    after = _plan(make_isvc("a").max_batch(16).preferred(4, 16).queue_delay(50)).wanted
    assert before[0]["data"] != after[0]["data"]  # the ConfigMap follows the batching
    assert before[1] == after[1]  # the Deployment does not roll


def test_a_canary_runs_its_own_configmap_and_deployment_after_the_stable_one() -> None:
    new = build_result().model_copy(update={"engine_key": "2" * 32})
    with_canary = _plan(make_isvc("a"), canary=CanaryPlan(result=new, replicas=3))
    names = _kinds(with_canary.wanted)
    assert names[:4] == [
        "ConfigMap/a-model-config",
        "Deployment/a",
        "ConfigMap/a-canary-model-config",
        "Deployment/a-canary",
    ]
    assert with_canary.canary_over == ()
    stable, canary = with_canary.wanted[1], with_canary.wanted[3]
    assert (
        stable["spec"]["template"]["metadata"]["annotations"]["tailpilot.io/engine-key"]
        == build_result().engine_key
    )
    assert canary["spec"]["template"]["metadata"]["annotations"]["tailpilot.io/engine-key"] == "2" * 32
    assert canary["spec"]["replicas"] == 3
    # Its pods carry the Service's selector (they take traffic) and the track its own selector adds.
    service = next(o for o in with_canary.wanted if o["kind"] == "Service")
    pod_labels = canary["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert canary["spec"]["selector"]["matchLabels"] == {
        **stable["spec"]["selector"]["matchLabels"],
        "tailpilot.io/track": "canary",
    }
    assert "tailpilot.io/track" not in stable["spec"]["template"]["metadata"]["labels"]
    volumes = {v["name"]: v for v in canary["spec"]["template"]["spec"]["volumes"]}
    assert volumes["model-config"]["configMap"]["name"] == "a-canary-model-config"
    assert [is_canary_child(o) for o in with_canary.wanted[:4]] == [False, False, True, True]
    # Without a canary, the stable children are unchanged and the canary's two are over.
    without = _plan(make_isvc("a"))
    assert without.wanted[:2] == with_canary.wanted[:2]
    assert _kinds(without.canary_over) == ["ConfigMap/a-canary-model-config", "Deployment/a-canary"]


def test_serving_pods_drain_before_sigterm() -> None:
    deployment = _plan(make_isvc("a")).wanted[1]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > 5
