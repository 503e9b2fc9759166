"""The activator's cold-start annotation: its JSON, to the millisecond, and what is refused reading it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from tailpilot.api import constants as c
from tailpilot.api.cold_start import ColdStartEpisode, parse_episode, rfc3339_ms

HELD = datetime(2026, 12, 6, 5, 31, 30, 123456, tzinfo=UTC)


def test_times_are_rfc3339_utc_to_the_millisecond() -> None:
    assert rfc3339_ms(HELD) == "2026-12-06T05:31:30.123Z"
    assert rfc3339_ms(datetime(2026, 12, 6, 6, 31, 30, tzinfo=timezone(timedelta(hours=1)))) == (
        "2026-12-06T05:31:30.000Z"
    )


def test_an_episode_round_trips_through_its_annotation() -> None:
    assert c.ANNOTATION_COLD_START == "tailpilot.io/cold-start"
    episode = ColdStartEpisode(
        held_at=HELD,
        woke_at=HELD + timedelta(milliseconds=38),
        backend_ready_at=HELD + timedelta(seconds=44.5),
        answered_at=HELD + timedelta(seconds=44.62),
    )
    text = episode.to_annotation()
    assert json.loads(text) == {
        "heldAt": "2026-12-06T05:31:30.123Z",
        "wokeAt": "2026-12-06T05:31:30.161Z",
        "backendReadyAt": "2026-12-06T05:32:14.623Z",
        "answeredAt": "2026-12-06T05:32:14.743Z",
    }
    back = parse_episode(text)
    assert back.held_at == datetime(2026, 12, 6, 5, 31, 30, 123000, tzinfo=UTC)
    assert back.answered_at - back.held_at == timedelta(seconds=44.62)
    # The times the activator did not see are left out, and read back as None.
    bare = ColdStartEpisode(held_at=HELD, answered_at=HELD + timedelta(seconds=1))
    assert set(json.loads(bare.to_annotation())) == {"heldAt", "answeredAt"}
    assert parse_episode(bare.to_annotation()).woke_at is None


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("yesterday", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"heldAt": "2026-12-06T05:31:30.123Z"}', "no answeredAt"),
        ('{"heldAt": "2026-12-06T05:31:30", "answeredAt": "2026-12-06T05:31:31Z"}', "no time zone"),
        ('{"heldAt": 5, "answeredAt": "2026-12-06T05:31:31Z"}', "expected an RFC 3339 time"),
        ('{"heldAt": "2026-12-06T05:31:32Z", "answeredAt": "2026-12-06T05:31:31Z"}', "before heldAt"),
        ('{"heldAt": "' + "x" * 2000 + '"}', "more than"),
    ],
)
def test_what_is_not_an_episode_is_refused_saying_why(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_episode(text)
