"""What the node agent does with a pod spec, as pure functions: paths, env, probes, status.

Filesystem: a pod gets a directory with `root/`, in which every volumeMount's
`mountPath` is a symlink to the volume's directory on this machine (the
agent's stand-in for mount namespaces). The container's command, args, env
values and workingDir are rewritten so that an absolute path under a mount
(or leading to one, like `/mnt/pvc` above `/mnt/pvc/models`) points into
`root/`; other paths (`/dev/null`, `/usr/bin/env`) are left alone. The
`terminationMessagePath` becomes a real file in `root/`.

Status: the agent keeps one `ContainerRecord` per container and derives the
pod's phase and conditions the way the kubelet does (see `pod_phase`).

Native sidecars: an init container with `restartPolicy: Always` (`is_sidecar`) keeps
running beside the containers; its readiness counts toward the pod's, its exit code
never counts toward the phase, and it is stopped after the containers (`stop_waves`).
"""

from __future__ import annotations

import base64
import re
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from tailpilot_e2e.agent_images import ImageEntry, resolve_argv

DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
#: The kubelet's limits on a termination message (bytes), per container.
TERMINATION_MESSAGE_LIMIT = 4096
FALLBACK_LOG_LIMIT = 2048


class PodConfigError(ValueError):
    """The pod cannot start as specified (missing ConfigMap, unsupported volume); reason and message."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


# ---- paths ------------------------------------------------------------------------------------------
_PATH_TOKEN = re.compile(r"(?<![\w.~\-/:])(/[\w.\-/@+]*)")


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def rewrite_paths(text: str, *, root: Path, mount_paths: Sequence[str], files: Sequence[str] = ()) -> str:
    """Point absolute paths in `text` that are under (or lead to) a mount, or are one of `files`, into `root`.

    Example: with mounts ["/engines", "/mnt/pvc/models"], "--store=/engines/x" becomes
    "--store=<root>/engines/x" and "--pvc-root /mnt/pvc" becomes "--pvc-root <root>/mnt/pvc";
    "/dev/null" stays.
    """

    def replace(match: re.Match[str]) -> str:
        token = match.group(1)
        if token.startswith("//"):
            return token
        clean = token.rstrip("/") or "/"
        hit = (
            clean in files
            or any(_under(clean, m) for m in mount_paths)
            or any(m.startswith(clean + "/") for m in mount_paths if clean != "/")
        )
        return f"{root}{token}" if hit else token

    return _PATH_TOKEN.sub(replace, text)


_WILDCARD = re.compile(r"(?<![\w.])0\.0\.0\.0(?![\w.]|/\d)")
#: A listen address with no host (`:8080`, `--listen-address=:8080`): every address, as 0.0.0.0.
_HOSTLESS_PORT = re.compile(r"(?:^|(?<==)):(\d{1,5})$")


def bind_pod_ip(text: str, pod_ip: str) -> str:
    """A pod's wildcard address is its own pod IP: `0.0.0.0` as a host becomes `pod_ip`.

    In a real pod, binding 0.0.0.0 binds the pod's own network namespace; here pods share the
    machine's, so a server told to bind 0.0.0.0 would take the port on every address of the
    machine. A listen address with no host at all (`:8080`, as Go servers take it, alone or as a
    flag's value) means the same. Example: "http://0.0.0.0:8080/healthz" ->
    "http://127.65.0.9:8080/healthz", "--listen-address=:8080" -> "--listen-address=127.65.0.9:8080";
    a network such as "0.0.0.0/0" stays.
    """
    return _HOSTLESS_PORT.sub(rf"{pod_ip}:\1", _WILDCARD.sub(pod_ip, text))


def mount_link(root: Path, mount_path: str) -> Path:
    """Where a mountPath lives inside the pod root."""
    return root / PurePosixPath(mount_path).relative_to("/")


def local_argv(
    table: Mapping[str, ImageEntry],
    spec: Mapping[str, Any],
    env: Mapping[str, str],
    *,
    pod_ip: str,
    root: Path,
) -> tuple[list[str], dict[str, str]]:
    """The container's argv and image env on this machine, or UnmappedImageError.

    `$(VAR)` references are expanded, the pod's own paths are pointed into `root` and a wildcard
    address becomes the pod IP (`bind_pod_ip`); the image table's additions (backend directory,
    PATH) are host paths and are left as they are, even when they happen to lie under a mountPath
    such as /tmp.
    """
    mounts = [m["mountPath"] for m in spec.get("volumeMounts") or []]
    files = [spec.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH]

    def rewrite(text: str) -> str:
        return bind_pod_ip(rewrite_paths(text, root=root, mount_paths=mounts, files=files), pod_ip)

    command = expand_args(spec.get("command") or [], env)
    return resolve_argv(
        table,
        image=spec.get("image", ""),
        command=command[:1] + [rewrite(a) for a in command[1:]],
        args=[rewrite(a) for a in expand_args(spec.get("args") or [], env)],
        pod_ip=pod_ip,
    )


def mount_plan(root: Path, spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The container's volumeMounts as bind mounts (`agent_mounts`): its link in `root` onto its mountPath.

    Parents come first (a mount inside another one is made after it). Only for images that run in
    a mount namespace of their own (`ImageEntry.mount_namespace`).
    """
    mounts = sorted(spec.get("volumeMounts") or [], key=lambda m: len(PurePosixPath(m["mountPath"]).parts))
    return [
        {
            "source": str(mount_link(root, m["mountPath"])),
            "target": str(PurePosixPath(m["mountPath"])),
            "readOnly": bool(m.get("readOnly")),
        }
        for m in mounts
    ]


