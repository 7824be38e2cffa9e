"""The rule that turns callers' records of KATalogus, Octopoes and Bytes into up, down or unknown
(core/outside_services.py): a record is news for three polls; a service configured but never recorded
is unknown; KATalogus, Octopoes, Bytes come first, in that order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from baton.core.outside_services import Recorded, outside_status, outside_statuses, stale_after_seconds

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
POLL = 60.0


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def test_a_fresh_record_says_up_or_down_and_how_long() -> None:
    stale = stale_after_seconds(POLL)
    up = outside_status("katalogus", True, Recorded(None, None, ago(30)), NOW, stale)
    assert (up.state, up.down_since, up.down_seconds, up.checked_seconds_ago) == ("up", None, None, 30.0)
    down = outside_status("octopoes", True, Recorded(ago(600), "answered 500", ago(50)), NOW, stale)
    assert (down.state, down.down_seconds, down.reason) == ("down", 600.0, "answered 500")


def test_a_record_older_than_three_polls_is_unknown_but_keeps_what_it_said() -> None:
    stale = stale_after_seconds(POLL)
    assert stale == 3 * POLL
    at_the_edge = outside_status("octopoes", True, Recorded(ago(900), "refused", ago(stale)), NOW, stale)
    assert at_the_edge.state == "down"
    gone = outside_status("octopoes", True, Recorded(ago(900), "refused", ago(stale + 1)), NOW, stale)
    assert (gone.state, gone.down_since, gone.down_seconds, gone.reason) == ("unknown", ago(900), None, "refused")
    quiet = outside_status("bytes", True, Recorded(None, None, ago(stale + 1)), NOW, stale)
    assert quiet.state == "unknown"


def test_configured_or_recorded_services_in_order() -> None:
    recorded = {
        "bytes": Recorded(ago(10), "refused", ago(5)),
        "katalogus": Recorded(None, None, ago(5)),
        "elsewhere": Recorded(None, None, ago(5)),
    }
    statuses = outside_statuses({"octopoes", "katalogus"}, recorded, NOW, stale_after_seconds(POLL))
    assert [(s.service, s.state, s.configured) for s in statuses] == [
        ("katalogus", "up", True),
        ("octopoes", "unknown", True),  # configured, never called: no record
        ("bytes", "down", False),  # recorded by another process
        ("elsewhere", "up", False),
    ]
    assert statuses[1].checked_at is None and statuses[1].checked_seconds_ago is None
