"""cluster up/down: reuse, clean shutdown, and clear errors for faults (a second, throwaway cluster)."""

from __future__ import annotations

import os
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from tailpilot_e2e.cluster import COMPONENTS, ClusterPaths, LocalCluster
from tailpilot_e2e.config import Binaries, Ports
from tailpilot_e2e.fleet import NodePool
from tailpilot_e2e.procs import ClusterError, pid_runs, read_pid

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SMALL_FLEET = (
    NodePool("gpu-h100", 1, cpu="64", memory="512Gi", gpu_product="NVIDIA-H100-80GB-HBM3", gpus=8),
)


def throwaway_cluster(tmp_path: Path, *, offset: int, binaries: Binaries | None = None) -> LocalCluster:
    ports = Ports(**{name: port + offset for name, port in vars(Ports()).items()})
    return LocalCluster(
        paths=ClusterPaths(tmp_path / "cluster"), ports=ports, binaries=binaries, fleet=SMALL_FLEET
    )


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes() and pid_runs(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_up_reuses_a_running_cluster_and_down_leaves_no_process(tmp_path):
    cluster = throwaway_cluster(tmp_path, offset=1000)
    try:
        assert cluster.up() is True
        pids = {name: read_pid(cluster.paths.root / f"{name}.pid") for name in COMPONENTS}
        assert all(pid is not None and pid_runs(pid) for pid in pids.values()), pids
        assert cluster.up() is False  # a second `up` reuses it
        assert {name: read_pid(cluster.paths.root / f"{name}.pid") for name in COMPONENTS} == pids
    finally:
        stopped = cluster.down()
    assert sorted(stopped) == sorted(COMPONENTS)
    assert not any(pid_runs(pid) for pid in pids.values() if pid)
    assert processes_mentioning(str(tmp_path)) == []
    assert not cluster.paths.root.exists()


def test_port_already_taken_names_the_component(tmp_path):
    cluster = throwaway_cluster(tmp_path, offset=2000)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", cluster.ports.etcd_client))
        squatter.listen()
        with pytest.raises(ClusterError) as error:
            cluster.up()
    assert f"etcd: port 127.0.0.1:{cluster.ports.etcd_client} is already in use" in str(error.value)
    assert processes_mentioning(str(tmp_path)) == []


def test_missing_binary_is_named(tmp_path):
    binaries = replace(Binaries.from_cache(), kwok=tmp_path / "no-such" / "kwok")
    cluster = throwaway_cluster(tmp_path, offset=3000, binaries=binaries)
    with pytest.raises(ClusterError, match=r"missing cluster binaries.*no-such/kwok"):
        cluster.up()


def test_component_that_never_gets_ready_is_named_with_its_log(tmp_path):
    fake = tmp_path / "kube-apiserver"
    fake.write_text("#!/bin/sh\necho 'simulated crash: bad flag' >&2\nexit 7\n")
    fake.chmod(0o755)
    cluster = throwaway_cluster(
        tmp_path, offset=4000, binaries=replace(Binaries.from_cache(), kube_apiserver=fake)
    )
    with pytest.raises(ClusterError) as error:
        cluster.up()
    message = str(error.value)
    assert "kube-apiserver exited with code 7 before becoming ready" in message
    assert "simulated crash: bad flag" in message and "kube-apiserver.log" in message
    assert processes_mentioning(str(tmp_path)) == []  # etcd, started first, was stopped again
    assert os.path.exists(cluster.paths.root / "logs" / "etcd.log")
