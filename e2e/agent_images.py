"""The node agent's image table: which local executable plays which container image (pure data).

A real kubelet pulls an image and runs its entry point; the node agent has no
container runtime, so it maps an image *repository* (the tag is ignored) to
executables on this machine:

- `nvcr.io/nvidia/tritonserver`: command `tritonserver` runs the `tritonserver`
  bundled with nvidia-pytriton, with a Python backend directory, bound to the pod IP;
- `ghcr.io/tailpilot/tailpilot-builder`: command `tailpilot` runs the project's own
  `tailpilot` console script (the build Job's `tailpilot build`);
- `ghcr.io/tailpilot/tailpilot-operator`: the same console script, also as the image's
  entry point (the chart's Deployment gives only `args: [operator, ...]`), and command
  `python`, the project's own interpreter (`.venv/bin/python`, as the image's venv is first on
  its PATH: the chart's activator Deployment runs `python -P -m tailpilot.activator`); run in
  a private mount namespace with the pod's volumes at their mountPaths, because the operator
  and the activator read their ServiceAccount token at the absolute in-cluster path.

A pod spec without `command` runs the image's entry point (`ImageEntry.entrypoint`)
with its `args`, or with the image's default arguments (`ImageEntry.default_args`, the
Dockerfile's CMD) when it has no `args` either, as a container runtime does.

Any other command of a mapped image (`sh`, `cp`, ...) is looked up on this
machine's PATH, as the image's own shell tools would be. An image whose
repository is not in the table cannot run: the pod waits with ErrImagePull.

- `quay.io/prometheus-operator/prometheus-operator`, `quay.io/prometheus/prometheus` and
  `quay.io/prometheus-operator/prometheus-config-reloader`: prometheus-operator's Deployment,
  and the Prometheus and config reloader its StatefulSet runs, built from their upstream Go
  modules (`e2e/build-binaries.sh`). The operator and Prometheus run in a mount namespace: both
  read the in-cluster ServiceAccount token, and the configuration the operator generates names
  absolute paths (rule files).

Triton binds 0.0.0.0 by default, which would collide between pods on one
host; a pod has its own network namespace in a real cluster, here its own
loopback address, so the table adds `--*-address=<pod IP>` for Triton, and
`--web.listen-address=<pod IP>:<its port>` for Prometheus and prometheus-operator
(whose defaults are every address). For the same reason, where an image's containers talk to each
other over the pod's loopback (the config reloader reloads Prometheus at
`http://127.0.0.1:9090`), `ImageEntry.pod_loopback` turns `127.0.0.1` and
`localhost` in its arguments into the pod IP.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


class UnmappedImageError(LookupError):
    """The image (or a command in it) has no local executable; the message says which and why."""


@dataclass(frozen=True)
class ImageEntry:
    """How to run one image repository's commands on this machine.

    Attributes:
        repository: Image name without tag or digest (`registry/path/name`).
        executables: Command name (argv[0] as the pod spec gives it) -> local executable.
        extra_args: Per command, a function of the pod IP returning arguments appended to argv.
        env: Environment added under the container's own env (e.g. PATH for the Python backend).
        entrypoint: The image's ENTRYPOINT (its argv[0] mapped like a command), used when the pod
            spec has no `command`; empty: the agent needs an explicit command.
        default_args: The image's CMD, used when the pod spec has neither `command` nor `args`.
        mount_namespace: Run the image's containers in a private mount namespace in which each
            volume is bind-mounted at its mountPath (`agent_mounts`), for programs that open
            absolute paths of their own (the in-cluster ServiceAccount token) that the agent's
            rewriting of command, args and env cannot reach.
        pod_loopback: The container reaches its pod's other containers at 127.0.0.1 or localhost
            in its arguments; here the pod's loopback is its pod IP (`own_loopback`).
    """

    repository: str
    executables: Mapping[str, str]
    extra_args: Mapping[str, Callable[[str], Sequence[str]]] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    entrypoint: Sequence[str] = ()
    default_args: Sequence[str] = ()
    mount_namespace: bool = False
    pod_loopback: bool = False


_LOOPBACK_HOST = re.compile(r"(?<![\w.\-])(?:127\.0\.0\.1|localhost)(?![\w.\-])")


def own_loopback(text: str, pod_ip: str) -> str:
    """The pod's loopback is its pod IP here.

    Example: "http://127.0.0.1:9090/-/reload" -> "http://127.65.0.9:9090/-/reload".
    """
    return _LOOPBACK_HOST.sub(pod_ip, text)


def image_repository(image: str) -> str:
    """`registry/name:tag@sha256:...` -> `registry/name` (a port in the registry host is kept)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[: len(name) - len(last[-1])] + last[-1].split(":", 1)[0]
    return name


