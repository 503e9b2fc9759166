"""`tailpilot operator`: run the operator against the current kubeconfig (or in-cluster credentials)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import kopf
from kubernetes import client, config

from tailpilot.api import constants as c
from tailpilot.controllers.handlers import ServiceLoops, register
from tailpilot.controllers.kubeapi import Kube
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
    reconciler = Reconciler(kube, build_settings(args))
    registry = kopf.OperatorRegistry()
    executor = ThreadPoolExecutor(max_workers=args.workers, thread_name_prefix="reconcile")
    register(registry, loops=ServiceLoops(reconciler=reconciler, executor=executor))

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


def main(argv: Sequence[str]) -> int:
    """Entry point of `tailpilot operator`."""
    args = parse_args(argv)
    kopf.configure(verbose=args.verbose)
    if not args.verbose:
        # kopf logs every handled watch event at INFO; at 500 services that is noise, not news.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    run(args)
    return 0
