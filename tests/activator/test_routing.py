"""Which service a request is for, from its Host header or gRPC authority (pure)."""

from __future__ import annotations

import pytest

from tailpilot.activator.routing import ServiceKey, host_without_port, service_for_host

RESNET = ServiceKey(namespace="shop", name="resnet")
IPS = {"10.96.0.17": RESNET, "fd00::17": ServiceKey(namespace="shop", name="bert")}


def route(host: str) -> ServiceKey | None:
    return service_for_host(host, service_for_ip=IPS.get)


@pytest.mark.parametrize(
    "host",
    [
        "resnet.shop",
        "resnet.shop:8000",
        "resnet.shop.svc",
        "resnet.shop.svc:8001",
        "resnet.shop.svc.cluster.local",
        "resnet.shop.svc.cluster.local:8000",
        "resnet.shop.svc.cluster.local.",  # fully qualified, trailing dot
        "resnet.shop.svc.corp.example:8001",  # another cluster domain
        "ReSNet.Shop.SVC.Cluster.Local",  # DNS is case-insensitive
        " resnet.shop:8000 ",
    ],
)
def test_every_dns_form_of_a_service_routes_to_it(host: str) -> None:
    assert route(host) == RESNET


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("10.96.0.17", RESNET),
        ("10.96.0.17:8000", RESNET),
        ("[fd00::17]:8001", ServiceKey(namespace="shop", name="bert")),
        ("fd00:0::17", ServiceKey(namespace="shop", name="bert")),  # the same IPv6, written longer
        ("10.96.0.18:8000", None),  # a cluster IP of no model Service
    ],
)
def test_a_cluster_ip_routes_through_the_table(host: str, expected: ServiceKey | None) -> None:
    assert route(host) == expected


@pytest.mark.parametrize(
    "host",
    [
        "",
        "resnet",  # the short name: no namespace
        "resnet:8000",
        "resnet.shop.pod.cluster.local",  # not a Service's name
        "resnet.shop.example.com",
        "res_net.shop",  # not a DNS label
        "-resnet.shop",
        "resnet..shop",
        f"{'a' * 64}.shop",  # a label over 63 characters
    ],
)
def test_hosts_that_name_no_service(host: str) -> None:
    assert route(host) is None


def test_host_without_port() -> None:
    assert host_without_port("m.ns:8000") == "m.ns"
    assert host_without_port("[fd00::1]:8001") == "fd00::1"
    assert host_without_port("fd00::1") == "fd00::1"
    assert host_without_port("M.NS.") == "m.ns"


def test_a_service_key_reads_as_namespace_slash_name() -> None:
    assert str(RESNET) == "shop/resnet"
