"""Endpoints, the in-memory table and its change signal, the least-outstanding pick."""

from __future__ import annotations

import asyncio

import pytest

from tailpilot.activator.backends import Endpoint, EndpointTable, LeastOutstanding, Transport, serving
from tailpilot.activator.routing import ServiceKey

A = ServiceKey(namespace="shop", name="a")
E1 = Endpoint(address="10.0.0.1", http_port=8000, grpc_port=8001)
E2 = Endpoint(address="10.0.0.2", http_port=8000, grpc_port=8001)
E3 = Endpoint(address="10.0.0.3", http_port=8000, grpc_port=None)


def test_targets_bracket_ipv6_and_need_the_port() -> None:
    assert E1.target(Transport.GRPC) == "10.0.0.1:8001"
    assert (
        Endpoint(address="fd00::1", http_port=8000, grpc_port=None).target(Transport.HTTP) == "[fd00::1]:8000"
    )
    with pytest.raises(ValueError, match="no grpc port"):
        E3.target(Transport.GRPC)
    assert serving([E1, E3], Transport.GRPC) == (E1,)


def test_the_table_knows_services_and_their_cluster_ips() -> None:
    table = EndpointTable()
    assert not table.synced and not table.knows(A)
    table.set_service(A, ["10.96.0.1"])
    table.mark_synced()
    assert table.synced and table.knows(A)
    assert table.service_for_ip("10.96.0.1") == A
    table.set_service(A, ["10.96.0.2"])  # a new IP replaces the old
    assert (table.service_for_ip("10.96.0.1"), table.service_for_ip("10.96.0.2")) == (None, A)
    table.drop_service(A)
    assert not table.knows(A) and table.service_for_ip("10.96.0.2") is None


def test_ready_endpoints_are_sorted_and_deduplicated() -> None:
    table = EndpointTable()
    table.set_endpoints(A, [E2, E1, E2])
    assert table.ready(A) == (E1, E2)
    table.set_endpoints(A, [])
    assert table.ready(A) == ()


def test_changed_returns_at_the_next_change_of_that_service_only() -> None:
    async def scenario() -> None:
        table = EndpointTable()
        other = ServiceKey(namespace="shop", name="b")
        waiter = asyncio.create_task(table.changed(A))
        await asyncio.sleep(0)
        table.set_endpoints(other, [E1])
        await asyncio.sleep(0)
        assert not waiter.done()
        table.set_endpoints(A, [E1])
        await asyncio.wait_for(waiter, timeout=5.0)

    asyncio.run(scenario())


def test_the_pick_prefers_fewest_outstanding_and_takes_ties_in_turn() -> None:
    balancer = LeastOutstanding()
    assert [balancer.pick(A, [E1, E2]) for _ in range(4)] == [E1, E2, E1, E2]
    with balancer.in_flight(E1):
        assert balancer.outstanding(E1) == 1
        assert [balancer.pick(A, [E1, E2]) for _ in range(3)] == [E2, E2, E2]
    assert balancer.outstanding(E1) == 0


def test_the_pick_skips_excluded_endpoints() -> None:
    balancer = LeastOutstanding()
    assert balancer.pick(A, [E1, E2], excluded=[E1]) == E2
    assert balancer.pick(A, [E1], excluded=[E1]) is None
    assert balancer.pick(A, []) is None
