"""The README's quick start, run as written: its kubectl commands, in order, on the local cluster.

The commands are read from the README's own code block (the one that starts with `helm install`), so
that the block and this test cannot drift apart. They run as a user runs them: `kubectl` (and its
`tailpilot` plugin, found on the PATH) with a kubeconfig whose context names the test's namespace,
from the repository's root, the example files as they ship. Between them the test plays what this
machine cannot run: the GPU builds and profiles on the simulated H100 and L4 nodes, and the storage
a cluster's provisioner would give the engine store claim (a PersistentVolume made for it).

The CPU example, which the README's block does not name, is applied in its shipped form too (the
native onnxruntime backend), its build and profile played on a simulated CPU node.

Left to their own tests: `helm install` (tests/chart, tests/real_pods/test_chart_operator.py, which
runs the chart's operator as a pod) and `kubectl tailpilot report`, which reads the user's Prometheus
(tests/tools). Here the operator runs as a local process watching the test's namespace.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from tailpilot.api.engine import (
    BuildOutcome,
    BuildResult,
    ProfileResult,
    ProfileSummary,
    ProfileSummaryPoint,
    ServiceTimeModel,
    TensorSpec,
)
from tailpilot.builders import example_model
from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.config import REPO_ROOT
from tailpilot_e2e.operator_harness import (
    OperatorProcess,
    condition,
    create_engine_store,
    custom_object,
    play_engine_pods,
    played_profile,
)
from tailpilot_e2e.wait import eventually

from .test_gpu_products import play_products

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

#: Where the console scripts are, `kubectl-tailpilot` among them.
VENV_BIN = Path(sys.executable).parent
#: The CPU example's played build: the example model optimized for Triton's onnxruntime backend.
MLP_NATIVE_BUILD = BuildResult(
    outcome=BuildOutcome.SUCCEEDED,
    engine_key="c" * 32,
    artifact="pvc://tailpilot-engines/" + "c" * 32,
    triton_backend="onnxruntime",
    inputs=(
        TensorSpec(name=example_model.INPUT_NAME, data_type="TYPE_FP32", dims=example_model.INPUT_SHAPE),
    ),
    outputs=(
        TensorSpec(name=example_model.OUTPUT_NAME, data_type="TYPE_FP32", dims=(example_model.NUM_CLASSES,)),
    ),
)
#: Its played profile on a CPU replica.
MLP_CPU_PROFILE = ProfileSummary(
    hardware="cpu",
    service_time=ServiceTimeModel(intercept_ms=2.0, per_item_ms=0.5, jitter_cv=0.1),
    points=[
        ProfileSummaryPoint(batch_size=b, p99_ms=2.5 + 0.6 * b, throughput_per_s=b / (2.0 + 0.5 * b) * 1000)
        for b in (1, 4, 8, 16)
    ],
)
#: Commands of the block left to other tests (see the module's docstring).
ELSEWHERE = ("helm install", "kubectl tailpilot report")


def quick_start_commands(readme: str) -> list[str]:
    """The commands of the README's block that starts with `helm install`, without their comments."""
    blocks = re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
    (block,) = [b for b in blocks if b.startswith("helm install")]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def test_the_quick_start_block_is_what_a_user_types() -> None:
    commands = quick_start_commands((REPO_ROOT / "README.md").read_text())
    assert commands[0].startswith("helm install tailpilot charts/tailpilot")
    # The engine store comes before the first service, in the order a user types them.
    order = [c for c in commands if c.startswith("kubectl apply -f examples/")]
    assert order[0] == "kubectl apply -f examples/engine-store.yaml", order
    assert all((REPO_ROOT / c.split()[-1]).is_file() for c in order)


def _namespaced_kubeconfig(cluster: LocalCluster, namespace: str, tmp_path: Path) -> Path:
    """The cluster's kubeconfig with the context's namespace set, as `kubens`/`kubectl config` would."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(cluster.paths.kubeconfig.read_text())
    subprocess.run(  # noqa: S603
        [str(cluster.binaries.kubectl), f"--kubeconfig={kubeconfig}", "config", "set-context", "--current",
         f"--namespace={namespace}"],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return kubeconfig


def _storage_for_the_claim(core: client.CoreV1Api, namespace: str, host_path: Path) -> str:
    """A PersistentVolume reserved for the example's claim: what a provisioner would make for it."""
    name = f"quick-start-{uuid.uuid4().hex[:8]}"
    core.create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=name, labels={"tailpilot.io/test": "true"}),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "50Gi"},
                access_modes=["ReadWriteMany"],
                persistent_volume_reclaim_policy="Delete",
                host_path=client.V1HostPathVolumeSource(path=str(host_path), type="DirectoryOrCreate"),
                claim_ref=client.V1ObjectReference(namespace=namespace, name="tailpilot-engines"),
            ),
        )
    )
    return name


