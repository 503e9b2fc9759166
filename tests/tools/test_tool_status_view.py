"""`tailpilot status`: the service's state rendered from the object alone."""

from __future__ import annotations

import copy

from tailpilot.cli import SUBCOMMANDS
from tailpilot.tools.status_view import render

#: Every condition the operator writes has one (the status codec requires it).
AT = "2026-12-02T04:00:00Z"

OBJ = {
    "metadata": {"name": "resnet", "namespace": "shop"},
    "spec": {"slo": {"p99LatencyMs": 25}},
    "status": {
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": AT},
            {
                "type": "SLOMet",
                "status": "False",
                "reason": "SLOViolated",
                "message": "observed P99 31.0 ms",
                "lastTransitionTime": AT,
            },
            {
                "type": "GpuProductChosen",
                "status": "True",
                "reason": "MovedForCost",
                "message": "...",
                "lastTransitionTime": AT,
            },
        ],
        "engine": {"key": "0123456789abcdef", "tritonBackend": "tensorrt"},
        "replicas": 3,
        "readyReplicas": 3,
        "batching": {"maxBatchSize": 16, "maxQueueDelayMicroseconds": 2000, "instancesPerReplica": 2},
        "observed": {
            "p99Ms": 31.0,
            "requestRate": 140.25,
            "queueDepth": 0.4,
            "queueTimeMs": 9.5,
            "serverTimeMs": 6.0,
            "computeTimeMs": 5.1,
            "meanBatchSize": 4.2,
            "timeDominatedBy": "Queue",
        },
        "predictedP99Ms": 21.8,
        "profile": {"hardware": "NVIDIA-L4", "serviceTime": {"interceptMs": 1.2, "perItemMs": 0.11}},
        "learned": {"serviceTimeScale": 1.3, "serviceTimeSlopeScale": 1.05},
        "gpu": {
            "product": "NVIDIA-L4",
            "reason": "MovedForCost",
            "message": "NVIDIA-L4 averaged $1.60/h against $4.00/h",
            "candidates": [
                {
                    "product": "NVIDIA-L4",
                    "phase": "Serving",
                    "pricePerHour": 0.8,
                    "capacityPerReplicaPerS": 60.0,
                    "replicasNeeded": 3,
                    "costPerHour": 2.4,
                },
                {"product": "NVIDIA-H100-80GB-HBM3", "phase": "Profiled", "pricePerHour": 4.0},
            ],
        },
        "decisions": [
            {
                "time": "2026-12-02T04:12:03Z",
                "action": "ScaleUp",
                "reason": "SLOAtRisk",
                "replicasBefore": 2,
                "replicasAfter": 3,
                "maxBatchSizeBefore": 16,
                "maxBatchSizeAfter": 16,
                "requestRate": 140.2,
                "observedP99Ms": 30.1,
                "predictedP99Ms": 21.8,
            },
            {
                "time": "2026-12-02T04:20:00Z",
                "action": "MoveGpuProduct",
                "reason": "MovedForCost",
                "replicasBefore": 1,
                "replicasAfter": 3,
                "maxBatchSizeBefore": 16,
                "maxBatchSizeAfter": 16,
                "gpuProduct": "NVIDIA-L4",
            },
        ],
    },
}