def kubernetes_service_env(server: str) -> dict[str, str]:
    """KUBERNETES_SERVICE_HOST/PORT, which the kubelet gives every container, for the API server at `server`.

    On a real node they name the `kubernetes` Service's ClusterIP, which kube-proxy forwards to the
    API server; here there is no kube-proxy, so they name the API server's own address
    (`https://127.0.0.1:6743` -> host 127.0.0.1, port 6743), which its serving certificate covers.
    """
    url = urllib.parse.urlsplit(server)
    if not url.hostname:
        raise ValueError(f"not an API server URL: {server!r}")
    port = str(url.port or (443 if url.scheme == "https" else 80))
    return {
        "KUBERNETES_SERVICE_HOST": url.hostname,
        "KUBERNETES_SERVICE_PORT": port,
        "KUBERNETES_SERVICE_PORT_HTTPS": port,
    }


# ---- volumes ----------------------------------------------------------------------------------------
VolumeKind = Literal["emptyDir", "configMap", "secret", "persistentVolumeClaim", "hostPath", "projected"]
_VOLUME_KINDS: tuple[VolumeKind, ...] = (
    "emptyDir",
    "configMap",
    "secret",
    "persistentVolumeClaim",
    "hostPath",
    "projected",
)


@dataclass(frozen=True)
class VolumePlan:
    """One pod volume: its kind and what the agent needs to materialize it."""

    name: str
    kind: VolumeKind
    source: Mapping[str, Any]


def volume_plans(pod: Mapping[str, Any]) -> list[VolumePlan]:
    """The pod's volumes, or PodConfigError for a kind the agent cannot provide."""
    plans = []
    for volume in pod["spec"].get("volumes") or []:
        kinds = [k for k in _VOLUME_KINDS if k in volume]
        if not kinds:
            other = next((k for k in volume if k != "name"), "?")
            raise PodConfigError(
                "CreateContainerConfigError",
                f"volume {volume['name']!r}: {other} is not supported by the node agent",
            )
        plans.append(VolumePlan(name=volume["name"], kind=kinds[0], source=volume[kinds[0]] or {}))  # type: ignore[arg-type]
    return plans