def resolve_argv(
    table: Mapping[str, ImageEntry],
    *,
    image: str,
    command: Sequence[str],
    args: Sequence[str],
    pod_ip: str,
    host_path: str | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The local argv and extra env for a container, or UnmappedImageError.

    Args:
        table: Image repository -> entry.
        image: The container's image.
        command: The container's `command`; empty: the image's entry point (`ImageEntry.entrypoint`).
        args: The container's `args`; with neither, the image's `default_args`.
        pod_ip: The pod's loopback address.
        host_path: PATH used to find host commands (`shutil.which`'s default when None).
    """
    entry = table.get(image_repository(image))
    if entry is None:
        raise UnmappedImageError(
            f"image {image!r} has no local mapping in the node agent's image table "
            f"(known: {', '.join(sorted(table)) or 'none'})"
        )
    if not command:
        if not entry.entrypoint:
            raise UnmappedImageError(
                f"image {image!r}: the node agent needs an explicit command (no entry point)"
            )
        command = list(entry.entrypoint)
        args = list(args) or list(entry.default_args)
    name = command[0]
    executable = entry.executables.get(name) or shutil.which(name, path=host_path)
    if executable is None:
        raise UnmappedImageError(f"image {image!r}: command {name!r} is neither mapped nor on this machine")
    extra = list(entry.extra_args[name](pod_ip)) if name in entry.extra_args else []
    argv = [*command[1:], *args]
    if entry.pod_loopback:
        argv = [own_loopback(a, pod_ip) for a in argv]
    return [executable, *argv, *extra], dict(entry.env)


TRITON_REPOSITORY = "nvcr.io/nvidia/tritonserver"
BUILDER_REPOSITORY = "ghcr.io/tailpilot/tailpilot-builder"
OPERATOR_REPOSITORY = "ghcr.io/tailpilot/tailpilot-operator"
PROMETHEUS_OPERATOR_REPOSITORY = "quay.io/prometheus-operator/prometheus-operator"
PROMETHEUS_REPOSITORY = "quay.io/prometheus/prometheus"
CONFIG_RELOADER_REPOSITORY = "quay.io/prometheus-operator/prometheus-config-reloader"


def default_table(
    *,
    venv_bin: Path,
    triton_binary: Path,
    backend_dir: Path,
    prometheus_operator_binary: Path | None = None,
    prometheus_binary: Path | None = None,
    config_reloader_binary: Path | None = None,
) -> dict[str, ImageEntry]:
    """The table the agent runs with (see the module docstring).

    Triton, the builder and the operator always; prometheus-operator, Prometheus and its config
    reloader where their binaries are given.
    """

    def triton_extra(pod_ip: str) -> list[str]:
        return [
            f"--backend-directory={backend_dir}",
            f"--http-address={pod_ip}",
            f"--grpc-address={pod_ip}",
            f"--metrics-address={pod_ip}",
        ]

    # The Python backend's stub finds numpy/onnxruntime through the interpreter first on PATH.
    path_env = {"PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin"}
    table = {
        TRITON_REPOSITORY: ImageEntry(
            repository=TRITON_REPOSITORY,
            executables={"tritonserver": str(triton_binary)},
            extra_args={"tritonserver": triton_extra},
            env=path_env,
        ),
        # docker/builder.Dockerfile: ENTRYPOINT ["tailpilot"], CMD ["build", "--help"].
        BUILDER_REPOSITORY: ImageEntry(
            repository=BUILDER_REPOSITORY,
            executables={"tailpilot": str(venv_bin / "tailpilot")},
            env=path_env,
            entrypoint=("tailpilot",),
            default_args=("build", "--help"),
        ),
        # docker/operator.Dockerfile: ENTRYPOINT ["tailpilot"], CMD ["operator"], and its ENV; its
        # PATH starts with the venv, so `python` is the venv's (the chart's activator Deployment).
        OPERATOR_REPOSITORY: ImageEntry(
            repository=OPERATOR_REPOSITORY,
            executables={"tailpilot": str(venv_bin / "tailpilot"), "python": str(venv_bin / "python")},
            env={**path_env, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"},
            entrypoint=("tailpilot",),
            default_args=("operator",),
            mount_namespace=True,
        ),
    }
    if prometheus_operator_binary is not None:
        # The image's ENTRYPOINT ["/bin/operator"].
        table[PROMETHEUS_OPERATOR_REPOSITORY] = ImageEntry(
            repository=PROMETHEUS_OPERATOR_REPOSITORY,
            executables={"/bin/operator": str(prometheus_operator_binary)},
            # Its default is `:8080`, every address of the machine (Go's flag package: the last wins).
            extra_args={"/bin/operator": lambda pod_ip: [f"--web.listen-address={pod_ip}:8080"]},
            entrypoint=("/bin/operator",),
            mount_namespace=True,
        )
    if prometheus_binary is not None:
        # The image's ENTRYPOINT ["/bin/prometheus"] and CMD.
        table[PROMETHEUS_REPOSITORY] = ImageEntry(
            repository=PROMETHEUS_REPOSITORY,
            executables={"/bin/prometheus": str(prometheus_binary)},
            extra_args={"/bin/prometheus": lambda pod_ip: [f"--web.listen-address={pod_ip}:9090"]},
            entrypoint=("/bin/prometheus",),
            default_args=("--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"),
            mount_namespace=True,
        )
    if config_reloader_binary is not None:
        # The image's ENTRYPOINT ["/bin/prometheus-config-reloader"].
        table[CONFIG_RELOADER_REPOSITORY] = ImageEntry(
            repository=CONFIG_RELOADER_REPOSITORY,
            executables={"/bin/prometheus-config-reloader": str(config_reloader_binary)},
            entrypoint=("/bin/prometheus-config-reloader",),
            pod_loopback=True,
        )
    return table