def test_status_shows_slo_now_breakdown_profile_choice_and_decisions():
    text = render(OBJ)
    lines = text.splitlines()
    assert lines[0] == "resnet in shop: Ready True (Ready)"
    assert "engine 0123456789ab (tensorrt), 3/3 replicas ready, max batch 16" in text
    assert "P99 31.0 ms against the SLO's 25.0 ms (False: SLOViolated), 140.2 req/s" in text
    assert "predicted P99 21.8 ms" in text
    assert "queue 9.5 ms, server 6.0 ms (compute 5.1 ms), mean batch 4.2: Queue dominates" in text
    assert (
        "1.2 ms + 0.1 ms x batch per batch, measured on NVIDIA-L4; the serving pods compute x1.30 of it"
        in text
    )
    assert "slope" not in text  # x1.05: within the 10% the policy leaves the profile's slope alone
    steeper = {**OBJ, "status": {**OBJ["status"], "learned": {"serviceTimeSlopeScale": 1.6}}}
    assert "measured on NVIDIA-L4; each item costs x1.60 of the profile's slope" in render(steeper)
    assert "GPU         NVIDIA-L4 (MovedForCost)" in text
    assert "$0.80/GPU-h, 60.0 req/s per replica, needs 3, $2.40/h" in text
    assert "the last 2, oldest first" in text
    assert "04:12:03  ScaleUp" in text and "replicas 2->3" in text
    assert "MoveGpuProduct" in text and "-> NVIDIA-L4" in text
    assert any(line.strip().startswith("SLOMet") and "observed P99 31.0 ms" in line for line in lines)


def test_a_new_service_renders_without_a_status():
    text = render({"metadata": {"name": "x"}, "spec": {}})
    assert text.startswith("x in default: Ready Unknown (-)")
    assert "no engine yet" in text and "Profile     none yet" in text


def test_status_is_a_subcommand():
    assert SUBCOMMANDS["status"][0] == "tailpilot.tools.status_view"


def test_status_shows_the_canary_and_both_sides():
    canary = {
        "engine": {"key": "fedcba9876543210"},
        "phase": "RolledBack",
        "reason": "CanaryLatencyRegression",
        "replicas": 1,
        "trafficPercent": 49.5,
        "candidate": {"p99Ms": 15.2, "requests": 316, "failures": 0, "pods": 1},
        "stable": {"p99Ms": 8.4, "requests": 322, "failures": 0, "pods": 1},
    }
    text = render({**OBJ, "status": {**OBJ["status"], "canary": canary}})
    assert (
        "Canary      engine fedcba987654 RolledBack (CanaryLatencyRegression), 1 replica(s), "
        "49.5% of requests" in text
    )
    assert "  candidate  P99 15.2 ms, 316 requests, 0 failed, 1 pod(s)" in text
    assert "  stable     P99 8.4 ms, 322 requests, 0 failed, 1 pod(s)" in text


def test_status_shows_each_compute_part_the_tails_and_the_largest_part():
    observed = {
        **OBJ["status"]["observed"],
        "computeInputTimeMs": 0.06,
        "computeOutputTimeMs": 0.31,
        "queueTimeP99Ms": 120.4,
        "computeTimeP99Ms": 5.2,
    }
    breakdown = {
        "type": "LatencyBreakdown",
        "status": "True",
        "reason": "QueueDominated",
        "message": "queue 9.5 ms of 15.5 ms per request (61%)",
        "lastTransitionTime": AT,
    }
    status = {**OBJ["status"], "observed": observed, "conditions": [*OBJ["status"]["conditions"], breakdown]}
    lines = render({**OBJ, "status": status}).splitlines()
    assert "Parts       compute input 0.06 ms, compute infer 5.1 ms, compute output 0.31 ms" in lines
    assert "Tails       P99 queue 120.4 ms, compute infer 5.2 ms" in lines
    assert "Largest     QueueDominated (True): queue 9.5 ms of 15.5 ms per request (61%)" in lines
    # The existing line stays as it was, and an older status without the parts shows none of this.
    assert any(
        "queue 9.5 ms, server 6.0 ms (compute 5.1 ms), mean batch 4.2: Queue dominates" in x for x in lines
    )
    assert not any(x.startswith(("Parts", "Tails", "Largest")) for x in render(OBJ).splitlines())


def test_status_shows_the_executed_batch_sizes_on_one_line():
    observed = {
        **OBJ["status"]["observed"],
        "batchSizes": [
            {"size": 1, "executions": 20, "requestShare": 0.08},
            {"size": 4, "executions": 14, "requestShare": 0.225, "computeMs": 12.25},
            {"size": 32, "maxSize": 64, "executions": 9, "requestShare": 0.695},
        ],
    }
    lines = render({**OBJ, "status": {**OBJ["status"], "observed": observed}}).splitlines()
    assert "Batch sizes 1 x 20 (8% of requests), 4 x 14 (22%, 12.2 ms each), 32-64 x 9 (70%)" in lines
    assert not any(x.startswith("Batch sizes") for x in render(OBJ).splitlines())