def test_the_readme_quick_start_runs_as_written(
    k8s: client.ApiClient, crds: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    core = client.CoreV1Api(k8s)
    volume = _storage_for_the_claim(core, namespace, tmp_path / "engines")
    kubeconfig = _namespaced_kubeconfig(crds, namespace, tmp_path)
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "PATH": f"{crds.binaries.kubectl.parent}:{VENV_BIN}:{os.environ['PATH']}",
    }
    played: set[str] = set()
    outputs: dict[str, str] = {}
    try:
        with OperatorProcess(crds, namespace=namespace, log_dir=crds.paths.root / "logs"):
            for command in quick_start_commands((REPO_ROOT / "README.md").read_text()):
                if command.startswith(ELSEWHERE):
                    continue
                ran = subprocess.run(  # noqa: S603
                    shlex.split(command), cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                    timeout=60, check=False,
                )  # fmt: skip
                assert ran.returncode == 0, f"{command}: {ran.stderr}"
                outputs[command] = ran.stdout
                applied = re.fullmatch(r"kubectl apply -f (examples/\S+\.yaml)", command)
                if applied and "inferenceservice" in ran.stdout:
                    name = ran.stdout.split()[0].split("/")[-1]
                    _ready(k8s, core, namespace, name, played)
                if applied and "persistentvolumeclaim" in ran.stdout:
                    eventually(
                        lambda: (
                            core.read_namespaced_persistent_volume_claim(
                                "tailpilot-engines", namespace
                            ).status.phase
                            == "Bound"
                        ),
                        timeout=60,
                        description="the engine store claim Bound",
                    )
    finally:
        core.delete_persistent_volume(volume)

    # What the user reads back, from the commands' own output (the README's order: the table after
    # the first service, the plugin's status after the second).
    table = outputs["kubectl get tpisvc"].splitlines()
    assert table[0].split()[:3] == ["NAME", "READY", "REPLICAS"], table
    assert [line.split()[:2] for line in table[1:]] == [["resnet50-h100", "True"]], table
    wide = outputs["kubectl get tpisvc -o wide"].splitlines()
    assert {"ENGINE", "GPU"} <= set(wide[0].split()), wide
    engine = custom_object(k8s, namespace, "resnet50-h100")["status"]["engine"]["key"]
    assert wide[1].split()[0] == "resnet50-h100" and engine in wide[1].split(), wide
    status = outputs["kubectl tailpilot status resnet50-h100"]
    assert f"resnet50-h100 in {namespace}: Ready True" in status, status
    assert "p99LatencyMs" in outputs["kubectl explain inferenceservice.spec.slo"]
    # The any-GPU example serves on the cheaper product that holds its SLO.
    assert custom_object(k8s, namespace, "resnet50-any-gpu")["status"]["gpu"]["product"] == "NVIDIA-L4"


def _ready(
    k8s: client.ApiClient, core: client.CoreV1Api, namespace: str, name: str, played: set[str]
) -> None:
    """Play the service's builds and profiles (each on its product's node) until it is Ready."""

    def ready() -> bool:
        play_products(core, namespace, played)
        return (condition(custom_object(k8s, namespace, name), "Ready") or {}).get("status") == "True"

    eventually(ready, timeout=180, interval=0.5, description=f"{name} Ready")


def test_the_cpu_example_as_shipped_is_served_on_the_simulated_cpu_nodes(
    k8s: client.ApiClient, crds: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    """examples/cpu-onnxruntime.yaml in its shipped form (the native onnxruntime backend, which this
    machine's Triton lacks): applied with kubectl, its build and profile played on a KWOK CPU node,
    served to Ready with the onnxruntime backend in its model config. The real-pods tests serve the
    same file rewritten to the python variant, for real."""
    core = client.CoreV1Api(k8s)
    volume = _storage_for_the_claim(core, namespace, tmp_path / "engines")
    create_engine_store(
        core, namespace, host_path=tmp_path / "models", claim="models"
    )  # the user's model store
    kubeconfig = _namespaced_kubeconfig(crds, namespace, tmp_path)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    played: set[str] = set()

    def result(pod: client.V1Pod, component: str) -> BuildResult | ProfileResult:
        assert pod.spec.node_name.startswith("cpu-"), pod.spec.node_name  # a simulated CPU node
        return MLP_NATIVE_BUILD if component == "engine-build" else played_profile(pod, MLP_CPU_PROFILE)

    try:
        with OperatorProcess(crds, namespace=namespace, log_dir=crds.paths.root / "logs"):
            for example in ("examples/engine-store.yaml", "examples/cpu-onnxruntime.yaml"):
                subprocess.run(  # noqa: S603
                    [str(crds.binaries.kubectl), "apply", "-f", example],
                    cwd=REPO_ROOT, env=env, check=True, capture_output=True, timeout=60,
                )  # fmt: skip

            def ready() -> bool:
                play_engine_pods(core, namespace, played, result)
                return (condition(custom_object(k8s, namespace, "mlp-cpu"), "Ready") or {}).get(
                    "status"
                ) == "True"

            eventually(ready, timeout=180, interval=0.5, description="mlp-cpu Ready")
    finally:
        core.delete_persistent_volume(volume)
    config = core.read_namespaced_config_map("mlp-cpu-model-config", namespace).data["config.pbtxt"]
    assert 'backend: "onnxruntime"' in config, config
