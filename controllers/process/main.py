"""`tailpilot operator`: run the operator against the current kubeconfig (or in-cluster credentials)."""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import functools
import logging
import os
import socket
import sys
import threading
import urllib.parse
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kopf
from aiohttp import web
from kubernetes import client, config
from prometheus_client import start_http_server

from tailpilot.controllers.alerting.alert_webhook import AlertNotification, make_webhook_app
from tailpilot.controllers.alerting.webhook_guard import RateLimit, RotatingToken
from tailpilot.controllers.autoscale.autoscaler import Autoscaler
from tailpilot.controllers.autoscale.fast_checks import FastChecker
from tailpilot.controllers.core.clock import SYSTEM_CLOCK, Clock
from tailpilot.controllers.core.kubeapi import SECRETS, Kube, api_client
from tailpilot.controllers.core.metrics import OperatorMetrics
from tailpilot.controllers.core.settings import DEFAULT_CONTROL_PERIOD_S, OperatorSettings, parse_gpu_prices
from tailpilot.controllers.core.watched import WatchedObjects
from tailpilot.controllers.gpu.gpu_inventory import GpuInventory
from tailpilot.controllers.process.activator_watch import ActivatorWatch
from tailpilot.controllers.process.handlers import ServiceLoops, register
from tailpilot.controllers.process.leader_election import (
    DEFAULT_LEASE_DURATION_S,
    DEFAULT_RENEW_DEADLINE_S,
    DEFAULT_RETRY_PERIOD_S,
    ElectionTiming,
    LeaderElector,
    LeaseLock,
)
from tailpilot.controllers.reconcile.reconciler import Reconciler
from tailpilot.controllers.rollout.canary_analysis import CanaryAnalyst
from tailpilot.controllers.signals.activator_held import ActivatorHeld
from tailpilot.controllers.signals.pod_signals import PodSignals
from tailpilot.controllers.signals.prometheus_access import PrometheusAccess, invalid_urls, parse_allowed_urls
from tailpilot.controllers.signals.prometheus_client import PrometheusClient
from tailpilot.controllers.signals.service_runtime import ServiceRuntimes
from tailpilot.manifests.settings import ManifestSettings, settings_from_env
from tailpilot.policy.signals import DEFAULT_READS_PER_S

DEFAULT_BUILDER_IMAGE = "ghcr.io/tailpilot/tailpilot-builder:0.1.0"
#: The exit status of a replica that lost the lease (any non-zero one makes the kubelet restart it).
LOST_LEASE_EXIT_CODE = 1

log = logging.getLogger(__name__)


def _key_values(items: Sequence[str], flag: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"{flag} takes KEY=VALUE, got {item!r}")
        pairs[key] = value
    return pairs


def parse_args(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> argparse.Namespace:
    """Command-line flags; each defaults to a `TAILPILOT_*` environment variable (what the Helm chart sets).

    This and `build_settings` are the operator's one settings path: the manifest variables go
    through `tailpilot.manifests.settings.settings_from_env`, the others are flag defaults here.
    `environ` is the environment read (`os.environ` unless given; the chart test passes the rendered
    Deployment's). Everything is read once, at start-up.
    """
    environ = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(prog="tailpilot operator", description=__doc__)
    try:
        # The chart always sets the builder image; a bare `tailpilot operator` uses this release's.
        from_env = settings_from_env(environ, default_builder_image=DEFAULT_BUILDER_IMAGE)
    except ValueError as exc:
        parser.error(str(exc))
    parser.set_defaults(manifests_from_env=from_env)
    # The flags in the order `--help` lists them.
    _add_service_flags(parser, from_env, environ)
    _add_prometheus_flags(parser, environ)
    _add_loop_flags(parser, environ)
    _add_server_flags(parser, environ)
    _add_election_flags(parser, environ)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(list(argv))
    _check_args(parser, args, environ)
    return args


def _add_service_flags(
    parser: argparse.ArgumentParser, from_env: ManifestSettings, environ: Mapping[str, str]
) -> None:
    """What the services are made of: the namespaces watched, images, storage, labels, GPU prices."""
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="watch only this namespace (repeatable); default: all namespaces",
    )
    parser.add_argument("--builder-image", default=from_env.builder_image)
    parser.add_argument("--triton-image", default=from_env.triton_image)
    parser.add_argument(
        "--engine-store-claim",
        default=from_env.engine_store_claim,
        help="PVC (in each service's namespace) holding the engine store",
    )
    parser.add_argument(
        "--monitoring-label",
        action="append",
        default=[],
        help="extra KEY=VALUE label on generated ServiceMonitors and PrometheusRules (repeatable; "
        "added to the JSON object in TAILPILOT_MONITORING_LABELS)",
    )
    parser.add_argument(
        "--build-pod-label",
        action="append",
        default=[],
        help="extra KEY=VALUE label on engine build pods (repeatable)",
    )
    parser.add_argument(
        "--activator-service",
        default=environ.get("TAILPILOT_ACTIVATOR_SERVICE") or None,
        help="NAMESPACE/NAME of the activator's Service (the chart's): a service at zero replicas is "
        "routed to its pods; unset, minReplicas 0 keeps one replica",
    )
    parser.add_argument(
        "--gpu-price",
        action="append",
        default=[],
        help="PRODUCT=PRICE: price of one GPU of that product per hour (repeatable; over the JSON "
        "object in TAILPILOT_GPU_PRICES), for services that list several products",
    )