def key_files(
    data: Mapping[str, str], items: Sequence[Mapping[str, Any]] | None, *, encoded: bool
) -> dict[str, bytes]:
    """ConfigMap/Secret data -> {relative path: content}, honouring `items` (key -> path) like the kubelet."""
    raw = {k: base64.b64decode(v) if encoded else v.encode() for k, v in data.items()}
    if not items:
        return raw
    return {item["path"]: raw[item["key"]] for item in items if item["key"] in raw}


def pv_host_path(pv: Mapping[str, Any]) -> str:
    """The directory a bound PersistentVolume stands for (local or hostPath), or PodConfigError."""
    spec = pv.get("spec", {})
    for kind in ("local", "hostPath"):
        if kind in spec:
            return str(spec[kind]["path"])
    raise PodConfigError(
        "CreateContainerConfigError",
        f"PersistentVolume {pv['metadata']['name']} is neither local nor hostPath",
    )


# ---- env --------------------------------------------------------------------------------------------
#: fieldRef paths the downward API offers for env.
def field_value(pod: Mapping[str, Any], field_path: str, *, pod_ip: str, host_ip: str) -> str:
    """Value of a downward-API fieldRef for env (status.podIP, metadata.name, ...)."""
    meta, spec = pod["metadata"], pod["spec"]
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    if field_path in simple:
        return str(simple[field_path])
    match = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", field_path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise PodConfigError("CreateContainerConfigError", f"fieldRef {field_path!r} is not supported")


Lookup = Callable[[str, str], Mapping[str, str] | None]  # (kind "configmap"/"secret", name) -> data


