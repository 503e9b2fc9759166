"""apply_batching against real Triton servers (tritonserver 2.51 from nvidia-pytriton, Python backend)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
import tritonclient.grpc as grpcclient
from triton_fixtures import INPUTS, MODEL, BoundedLoad, model_config_json, write_repository
from tritonclient.utils import InferenceServerException

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.builders.reload_cost import measure_reload
from tailpilot.builders.triton_server import TritonServer
from tailpilot.controllers.autoscale.batching import BatchingReason, apply_batching, batching_fields
from tailpilot.controllers.core.admin_key import generate_key
from tailpilot.manifests.triton_access import (
    ADMIN_KEY_ENV,
    ADMIN_KEY_HEADER,
    GRPC_ADMIN_KEY_HEADER,
    restricted_api_args,
)
from tailpilot_e2e.agent_pod import expand_args
from tailpilot_e2e.wait import eventually

pytestmark = [pytest.mark.triton, pytest.mark.slow]

OLD = BatchingConfig(max_batch_size=4)
NEW = BatchingConfig(max_batch_size=16, preferred_batch_sizes=(8,), max_queue_delay_us=500)


def apply(urls: list[str], config_json: str, admin_key: str | None = None):
    async def main():
        return await apply_batching(
            pod_urls=urls, model_name=MODEL, config_json=config_json, admin_key=admin_key, timeout_s=30.0
        )

    return asyncio.run(main())


def served_batching(url: str, admin_key: str | None = None) -> tuple[str, tuple[str, ...], str]:
    headers = {ADMIN_KEY_HEADER: admin_key} if admin_key else {}
    max_batch, preferred, delay = batching_fields(
        httpx.get(f"{url}/v2/models/{MODEL}/config", headers=headers, timeout=5).json()
    )
    # Triton fills in preferred = [max batch] when none is configured.
    return max_batch, (() if preferred == (max_batch,) else preferred), delay


def test_live_change_under_load_has_zero_failures_and_an_invalid_change_is_refused(tmp_path: Path):
    repo = write_repository(tmp_path / "repo", batching=OLD)
    with TritonServer(repo, explicit_models=[MODEL], work_dir=tmp_path / "triton") as server:
        url = server.http_url
        assert served_batching(url) == ("4", (), "0")
        with BoundedLoad([url], workers=8, rate_per_worker=40, max_requests=3000, max_seconds=25) as load:
            eventually(lambda: load.result.count >= 100, timeout=15, description="load running")
            result = apply([url], model_config_json(NEW))
            assert result.ok, result
            assert served_batching(url) == ("16", ("8",), "500")
            # Invalid: a preferred batch size above the max batch size.
            invalid = json.loads(model_config_json(NEW))
            invalid["dynamic_batching"]["preferred_batch_size"] = ["64"]
            refused = apply([url], json.dumps(invalid))
            assert not refused.ok and refused.reason == BatchingReason.REFUSED, refused
            before = load.result.count
            eventually(
                lambda: load.result.count >= before + 100, timeout=15, description="serving after refusal"
            )
        assert served_batching(url) == ("16", ("8",), "500")  # the old (last good) config keeps serving
        assert load.result.failures == []
        assert load.result.count >= 300
        p99_ms = load.result.p99_s() * 1000
        print(f"live change: {load.result.count} requests, 0 failed, client P99 {p99_ms:.1f} ms")


def test_a_pod_that_refuses_rolls_the_other_back(tmp_path: Path):
    ok_repo = write_repository(tmp_path / "ok", batching=OLD)
    picky_repo = write_repository(tmp_path / "picky", batching=OLD, refuse_above=8)
    with (
        TritonServer(ok_repo, explicit_models=[MODEL], work_dir=tmp_path / "t1") as a,
        TritonServer(picky_repo, explicit_models=[MODEL], work_dir=tmp_path / "t2") as b,
    ):
        urls = [a.http_url, b.http_url]
        with BoundedLoad(urls, workers=4, rate_per_worker=30, max_requests=2000, max_seconds=25) as load:
            eventually(lambda: load.result.count >= 50, timeout=15, description="load running")
            result = apply(urls, model_config_json(NEW))
        assert not result.ok
        assert result.reason == BatchingReason.REFUSED, result
        assert [f.pod_url for f in result.failed] == [b.http_url]
        assert result.rolled_back == (a.http_url,)
        assert served_batching(a.http_url) == ("4", (), "0")
        assert served_batching(b.http_url) == ("4", (), "0")
        assert load.result.failures == []
        print(f"rollback: {load.result.count} requests during the refused change, 0 failed")
        # A change both pods accept goes through.
        fine = apply(urls, model_config_json(BatchingConfig(max_batch_size=8, max_queue_delay_us=200)))
        assert fine.ok, fine
        assert served_batching(b.http_url) == ("8", (), "200")


def test_admin_apis_refuse_calls_without_the_key_and_the_operators_reload_with_it_succeeds(tmp_path: Path):
    key = generate_key()
    # The serving pods' flags, `$(VAR)` expanded from the env as the kubelet (and the node agent) does.
    args = expand_args(restricted_api_args(), {ADMIN_KEY_ENV: key})
    repo = write_repository(tmp_path / "repo", batching=OLD)
    with TritonServer(repo, explicit_models=[MODEL], work_dir=tmp_path / "triton", extra_args=args) as server:
        url = server.http_url
        refused = {
            "unload": httpx.post(f"{url}/v2/repository/models/{MODEL}/unload", timeout=5),
            "load": httpx.post(f"{url}/v2/repository/models/{MODEL}/load", json={}, timeout=5),
            "index": httpx.post(f"{url}/v2/repository/index", timeout=5),
            "config": httpx.get(f"{url}/v2/models/{MODEL}/config", timeout=5),
            "wrong key": httpx.post(
                f"{url}/v2/repository/models/{MODEL}/unload", headers={ADMIN_KEY_HEADER: "guess"}, timeout=5
            ),
            "logging": httpx.post(f"{url}/v2/logging", json={"log_verbose_level": 1}, timeout=5),
            "trace": httpx.post(f"{url}/v2/trace/setting", json={"trace_level": ["TIMESTAMPS"]}, timeout=5),
        }
        assert {name: r.status_code for name, r in refused.items()} == dict.fromkeys(refused, 403)
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            with pytest.raises(InferenceServerException, match="restricted"):
                client.unload_model(MODEL)
            assert client.is_model_ready(MODEL)  # nothing was unloaded
        # What clients, probes and the fast loop use is open.
        assert httpx.get(f"{url}/v2/health/ready", timeout=5).status_code == 200
        assert httpx.get(f"{url}/v2/models/{MODEL}", timeout=5).status_code == 200
        assert httpx.get(f"{url}/v2/models/{MODEL}/stats", timeout=5).status_code == 200
        body = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
        assert httpx.post(f"{url}/v2/models/{MODEL}/infer", json=body, timeout=10).status_code == 200

        # The operator without the key changes nothing: its first read is refused.
        keyless = apply([url], model_config_json(NEW))
        assert not keyless.ok and keyless.reason == BatchingReason.UNREACHABLE, keyless
        assert "403" in keyless.failed[0].message
        assert served_batching(url, key) == ("4", (), "0")
        # With the key, the live reload goes through, verified.
        with BoundedLoad([url], workers=4, rate_per_worker=30, max_requests=1500, max_seconds=20) as load:
            eventually(lambda: load.result.count >= 50, timeout=15, description="load running")
            result = apply([url], model_config_json(NEW), admin_key=key)
        assert result.ok, result
        assert served_batching(url, key) == ("16", ("8",), "500")
        assert load.result.failures == []

        # The profile Job's timed reload (gRPC): refused without the key, timed with its gRPC header.
        with pytest.raises(InferenceServerException, match="restricted"):
            measure_reload(server.grpc_url, MODEL, INPUTS, config_json=model_config_json(OLD), timeout_s=30)
        timing = measure_reload(
            server.grpc_url,
            MODEL,
            INPUTS,
            config_json=model_config_json(OLD),
            timeout_s=30,
            headers={GRPC_ADMIN_KEY_HEADER: key},
        )
        assert timing.load_s > 0
        assert served_batching(url, key) == ("4", (), "0")
