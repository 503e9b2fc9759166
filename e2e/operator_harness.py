"""Run the real operator against the local cluster, and play engine builds and profiles on simulated nodes.

The operator runs as its own process (`tailpilot operator`, the console
script users run), scoped to one namespace so tests do not see each other's
objects, and is stopped by PID. It is told to label its engine Job pods (build
and profile) `kwok.tailpilot.io/await-result`, so KWOK keeps them Running until
a test plays a result onto them (the termination message a real build or
profile writes).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kubernetes import client

from tailpilot.api.constants import LABEL_ISVC
from tailpilot.api.engine import (
    BuildOutcome,
    BuildResult,
    ProfileResult,
    ProfileSummary,
    ProfileSummaryPoint,
    ServiceTimeModel,
    TensorSpec,
)
from tailpilot.builders.triton_server import free_port
from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.config import REPO_ROOT
from tailpilot_e2e.procs import pid_runs
from tailpilot_e2e.wait import EventuallyTimeout, eventually

CRD_FILE = REPO_ROOT / "crds" / "tailpilot.io_inferenceservices.yaml"
AWAIT_RESULT_LABEL = "kwok.tailpilot.io/await-result"
BUILD_COMPONENT_SELECTOR = "app.kubernetes.io/component=engine-build"
PROFILE_COMPONENT_SELECTOR = "app.kubernetes.io/component=engine-profile"


def install_crds(cluster: LocalCluster, files: Sequence[Path] = (CRD_FILE,)) -> None:
    """Server-side apply CRDs (the largest exceed client-side apply's limit), wait until Established.

    One kubectl call each for all the files: applying, naming, waiting.
    """
    args = [a for path in files for a in ("-f", str(path))]
    cluster.kubectl("apply", "--server-side", "--force-conflicts", *args, timeout=120)
    names = cluster.kubectl("get", *args, "-o", "name").stdout.split()
    cluster.kubectl("wait", "--for=condition=Established", *names, "--timeout=60s", timeout=70)


class OperatorProcess:
    """`tailpilot operator` as a child process; a context manager."""

    def __init__(
        self,
        cluster: LocalCluster,
        *,
        namespace: str,
        log_dir: Path,
        extra_args: Sequence[str] = (),
        kubeconfig: Path | None = None,
    ):
        self.kubeconfig = kubeconfig or cluster.paths.kubeconfig
        self.cluster = cluster
        self.namespace = namespace
        self.log_file = log_dir / f"operator-{namespace}.log"
        self.extra_args = list(extra_args)
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    def start(self, timeout: float = 60) -> OperatorProcess:
        """Start and wait for kopf's liveness endpoint (the operator is watching then)."""
        self.port = free_port()
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        argv = [
            str(Path(sys.executable).parent / "tailpilot"),  # the console script users run
            "operator",
            "--namespace",
            self.namespace,
            "--build-pod-label",
            f"{AWAIT_RESULT_LABEL}=true",
            "--build-retry-base-seconds",
            "3",
            "--resync-seconds",
            "60",
            "--liveness",
            f"http://127.0.0.1:{self.port}/healthz",
            *self.extra_args,
        ]
        with self.log_file.open("ab") as log:
            self.process = subprocess.Popen(  # noqa: S603
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
            )
        try:
            eventually(
                self._exited_or_ready, timeout=timeout, description=f"operator ready ({self.log_file})"
            )
        except BaseException:
            self.kill()
            raise
        if self.process.poll() is not None:
            raise AssertionError(f"operator exited with {self.process.returncode}; log: {self.log_file}")
        return self

    def _exited_or_ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            return True
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1) as response:  # noqa: S310
                return bool(response.status == 200)
        except OSError:
            return False

    def ready(self) -> bool:
        """Whether `/readyz` answers 200: with `--leader-election`, this process leads and kopf runs."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1) as response:  # noqa: S310
                return bool(response.status == 200)
        except OSError:
            return False

    @property
    def pid(self) -> int:  # noqa: D102
        assert self.process is not None
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL, as a crashed or evicted operator would die."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a grace period."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()
        assert not pid_runs(self.process.pid)

    def __enter__(self) -> OperatorProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def create_engine_store(
    core: client.CoreV1Api, namespace: str, *, host_path: Path, claim: str = "tailpilot-engines"
) -> None:
    """A PersistentVolume bound to the namespace's engine-store claim (no provisioner runs here)."""
    pv_name = f"{claim}-{namespace}"[:63]
    core.create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=pv_name, labels={"tailpilot.io/test": "true"}),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "10Gi"},
                access_modes=["ReadWriteMany", "ReadOnlyMany"],
                persistent_volume_reclaim_policy="Delete",
                storage_class_name="",
                host_path=client.V1HostPathVolumeSource(path=str(host_path), type="DirectoryOrCreate"),
                claim_ref=client.V1ObjectReference(namespace=namespace, name=claim),
            ),
        )
    )
    core.create_namespaced_persistent_volume_claim(
        namespace,
        client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name=claim),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteMany"],
                storage_class_name="",
                volume_name=pv_name,
                resources=client.V1VolumeResourceRequirements(requests={"storage": "10Gi"}),
            ),
        ),
    )