def test_status_shows_the_clients_p99_and_the_part_outside_the_server():
    observed = {**OBJ["status"]["observed"], "clientP99Ms": 190.0, "outsideServerP99Ms": 159.0}
    lines = render({**OBJ, "status": {**OBJ["status"], "observed": observed}}).splitlines()
    assert (
        "Clients     P99 190.0 ms, outside the server 159.0 ms (the clients' P99 less the server's)" in lines
    )
    assert not any(x.startswith("Clients") for x in render(OBJ).splitlines())


def test_status_shows_the_error_budget_and_the_headroom_it_holds():
    status = {
        **OBJ["status"],
        "learned": {"headroom": 1.8},
        "errorBudget": {
            "objectivePercent": 99.0,
            "compliancePeriodHours": 168,
            "measuredSeconds": 7200,
            "missedSeconds": 72,
            "remainingPercent": 98.81,
        },
    }
    text = render({**OBJ, "status": status})
    assert "Budget      objective 99.00% over 168 h: 99.00% met in 2.0 h measured" in text
    assert "98.8% of the budget left; headroom x1.80 over the arrivals" in text
    assert "Budget" not in render(OBJ)  # no decision yet, no budget line


def test_control_characters_in_a_message_are_shown_as_escapes_never_sent_to_the_terminal():
    hostile = "built\x1b]0;owned\x07\x1b[2J\nfake line\r\x9b1m"
    condition = {
        "type": "Ready",
        "status": "False",
        "reason": "BuildFailed",
        "message": hostile,
        "lastTransitionTime": AT,
    }
    obj = {
        "metadata": {"name": "x"},
        "spec": {},
        "status": {"conditions": [condition]},
    }
    text = render(obj)
    assert not any(ch in text for ch in "\x1b\x07\r\x9b")
    assert text.count("\n") == len(text.splitlines())  # only the lines' own ends
    assert "built\\x1b]0;owned\\x07\\x1b[2J\\nfake line\\r\\x9b1m" in text


def test_a_section_the_codec_cannot_read_is_named_and_the_rest_still_shows(caplog):
    decisions = [*OBJ["status"]["decisions"]]
    decisions.insert(1, {**decisions[0], "replicasAfter": -1})  # below the schema's minimum
    status = {**OBJ["status"], "observed": {"p99Ms": "fast"}, "decisions": decisions}
    lines = render({**OBJ, "status": status}).splitlines()
    assert lines[0] == "resnet in shop: Ready True (Ready)"
    assert lines[1] == (
        "Unreadable  status.observed, status.decisions[1]: could not be read, not in the form this "
        "tailpilot reads (kubectl get -o yaml shows it as written)"
    )
    text = "\n".join(lines)
    # Unknown, not made up: the observation's figures are dashes; every other section as before.
    assert "P99 - against the SLO's 25.0 ms (False: SLOViolated), -, -, predicted P99 21.8 ms" in text
    assert "engine 0123456789ab (tensorrt), 3/3 replicas ready, max batch 16" in text
    assert "GPU         NVIDIA-L4 (MovedForCost)" in text
    assert "the last 2, oldest first" in text and "04:12:03  ScaleUp" in text and "MoveGpuProduct" in text
    assert any(line.strip().startswith("SLOMet") for line in lines)
    # The tool says it; the codec's own warning is not printed besides.
    assert not [r for r in caplog.records if r.name == "tailpilot.status"]


def test_an_unreadable_engine_or_profile_is_not_shown_as_none_yet():
    status = {**OBJ["status"], "engine": {"key": "not hex"}, "profile": {"hardware": "NVIDIA-L4"}}
    text = render({**OBJ, "status": status})
    assert "Unreadable  status.engine, status.profile: could not be read" in text
    assert "Serving     unknown: status.engine could not be read" in text
    assert "Profile     unknown: status.profile could not be read" in text
    assert "no engine yet" not in text and "none yet" not in text


def test_a_status_that_is_not_an_object_renders_and_says_so():
    text = render({"metadata": {"name": "x"}, "spec": {}, "status": ["not", "an", "object"]})
    assert text.startswith("x in default: Ready Unknown (-)\nUnreadable  status: could not be read")
    assert "Serving     unknown: status.engine could not be read" in text


def test_the_status_is_read_through_the_codec_as_typed_values():
    from datetime import UTC, datetime

    from tailpilot.tools.status_view import read_status

    read = read_status({**OBJ["status"], "observed": {**OBJ["status"]["observed"], "requestRate": 140}})
    assert read.unreadable == ()
    observed = read.status.observed
    assert observed is not None and observed.time_dominated_by == "Queue"
    # A JSON integer in a float field is a float once read, and is printed as it was before.
    assert isinstance(observed.request_rate, float) and observed.request_rate == 140.0
    assert read.status.decisions[0].time == datetime(2026, 12, 2, 4, 12, 3, tzinfo=UTC)
    assert read.status.conditions[1].reason == "SLOViolated"
    status = {**OBJ["status"], "observed": {**OBJ["status"]["observed"], "requestRate": 140}}
    assert "140.0 req/s" in render({**OBJ, "status": status})


def test_a_service_at_zero_says_so_and_where_its_requests_go():
    at_zero = copy.deepcopy(OBJ)
    at_zero["status"].update({"replicas": 0, "readyReplicas": 0, "scaledToZeroAt": "2026-12-06T05:00:00Z"})
    text = render(at_zero)
    assert "0/0 replicas ready" in text
    assert (
        "Zero        scaled to zero at 2026-12-06T05:00:00+00:00: its Service routes to the activator" in text
    )
    assert "Zero " not in render(OBJ)


COLD_START = {
    "heldAt": "2026-12-06T05:31:30.123000Z",
    "answeredAt": "2026-12-06T05:32:14.743000Z",
    "totalSeconds": 44.62,
    "parts": [
        {"name": "wakeRequest", "seconds": 0.038},
        {"name": "podCreation", "seconds": 0.839},
        {"name": "scheduling", "seconds": 1.0},
        {"name": "podStartAndImagePull", "seconds": 10.0},
        {"name": "engineFetch", "seconds": 8.0},
        {"name": "containerStart", "seconds": 1.0},
        {"name": "serverStartAndModelLoad", "seconds": 22.0},
        {"name": "endpointPropagation", "seconds": 1.623},
        {"name": "firstInference", "seconds": 0.12},
    ],
    "pod": "resnet-7d9-abc",
}


def test_the_last_cold_start_is_shown_in_its_parts_after_the_serving_line():
    woken = copy.deepcopy(OBJ)
    woken["status"]["coldStart"] = COLD_START
    lines = render(woken).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Cold start"))
    assert lines[at - 1].startswith("Serving ")
    assert lines[at] == (
        "Cold start  44.620 s from the first request held (2026-12-06 05:31:30.123 UTC) to its answer; "
        "pod resnet-7d9-abc"
    )
    assert lines[at + 1 : at + 10] == [
        "  wakeRequest                    0.038 s   0.1%",
        "  podCreation                    0.839 s   1.9%",
        "  scheduling                     1.000 s   2.2%",
        "  podStartAndImagePull          10.000 s  22.4%",
        "  engineFetch                    8.000 s  17.9%",
        "  containerStart                 1.000 s   2.2%",
        "  serverStartAndModelLoad       22.000 s  49.3%",
        "  endpointPropagation            1.623 s   3.6%",
        "  firstInference                 0.120 s   0.3%",
    ]
    assert "Cold start" not in render(OBJ)
    unreadable = copy.deepcopy(OBJ)
    unreadable["status"]["coldStart"] = {**COLD_START, "heldAt": "soon"}
    assert "Cold start  unknown: status.coldStart could not be read" in render(unreadable)
