"""Which pods run the batching in force: read back from real Triton servers, nothing changed by the read.

The autoscaler reads each new pod incarnation's config once (`check_config`) and reloads only the
pods that came up running another batching (a Triton restarted in its pod loads the config its pod
started with). The real-pods tier kills a Triton during a reload and checks the whole loop
(`tests/real_pods/test_faults.py`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from triton_fixtures import MODEL, model_config_json, write_repository

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.builders.triton_server import TritonServer, free_port
from tailpilot.controllers.autoscale.batching import BatchingReason, check_config
from tailpilot.controllers.autoscale.pod_batching import incarnation

pytestmark = [pytest.mark.triton, pytest.mark.slow]

OLD = BatchingConfig(max_batch_size=4)
NEW = BatchingConfig(max_batch_size=16, preferred_batch_sizes=(8,), max_queue_delay_us=500)


def check(urls: list[str], batching: BatchingConfig):  # type: ignore[no-untyped-def]
    return asyncio.run(
        check_config(pod_urls=urls, model_name=MODEL, config_json=model_config_json(batching), timeout_s=10.0)
    )


def test_pods_running_another_batching_are_found_and_left_unchanged(tmp_path: Path) -> None:
    old_repo = write_repository(tmp_path / "old", batching=OLD)
    new_repo = write_repository(tmp_path / "new", batching=NEW)
    with (
        TritonServer(old_repo, explicit_models=[MODEL], work_dir=tmp_path / "t1") as restarted,
        TritonServer(new_repo, explicit_models=[MODEL], work_dir=tmp_path / "t2") as current,
    ):
        gone = f"http://127.0.0.1:{free_port()}"
        found = check([restarted.http_url, current.http_url, gone], NEW)
        assert found.matching == (current.http_url,)
        ((differing,),) = [found.differing]
        assert differing.pod_url == restarted.http_url and differing.reason == BatchingReason.VERIFY_FAILED
        assert "('4', ('4',), '0')" in differing.message, differing.message
        assert [u.pod_url for u in found.unreadable] == [gone]
        # Reading changed nothing: the restarted one still runs its old batching.
        assert check([restarted.http_url], OLD).matching == (restarted.http_url,)


def test_a_pod_incarnation_changes_with_its_restarts() -> None:
    pod = {
        "metadata": {"uid": "u1"},
        "status": {"containerStatuses": [{"name": "triton", "restartCount": 0}]},
    }
    again = {
        "metadata": {"uid": "u1"},
        "status": {"containerStatuses": [{"name": "triton", "restartCount": 1}]},
    }
    assert incarnation(pod) == "u1/0" != incarnation(again)
    assert incarnation({"metadata": {"uid": "u2"}, "status": {}}) == "u2/0"
