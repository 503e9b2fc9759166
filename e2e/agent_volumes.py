"""The node agent's volumes: ConfigMap, Secret, projected, emptyDir, PVC and hostPath on this machine.

A volume is a directory: emptyDir, ConfigMap, Secret and projected volumes live in the
pod's directory (files written atomically and refreshed, as the kubelet refreshes
them); a PVC is the directory of its bound `local` or `hostPath` PersistentVolume.
Containers see them through symlinks at their mountPaths in the pod root (`agent_pod`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tailpilot_e2e.agent_node import NODE_IP
from tailpilot_e2e.agent_pod import (
    DEFAULT_TERMINATION_MESSAGE_PATH,
    Lookup,
    PodConfigError,
    field_value,
    key_files,
    mount_link,
    pv_host_path,
    volume_plans,
)


def write_files(target: Path, files: Mapping[str, bytes]) -> None:
    """Write changed files atomically (a reader never sees half a ConfigMap key)."""
    for rel, content in files.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_bytes() != content:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_bytes(content)
            tmp.replace(path)


def link_mounts(root: Path, container: Mapping[str, Any], volume_dirs: Mapping[str, Path]) -> None:
    """Make each mountPath of the container a symlink in the pod root to its volume's directory."""
    for mount in container.get("volumeMounts") or []:
        link = mount_link(root, mount["mountPath"])
        link.parent.mkdir(parents=True, exist_ok=True)
        source = volume_dirs[mount["name"]]
        if mount.get("subPath"):
            source = source / mount["subPath"]
            if not source.exists():  # a key of a ConfigMap or Secret is a file; a missing path a new dir
                source.mkdir(parents=True)
        if link.is_symlink() and Path(os.readlink(link)) == source:
            continue
        if link.is_symlink() or link.is_file():
            link.unlink()
        link.symlink_to(source)
    message_path = mount_link(
        root, container.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH
    )
    message_path.parent.mkdir(parents=True, exist_ok=True)


class PodVolumes:
    """Materializes pod volumes through the API (ConfigMaps, Secrets, PVCs, tokens)."""

    def __init__(self, api: client.ApiClient):
        self.api = api
        self.core = client.CoreV1Api(api)

    def lookup(self, namespace: str) -> Lookup:
        """ConfigMap/Secret data of `namespace` by (kind, name), None when absent."""

        def lookup(kind: str, name: str) -> Mapping[str, str] | None:
            try:
                if kind == "configmap":
                    return dict(self.core.read_namespaced_config_map(name, namespace).data or {})
                return dict(self.core.read_namespaced_secret(name, namespace).data or {})
            except ApiException as error:
                if error.status == 404:
                    return None
                raise

        return lookup

    def materialize(self, pod: dict[str, Any], *, pod_dir: Path, pod_ip: str) -> dict[str, Path]:
        """Volume name -> its directory on this machine (written or refreshed), or PodConfigError."""
        namespace = pod["metadata"]["namespace"]
        lookup = self.lookup(namespace)
        dirs: dict[str, Path] = {}
        for plan in volume_plans(pod):
            target = pod_dir / "volumes" / plan.name
            if plan.kind == "persistentVolumeClaim":
                claim = self.core.read_namespaced_persistent_volume_claim(plan.source["claimName"], namespace)
                if not claim.spec.volume_name or claim.status.phase != "Bound":
                    raise PodConfigError(
                        "ContainerCreating",
                        f"PersistentVolumeClaim {plan.source['claimName']!r} is not bound",
                    )
                pv = self.api.sanitize_for_serialization(
                    self.core.read_persistent_volume(claim.spec.volume_name)
                )
                host = Path(pv_host_path(pv))
                host.mkdir(parents=True, exist_ok=True)
                dirs[plan.name] = host
                continue
            if plan.kind == "hostPath":
                dirs[plan.name] = Path(plan.source["path"])
                continue
            target.mkdir(parents=True, exist_ok=True)
            if plan.kind in ("configMap", "secret"):
                write_files(target, self._object_files(plan.kind, plan.source, lookup, volume=plan.name))
            elif plan.kind == "projected":
                files: dict[str, bytes] = {}
                for source in plan.source.get("sources") or []:
                    files |= self._projected_files(pod, source, lookup, pod_ip=pod_ip, volume=plan.name)
                write_files(target, files)
            dirs[plan.name] = target
        return dirs

    def _object_files(
        self, kind: str, source: Mapping[str, Any], lookup: Lookup, *, volume: str
    ) -> dict[str, bytes]:
        """Files of a configMap/secret volume (or projection)."""
        api_kind = "configmap" if kind == "configMap" else "secret"
        name = source.get("name") or source.get("secretName", "")
        data = lookup(api_kind, name)
        if data is None:
            if source.get("optional"):
                return {}
            raise PodConfigError("ContainerCreating", f"{api_kind} {name!r} not found (volume {volume!r})")
        return key_files(data, source.get("items"), encoded=api_kind == "secret")

    def _projected_files(
        self, pod: dict[str, Any], source: Mapping[str, Any], lookup: Lookup, *, pod_ip: str, volume: str
    ) -> dict[str, bytes]:
        """One source of a projected volume: configMap, secret, downwardAPI or a ServiceAccount token."""
        if "configMap" in source or "secret" in source:
            kind = "configMap" if "configMap" in source else "secret"
            return self._object_files(kind, source[kind], lookup, volume=volume)
        if "downwardAPI" in source:
            return {
                item["path"]: field_value(
                    pod, item["fieldRef"]["fieldPath"], pod_ip=pod_ip, host_ip=NODE_IP
                ).encode()
                for item in source["downwardAPI"].get("items") or []
                if "fieldRef" in item
            }
        if "serviceAccountToken" in source:
            token_spec, meta = source["serviceAccountToken"], pod["metadata"]
            audience = token_spec.get("audience")
            request = client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(
                    audiences=[audience] if audience else [],
                    expiration_seconds=int(token_spec.get("expirationSeconds", 3607)),
                    bound_object_ref=client.V1BoundObjectReference(
                        kind="Pod", api_version="v1", name=meta["name"], uid=meta["uid"]
                    ),
                )
            )
            account = pod["spec"].get("serviceAccountName") or "default"
            token = self.core.create_namespaced_service_account_token(account, meta["namespace"], request)
            return {token_spec["path"]: token.status.token.encode()}
        raise PodConfigError(
            "CreateContainerConfigError", f"volume {volume!r}: projected {sorted(source)} is not supported"
        )