def container_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    pod_ip: str,
    host_ip: str,
    lookup: Lookup,
) -> dict[str, str]:
    """The container's environment from envFrom and env (later wins, `$(VAR)` expanded), or PodConfigError."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        kind, ref = (
            ("configmap", source["configMapRef"])
            if "configMapRef" in source
            else ("secret", source.get("secretRef", {}))
        )
        data = lookup(kind, ref.get("name", ""))
        if data is None:
            if ref.get("optional"):
                continue
            raise PodConfigError("CreateContainerConfigError", f"{kind} {ref.get('name')!r} not found")
        for key, value in data.items():
            env[source.get("prefix", "") + key] = (
                base64.b64decode(value).decode() if kind == "secret" else value
            )
    for var in container.get("env") or []:
        if "value" in var or "valueFrom" not in var:
            env[var["name"]] = _expand(var.get("value", ""), env)
            continue
        source = var["valueFrom"]
        if "fieldRef" in source:
            env[var["name"]] = field_value(
                pod, source["fieldRef"]["fieldPath"], pod_ip=pod_ip, host_ip=host_ip
            )
        elif "configMapKeyRef" in source or "secretKeyRef" in source:
            kind = "configmap" if "configMapKeyRef" in source else "secret"
            ref = source.get("configMapKeyRef") or source["secretKeyRef"]
            data = lookup(kind, ref["name"])
            if data is None or ref["key"] not in data:
                if ref.get("optional"):
                    continue
                raise PodConfigError(
                    "CreateContainerConfigError", f"{kind} {ref['name']!r} key {ref['key']!r} not found"
                )
            value = data[ref["key"]]
            env[var["name"]] = base64.b64decode(value).decode() if kind == "secret" else value
        else:
            raise PodConfigError(
                "CreateContainerConfigError",
                f"env {var['name']}: valueFrom {sorted(source)} is not supported",
            )
    return env


def _expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion (`$$` escapes); unknown references stay as written."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        value,
    )


def expand_args(args: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """`$(VAR)` expansion in command and args, as the kubelet does."""
    return [_expand(a, env) for a in args]


# ---- probes -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Probe:
    """One probe of a container, resolved against its ports."""

    kind: Literal["httpGet", "tcpSocket", "exec"]
    port: int = 0
    path: str = "/"
    host: str | None = None
    command: tuple[str, ...] = ()
    initial_delay_s: float = 0
    period_s: float = 10
    timeout_s: float = 1
    success_threshold: int = 1
    failure_threshold: int = 3


def parse_probe(spec: Mapping[str, Any] | None, ports: Sequence[Mapping[str, Any]]) -> Probe | None:
    """A pod-spec probe -> Probe (named ports resolved), None when absent."""
    if not spec:
        return None
    timing = {
        "initial_delay_s": float(spec.get("initialDelaySeconds", 0)),
        "period_s": float(spec.get("periodSeconds", 10)),
        "timeout_s": float(spec.get("timeoutSeconds", 1)),
        "success_threshold": int(spec.get("successThreshold", 1)),
        "failure_threshold": int(spec.get("failureThreshold", 3)),
    }

    def port_number(port: int | str) -> int:
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        for p in ports:
            if p.get("name") == port:
                return int(p["containerPort"])
        raise PodConfigError("CreateContainerConfigError", f"probe port {port!r} is not a container port")

    if "httpGet" in spec:
        http = spec["httpGet"]
        return Probe(
            "httpGet",
            port=port_number(http["port"]),
            path=http.get("path", "/"),
            host=http.get("host"),
            **timing,
        )
    if "tcpSocket" in spec:
        tcp = spec["tcpSocket"]
        return Probe("tcpSocket", port=port_number(tcp["port"]), host=tcp.get("host"), **timing)
    if "exec" in spec:
        return Probe("exec", command=tuple(spec["exec"].get("command") or ()), **timing)
    raise PodConfigError("CreateContainerConfigError", f"probe kind {sorted(spec)} is not supported")


# ---- status -----------------------------------------------------------------------------------------
@dataclass
class Termination:
    """How a container run ended."""

    exit_code: int
    reason: str
    message: str
    started_at: float
    finished_at: float
    signal: int | None = None


@dataclass
class ContainerRecord:
    """What the agent knows about one container of a pod (restart count survives agent restarts)."""

    name: str
    image: str
    restart_count: int = 0
    running_since: float | None = None
    process_id: int | None = None
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    terminated: Termination | None = None
    last_terminated: Termination | None = None
    ready: bool = False
    started: bool = False
    probe_counts: dict[str, int] = field(default_factory=dict)


def rfc3339(ts: float) -> str:
    """Seconds since the epoch -> the API's time format."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _termination_dict(t: Termination, container_id: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "exitCode": t.exit_code,
        "reason": t.reason,
        "startedAt": rfc3339(t.started_at),
        "finishedAt": rfc3339(t.finished_at),
        "containerID": container_id,
    }
    if t.message:
        out["message"] = t.message
    if t.signal:
        out["signal"] = t.signal
    return out


def container_status(record: ContainerRecord, *, pod_uid: str) -> dict[str, Any]:
    """The API's ContainerStatus of a record."""
    container_id = f"tailpilot-agent://{pod_uid}/{record.name}/{record.restart_count}"
    if record.running_since is not None:
        state: dict[str, Any] = {"running": {"startedAt": rfc3339(record.running_since)}}
    elif record.terminated is not None:
        state = {"terminated": _termination_dict(record.terminated, container_id)}
    else:
        waiting: dict[str, Any] = {"reason": record.waiting_reason}
        if record.waiting_message:
            waiting["message"] = record.waiting_message
        state = {"waiting": waiting}
    status: dict[str, Any] = {
        "name": record.name,
        "image": record.image,
        "imageID": "",
        "ready": record.ready,
        "started": record.started if record.running_since is not None else False,
        "restartCount": record.restart_count,
        "state": state,
        "lastState": (
            {"terminated": _termination_dict(record.last_terminated, container_id)}
            if record.last_terminated
            else {}
        ),
    }
    if record.running_since is not None or record.terminated is not None:
        status["containerID"] = container_id
    return status


PodPhase = Literal["Pending", "Running", "Succeeded", "Failed"]


def is_sidecar(spec: Mapping[str, Any]) -> bool:
    """A native sidecar: an init container with `restartPolicy: Always` (Kubernetes 1.29+)."""
    return spec.get("restartPolicy") == "Always"


