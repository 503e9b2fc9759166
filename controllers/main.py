"""`tailpilot operator`: run the operator against the current kubeconfig (or in-cluster credentials)."""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import kopf
from aiohttp import web
from kubernetes import client, config
from prometheus_client import start_http_server

from tailpilot.api import constants as c
from tailpilot.controllers.alert_webhook import AlertNotification, make_webhook_app
from tailpilot.controllers.autoscaler import Autoscaler
from tailpilot.controllers.clock import SYSTEM_CLOCK
from tailpilot.controllers.fast_checks import FastChecker
from tailpilot.controllers.handlers import ServiceLoops, register
from tailpilot.controllers.kubeapi import SECRETS, Kube
from tailpilot.controllers.metrics import OperatorMetrics
from tailpilot.controllers.reconciler import Reconciler
from tailpilot.controllers.settings import OperatorSettings
from tailpilot.manifests.settings import ManifestSettings

DEFAULT_BUILDER_IMAGE = "ghcr.io/tailpilot/tailpilot-builder:0.1.0"


def _key_values(items: Sequence[str], flag: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"{flag} takes KEY=VALUE, got {item!r}")
        pairs[key] = value
    return pairs


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Command-line flags; each has an environment-variable default for the Helm chart."""
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="tailpilot operator", description=__doc__)
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="watch only this namespace (repeatable); default: all namespaces",
    )
    parser.add_argument("--builder-image", default=env("TAILPILOT_BUILDER_IMAGE", DEFAULT_BUILDER_IMAGE))
    parser.add_argument("--triton-image", default=env("TAILPILOT_TRITON_IMAGE", c.DEFAULT_TRITON_IMAGE))
    parser.add_argument(
        "--engine-store-claim",
        default=env("TAILPILOT_ENGINE_STORE_CLAIM", c.DEFAULT_ENGINE_STORE_CLAIM),
        help="PVC (in each service's namespace) holding the engine store",
    )
    parser.add_argument(
        "--build-pod-label",
        action="append",
        default=[],
        help="extra KEY=VALUE label on engine build pods (repeatable)",
    )
    parser.add_argument("--prometheus-url", default=env("TAILPILOT_PROMETHEUS_URL"))
    parser.add_argument("--resync-seconds", type=float, default=float(env("TAILPILOT_RESYNC_SECONDS", "300")))
    parser.add_argument(
        "--build-retry-base-seconds",
        type=float,
        default=float(env("TAILPILOT_BUILD_RETRY_BASE_SECONDS", "30")),
    )
    parser.add_argument(
        "--liveness",
        default=env("TAILPILOT_LIVENESS", "http://127.0.0.1:8080/healthz"),
        help="kopf liveness endpoint URL",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=int(env("TAILPILOT_WORKERS", "16")),
        help="reconciles running at once (each blocks on API calls in a worker thread)",
    )
    parser.add_argument(
        "--control-period-seconds",
        type=float,
        default=float(env("TAILPILOT_CONTROL_PERIOD_SECONDS", "15")),
        help="how often the autoscaler evaluates each Ready service",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=int(env("TAILPILOT_METRICS_PORT", "0")),
        help="serve the operator's Prometheus metrics on this port (0: off)",
    )
    parser.add_argument(
        "--webhook-port",
        type=int,
        default=int(env("TAILPILOT_WEBHOOK_PORT", "0")),
        help="serve the Alertmanager webhook (POST /alerts) on this port (0: off)",
    )
    parser.add_argument(
        "--webhook-token-secret",
        default=env("TAILPILOT_WEBHOOK_TOKEN_SECRET", ""),
        help="NAMESPACE/NAME/KEY of the Secret holding the webhook's bearer token",
    )
    parser.add_argument(
        "--webhook-token-file",
        default=env("TAILPILOT_WEBHOOK_TOKEN_FILE", ""),
        help="file holding the webhook's bearer token (instead of a Secret)",
    )
    parser.add_argument(
        "--bind-address",
        default=env("TAILPILOT_BIND_ADDRESS", "0.0.0.0"),  # noqa: S104
        help="address the metrics and webhook servers listen on",
    )
    parser.add_argument("--verbose", action="store_true")
    return parser.parse_args(list(argv))


def _api_client() -> client.ApiClient:
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    # The reconciler runs in a few worker threads; give each its own pooled connection.
    configuration.connection_pool_maxsize = 16
    return client.ApiClient(configuration)


def build_settings(args: argparse.Namespace) -> OperatorSettings:
    """Operator settings from parsed flags."""
    return OperatorSettings(
        manifests=ManifestSettings(
            builder_image=args.builder_image,
            triton_image=args.triton_image,
            engine_store_claim=args.engine_store_claim,
        ),
        build_pod_labels=_key_values(args.build_pod_label, "--build-pod-label"),
        resync_seconds=args.resync_seconds,
        build_retry_base_seconds=args.build_retry_base_seconds,
        prometheus_url=args.prometheus_url,
    )


def run(
    args: argparse.Namespace,
    *,
    stop_flag: threading.Event | None = None,
    ready_flag: threading.Event | None = None,
) -> None:
    """Run the operator until stopped."""
    kube = Kube(_api_client())
    clock = SYSTEM_CLOCK  # one clock for every loop
    reconciler = Reconciler(kube, build_settings(args), clock=clock)
    registry = kopf.OperatorRegistry()
    executor = ThreadPoolExecutor(max_workers=args.workers, thread_name_prefix="reconcile")
    metrics = OperatorMetrics()
    autoscaler = Autoscaler(
        kube=kube,
        http=httpx.AsyncClient(timeout=10.0),
        metrics=metrics,
        default_prometheus_url=args.prometheus_url,
        control_period_s=args.control_period_seconds,
        clock=clock,
    )
    fast_checker = FastChecker(kube=kube, http=autoscaler.http, metrics=metrics, clock=clock)
    loops = ServiceLoops(
        reconciler=reconciler,
        executor=executor,
        autoscaler=autoscaler,
        fast_checker=fast_checker,
        clock=clock,
    )
    register(registry, loops=loops)
    if args.metrics_port:
        start_http_server(args.metrics_port, addr=args.bind_address, registry=metrics.registry)
    token = _webhook_token(args, kube)
    if args.webhook_port and token:
        _register_webhook(
            registry,
            loops=loops,
            metrics=metrics,
            token=token,
            host=args.bind_address,
            port=args.webhook_port,
        )

    settings = kopf.OperatorSettings()
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    namespaces = args.namespace
    asyncio.run(
        kopf.operator(
            registry=registry,
            settings=settings,
            standalone=True,
            clusterwide=not namespaces,
            namespaces=namespaces,
            liveness_endpoint=args.liveness,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    )
    executor.shutdown(wait=False, cancel_futures=True)


def _webhook_token(args: argparse.Namespace, kube: Kube) -> str:
    if args.webhook_token_file:
        return Path(args.webhook_token_file).read_text().strip()
    if args.webhook_token_secret:
        namespace, name, key = args.webhook_token_secret.split("/", 2)
        secret = kube.get(SECRETS, namespace, name)
        if secret is None or key not in (secret.get("data") or {}):
            raise SystemExit(f"webhook token: Secret {namespace}/{name} has no key {key!r}")
        return base64.b64decode(secret["data"][key]).decode().strip()
    return ""


def _register_webhook(
    registry: kopf.OperatorRegistry,
    *,
    loops: ServiceLoops,
    metrics: OperatorMetrics,
    token: str,
    host: str,
    port: int,
) -> None:
    """Serve the Alertmanager webhook while the operator runs; a firing alert re-evaluates at once."""

    async def on_alert(alert: AlertNotification) -> None:
        loops.alert(alert.namespace, alert.inferenceservice, firing=alert.status == "firing")

    runner = web.AppRunner(make_webhook_app(token=token, on_alert=on_alert, metrics=metrics))

    @kopf.on.startup(registry=registry)
    async def start_webhook(**_: object) -> None:
        await runner.setup()
        await web.TCPSite(runner, host, port).start()

    @kopf.on.cleanup(registry=registry)
    async def stop_webhook(**_: object) -> None:
        await runner.cleanup()


def main(argv: Sequence[str]) -> int:
    """Entry point of `tailpilot operator`."""
    args = parse_args(argv)
    kopf.configure(verbose=args.verbose)
    if not args.verbose:
        # kopf logs every handled watch event at INFO, and httpx every request (eleven Prometheus
        # queries per service and control period); at 500 services that is noise, not news.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
        logging.getLogger("httpx").setLevel(logging.WARNING)
    run(args)
    return 0
