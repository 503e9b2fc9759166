"""Pod and container security contexts that pass the PodSecurity `restricted` profile."""

from __future__ import annotations

from typing import Any


def pod_security_context(run_as_user: int) -> dict[str, Any]:
    """Pod-level: non-root, fixed UID/GID, RuntimeDefault seccomp."""
    return {
        "runAsNonRoot": True,
        "runAsUser": run_as_user,
        "runAsGroup": run_as_user,
        "fsGroup": run_as_user,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    """Container-level: no privilege escalation, no capabilities, read-only root filesystem."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
