"""The node agent's pure translation of pod specs: paths, images, env, probes, phase (no cluster)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from tailpilot_e2e.agent_images import (
    ImageEntry,
    UnmappedImageError,
    image_repository,
    resolve_argv,
)
from tailpilot_e2e.agent_pod import (
    ContainerRecord,
    PodConfigError,
    Termination,
    container_env,
    key_files,
    local_argv,
    parse_probe,
    pod_phase,
    rewrite_paths,
    volume_plans,
)

ROOT = Path("/state/pods/u1/root")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("--model-repository=/models", f"--model-repository={ROOT}/models"),
        ("/engines/engines/k/repository/m/1", f"{ROOT}/engines/engines/k/repository/m/1"),
        ("/mnt/pvc", f"{ROOT}/mnt/pvc"),  # leads to the mount /mnt/pvc/models
        ("/dev/termination-log", f"{ROOT}/dev/termination-log"),
        ("/dev/null", "/dev/null"),
        ("/usr/bin/env", "/usr/bin/env"),
        ("/modelsX", "/modelsX"),  # not a path under /models
        ("pvc://models/mlp/model.onnx", "pvc://models/mlp/model.onnx"),
        ("http://127.0.0.1:8000/v2/models", "http://127.0.0.1:8000/v2/models"),
        ('{"store":"/engines"}', f'{{"store":"{ROOT}/engines"}}'),
        ('cp /config/c.pbtxt "/models/m/c.pbtxt"', f'cp {ROOT}/config/c.pbtxt "{ROOT}/models/m/c.pbtxt"'),
    ],
)
def test_paths_under_or_leading_to_a_mount_point_into_the_pod_root(text: str, expected: str) -> None:
    mounts = ["/models", "/engines", "/config", "/mnt/pvc/models", "/dev/shm"]
    assert rewrite_paths(text, root=ROOT, mount_paths=mounts, files=["/dev/termination-log"]) == expected


def test_image_repository_drops_tag_and_digest_but_keeps_a_registry_port() -> None:
    assert image_repository("nvcr.io/nvidia/tritonserver:24.10-py3") == "nvcr.io/nvidia/tritonserver"
    assert image_repository("localhost:5000/x/y:1@sha256:ab") == "localhost:5000/x/y"
    assert image_repository("busybox") == "busybox"


def test_images_resolve_through_the_table_or_say_why_not() -> None:
    table = {
        "repo/triton": ImageEntry(
            "repo/triton",
            executables={"tritonserver": "/opt/tritonserver"},
            extra_args={"tritonserver": lambda ip: [f"--http-address={ip}"]},
            env={"PATH": "/venv/bin"},
        )
    }
    argv, env = resolve_argv(
        table, image="repo/triton:1", command=["tritonserver"], args=["--x"], pod_ip="127.65.0.9"
    )
    assert argv == ["/opt/tritonserver", "--x", "--http-address=127.65.0.9"]
    assert env == {"PATH": "/venv/bin"}
    sh, _ = resolve_argv(table, image="repo/triton:1", command=["sh", "-c", "true"], args=[], pod_ip="i")
    assert sh[0].endswith("/sh") and sh[1:] == ["-c", "true"]
    with pytest.raises(UnmappedImageError, match="busybox.*no local mapping"):
        resolve_argv(table, image="busybox:1", command=["sleep"], args=[], pod_ip="i")
    with pytest.raises(UnmappedImageError, match="explicit command"):
        resolve_argv(table, image="repo/triton:1", command=[], args=[], pod_ip="i")


def test_env_resolves_downward_api_refs_and_expansion() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "a"}},
        "spec": {"nodeName": "local-0"},
    }
    data = {("configmap", "cm"): {"k": "v"}, ("secret", "s"): {"t": base64.b64encode(b"tok").decode()}}
    container = {
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "t"}}},
            {"name": "URL", "value": "http://$(IP):8000/$$(IP)"},
        ],
    }
    env = container_env(
        pod, container, pod_ip="127.65.0.2", host_ip="127.0.0.1", lookup=lambda k, n: data.get((k, n))
    )
    assert env == {
        "CM_k": "v",
        "IP": "127.65.0.2",
        "APP": "a",
        "TOKEN": "tok",
        "URL": "http://127.65.0.2:8000/$(IP)",
    }
    with pytest.raises(PodConfigError, match="configmap 'missing' not found"):
        container_env(
            pod,
            {"envFrom": [{"configMapRef": {"name": "missing"}}]},
            pod_ip="",
            host_ip="",
            lookup=lambda k, n: None,
        )


def test_volume_kinds_and_configmap_items() -> None:
    pod = {"spec": {"volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "csi": {"driver": "x"}}]}}
    with pytest.raises(PodConfigError, match="csi is not supported"):
        volume_plans(pod)
    assert key_files({"a": "1", "b": "2"}, [{"key": "b", "path": "sub/b.txt"}], encoded=False) == {
        "sub/b.txt": b"2"
    }


def test_probes_resolve_named_ports_and_defaults() -> None:
    ports = [{"name": "http", "containerPort": 8000}]
    probe = parse_probe({"httpGet": {"path": "/v2/health/ready", "port": "http"}, "periodSeconds": 5}, ports)
    assert probe is not None
    assert (probe.kind, probe.port, probe.path, probe.period_s, probe.failure_threshold) == (
        "httpGet", 8000, "/v2/health/ready", 5.0, 3
    )  # fmt: skip
    assert parse_probe(None, ports) is None
    with pytest.raises(PodConfigError):
        parse_probe({"tcpSocket": {"port": "grpc"}}, ports)


def _ended(code: int) -> Termination:
    return Termination(
        exit_code=code, reason="Error" if code else "Completed", message="", started_at=0, finished_at=1
    )


@pytest.mark.parametrize(
    ("policy", "records", "expected"),
    [
        ("Never", [ContainerRecord("a", "i", terminated=_ended(0))], "Succeeded"),
        ("Never", [ContainerRecord("a", "i", terminated=_ended(2))], "Failed"),
        ("OnFailure", [ContainerRecord("a", "i", terminated=_ended(0))], "Succeeded"),
        ("Always", [ContainerRecord("a", "i", running_since=1.0)], "Running"),
        (
            "Always",
            [ContainerRecord("a", "i", last_terminated=_ended(3), waiting_reason="CrashLoopBackOff")],
            "Running",
        ),
        ("Always", [ContainerRecord("a", "i", waiting_reason="ErrImagePull")], "Pending"),
    ],
)
def test_pod_phase_follows_the_kubelet_rules(
    policy: str, records: list[ContainerRecord], expected: str
) -> None:
    assert pod_phase(restart_policy=policy, init_failed=False, init_done=True, records=records) == expected


def test_init_containers_gate_the_phase() -> None:
    running = [ContainerRecord("a", "i", running_since=1.0)]
    assert (
        pod_phase(restart_policy="Always", init_failed=False, init_done=False, records=running) == "Pending"
    )
    assert pod_phase(restart_policy="Never", init_failed=True, init_done=False, records=running) == "Failed"


def test_host_paths_the_image_table_adds_are_not_taken_for_container_paths() -> None:
    # A checkout under /tmp (as CI's clone is) put the backend directory under the pod's /tmp mount.
    table = {
        "repo/triton": ImageEntry(
            "repo/triton",
            executables={"tritonserver": "/tmp/ci/venv/tritonserver"},
            extra_args={"tritonserver": lambda ip: ["--backend-directory=/tmp/ci/backends"]},
        )
    }
    spec = {
        "image": "repo/triton:1",
        "command": ["tritonserver"],
        "args": ["--model-repository=/models", "--log-file=/tmp/log", "--http-port=$(PORT)"],
        "volumeMounts": [{"mountPath": "/models"}, {"mountPath": "/tmp"}],
    }
    argv, _ = local_argv(table, spec, {"PORT": "8000"}, pod_ip="127.65.0.2", root=ROOT)
    assert argv == [
        "/tmp/ci/venv/tritonserver",
        f"--model-repository={ROOT}/models",
        f"--log-file={ROOT}/tmp/log",
        "--http-port=8000",
        "--backend-directory=/tmp/ci/backends",
    ]