def played_resnet_build(engine_key: str) -> BuildResult:
    """The result a successful TensorRT build of the ResNet-50 example reports (played here: no GPU)."""
    return BuildResult(
        outcome=BuildOutcome.SUCCEEDED,
        engine_key=engine_key,
        artifact=f"pvc://tailpilot-engines/{engine_key}",
        triton_backend="tensorrt",
        inputs=(TensorSpec(name="data", data_type="TYPE_FP32", dims=(3, 224, 224)),),
        outputs=(TensorSpec(name="resnetv24_dense0_fwd", data_type="TYPE_FP32", dims=(1000,)),),
    )


#: The profile of the ResNet-50 TensorRT plan on an H100 that tests play as its profile Job's result.
RESNET_H100_PROFILE = ProfileSummary(
    hardware="NVIDIA-H100-80GB-HBM3",
    service_time=ServiceTimeModel(intercept_ms=1.2, per_item_ms=0.11, jitter_cv=0.05),
    points=[
        ProfileSummaryPoint(
            batch_size=b,
            p99_ms=round(1.3 + 0.12 * b, 3),
            throughput_per_s=round(b / (1.2 + 0.11 * b) * 1000, 1),
        )
        for b in (1, 8, 32, 64)
    ],
)


def played_profile(pod: client.V1Pod, profile: ProfileSummary) -> ProfileResult:
    """The result a successful profile Job reports for the request it was given (played here: no GPU)."""
    return ProfileResult(
        outcome=BuildOutcome.SUCCEEDED,
        profile_key=pod.metadata.labels["tailpilot.io/profile-key"],
        profile=profile,
    )


def running_build_pod(
    core: client.CoreV1Api, namespace: str, *, job_name: str | None = None, timeout: float = 60
) -> client.V1Pod:
    """Wait for a Running, not yet played build pod (of one Job, if named)."""
    return _running_pod(core, namespace, BUILD_COMPONENT_SELECTOR, job_name=job_name, timeout=timeout)


def running_profile_pod(
    core: client.CoreV1Api, namespace: str, *, job_name: str | None = None, timeout: float = 60
) -> client.V1Pod:
    """Wait for a Running, not yet played profile pod (of one Job, if named)."""
    return _running_pod(core, namespace, PROFILE_COMPONENT_SELECTOR, job_name=job_name, timeout=timeout)


def _running_pod(
    core: client.CoreV1Api, namespace: str, component: str, *, job_name: str | None, timeout: float
) -> client.V1Pod:
    selector = component + (f",job-name={job_name}" if job_name else "")

    def find() -> client.V1Pod | None:
        for pod in core.list_namespaced_pod(namespace, label_selector=selector).items:
            annotations = pod.metadata.annotations or {}
            if pod.status.phase == "Running" and "kwok.tailpilot.io/exit-code" not in annotations:
                return pod
        return None

    try:
        pod: client.V1Pod = eventually(
            find, timeout=timeout, description=f"a running {selector} pod in {namespace}"
        )
    except EventuallyTimeout as timeout_error:
        raise EventuallyTimeout(f"{timeout_error}; {_why_not_running(core, namespace, selector)}") from None
    return pod


