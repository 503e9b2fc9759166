"""GPUs the pods of every namespace hold on the simulated GPU nodes (the cluster tests wait for them free)."""

from __future__ import annotations

from kubernetes import client

from tailpilot.api import constants as c


def gpus_in_use(core: client.CoreV1Api, *, node_prefix: str) -> int:
    """GPUs the limits of running and pending pods ask for on nodes whose name starts with `node_prefix`."""
    used = 0
    for pod in core.list_pod_for_all_namespaces(
        field_selector="status.phase!=Succeeded,status.phase!=Failed"
    ).items:
        if pod.spec.node_name and pod.spec.node_name.startswith(node_prefix):
            for container in pod.spec.containers:
                limits = (container.resources and container.resources.limits) or {}
                used += int(limits.get(c.GPU_RESOURCE, 0))
    return used
