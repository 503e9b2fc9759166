"""The operator's reading of the requests a real activator holds (`controllers.signals.activator_held`).

A real activator (`tailpilot.activator`, started on 127.0.0.1 with a cold service) holds requests
sent to it; the operator's reader asks its admin port's metrics page, as it asks the activator's
ready pods, and sums the service's held gauge. A second address that does not answer is left out;
when none answers there is no reading.
"""

from __future__ import annotations

import asyncio

from tailpilot.activator.routing import ServiceKey
from tailpilot.controllers.signals.activator_held import ActivatorHeld, held_in_page
from tailpilot.manifests.activator_routing import ActivatorEndpoints
from tests.activator.harness import SERVICE, eventually, known_table, started

INFER = "/v2/models/resnet/infer"
OTHER = ServiceKey(namespace="shop", name="bert")


def test_the_requests_held_for_a_service_are_read_from_the_activators_metrics_page() -> None:
    async def scenario() -> None:
        async with started(table=known_table(SERVICE, OTHER)) as harness:
            port = harness.running.admin_port
            # The first address is the activator; the second (nothing listens there) is left out.
            endpoints = ActivatorEndpoints(addresses=("127.0.0.1", "127.0.0.2"), ports={"metrics": port})
            reader = ActivatorHeld(lambda: endpoints)
            assert await reader.held(SERVICE.namespace, SERVICE.name) == 0
            held = [asyncio.create_task(harness.post(INFER, data=b"{}")) for _ in range(4)]
            other = asyncio.create_task(harness.post(INFER, data=b"{}", host="bert.shop.svc.cluster.local"))
            await eventually(lambda: harness.held() == 4 and harness.held(OTHER) == 1)
            assert await reader.held(SERVICE.namespace, SERVICE.name) == 4
            assert await reader.held(OTHER.namespace, OTHER.name) == 1
            assert await reader.held("elsewhere", SERVICE.name) == 0
            # No activator pod seen, or none answering: no reading.
            assert await ActivatorHeld(lambda: None).held(SERVICE.namespace, SERVICE.name) is None
            silent = ActivatorEndpoints(addresses=("127.0.0.2",), ports={"metrics": port})
            assert await ActivatorHeld(lambda: silent).held(SERVICE.namespace, SERVICE.name) is None
            no_port = ActivatorEndpoints(addresses=("127.0.0.1",), ports={"http": 8000})
            assert await ActivatorHeld(lambda: no_port).held(SERVICE.namespace, SERVICE.name) is None
            for task in (*held, other):
                task.cancel()
            await asyncio.gather(*held, other, return_exceptions=True)

    asyncio.run(scenario())


def test_the_gauge_is_summed_over_its_lines_for_the_service_only() -> None:
    page = "\n".join(
        [
            "# HELP tailpilot_activator_held_requests Requests held now.",
            "# TYPE tailpilot_activator_held_requests gauge",
            'tailpilot_activator_held_requests{namespace="shop",service="resnet"} 7.0',
            'tailpilot_activator_held_requests{namespace="shop",service="bert"} 3.0',
            'tailpilot_activator_requests_total{namespace="shop",service="resnet",outcome="held"} 99.0',
            "",
        ]
    )
    assert held_in_page(page, namespace="shop", service="resnet") == 7
    assert held_in_page(page, namespace="shop", service="absent") == 0
