"""The cold-start breakdown (pure): exact sums, clamping, merged parts, the pod's timestamps."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from tailpilot.api.cold_start import ColdStartEpisode
from tailpilot.policy.cold_start import (
    PARTS,
    ColdStartBreakdown,
    PodMilestones,
    break_down,
    epoch_ms,
    first_ready_since,
    pod_milestones,
)

T0 = datetime(2026, 12, 6, 5, 31, 30, 123000, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """T0 plus `seconds` (to the millisecond)."""
    return T0 + timedelta(milliseconds=round(seconds * 1000))


def second(seconds: float) -> datetime:
    """A Kubernetes timestamp: T0 plus `seconds`, truncated to the second."""
    return at(seconds).replace(microsecond=0)


EPISODE = ColdStartEpisode(held_at=at(0), woke_at=at(0.04), backend_ready_at=at(44.5), answered_at=at(44.62))
POD = PodMilestones(
    name="resnet-7d9-abc",
    created=second(0.9),
    scheduled=second(1.9),
    fetch_started=second(12.2),
    initialized=second(20.5),
    server_started=second(21.3),
    ready=second(43.7),
)


def ms(breakdown: ColdStartBreakdown) -> dict[str, int]:
    return {part.name: part.milliseconds for part in breakdown.parts}


def test_every_part_in_order_summing_exactly_to_the_clients_wait() -> None:
    breakdown = break_down(EPISODE, POD)
    assert [part.name for part in breakdown.parts] == list(PARTS)
    assert breakdown.total_milliseconds == 44620
    assert sum(part.milliseconds for part in breakdown.parts) == 44620
    # The pod's seconds are truncated: its created time (05:31:31.000) reads 0.877 s after the hold.
    assert ms(breakdown) == {
        "wakeRequest": 40,
        "podCreation": 837,  # 05:31:30.163 -> 05:31:31
        "scheduling": 1000,
        "podStartAndImagePull": 10000,
        "engineFetch": 8000,
        "containerStart": 1000,
        "serverStartAndModelLoad": 22000,
        "endpointPropagation": 1623,  # Ready 05:32:13 (truncated from .823) -> 05:32:14.623
        "firstInference": 120,
    }
    assert breakdown.pod == "resnet-7d9-abc"
    assert breakdown.parts[-1].seconds == 0.12


def test_timestamps_out_of_order_or_outside_the_episode_are_clamped_never_negative() -> None:
    # The pod's creation reads before the hold (a clock behind), the scheduling before the creation,
    # Ready after the answer (the pod flapped): every part stays >= 0 and the sum stays exact.
    odd = PodMilestones(
        created=at(-3),
        scheduled=at(-5),
        fetch_started=at(10),
        initialized=at(9),
        server_started=at(11),
        ready=at(60),
    )
    breakdown = break_down(EPISODE, odd)
    assert all(part.milliseconds >= 0 for part in breakdown.parts)
    assert sum(part.milliseconds for part in breakdown.parts) == breakdown.total_milliseconds
    got = ms(breakdown)
    assert (got["podCreation"], got["scheduling"], got["engineFetch"]) == (0, 0, 0)
    assert got["serverStartAndModelLoad"] == 44620 - 11000  # Ready clamped to the answer
    assert got["endpointPropagation"] == got["firstInference"] == 0


def test_unknown_boundaries_merge_the_parts_around_them() -> None:
    no_wake = ColdStartEpisode(held_at=at(0), answered_at=at(44.62), backend_ready_at=at(44.5))
    no_init_status = PodMilestones(**{**POD.__dict__, "fetch_started": None})
    breakdown = break_down(no_wake, no_init_status)
    assert [part.name for part in breakdown.parts] == [
        "wakeRequest+podCreation",
        "scheduling",
        "podStartAndImagePull+engineFetch",
        "containerStart",
        "serverStartAndModelLoad",
        "endpointPropagation",
        "firstInference",
    ]
    assert ms(breakdown)["podStartAndImagePull+engineFetch"] == 18000
    assert sum(part.milliseconds for part in breakdown.parts) == 44620


def test_no_pod_found_leaves_the_activators_own_boundaries() -> None:
    breakdown = break_down(EPISODE, None)
    assert [(part.name, part.milliseconds) for part in breakdown.parts] == [
        ("wakeRequest", 40),
        (
            "podCreation+scheduling+podStartAndImagePull+engineFetch+containerStart+serverStartAndModelLoad"
            "+endpointPropagation",
            44460,
        ),
        ("firstInference", 120),
    ]
    assert breakdown.pod == ""
    bare = break_down(ColdStartEpisode(held_at=at(0), answered_at=at(2)), None)
    assert [(part.name, part.milliseconds) for part in bare.parts] == [("+".join(PARTS), 2000)]


def test_sums_are_exact_for_any_timestamps() -> None:
    rng = random.Random(7)
    for _ in range(500):
        total = rng.uniform(0, 400)

        def maybe(total: float = total, spread: float = 10.0) -> datetime | None:
            return None if rng.random() < 0.2 else at(rng.uniform(-spread, total + spread))

        episode = ColdStartEpisode(
            held_at=at(0), answered_at=at(total), woke_at=maybe(), backend_ready_at=maybe()
        )
        pod = PodMilestones(*["p", *(maybe() for _ in range(6))])  # type: ignore[arg-type]
        breakdown = break_down(episode, pod)
        assert all(part.milliseconds >= 0 for part in breakdown.parts)
        assert sum(part.milliseconds for part in breakdown.parts) == breakdown.total_milliseconds
        assert "+".join(part.name for part in breakdown.parts) == "+".join(PARTS)


def test_epoch_milliseconds_are_floored_exactly() -> None:
    assert epoch_ms(datetime(1970, 1, 1, 0, 0, 1, 999999, tzinfo=UTC)) == 1999


def serving_pod(name: str, *, ready: str | None, restarted: bool = False) -> dict[str, Any]:
    """A serving pod as the API server returns it, Ready at `ready` (None: not Ready)."""
    conditions = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-06T05:31:31Z"},
        {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-12-06T05:31:50Z"},
        {
            "type": "Ready",
            "status": "True" if ready else "False",
            "lastTransitionTime": ready or "2026-12-06T05:31:31Z",
        },
    ]
    triton: dict[str, Any] = {"name": "triton", "state": {"running": {"startedAt": "2026-12-06T05:31:51Z"}}}
    if restarted:
        triton = {
            "name": "triton",
            "state": {"running": {"startedAt": "2026-12-06T05:32:05Z"}},
            "lastState": {
                "terminated": {"startedAt": "2026-12-06T05:31:51Z", "finishedAt": "2026-12-06T05:32:04Z"}
            },
        }
    return {
        "metadata": {"name": name, "creationTimestamp": "2026-12-06T05:31:30Z"},
        "status": {
            "conditions": conditions,
            "initContainerStatuses": [
                {
                    "name": "model-repository",
                    "state": {
                        "terminated": {
                            "startedAt": "2026-12-06T05:31:42Z",
                            "finishedAt": "2026-12-06T05:31:49Z",
                        }
                    },
                }
            ],
            "containerStatuses": [triton],
        },
    }


def test_the_pods_timestamps_are_read_from_its_conditions_and_container_statuses() -> None:
    pod = serving_pod("a", ready="2026-12-06T05:32:13Z")
    got = pod_milestones(pod, fetch_container="model-repository", server_container="triton")
    assert got == PodMilestones(
        name="a",
        created=datetime(2026, 12, 6, 5, 31, 30, tzinfo=UTC),
        scheduled=datetime(2026, 12, 6, 5, 31, 31, tzinfo=UTC),
        fetch_started=datetime(2026, 12, 6, 5, 31, 42, tzinfo=UTC),
        initialized=datetime(2026, 12, 6, 5, 31, 50, tzinfo=UTC),
        server_started=datetime(2026, 12, 6, 5, 31, 51, tzinfo=UTC),
        ready=datetime(2026, 12, 6, 5, 32, 13, tzinfo=UTC),
    )
    # Triton crashed once on its way to Ready: its first start counts (the crash was part of the wait).
    restarted = pod_milestones(
        serving_pod("a", ready="2026-12-06T05:32:13Z", restarted=True),
        fetch_container="model-repository",
        server_container="triton",
    )
    assert restarted.server_started == datetime(2026, 12, 6, 5, 31, 51, tzinfo=UTC)
    # Nothing the kubelet has not written yet, and nothing unreadable, is guessed.
    bare = pod_milestones(
        {"metadata": {"name": "b", "creationTimestamp": "soon"}, "status": {}},
        fetch_container="model-repository",
        server_container="triton",
    )
    assert bare == PodMilestones(name="b")


def test_the_pod_read_is_the_first_to_turn_ready_since_the_hold() -> None:
    held = datetime(2026, 12, 6, 5, 31, 30, 500000, tzinfo=UTC)
    before = serving_pod("old", ready="2026-12-06T05:31:29Z")
    same_second = serving_pod("b", ready="2026-12-06T05:31:30Z")  # truncated: may be after the hold
    later = serving_pod("a", ready="2026-12-06T05:32:13Z")
    not_ready = serving_pod("c", ready=None)
    assert first_ready_since([later, before, not_ready, same_second], held) is same_second
    assert first_ready_since([later, before, not_ready], held) is later
    assert first_ready_since([before, not_ready], held) is None