def will_restart(restart_policy: str, termination: Termination) -> bool:
    """Whether a container that ended this way is started again."""
    return restart_policy == "Always" or (restart_policy == "OnFailure" and termination.exit_code != 0)


def containers_finished(*, init_failed: bool, records: Sequence[ContainerRecord]) -> bool:
    """Whether the pod's regular containers are done for good: the moment the kubelet stops the sidecars.

    True when an init container failed for good, or every container ended and none will be
    started again (`records` carry `terminated` only for an end that is final).
    """
    if init_failed:
        return True
    return bool(records) and all(r.running_since is None and r.terminated is not None for r in records)


def pod_phase(
    *,
    restart_policy: str,
    init_failed: bool,
    init_done: bool,
    records: Sequence[ContainerRecord],
    sidecars: Sequence[ContainerRecord] = (),
) -> PodPhase:
    """The kubelet's phase rules for the containers' states.

    Failed: an init container failed for good, or every container ended, one non-zero, none restarts.
    Succeeded: every container ended with 0 and none restarts. Running: initialized and some container
    runs (or is restarting). Pending otherwise. Sidecars (`sidecars`, native sidecar init containers)
    keep a pod whose containers all ended Running until they have stopped; their own exit codes never
    count.
    """
    if init_failed:
        return "Failed"
    if not init_done:
        return "Pending"
    ended = [r.terminated for r in records if r.running_since is None and r.terminated is not None]
    if (
        records
        and len(ended) == len(records)
        and not any(will_restart(restart_policy, t) for t in ended if t)
    ):
        if any(s.running_since is not None for s in sidecars):
            return "Running"
        return "Succeeded" if all(t and t.exit_code == 0 for t in ended) else "Failed"
    if any(
        r.running_since is not None or r.last_terminated is not None or r.terminated is not None
        for r in records
    ):
        return "Running"
    return "Pending"


def pod_conditions(
    *,
    existing: Sequence[Mapping[str, Any]],
    init_done: bool,
    records: Sequence[ContainerRecord],
    now: float,
    sidecars: Sequence[ContainerRecord] = (),
) -> list[dict[str, Any]]:
    """Initialized, ContainersReady and Ready (transition times kept), beside the scheduler's PodScheduled.

    Ready needs every container ready and every sidecar ready (by its readiness probe, or started
    when it has none), as the kubelet's ContainersReady does.
    """
    all_ready = bool(records) and all(r.ready for r in [*records, *sidecars])
    wanted = {
        "Initialized": init_done,
        "ContainersReady": all_ready,
        "Ready": all_ready,
    }
    by_type = {c["type"]: c for c in existing}
    out = [dict(c) for c in existing if c["type"] not in wanted]
    for type_, value in wanted.items():
        status = "True" if value else "False"
        old = by_type.get(type_)
        changed_at = old["lastTransitionTime"] if old and old.get("status") == status else rfc3339(now)
        condition: dict[str, Any] = {"type": type_, "status": status, "lastTransitionTime": changed_at}
        if not value:
            condition["reason"] = (
                "ContainersNotInitialized" if type_ == "Initialized" else "ContainersNotReady"
            )
        out.append(condition)
    return out


def stop_waves(init: Sequence[Mapping[str, Any]], containers: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """Container names in the order the kubelet stops a pod: one wave after the other.

    First every regular container (and any regular init container still running), then each
    sidecar alone, in reverse order of declaration: a sidecar gets SIGTERM once everything
    declared after it has ended, so a sidecar still serves the containers that use it while
    they stop. Example: init [setup, proxy(sidecar), triton(sidecar)], containers [profile]
    -> [[setup, profile], [triton], [proxy]].
    """
    regular = [c["name"] for c in init if not is_sidecar(c)] + [c["name"] for c in containers]
    return [regular, *[[c["name"]] for c in reversed(init) if is_sidecar(c)]]