def _add_prometheus_flags(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    """Which Prometheus the services' queries may go to, and whether tenants' PromQL runs."""
    env = environ.get
    parser.add_argument("--prometheus-url", default=env("TAILPILOT_PROMETHEUS_URL"))
    parser.add_argument(
        "--allowed-prometheus-url",
        action="append",
        default=[],
        help="another Prometheus base URL a service may name in spec.monitoring.prometheusUrl "
        "(repeatable; added to the JSON list in TAILPILOT_ALLOWED_PROMETHEUS_URLS). Any other URL a "
        "service names is never contacted; --prometheus-url is always allowed",
    )
    parser.add_argument(
        "--client-latency-queries",
        action=argparse.BooleanOptionalAction,
        default=env("TAILPILOT_CLIENT_LATENCY_QUERIES", "false").lower() == "true",
        help="evaluate the services' spec.monitoring.clientLatencyP99Query (off by default: a "
        "tenant's PromQL on a shared Prometheus can read every tenant's series)",
    )


def _add_loop_flags(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    """The loops' pace: resyncs, build retries, liveness, workers, the control period, the read budget."""
    env = environ.get
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
        default=float(env("TAILPILOT_CONTROL_PERIOD_SECONDS", str(DEFAULT_CONTROL_PERIOD_S))),
        help="how often the autoscaler evaluates each Ready service",
    )
    parser.add_argument(
        "--pod-reads-per-second",
        type=float,
        default=float(env("TAILPILOT_POD_READS_PER_SECOND", str(DEFAULT_READS_PER_S))),
        help="the fast loop's budget of Triton metrics reads per second, all services together; "
        "beyond it every service's pods are read less often than every 2 s (0: no budget)",
    )


def _add_server_flags(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    """The operator's own servers: its metrics port, the Alertmanager webhook and its token."""
    env = environ.get
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


def _add_election_flags(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    """Leader election: several replicas, one acting."""
    env = environ.get
    election = parser.add_argument_group(
        "leader election", "several replicas, one acting: a Lease in one namespace names the one that acts"
    )
    election.add_argument(
        "--leader-election",
        action=argparse.BooleanOptionalAction,
        default=env("TAILPILOT_LEADER_ELECTION", "false").lower() == "true",
        help="act only while holding the Lease; a standby answers /healthz but not /readyz",
    )
    election.add_argument(
        "--leader-election-namespace",
        default=env("TAILPILOT_LEADER_ELECTION_NAMESPACE", ""),
        help="namespace of the Lease (the chart: the release namespace)",
    )
    election.add_argument(
        "--leader-election-lease", default=env("TAILPILOT_LEADER_ELECTION_LEASE", "tailpilot-operator")
    )
    election.add_argument(
        "--leader-election-identity",
        # In a pod the hostname is the pod name, what client-go's users put in holderIdentity too.
        default=env("TAILPILOT_LEADER_ELECTION_IDENTITY") or socket.gethostname(),
        help="holderIdentity of this replica (default: the hostname, which in a pod is its name)",
    )
    election.add_argument(
        "--lease-duration-seconds",
        type=float,
        default=float(env("TAILPILOT_LEASE_DURATION_SECONDS", str(DEFAULT_LEASE_DURATION_S))),
        help="how long a standby waits, from when it saw the lease last renewed, before taking it",
    )
    election.add_argument(
        "--renew-deadline-seconds",
        type=float,
        default=float(env("TAILPILOT_RENEW_DEADLINE_SECONDS", str(DEFAULT_RENEW_DEADLINE_S))),
        help="a leader that has not renewed for this long exits (below the lease duration)",
    )
    election.add_argument(
        "--retry-period-seconds",
        type=float,
        default=float(env("TAILPILOT_RETRY_PERIOD_SECONDS", str(DEFAULT_RETRY_PERIOD_S))),
        help="how often the leader renews and a standby tries",
    )


def _check_args(
    parser: argparse.ArgumentParser, args: argparse.Namespace, environ: Mapping[str, str]
) -> None:
    """Check the flags together, and add what they parse to (prices, URLs, election timing), or exit."""
    env = environ.get
    try:
        args.gpu_prices = parse_gpu_prices(env("TAILPILOT_GPU_PRICES", ""), args.gpu_price)
        args.allowed_prometheus_urls = parse_allowed_urls(
            env("TAILPILOT_ALLOWED_PROMETHEUS_URLS", ""), args.allowed_prometheus_url
        )
    except ValueError as exc:
        parser.error(str(exc))
    if args.prometheus_url and invalid_urls([args.prometheus_url]):
        parser.error(f"--prometheus-url takes an http(s) base URL without query, got {args.prometheus_url!r}")
    if args.webhook_port and not (args.webhook_token_secret or args.webhook_token_file):
        # The webhook never serves without a token: say so instead of silently not serving it.
        parser.error("--webhook-port needs --webhook-token-secret or --webhook-token-file")
    if args.webhook_token_secret and (
        len(parts := args.webhook_token_secret.split("/")) != 3 or not all(parts)
    ):
        parser.error(f"--webhook-token-secret takes NAMESPACE/NAME/KEY, got {args.webhook_token_secret!r}")
    if args.activator_service and (len(parts := args.activator_service.split("/")) != 2 or not all(parts)):
        parser.error(f"--activator-service takes NAMESPACE/NAME, got {args.activator_service!r}")
    if args.leader_election:
        if not args.leader_election_namespace:
            parser.error("--leader-election needs --leader-election-namespace (where the Lease lives)")
        try:
            args.election_timing = ElectionTiming(
                lease_duration_s=args.lease_duration_seconds,
                renew_deadline_s=args.renew_deadline_seconds,
                retry_period_s=args.retry_period_seconds,
            )
        except ValueError as exc:
            parser.error(str(exc))


def _api_client() -> client.ApiClient:
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return api_client(configuration)


def _activator_watch(args: argparse.Namespace) -> ActivatorWatch | None:
    """The watch of the activator's ready pods (`--activator-service`), else None."""
    if not args.activator_service:
        return None
    namespace, name = args.activator_service.split("/")
    # Its own client: the watch holds a connection open, which must not take one of the passes'.
    slices = client.DiscoveryV1Api(_api_client())
    return ActivatorWatch(
        list_slices=functools.partial(slices.list_namespaced_endpoint_slice, namespace), service_name=name
    )


def build_settings(args: argparse.Namespace) -> OperatorSettings:
    """Operator settings from `parse_args`' result: the environment's manifest settings, flags over them."""
    from_env: ManifestSettings = args.manifests_from_env
    return OperatorSettings(
        manifests=dataclasses.replace(
            from_env,
            builder_image=args.builder_image,
            triton_image=args.triton_image,
            engine_store_claim=args.engine_store_claim,
            monitoring_labels={
                **from_env.monitoring_labels,
                **_key_values(args.monitoring_label, "--monitoring-label"),
            },
        ),
        build_pod_labels=_key_values(args.build_pod_label, "--build-pod-label"),
        resync_seconds=args.resync_seconds,
        build_retry_base_seconds=args.build_retry_base_seconds,
        prometheus_url=args.prometheus_url,
        control_period_seconds=args.control_period_seconds,
        gpu_prices=args.gpu_prices,
        activator_service=tuple(args.activator_service.split("/")) if args.activator_service else None,
    )


def prometheus_access(args: argparse.Namespace) -> PrometheusAccess:
    """What services may use of Prometheus, from `parse_args`' result (the Prometheus client's bounds)."""
    return PrometheusAccess(
        default_url=args.prometheus_url,
        allowed_urls=tuple(args.allowed_prometheus_urls),
        client_queries=args.client_latency_queries,
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
    registry = kopf.OperatorRegistry()
    executor = ThreadPoolExecutor(max_workers=args.workers, thread_name_prefix="reconcile")
    metrics = OperatorMetrics()
    # The watches' objects, so neither the fast loop nor a decision asks the API server for them.
    watched = WatchedObjects(kube=kube, clock=clock)
    activator = _activator_watch(args)
    loops = _service_loops(
        args, kube=kube, executor=executor, metrics=metrics, watched=watched, clock=clock, activator=activator
    )
    register(registry, loops=loops, watched=watched, activator=activator)
    if args.metrics_port:
        start_http_server(args.metrics_port, addr=args.bind_address, registry=metrics.registry)
    if args.webhook_port:
        _register_webhook(
            registry,
            loops=loops,
            metrics=metrics,
            token=_webhook_token(args, kube),
            host=args.bind_address,
            port=args.webhook_port,
        )
    operator = _kopf_operator(args, registry, stop_flag=stop_flag)
    if not args.leader_election:
        asyncio.run(operator(liveness_endpoint=args.liveness, ready_flag=ready_flag))
        executor.shutdown(wait=False, cancel_futures=True)
        return
    _run_leading(args, operator, loops=loops, executor=executor, ready_flag=ready_flag, clock=clock)


def _service_loops(
    args: argparse.Namespace,
    *,
    kube: Kube,
    executor: ThreadPoolExecutor,
    metrics: OperatorMetrics,
    watched: WatchedObjects,
    clock: Clock,
    activator: ActivatorWatch | None = None,
) -> ServiceLoops:
    """The per-service loops and the jobs they run, sharing one clock, one pods' reader, one registry."""
    # GPU nodes and the pods on them, listed at most every 30 s, for services listing several products.
    inventory = GpuInventory(kube, clock=clock)
    reconciler = Reconciler(kube, build_settings(args), clock=clock, inventory=inventory)
    # Every Prometheus query goes through this client, which contacts only the allowed endpoints.
    http = PrometheusClient(prometheus_access(args), timeout=10.0)
    # Each service's memory, one object per service, which every job below reads and writes.
    runtimes = ServiceRuntimes()
    # One reader of the pods' Triton counters: the autoscaler's observations and the fast rules
    # (rotation, surge check) read the same history.
    signals = PodSignals(clock=clock, reads_per_s=args.pod_reads_per_second, runtimes=runtimes)
    autoscaler = Autoscaler(
        kube=kube,
        http=http,
        metrics=metrics,
        default_prometheus_url=args.prometheus_url,
        control_period_s=args.control_period_seconds,
        clock=clock,
        signals=signals,
        objects=watched,
        inventory=inventory,
        scale_to_zero=args.activator_service is not None,
        # A woken service's wake is sized from the requests held at the activator's pods.
        activator_held=ActivatorHeld(lambda: activator.endpoints) if activator is not None else None,
    )
    fast_checker = FastChecker(
        kube=kube,
        signals=signals,
        metrics=metrics,
        control_period_s=args.control_period_seconds,
        clock=clock,
        objects=watched,
    )
    return ServiceLoops(
        reconciler=reconciler,
        executor=executor,
        autoscaler=autoscaler,
        canary_analyst=CanaryAnalyst(
            kube=kube, http=http, metrics=metrics, default_prometheus_url=args.prometheus_url, clock=clock
        ),
        fast_checker=fast_checker,
        clock=clock,
        runtimes=runtimes,
    )


def _kopf_operator(
    args: argparse.Namespace, registry: kopf.OperatorRegistry, *, stop_flag: threading.Event | None
) -> Callable[..., Coroutine[Any, Any, None]]:
    """The kopf operator over the registry, with its settings; called with where it reports its health."""
    settings = kopf.OperatorSettings()
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    namespaces = args.namespace
    return functools.partial(
        kopf.operator,
        registry=registry,
        settings=settings,
        standalone=True,  # kopf's peering is not leader election: the Lease below is
        clusterwide=not namespaces,
        namespaces=namespaces,
        stop_flag=stop_flag,
    )


def _run_leading(
    args: argparse.Namespace,
    operator: Callable[..., Awaitable[None]],
    *,
    loops: ServiceLoops,
    executor: ThreadPoolExecutor,
    ready_flag: threading.Event | None,
    clock: Clock,
) -> None:
    """Run the operator while this replica holds the Lease; hand it over at a clean stop."""
    elector = LeaderElector(
        # Its own client and connection pool: a renewal never queues behind the reconciles' calls.
        LeaseLock(Kube(_api_client()), args.leader_election_namespace, args.leader_election_lease),
        identity=args.leader_election_identity,
        timing=args.election_timing,
        on_lost=_exit_lost,
        clock=clock,
    )
    asyncio.run(
        _run_elected(
            operator,
            elector=elector,
            liveness=args.liveness,
            ready_flag=ready_flag,
            progress=loops.passes.problem,
        )
    )
    # A clean stop (SIGTERM): kopf has stopped its handlers; let the reconciles sent finish, then
    # hand the lease over so the standby takes over at its next try, not after the lease duration.
    executor.shutdown(wait=True, cancel_futures=True)
    elector.release()


def _exit_lost(reason: str) -> None:
    """Stop acting at once: exit the process (the Deployment restarts it, a standby then)."""
    log.critical("leader election lost: %s; exiting", reason)
    logging.shutdown()
    sys.stderr.flush()
    # Not SystemExit: kopf's tasks and the reconcile threads must not get another turn to write.
    os._exit(LOST_LEASE_EXIT_CODE)


async def _run_elected(
    operator: Callable[..., Awaitable[None]],
    *,
    elector: LeaderElector,
    liveness: str,
    ready_flag: threading.Event | None,
    progress: Callable[[], str | None] = lambda: None,
) -> None:
    """Wait for the lease (a standby), then run the operator while the election thread renews it.

    `/healthz` (the liveness URL's path) answers 200 from the start while the election runs, so a
    standby is alive to the kubelet; `/readyz` answers 200 only on the leader once kopf is ready,
    so the webhook Service sends Alertmanager to the leader alone. kopf's own liveness endpoint
    is not started: this server, on the same event loop as kopf's handlers, answers the same way,
    and fails (503) when `progress` names a service pass stuck past its bound, as kopf's would.
    """
    loop = asyncio.get_running_loop()
    leading: asyncio.Future[None] = loop.create_future()

    def started_leading() -> None:  # called from the election's thread
        loop.call_soon_threadsafe(lambda: None if leading.done() else leading.set_result(None))

    elector.on_started_leading = started_leading
    kopf_ready = ready_flag if ready_flag is not None else threading.Event()
    thread = threading.Thread(target=elector.run, name="leader-election", daemon=True)

    async def healthz(_: web.Request) -> web.Response:
        if not thread.is_alive():
            return web.Response(status=503, text="the leader election thread has stopped")
        problem = progress()
        if problem is not None:
            return web.Response(status=503, text=f"no progress: {problem}")
        return web.Response(status=200, text=elector.observed_holder)

    async def readyz(_: web.Request) -> web.Response:
        ready = elector.leading.is_set() and kopf_ready.is_set()
        return web.Response(status=200 if ready else 503, text="leader" if ready else "standby")

    url = urllib.parse.urlsplit(liveness)
    app = web.Application()
    app.add_routes([web.get(url.path or "/healthz", healthz), web.get("/readyz", readyz)])
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, url.hostname, url.port).start()
    thread.start()
    try:
        log.info("leader election: %s waits for the lease", elector.identity)
        await leading
        log.info("leader election: %s leads", elector.identity)
        await operator(liveness_endpoint=None, ready_flag=kopf_ready)
    finally:
        elector.stop()
        await runner.cleanup()


def _webhook_token(args: argparse.Namespace, kube: Kube) -> RotatingToken:
    """The webhook's bearer token from its file or Secret, re-read there when it is rotated.

    Raises:
        SystemExit: When it cannot be read, or is empty, at start-up.
    """
    if args.webhook_token_file:
        path = Path(args.webhook_token_file)
        where = f"file {path}"

        def read() -> str:
            return path.read_text()

    else:
        namespace, name, key = args.webhook_token_secret.split("/", 2)
        where = f"Secret {namespace}/{name} key {key!r}"

        def read() -> str:
            secret = kube.get(SECRETS, namespace, name)
            if secret is None or key not in (secret.get("data") or {}):
                raise LookupError(f"Secret {namespace}/{name} has no key {key!r}")
            return base64.b64decode(secret["data"][key]).decode()

    try:
        return RotatingToken(read)
    except (OSError, LookupError) as exc:
        raise SystemExit(f"webhook token: {exc}") from exc
    except ValueError as exc:
        raise SystemExit(
            f"webhook token: {where} is empty; the webhook never serves without a token"
        ) from exc


def _register_webhook(
    registry: kopf.OperatorRegistry,
    *,
    loops: ServiceLoops,
    metrics: OperatorMetrics,
    token: RotatingToken,
    host: str,
    port: int,
) -> None:
    """Serve the Alertmanager webhook while the operator runs; a firing alert re-evaluates at once."""

    async def on_alert(alert: AlertNotification) -> None:
        loops.alert(alert)

    runner = web.AppRunner(
        make_webhook_app(token=token, on_alert=on_alert, metrics=metrics, rate_limit=RateLimit())
    )

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
