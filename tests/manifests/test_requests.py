"""No pod the operator creates is BestEffort: every container asks for CPU and memory."""

from __future__ import annotations

from typing import Any

from .test_child_names import children_of


def _pod_specs(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]["spec"])
        for o in objects
        if o["kind"] in ("Deployment", "Job")
    ]


def test_every_container_of_every_pod_requests_cpu_and_memory_at_the_default_spec() -> None:
    pods = _pod_specs(children_of("a"))
    assert {name.split("/")[0] for name, _ in pods} == {"Deployment", "Job"}
    for name, pod in pods:
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            resources = container.get("resources", {})
            asked = {*resources.get("requests", {}), *resources.get("limits", {})}
            assert {"cpu", "memory"} <= asked, f"{name} container {container['name']}: {resources}"
