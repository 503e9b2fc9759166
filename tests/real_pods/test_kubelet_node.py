"""A real node beside the node agent's: the kubelet, kube-proxy, containerd, runc and the CNI bridge.

The pod's image is built here (busybox and a page, written as an OCI archive and imported into
containerd); the scheduler places the pod on the tainted node because it tolerates the taint, the
kubelet runs it through containerd, the bridge plugin gives it an address, the kubelet's probe
finds it ready, and the host reaches it on that address and through its Service's cluster IP,
which kube-proxy routes.
"""

from __future__ import annotations

import ipaddress
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.config import Binaries
from tailpilot_e2e.kubelet_node import BRIDGE, KUBELET_SYSCTLS, NODE, POD_NETWORK, KubeletNode, read_sysctls
from tailpilot_e2e.oci_archive import busybox_image, write_archive
from tailpilot_e2e.wait import eventually

pytestmark = [pytest.mark.cluster]
IMAGE = "docker.io/tailpilot/web:test"
PAGE = b"served from a container on the kubelet's node\n"


@pytest.fixture(scope="module")
def kubelet_node(real_cluster: LocalCluster) -> Iterator[KubeletNode]:
    binaries = Binaries.from_cache()
    node = KubeletNode(real_cluster, kubelet=binaries.kubelet, kube_proxy=binaries.kube_proxy)
    kernel = read_sysctls(KUBELET_SYSCTLS)
    try:
        yield node.start()
    finally:
        node.stop()
    # The machine is shared with the rest of the suite: what the kubelet set is put back.
    assert read_sysctls(KUBELET_SYSCTLS) == kernel
    assert subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True, check=False).returncode != 0


def web_pod(node: KubeletNode) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "tolerations": [node.toleration()],
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "web",
                    "image": IMAGE,
                    "imagePullPolicy": "Never",
                    "args": ["httpd", "-f", "-p", "8080", "-h", "/www"],
                    "ports": [{"containerPort": 8080}],
                    "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
                }
            ],
        },
    }


def test_a_pod_from_an_image_built_here_runs_on_the_kubelet_and_answers_on_its_address(
    kubelet_node: KubeletNode, real_api: client.ApiClient, real_namespace: str, tmp_path: Path
) -> None:
    core, ns = client.CoreV1Api(real_api), real_namespace
    node = core.read_node(NODE)
    assert node.status.node_info.container_runtime_version.startswith("containerd://")
    assert any(t.key == "tailpilot.io/kubelet-node" for t in node.spec.taints or [])
    image = busybox_image(IMAGE, ["/bin/busybox"], files={"www/index.html": PAGE})
    kubelet_node.import_image(write_archive(image, tmp_path / "web.tar"))
    assert IMAGE in kubelet_node.images()

    core.create_namespaced_pod(ns, web_pod(kubelet_node))

    def ready() -> bool:
        pod = core.read_namespaced_pod("web", ns)
        conditions = {c.type: c.status for c in pod.status.conditions or []}
        return conditions.get("Ready") == "True"

    eventually(ready, timeout=90, description="the web pod Ready on the kubelet's node")
    pod = core.read_namespaced_pod("web", ns)
    assert pod.spec.node_name == NODE
    address = ipaddress.ip_address(pod.status.pod_ip)
    assert address in ipaddress.ip_network(POD_NETWORK), pod.status.pod_ip
    with urllib.request.urlopen(f"http://{address}:8080/", timeout=10) as answer:  # noqa: S310
        assert answer.read() == PAGE

    # A Service in front of it: kube-proxy routes its cluster IP (port 80) to the pod's 8080.
    service = core.create_namespaced_service(
        ns,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    )
    cluster_ip = service.spec.cluster_ip
    assert cluster_ip and ipaddress.ip_address(cluster_ip) not in ipaddress.ip_network(POD_NETWORK)
    # kube-proxy programs the Service after its EndpointSlice: until then the address answers nothing.
    assert (
        eventually(
            lambda: _page(f"http://{cluster_ip}/"),
            timeout=60,
            description="the Service's cluster IP answering",
        )
        == PAGE
    )

    # Deleted, the pod goes through the kubelet: its container is stopped and it disappears.
    core.delete_namespaced_pod("web", ns, grace_period_seconds=1)
    eventually(
        lambda: not core.list_namespaced_pod(ns, field_selector="metadata.name=web").items,
        timeout=60,
        description="the web pod gone",
    )


def _page(url: str) -> bytes | None:
    """The body `url` answers with, or None while nothing answers there."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310 - a test's own address
            return bytes(answer.read())
    except OSError:
        return None