def _why_not_running(core: client.CoreV1Api, namespace: str, selector: str) -> str:
    """The selector's pods with their phase and scheduling message, and which nodes hold other services' pods.

    A pod that waits for a node says why (the scheduler's message names the anti-affinity or the
    resource that ruled each node out), so a timeout in a test names its cause.
    """
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    if not pods:
        return f"no pod matches {selector}"
    states = []
    for pod in pods:
        scheduled = next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)
        message = (
            f" ({scheduled.reason}: {scheduled.message})" if scheduled and scheduled.status != "True" else ""
        )
        states.append(f"{pod.metadata.name} {pod.status.phase} on {pod.spec.node_name}{message}")
    held = sorted(
        f"{p.metadata.namespace}/{p.metadata.name} on {p.spec.node_name}"
        for p in core.list_pod_for_all_namespaces(label_selector=LABEL_ISVC).items
        if p.metadata.namespace != namespace and p.spec.node_name
    )
    return f"pods: {'; '.join(states)}; other services' pods on nodes: {', '.join(held) or 'none'}"


def play_profile(
    core: client.CoreV1Api, namespace: str, profile: ProfileSummary, *, timeout: float = 60
) -> None:
    """Wait for the running profile pod and finish it with a successful profile of `profile`."""
    pod = running_profile_pod(core, namespace, timeout=timeout)
    play_build(core, pod, result=played_profile(pod, profile))


def play_engine_jobs(
    core: client.CoreV1Api,
    namespace: str,
    played: set[str],
    *,
    build: Callable[[client.V1Pod], BuildResult],
    profile: ProfileSummary,
) -> int:
    """Finish every running, not yet played build and profile pod (one pass); return how many.

    Args:
        core: The API.
        namespace: Where the pods are.
        played: UIDs played so far (updated).
        build: The build result for a build pod.
        profile: The profile every profile pod reports.
    """
    return play_engine_pods(
        core,
        namespace,
        played,
        lambda pod, component: build(pod) if component == "engine-build" else played_profile(pod, profile),
    )


def play_engine_pods(
    core: client.CoreV1Api,
    namespace: str,
    played: set[str],
    result: Callable[[client.V1Pod, str], BuildResult | ProfileResult],
) -> int:
    """Finish every running, not yet played build and profile pod (one pass); return how many.

    `result(pod, component)` says what each reports: `component` is "engine-build" or
    "engine-profile". For services with several candidate engines (GPU products, precisions), whose
    pods each need their own result.
    """
    count = 0
    for selector in (BUILD_COMPONENT_SELECTOR, PROFILE_COMPONENT_SELECTOR):
        component = selector.split("=", 1)[1]
        for pod in core.list_namespaced_pod(namespace, label_selector=selector).items:
            if pod.status.phase != "Running" or pod.metadata.uid in played:
                continue
            play_build(core, pod, result=result(pod, component))
            played.add(pod.metadata.uid)
            count += 1
    return count


def play_build(
    core: client.CoreV1Api,
    pod: client.V1Pod,
    *,
    result: BuildResult | ProfileResult | None = None,
    exit_code: int | None = None,
    message: str | None = None,
) -> None:
    """Finish a simulated engine Job pod with its result (or a raw exit code and message)."""
    if result is not None:
        message = result.to_termination_message()
        exit_code = 0 if exit_code is None and result.outcome.value == "Succeeded" else (exit_code or 1)
    annotations: dict[str, Any] = {
        "kwok.tailpilot.io/exit-code": str(exit_code if exit_code is not None else 0)
    }
    if message is not None:
        annotations["kwok.tailpilot.io/termination-message"] = message
    core.patch_namespaced_pod(
        pod.metadata.name, pod.metadata.namespace, {"metadata": {"annotations": annotations}}
    )


def custom_object(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """The InferenceService as the API server has it."""
    found: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices", name
    )
    return found


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    """A status condition of a custom object."""
    for cond in (obj.get("status") or {}).get("conditions", []):
        if cond["type"] == type_:
            return dict(cond)
    return None


def events_once(
    core: client.CoreV1Api,
    namespace: str,
    holds: Callable[[list[client.CoreV1Event]], bool],
    *,
    name: str | None = None,
    timeout: float = 10,
    description: str = "the Events",
) -> list[client.CoreV1Event]:
    """The namespace's Events (of object `name`, if given) once `holds` says they include what is awaited.

    The operator posts a pass's Events after its status write, so a test that saw a condition
    reads the Event it comes with a moment later: it waits for it, bounded, instead of reading once.
    """
    selector = f"involvedObject.name={name}" if name else ""

    def listed() -> list[client.CoreV1Event] | None:
        events = list(core.list_namespaced_event(namespace, field_selector=selector).items)
        return events if holds(events) else None

    return eventually(listed, timeout=timeout, description=description)


def dump(obj: Any) -> str:
    """Readable JSON for assertion messages."""
    return json.dumps(obj, indent=1, default=str)[:3000]
