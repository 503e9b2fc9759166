"""The node agent's Node object: registration labels, capacity and conditions (pure).

`local-0` is a CPU inference node (`tailpilot.io/node-pool=cpu`) whose pods run as
local processes (`tailpilot.io/local-processes=true`); its capacity is advertised
(containers' CPU limits are enforced, `agent_cgroups`).
"""

from __future__ import annotations

import os
from typing import Any

from tailpilot_e2e.agent_pod import rfc3339

NODE_NAME = "local-0"
NODE_IP = "127.0.0.1"
LEASE_DURATION_S = 40


def node_manifest(name: str, *, cpu: str, memory: str) -> dict[str, Any]:
    """The Node the agent registers: a CPU inference node that runs pods as local processes."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "tailpilot.io/node-pool": "cpu",
                "tailpilot.io/local-processes": "true",
            },
        },
    }


def node_status(*, cpu: str, memory: str, now: float) -> dict[str, Any]:
    """Capacity, Ready and the pressure conditions, addresses and node info."""
    capacity = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "100Gi"}
    beat = rfc3339(now)

    def cond(type_: str, status: str, reason: str) -> dict[str, str]:
        return {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": reason,
            "lastHeartbeatTime": beat,
            "lastTransitionTime": beat,
        }

    return {
        "capacity": capacity,
        "allocatable": dict(capacity),
        "conditions": [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID"),
            cond("Ready", "True", "KubeletReady"),
        ],
        "addresses": [{"type": "InternalIP", "address": NODE_IP}, {"type": "Hostname", "address": NODE_NAME}],
        "nodeInfo": {
            "machineID": "tailpilot-local",
            "systemUUID": "tailpilot-local",
            "bootID": "tailpilot-local",
            "kernelVersion": os.uname().release,
            "osImage": "local processes (tailpilot node agent)",
            "containerRuntimeVersion": "tailpilot-agent://0.1",
            "kubeletVersion": "v0.0.0-tailpilot-agent",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }
