"""The node agent's pure translation of pod specs: paths, images, env, probes, phase (no cluster)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from tailpilot_e2e.agent_images import (
    BUILDER_REPOSITORY,
    CONFIG_RELOADER_REPOSITORY,
    OPERATOR_REPOSITORY,
    PROMETHEUS_OPERATOR_REPOSITORY,
    PROMETHEUS_REPOSITORY,
    TRITON_REPOSITORY,
    ImageEntry,
    UnmappedImageError,
    default_table,
    image_repository,
    own_loopback,
    resolve_argv,
)
from tailpilot_e2e.agent_pod import (
    ContainerRecord,
    PodConfigError,
    Termination,
    bind_pod_ip,
    container_env,
    containers_finished,
    is_sidecar,
    key_files,
    kubernetes_service_env,
    local_argv,
    mount_plan,
    parse_probe,
    pod_conditions,
    pod_phase,
    rewrite_paths,
    stop_waves,
    volume_plans,
)
from tailpilot_e2e.agent_volumes import link_mounts

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


# ---- native sidecars ---------------------------------------------------------------------------------
def _sidecar_phase(policy: str, main: list[ContainerRecord], sidecars: list[ContainerRecord]) -> str:
    return pod_phase(
        restart_policy=policy, init_failed=False, init_done=True, records=main, sidecars=sidecars
    )


def test_a_pod_whose_containers_succeeded_runs_until_its_sidecars_stopped_then_succeeds() -> None:
    main = [ContainerRecord("profile", "i", terminated=_ended(0))]
    running = ContainerRecord("triton", "i", running_since=1.0, started=True, ready=True)
    assert _sidecar_phase("Never", main, [running]) == "Running"
    # Stopped by the agent's SIGTERM: its exit code (143) does not count.
    stopped = ContainerRecord("triton", "i", terminated=_ended(143))
    assert _sidecar_phase("Never", main, [stopped]) == "Succeeded"
    assert _sidecar_phase("OnFailure", main, [stopped]) == "Succeeded"


def test_a_failed_container_fails_the_pod_whatever_its_sidecars_did() -> None:
    main = [ContainerRecord("profile", "i", terminated=_ended(2))]
    assert _sidecar_phase("Never", main, [ContainerRecord("triton", "i", terminated=_ended(0))]) == "Failed"
    assert _sidecar_phase("Never", main, [ContainerRecord("triton", "i", running_since=1.0)]) == "Running"
    # OnFailure restarts the failed container: not finished, the pod runs on.
    restarting = [
        ContainerRecord("profile", "i", last_terminated=_ended(2), waiting_reason="CrashLoopBackOff")
    ]
    assert not containers_finished(init_failed=False, records=restarting)
    assert (
        _sidecar_phase("OnFailure", restarting, [ContainerRecord("t", "i", running_since=1.0)]) == "Running"
    )


def test_a_crash_looping_sidecar_keeps_the_pod_running() -> None:
    main = [ContainerRecord("profile", "i", running_since=1.0, started=True, ready=True)]
    looping = ContainerRecord("triton", "i", last_terminated=_ended(1), waiting_reason="CrashLoopBackOff")
    assert _sidecar_phase("Never", main, [looping]) == "Running"


def test_containers_are_finished_when_every_one_ended_for_good_or_an_init_container_failed() -> None:
    done, running = (
        ContainerRecord("a", "i", terminated=_ended(0)),
        ContainerRecord("b", "i", running_since=1.0),
    )
    assert containers_finished(init_failed=False, records=[done])
    assert not containers_finished(init_failed=False, records=[done, running])
    assert not containers_finished(init_failed=False, records=[ContainerRecord("c", "i")])  # not started yet
    assert containers_finished(init_failed=True, records=[ContainerRecord("c", "i")])


def _ready_condition(main: list[ContainerRecord], sidecars: list[ContainerRecord]) -> dict[str, str]:
    conditions = pod_conditions(existing=[], init_done=True, records=main, now=0.0, sidecars=sidecars)
    return {c["type"]: c["status"] for c in conditions}


def test_a_sidecars_readiness_gates_the_pods() -> None:
    main = [ContainerRecord("profile", "i", running_since=1.0, started=True, ready=True)]
    unready = ContainerRecord("triton", "i", running_since=1.0, started=True, ready=False)
    ready = ContainerRecord("triton", "i", running_since=1.0, started=True, ready=True)
    assert _ready_condition(main, [unready]) == {
        "Initialized": "True",
        "ContainersReady": "False",
        "Ready": "False",
    }
    assert _ready_condition(main, [ready]) == {
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
    }
    assert _ready_condition([], [ready])["Ready"] == "False"


def test_sidecars_stop_after_the_containers_in_reverse_order_of_declaration() -> None:
    init = [
        {"name": "setup"},
        {"name": "proxy", "restartPolicy": "Always"},
        {"name": "triton", "restartPolicy": "Always"},
    ]
    assert [is_sidecar(c) for c in init] == [False, True, True]
    assert stop_waves(init, [{"name": "profile"}, {"name": "log"}]) == [
        ["setup", "profile", "log"],
        ["triton"],
        ["proxy"],
    ]
    assert stop_waves([], [{"name": "main"}]) == [["main"]]


# ---- image entry points, the API server's address, mount plans ---------------------------------------
def test_a_spec_without_command_runs_the_images_entry_point_with_its_args_or_default_args() -> None:
    table = {
        "repo/op": ImageEntry(
            "repo/op",
            executables={"tailpilot": "/venv/bin/tailpilot"},
            entrypoint=("tailpilot",),
            default_args=("operator",),
        )
    }

    def argv(command: list[str], args: list[str]) -> list[str]:
        return resolve_argv(table, image="repo/op:0.1.0", command=command, args=args, pod_ip="i")[0]

    assert argv([], ["operator", "--namespace=a"]) == ["/venv/bin/tailpilot", "operator", "--namespace=a"]
    assert argv([], []) == ["/venv/bin/tailpilot", "operator"]  # the image's CMD
    assert argv(["tailpilot"], []) == ["/venv/bin/tailpilot"]  # a command replaces the CMD too
    assert argv(["tailpilot", "crds"], ["--check"]) == ["/venv/bin/tailpilot", "crds", "--check"]


def test_the_default_table_runs_the_operator_image_from_the_projects_console_script() -> None:
    table = default_table(venv_bin=Path("/v/bin"), triton_binary=Path("/t"), backend_dir=Path("/b"))
    image = "ghcr.io/tailpilot/tailpilot-operator:0.1.0"
    argv, env = resolve_argv(table, image=image, command=[], args=["operator"], pod_ip="i")
    assert argv == ["/v/bin/tailpilot", "operator"]
    assert env["PATH"].startswith("/v/bin:") and env["PYTHONUNBUFFERED"] == "1"
    assert table[OPERATOR_REPOSITORY].mount_namespace
    assert not table[BUILDER_REPOSITORY].mount_namespace and not table[TRITON_REPOSITORY].mount_namespace
    # The chart's activator Deployment: the image's venv python, with the chart's module and flags.
    argv, _ = resolve_argv(
        table,
        image=image,
        command=["python", "-P", "-m", "tailpilot.activator"],
        args=["--http-port=8000"],
        pod_ip="i",
    )
    assert argv == ["/v/bin/python", "-P", "-m", "tailpilot.activator", "--http-port=8000"]


def test_prometheus_operators_containers_bind_and_reach_their_pod_ip() -> None:
    # The args prometheus-operator v0.85 gives the StatefulSet's containers, after the agent's
    # wildcard rewriting (`local_argv`): "--listen-address=:8080" has become the pod IP's.
    table = default_table(
        venv_bin=Path("/v/bin"),
        triton_binary=Path("/t"),
        backend_dir=Path("/b"),
        prometheus_operator_binary=Path("/c/operator"),
        prometheus_binary=Path("/c/prometheus"),
        config_reloader_binary=Path("/c/reloader"),
    )
    argv, _ = resolve_argv(
        table,
        image="quay.io/prometheus-operator/prometheus-operator:v0.85.0",
        command=[],
        args=["--localhost=127.0.0.1"],  # for the reloaders it configures: left as it is
        pod_ip="10.65.0.7",
    )
    assert argv == ["/c/operator", "--localhost=127.0.0.1", "--web.listen-address=10.65.0.7:8080"]
    assert table[PROMETHEUS_OPERATOR_REPOSITORY].mount_namespace  # in-cluster ServiceAccount token
    argv, _ = resolve_argv(
        table,
        image="quay.io/prometheus/prometheus:v3.16.0",
        command=[],
        args=["--config.file=/etc/prometheus/config_out/prometheus.env.yaml", "--web.enable-lifecycle"],
        pod_ip="10.65.0.7",
    )
    assert argv == [
        "/c/prometheus",
        "--config.file=/etc/prometheus/config_out/prometheus.env.yaml",
        "--web.enable-lifecycle",
        "--web.listen-address=10.65.0.7:9090",  # its default is every address of the machine
    ]
    assert table[PROMETHEUS_REPOSITORY].mount_namespace  # its generated config names absolute paths
    argv, _ = resolve_argv(
        table,
        image="quay.io/prometheus-operator/prometheus-config-reloader:v0.85.0",
        command=[],
        args=["--listen-address=10.65.0.7:8080", "--reload-url=http://127.0.0.1:9090/-/reload"],
        pod_ip="10.65.0.7",
    )
    assert argv == [
        "/c/reloader",
        "--listen-address=10.65.0.7:8080",
        "--reload-url=http://10.65.0.7:9090/-/reload",  # the pod's loopback is its pod IP here
    ]
    # Without the binaries (not built), the images are not in the table: their pods cannot run.
    bare = default_table(venv_bin=Path("/v/bin"), triton_binary=Path("/t"), backend_dir=Path("/b"))
    assert not {PROMETHEUS_OPERATOR_REPOSITORY, PROMETHEUS_REPOSITORY, CONFIG_RELOADER_REPOSITORY} & set(bare)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://127.0.0.1:9090/-/reload", "http://10.65.0.7:9090/-/reload"),
        ("localhost:8080", "10.65.0.7:8080"),
        ("http://localhost.example:80", "http://localhost.example:80"),
        ("127.0.0.10", "127.0.0.10"),
        ("--name=my-localhost", "--name=my-localhost"),
    ],
)
def test_a_pods_loopback_is_its_pod_ip(text: str, expected: str) -> None:
    assert own_loopback(text, "10.65.0.7") == expected


def test_containers_find_the_api_server_at_its_own_address() -> None:
    assert kubernetes_service_env("https://127.0.0.1:6743") == {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": "6743",
        "KUBERNETES_SERVICE_PORT_HTTPS": "6743",
    }
    assert kubernetes_service_env("https://api.example")["KUBERNETES_SERVICE_PORT"] == "443"


def test_mount_plans_bind_each_volume_link_onto_its_mount_path_parents_first() -> None:
    spec = {
        "volumeMounts": [
            {"name": "models", "mountPath": "/mnt/pvc/models"},
            {"name": "sa", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True},
            {"name": "pvc", "mountPath": "/mnt/pvc/"},
            {"name": "tmp", "mountPath": "/tmp"},
        ]
    }
    assert mount_plan(ROOT, spec) == [
        {"source": f"{ROOT}/tmp", "target": "/tmp", "readOnly": False},
        {"source": f"{ROOT}/mnt/pvc", "target": "/mnt/pvc", "readOnly": False},
        {"source": f"{ROOT}/mnt/pvc/models", "target": "/mnt/pvc/models", "readOnly": False},
        {
            "source": f"{ROOT}/var/run/secrets/kubernetes.io/serviceaccount",
            "target": "/var/run/secrets/kubernetes.io/serviceaccount",
            "readOnly": True,
        },
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://0.0.0.0:8080/healthz", "http://127.65.0.9:8080/healthz"),
        ("--bind-address=0.0.0.0", "--bind-address=127.65.0.9"),
        ("0.0.0.0", "127.65.0.9"),
        ("0.0.0.0/0", "0.0.0.0/0"),  # a network, not an address to bind
        ("10.0.0.0.0", "10.0.0.0.0"),
        ("v0.0.0.0", "v0.0.0.0"),
        ("--listen-address=:8080", "--listen-address=127.65.0.9:8080"),  # Go's "every address"
        (":9090", "127.65.0.9:9090"),
        ("http://prometheus:9090", "http://prometheus:9090"),  # a host is named: left alone
        ("--ratio=1:2", "--ratio=1:2"),
        ("--selector=a=b,c=:80x", "--selector=a=b,c=:80x"),
    ],
)
def test_a_pods_wildcard_address_is_its_pod_ip(text: str, expected: str) -> None:
    assert bind_pod_ip(text, "127.65.0.9") == expected


def test_container_args_bind_the_pod_ip_instead_of_the_machines_addresses() -> None:
    table = {"repo/op": ImageEntry("repo/op", executables={}, entrypoint=("sh",))}
    spec = {"image": "repo/op:1", "args": ["-c", "serve --liveness=http://0.0.0.0:8080/healthz"]}
    argv, _ = local_argv(table, spec, {}, pod_ip="127.65.0.9", root=ROOT)
    assert argv[1:] == ["-c", "serve --liveness=http://127.65.0.9:8080/healthz"]


def test_the_serving_containers_admin_key_reaches_tritons_argv_as_the_kubelet_expands_it() -> None:
    # The Triton container the operator builds: the key from the service's Secret, `$(VAR)` in args.
    from tailpilot.manifests.deployment import triton_container
    from tailpilot.manifests.settings import ManifestSettings
    from tailpilot.manifests.triton_access import ADMIN_KEY_HEADER, admin_key_ref
    from tests.manifests.fixtures import make_isvc

    isvc = make_isvc("a").obj()
    spec = triton_container(
        isvc=isvc,
        image=f"{TRITON_REPOSITORY}:24.10-py3",
        settings=ManifestSettings(builder_image="b"),
        admin_key=admin_key_ref("a"),
    )
    pod = {"metadata": {"name": "a-1", "namespace": "ml"}, "spec": {"nodeName": "local-0"}}
    secrets = {("secret", "a-triton-admin"): {"admin-key": base64.b64encode(b"k3y-from-the-secret").decode()}}
    env = container_env(
        pod, spec, pod_ip="127.65.0.2", host_ip="127.0.0.1", lookup=lambda k, n: secrets.get((k, n))
    )
    table = {
        TRITON_REPOSITORY: ImageEntry(TRITON_REPOSITORY, executables={"tritonserver": "/opt/tritonserver"})
    }
    argv, _ = local_argv(table, spec, env, pod_ip="127.65.0.2", root=ROOT)
    apis = "model-repository,model-config,trace,logging,shared-memory"
    assert f"--http-restricted-api={apis}:{ADMIN_KEY_HEADER}=k3y-from-the-secret" in argv
    assert f"--grpc-restricted-protocol={apis}:{ADMIN_KEY_HEADER}=k3y-from-the-secret" in argv
    # No Secret (yet): the container is not started, as the kubelet refuses it.
    with pytest.raises(PodConfigError, match="secret 'a-triton-admin' key 'admin-key' not found"):
        container_env(pod, spec, pod_ip="127.65.0.2", host_ip="127.0.0.1", lookup=lambda k, n: None)


def test_a_sub_path_mount_of_a_key_links_the_keys_file_and_a_missing_one_becomes_a_directory(
    tmp_path: Path,
) -> None:
    # prometheus-operator mounts its web config Secret's key as a file (`subPath: web-config.yaml`).
    secret, data = tmp_path / "volumes" / "web-config", tmp_path / "volumes" / "data"
    secret.mkdir(parents=True)
    (secret / "web-config.yaml").write_text("tls_server_config: {}\n")
    data.mkdir()
    container = {
        "volumeMounts": [
            {
                "name": "web-config",
                "mountPath": "/etc/prometheus/web-config.yaml",
                "subPath": "web-config.yaml",
            },
            {"name": "data", "mountPath": "/var/lib/app", "subPath": "app"},
        ]
    }
    root = tmp_path / "root"
    for _ in range(2):  # the agent links again on every sync
        link_mounts(root, container, {"web-config": secret, "data": data})
    assert (root / "etc/prometheus/web-config.yaml").read_text() == "tls_server_config: {}\n"
    assert (data / "app").is_dir() and (root / "var/lib/app").resolve() == (data / "app").resolve()
