from tailpilot.controllers.reconcile.drift import Outcome, is_subset, plan


def deployment(replicas=2, gpu="1"):
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "a", "labels": {"x": "y"}},
        "spec": {
            "replicas": replicas,
            "template": {
                "spec": {
                    "containers": [
                        {"name": "triton", "resources": {"limits": {"nvidia.com/gpu": gpu, "memory": "1Gi"}}}
                    ]
                }
            },
        },
    }


def live_of(desired, **status):
    live = {
        **desired,
        "metadata": {
            **desired["metadata"],
            "uid": "u",
            "resourceVersion": "7",
            "annotations": {"deployment.kubernetes.io/revision": "1"},
        },
    }
    live["spec"] = {**desired["spec"], "progressDeadlineSeconds": 600, "strategy": {"type": "RollingUpdate"}}
    live["status"] = status
    return live


def test_missing_object_is_created():
    assert plan(deployment(), None) is Outcome.CREATE


def test_server_defaults_and_status_are_not_drift():
    desired = deployment()
    assert plan(desired, live_of(desired, readyReplicas=2)) is Outcome.NONE


def test_hand_edited_replicas_and_gpu_limit_are_drift():
    desired = deployment(replicas=2, gpu="1")
    assert plan(desired, live_of(deployment(replicas=5))) is Outcome.UPDATE
    assert plan(desired, live_of(deployment(gpu="2"))) is Outcome.UPDATE


def test_quantities_compare_by_value():
    assert is_subset({"cpu": "500m", "memory": "1Gi", "n": 1}, {"cpu": "0.5", "memory": "1024Mi", "n": "1"})
    assert not is_subset({"cpu": "500m"}, {"cpu": "1"})


def test_lists_must_keep_length_but_elements_compare_as_subsets():
    assert is_subset([{"name": "a"}], [{"name": "a", "protocol": "TCP"}])
    assert not is_subset([{"name": "a"}], [{"name": "a"}, {"name": "b"}])


def test_a_service_selector_with_a_key_the_operator_dropped_is_drift():
    desired = {"kind": "Service", "metadata": {"name": "a"}, "spec": {"selector": {"app": "a"}}}
    live = {
        "kind": "Service",
        "metadata": {"name": "a"},
        "spec": {"selector": {"app": "a", "tailpilot.io/rotation": "in"}},
    }
    assert plan(desired, live) is Outcome.UPDATE
    assert (
        plan(desired, {**live, "spec": {"selector": {"app": "a"}, "clusterIP": "10.0.0.1"}}) is Outcome.NONE
    )
    # Other kinds keep subset semantics for their selectors (a Deployment's is immutable anyway).
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "a"},
        "spec": {"selector": {"matchLabels": {"app": "a"}}},
    }
    live_deployment = {**deployment, "spec": {"selector": {"matchLabels": {"app": "a", "x": "y"}}}}
    assert plan(deployment, live_deployment) is Outcome.NONE


def test_the_drift_check_sees_one_value_in_two_spellings() -> None:
    assert is_subset({"memory": "1Gi", "cpu": "500m"}, {"memory": "1073741824", "cpu": "0.5"})
    assert not is_subset({"memory": "1Gi"}, {"memory": "1G"})
    assert is_subset({"image": "triton:24.08"}, {"image": "triton:24.08"})


def test_the_operators_own_pause_is_drift_once_the_plan_drops_it_and_a_pause_by_hand_is_not():
    desired = deployment()
    paused = live_of(desired)
    paused["spec"]["paused"] = True
    # Paused by hand (kubectl rollout pause): not the operator's field to take back.
    assert plan(desired, paused) is Outcome.NONE
    # Paused by the operator for a GPU product move's hand-over: the next apply drops the pause.
    paused["metadata"]["annotations"]["tailpilot.io/paused-for-move"] = "true"
    assert plan(desired, paused) is Outcome.UPDATE
    held = {
        **desired,
        "metadata": {**desired["metadata"], "annotations": {"tailpilot.io/paused-for-move": "true"}},
    }
    assert plan(held, paused) is Outcome.NONE
