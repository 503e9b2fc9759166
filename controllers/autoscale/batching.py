"""Live batching changes on every ready Triton pod, verified, and rolled back on refusal.

Triton in explicit model-control mode reloads a model with a new configuration
when it receives `POST /v2/repository/models/NAME/load` with
`{"parameters": {"config": "<json>"}}` (the JSON from
`tailpilot.manifests.triton_model_config.to_load_override_json`). The reload keeps the
old model serving until the new one is ready (~1.5 s on the CPU, zero failed
requests measured under load); an invalid config answers HTTP 500 and the old
model keeps serving.

The rollout, pod by pod:

1. Read every pod's current config (`GET /v2/models/NAME/config`): the rollback
   target. A pod that cannot be read aborts the change before anything moves.
2. Canary: apply to the first pod and verify by reading the config back (the
   batching fields and every field the override sets must match). If it is
   refused, nothing else was touched.
3. Apply to the remaining pods concurrently, verifying each.
4. If any pod refused or failed verification, reload every pod already changed
   with its previous config, and report which pods were changed, refused, or
   rolled back, and why.

The calls go through tritonclient's asyncio HTTP client
(`tritonclient.http.aio.InferenceServerClient`): one client per pod for the
whole change, all closed when `apply_batching` returns. A refusal raises
`InferenceServerException` carrying Triton's error text and HTTP status, which
reaches the user's Event; network failures and timeouts are aiohttp's.

Both calls are restricted APIs on the serving pods (`model-repository`, `model-config`): each one
carries the service's admin key in the `tailpilot-admin-key` header
(`tailpilot.manifests.triton_access`). A pod that answers 403 holds another key (it started before
its Secret was recreated and has not been replaced yet): its read or load fails like any refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from tritonclient.http.aio import InferenceServerClient
from tritonclient.utils import InferenceServerException

from tailpilot.manifests.triton_access import ADMIN_KEY_HEADER

#: Seconds each Triton call may take, a reload included (~1.5 s on the CPU): the timeout of the
#: operator's shared httpx client that these calls used before they went through tritonclient.
DEFAULT_TIMEOUT_S = 10.0

#: What a call to a pod raises when the pod cannot be reached or does not answer in time.
_NETWORK_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)


class BatchingReason:
    """CamelCase outcomes of a batching change (also the `result` label of the operator metric)."""

    APPLIED = "Applied"
    NO_PODS = "NoReadyPods"
    UNREACHABLE = "PodUnreachable"
    REFUSED = "RefusedByTriton"
    VERIFY_FAILED = "VerifyFailed"
    ROLLED_BACK = "RolledBack"
    ROLLBACK_FAILED = "RollbackFailed"
    INVALID_CONFIG = "InvalidConfig"


@dataclass(frozen=True)
class PodOutcome:
    """What happened on one pod."""

    pod_url: str
    reason: str
    message: str = ""


@dataclass(frozen=True)
class BatchingApplyResult:
    """The outcome of one change across pods.

    Attributes:
        ok: Every pod runs the new config (verified).
        reason: `BatchingReason.APPLIED`, or the first failure's reason.
        message: Human-readable summary.
        applied: Pods now running the new config.
        rolled_back: Pods changed, then restored to their previous config.
        failed: Pods that refused, failed verification, were unreachable, or could not be restored.
    """

    ok: bool
    reason: str
    message: str
    applied: tuple[str, ...] = ()
    rolled_back: tuple[str, ...] = ()
    failed: tuple[PodOutcome, ...] = ()


class _PodError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _same(want: object, have: object) -> bool:
    """Tell whether `have` contains `want`.

    Dicts compare as subsets, lists element-wise, scalars as lower-cased strings
    (protobuf's JSON renders 64-bit integers as strings).
    """
    if isinstance(want, dict):
        return isinstance(have, dict) and all(_same(v, have.get(k)) for k, v in want.items())
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(want) == len(have)
            and all(_same(a, b) for a, b in zip(want, have, strict=True))
        )
    return str(want).lower() == str(have).lower()


def batching_fields(config: Mapping[str, Any]) -> tuple[str, tuple[str, ...], str]:
    """Return (max batch size, preferred sizes, max queue delay us), Triton's defaults for absent fields."""
    dynamic = config.get("dynamic_batching") or {}
    return (
        str(config.get("max_batch_size", 0)),
        tuple(str(p) for p in dynamic.get("preferred_batch_size", [])),
        str(dynamic.get("max_queue_delay_microseconds", 0)),
    )


def verify_config(want: Mapping[str, Any], have: Mapping[str, Any]) -> str:
    """Return "" when `have` (read back from Triton) runs `want`, else what differs.

    Triton completes a dynamic-batching config without preferred sizes with
    `preferred_batch_size: [max_batch_size]`, so that read-back also matches.
    """
    want_fields, have_fields = batching_fields(want), batching_fields(have)
    if not want_fields[1] and have_fields[1] == (want_fields[0],):
        have_fields = (have_fields[0], (), have_fields[2])
    if want_fields != have_fields:
        return f"batching reads back as {have_fields}, wanted {want_fields}"
    for key, value in want.items():
        if key == "dynamic_batching":
            continue  # compared above, with Triton's completion
        if not _same(value, have.get(key)):
            got, wanted = json.dumps(have.get(key))[:200], json.dumps(value)[:200]
            return f"field {key!r} reads back as {got}, wanted {wanted}"
    return ""


def _error_text(error: InferenceServerException) -> str:
    """Triton's error text: the body's "error" field, else the raw body (as the server sent it)."""
    body = error.debug_details()
    if body is not None:  # tritonclient could not decode the body as {"error": ...}
        return str(body)[:300]
    return str(error.message())


def _http_status(error: InferenceServerException) -> str:
    return str(error.status())


def _network_text(error: BaseException) -> str:
    """The network error as "Type: text" (aiohttp's repr carries the whole connection key)."""
    return f"{type(error).__name__}: {error}" if str(error) else repr(error)


def _connect(pod_url: str, timeout_s: float) -> InferenceServerClient:
    """A client for one pod; tritonclient takes host:port without the scheme (and https as a flag)."""
    scheme, sep, address = pod_url.partition("://")
    if not sep:
        scheme, address = "http", pod_url
    # conn_timeout is aiohttp's total timeout, applied to each request of the client's session.
    return InferenceServerClient(address.rstrip("/"), conn_timeout=timeout_s, ssl=scheme == "https")


#: Headers of every call to a pod: the admin key's, or none.
Headers = Mapping[str, str] | None


async def _get_config(client: InferenceServerClient, model: str, headers: Headers) -> dict[str, Any]:
    try:
        body = await client.get_model_config(model, headers=headers)
    except InferenceServerException as exc:
        raise _PodError(
            BatchingReason.UNREACHABLE, f"reading config: HTTP {_http_status(exc)} {_error_text(exc)}"
        ) from exc
    except _NETWORK_ERRORS as exc:
        raise _PodError(BatchingReason.UNREACHABLE, f"reading config: {_network_text(exc)}") from exc
    if not isinstance(body, dict):
        raise _PodError(BatchingReason.UNREACHABLE, "reading config: not a JSON object")
    return body


async def _load(client: InferenceServerClient, model: str, config_json: str, headers: Headers) -> None:
    try:
        await client.load_model(model, config=config_json, headers=headers)
    except InferenceServerException as exc:
        raise _PodError(BatchingReason.REFUSED, f"HTTP {_http_status(exc)}: {_error_text(exc)}") from exc
    except _NETWORK_ERRORS as exc:
        raise _PodError(BatchingReason.UNREACHABLE, f"loading: {_network_text(exc)}") from exc


async def _apply_one(
    client: InferenceServerClient, model: str, config_json: str, want: dict[str, Any], headers: Headers
) -> None:
    await _load(client, model, config_json, headers)
    have = await _get_config(client, model, headers)
    difference = verify_config(want, have)
    if difference:
        raise _PodError(BatchingReason.VERIFY_FAILED, difference)


async def _read_all(
    clients: Mapping[str, InferenceServerClient], pod_urls: Sequence[str], model: str, headers: Headers
) -> tuple[dict[str, dict[str, Any]], list[PodOutcome]]:
    reads = await asyncio.gather(
        *(_get_config(clients[u], model, headers) for u in pod_urls), return_exceptions=True
    )
    previous: dict[str, dict[str, Any]] = {}
    unreadable: list[PodOutcome] = []
    for url, read in zip(pod_urls, reads, strict=True):
        if isinstance(read, _PodError):
            unreadable.append(PodOutcome(url, read.reason, read.message))
        elif isinstance(read, BaseException):
            raise read
        else:
            previous[url] = read
    return previous, unreadable


async def _rollout(
    clients: Mapping[str, InferenceServerClient],
    pod_urls: Sequence[str],
    model: str,
    config_json: str,
    want: dict[str, Any],
    headers: Headers,
) -> tuple[list[str], list[PodOutcome]]:
    """Canary first, then the rest concurrently; returns (pods changed, failures)."""
    changed: list[str] = []
    failures: list[PodOutcome] = []
    batches = [list(pod_urls[:1]), list(pod_urls[1:])]
    for batch in batches:
        outcomes = await asyncio.gather(
            *(_apply_one(clients[u], model, config_json, want, headers) for u in batch),
            return_exceptions=True,
        )
        for url, outcome in zip(batch, outcomes, strict=True):
            if outcome is None:
                changed.append(url)
            elif isinstance(outcome, _PodError):
                failures.append(PodOutcome(url, outcome.reason, outcome.message))
                # A reload that answered but reads back wrong did change the pod: restore it too.
                if outcome.reason == BatchingReason.VERIFY_FAILED:
                    changed.append(url)
            else:
                raise outcome
        if failures:
            break  # a refused canary leaves every other pod untouched
    return changed, failures


async def _rollback(
    clients: Mapping[str, InferenceServerClient],
    changed: Sequence[str],
    model: str,
    previous: Mapping[str, dict[str, Any]],
    headers: Headers,
) -> tuple[list[str], list[PodOutcome]]:
    restores = await asyncio.gather(
        *(_load(clients[u], model, json.dumps(previous[u]), headers) for u in changed),
        return_exceptions=True,
    )
    rolled_back: list[str] = []
    failures: list[PodOutcome] = []
    for url, restore in zip(changed, restores, strict=True):
        if restore is None:
            rolled_back.append(url)
        elif isinstance(restore, _PodError):
            failures.append(PodOutcome(url, BatchingReason.ROLLBACK_FAILED, restore.message))
        else:
            raise restore
    return rolled_back, failures


async def apply_batching(
    *,
    pod_urls: Sequence[str],
    model_name: str,
    config_json: str,
    admin_key: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> BatchingApplyResult:
    """Apply a model config override to every pod; verify; roll back the changed pods if one refuses.

    Args:
        pod_urls: Base HTTP URLs of the ready Triton pods, e.g. "http://10.0.0.5:8000".
        model_name: The model's name in Triton's repository.
        config_json: The complete model config as JSON (`to_load_override_json`).
        admin_key: The service's admin key, sent on every call (the pods restrict these APIs to
            it); None sends none (a Triton without restricted APIs).
        timeout_s: Seconds each call to a pod may take (it must cover a reload, a few seconds).

    Returns:
        Which pods run the new config, which were rolled back, which failed and why.
    """
    try:
        want = json.loads(config_json)
    except json.JSONDecodeError as exc:
        return BatchingApplyResult(ok=False, reason=BatchingReason.INVALID_CONFIG, message=f"not JSON: {exc}")
    if not isinstance(want, dict):
        return BatchingApplyResult(
            ok=False, reason=BatchingReason.INVALID_CONFIG, message="not a JSON object"
        )
    if not pod_urls:
        return BatchingApplyResult(ok=False, reason=BatchingReason.NO_PODS, message="no ready pods to change")

    async with contextlib.AsyncExitStack() as clients_open:
        clients: dict[str, InferenceServerClient] = {}
        for url in dict.fromkeys(pod_urls):
            clients[url] = _connect(url, timeout_s)
            clients_open.push_async_callback(clients[url].close)
        headers = {ADMIN_KEY_HEADER: admin_key} if admin_key is not None else None
        return await _apply(clients, pod_urls, model_name, config_json, want, headers)


async def _apply(
    clients: Mapping[str, InferenceServerClient],
    pod_urls: Sequence[str],
    model_name: str,
    config_json: str,
    want: dict[str, Any],
    headers: Headers,
) -> BatchingApplyResult:
    previous, unreadable = await _read_all(clients, pod_urls, model_name, headers)
    if unreadable:
        return BatchingApplyResult(
            ok=False,
            reason=BatchingReason.UNREACHABLE,
            message=f"{len(unreadable)} of {len(pod_urls)} pods could not be read; nothing changed",
            failed=tuple(unreadable),
        )
    changed, failures = await _rollout(clients, pod_urls, model_name, config_json, want, headers)
    if not failures:
        return BatchingApplyResult(
            ok=True,
            reason=BatchingReason.APPLIED,
            message=f"new batching on all {len(changed)} pods, verified",
            applied=tuple(changed),
        )
    rolled_back, rollback_failures = await _rollback(clients, changed, model_name, previous, headers)
    first = failures[0]
    return BatchingApplyResult(
        ok=False,
        reason=BatchingReason.ROLLBACK_FAILED if rollback_failures else first.reason,
        message=(
            f"{first.pod_url} {first.reason}: {first.message}; "
            f"rolled back {len(rolled_back)} of {len(changed)} changed pods"
        ),
        rolled_back=tuple(rolled_back),
        failed=tuple(failures + rollback_failures),
    )


@dataclass(frozen=True)
class ConfigCheck:
    """Which pods run a config and which do not (read back from each), and which could not be read."""

    matching: tuple[str, ...] = ()
    differing: tuple[PodOutcome, ...] = ()
    unreadable: tuple[PodOutcome, ...] = ()


async def check_config(
    *,
    pod_urls: Sequence[str],
    model_name: str,
    config_json: str,
    admin_key: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ConfigCheck:
    """Read every pod's config and compare it with `config_json` as a change is verified; change nothing.

    A Triton restarted in its pod loads the config its pod started with, not a batching changed live
    since: this finds those pods (one config read each) so that only they are reloaded.
    """
    want = json.loads(config_json)
    async with contextlib.AsyncExitStack() as clients_open:
        clients: dict[str, InferenceServerClient] = {}
        for url in dict.fromkeys(pod_urls):
            clients[url] = _connect(url, timeout_s)
            clients_open.push_async_callback(clients[url].close)
        headers = {ADMIN_KEY_HEADER: admin_key} if admin_key is not None else None
        have, unreadable = await _read_all(clients, list(clients), model_name, headers)
    differing = [
        PodOutcome(url, BatchingReason.VERIFY_FAILED, difference)
        for url, config in have.items()
        if (difference := verify_config(want, config))
    ]
    return ConfigCheck(
        matching=tuple(url for url in have if url not in {d.pod_url for d in differing}),
        differing=tuple(differing),
        unreadable=tuple(unreadable),
    )
