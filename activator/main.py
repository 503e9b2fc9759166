r"""The activator process: flags into settings, the cluster (or static services) wired in, SIGTERM drains.

    python -P -m tailpilot.activator --http-port 8000 --grpc-port 8001 --metrics-port 9090 \\
        --max-held-per-service 1000 --max-held-bytes 268435456 --hold-timeout-s 300 --max-body-bytes 67108864

In a cluster it reads the services and their replicas from the API server (`kube_backends`),
wakes a service by annotating its InferenceService (`waking.KubeWaker`) and records each cold start
there too (`cold_start.KubeColdStartWriter`), with the in-cluster ServiceAccount or `--kubeconfig`.
With `--static-service` it needs no cluster: the services and their replicas are the flag's, and a
wake and a cold start are only logged (local runs and `tailpilot.bench.activator_overhead`).

SIGTERM (or SIGINT) drains: readiness turns 503, the proxy ports stop accepting, requests in
flight, held ones included, get up to the hold timeout to finish, and the process exits 0. The
pod's `terminationGracePeriodSeconds` must exceed the hold timeout (say 330 s for the default 300 s)
for the drain to complete.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from collections.abc import Sequence

from kubernetes import client, config

from tailpilot.activator.app import ActivatorSettings, start_activator
from tailpilot.activator.backends import Endpoint, EndpointTable
from tailpilot.activator.cold_start import ColdStartWriter, KubeColdStartWriter
from tailpilot.activator.holding import HoldLimits
from tailpilot.activator.kube_backends import KubeBackends
from tailpilot.activator.routing import ServiceKey
from tailpilot.activator.waking import KubeWaker, LoggingWaker, Waker

log = logging.getLogger("tailpilot.activator")

_DEFAULTS = ActivatorSettings()
_LIMITS = HoldLimits()


def parse_static_service(text: str) -> tuple[ServiceKey, tuple[Endpoint, ...]]:
    """A `--static-service` value: `NS/NAME` or `NS/NAME=ADDR:HTTP:GRPC,...`.

    With no replica, requests are held until the timeout. A port may be empty (`127.0.0.1:8000:`
    serves HTTP only).
    """
    service, _, replicas = text.partition("=")
    namespace, slash, name = service.partition("/")
    if not slash or not namespace or not name:
        raise argparse.ArgumentTypeError(f"expected NS/NAME[=ADDR:HTTP:GRPC,...], got {text!r}")
    endpoints = []
    for replica in filter(None, replicas.split(",")):
        address, _, ports = replica.rpartition(":")
        address, _, http_port = address.rpartition(":")
        if not address:
            raise argparse.ArgumentTypeError(f"expected ADDR:HTTP:GRPC, got {replica!r}")
        endpoints.append(
            Endpoint(
                address=address.strip("[]"),
                http_port=int(http_port) if http_port else None,
                grpc_port=int(ports) if ports else None,
            )
        )
    return ServiceKey(namespace=namespace, name=name), tuple(endpoints)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -P -m tailpilot.activator",
        description="Holds KServe v2 requests for services scaled to zero, wakes them, forwards them.",
    )
    parser.add_argument("--bind-address", default=_DEFAULTS.bind_address)
    parser.add_argument(
        "--http-port", type=int, default=_DEFAULTS.http_port, help="KServe v2 HTTP (0: any free port)"
    )
    parser.add_argument(
        "--grpc-port", type=int, default=_DEFAULTS.grpc_port, help="KServe v2 gRPC (0: any free port)"
    )
    parser.add_argument(
        "--metrics-port", type=int, default=_DEFAULTS.admin_port, help="/metrics, /healthz and /readyz"
    )
    parser.add_argument("--max-held-per-service", type=int, default=_LIMITS.max_held_per_service)
    parser.add_argument("--max-held-bytes", type=int, default=_LIMITS.max_held_bytes)
    parser.add_argument("--hold-timeout-s", type=float, default=_LIMITS.hold_timeout_s)
    parser.add_argument("--max-body-bytes", type=int, default=_LIMITS.max_body_bytes)
    parser.add_argument(
        "--retry-after-s", type=int, default=_DEFAULTS.retry_after_s, help="Retry-After of a 503"
    )
    parser.add_argument("--forward-timeout-s", type=float, default=_DEFAULTS.forward_timeout_s)
    parser.add_argument("--max-forward-tries", type=int, default=_DEFAULTS.max_forward_tries)
    parser.add_argument("--grpc-max-concurrent-rpcs", type=int, default=_DEFAULTS.grpc_max_concurrent_rpcs)
    parser.add_argument(
        "--kubeconfig", help="out of a cluster: this kubeconfig instead of the in-cluster account"
    )
    parser.add_argument(
        "--static-service",
        type=parse_static_service,
        action="append",
        default=[],
        metavar="NS/NAME[=ADDR:HTTP:GRPC,...]",
        help="serve this service with these replicas, without a cluster (repeatable; wakes are only logged)",
    )
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def settings_from(options: argparse.Namespace) -> ActivatorSettings:
    """The settings the flags give."""
    return ActivatorSettings(
        bind_address=options.bind_address,
        http_port=options.http_port,
        grpc_port=options.grpc_port,
        admin_port=options.metrics_port,
        limits=HoldLimits(
            max_held_per_service=options.max_held_per_service,
            max_held_bytes=options.max_held_bytes,
            hold_timeout_s=options.hold_timeout_s,
            max_body_bytes=options.max_body_bytes,
        ),
        retry_after_s=options.retry_after_s,
        forward_timeout_s=options.forward_timeout_s,
        max_forward_tries=options.max_forward_tries,
        grpc_max_concurrent_rpcs=options.grpc_max_concurrent_rpcs,
    )


def _static_table(services: Sequence[tuple[ServiceKey, tuple[Endpoint, ...]]]) -> EndpointTable:
    table = EndpointTable()
    for key, endpoints in services:
        table.set_service(key)
        table.set_endpoints(key, endpoints)
    table.mark_synced()
    return table


def _api_client(kubeconfig: str | None) -> client.ApiClient:
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)


async def run(options: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT, then drain."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    kube: KubeBackends | None = None
    api_client: client.ApiClient | None = None
    waker: Waker
    cold_start_writer: ColdStartWriter | None = None  # static services: the records are only logged
    if options.static_service:
        table = _static_table(options.static_service)
        waker = LoggingWaker()
    else:
        api_client = _api_client(options.kubeconfig)
        kube = KubeBackends.of(api_client, loop)
        kube.start()
        table = kube.table
        waker = KubeWaker(client.CustomObjectsApi(api_client))
        cold_start_writer = KubeColdStartWriter(client.CustomObjectsApi(api_client))
    try:
        running = await start_activator(
            settings_from(options), backends=table, waker=waker, cold_start_writer=cold_start_writer
        )
        # bench/activator_overhead.py reads the ports from this line.
        log.info(
            "activator listening: http %d, grpc %d, admin %d",
            running.http_port,
            running.grpc_port,
            running.admin_port,
        )
        await stop.wait()
        log.info("draining: held requests get up to %g s", running.settings.limits.hold_timeout_s)
        await running.drain()
    finally:
        if kube is not None:
            kube.stop()
        if api_client is not None:
            api_client.close()  # type: ignore[no-untyped-call]
    log.info("drained; exiting")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The entry point of `python -P -m tailpilot.activator`."""
    options = parse_args(argv)
    logging.basicConfig(level=options.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return asyncio.run(run(options))
