"""The rules of periodic rescans, without a database: the next deadline (grace period plus jitter, the
plugin's cron or interval), the grace period a rescan honours, and what the checks decide."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from baton.core.rescans import (
    OBJECT_GONE,
    PLUGIN_NOT_ENABLED,
    SCAN_LEVEL_TOO_LOW,
    TYPE_NOT_CONSUMED,
    ObjectView,
    Outcome,
    PluginView,
    grace_of,
    judge,
    judge_without_object,
    next_rescan,
    object_type_of,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DNS = PluginView("dns-records", ("Hostname",), 1)


def test_the_next_deadline_is_the_grace_period_plus_a_jitter_within_its_bound() -> None:
    rng = random.Random(7)
    deadlines = [next_rescan(NOW, grace_seconds=86_400, jitter_seconds=18_000, rng=rng) for _ in range(2000)]
    offsets = [(deadline - NOW).total_seconds() - 86_400 for deadline in deadlines]
    assert min(offsets) >= 0 and max(offsets) <= 18_000
    # Spread over the whole window (not all at once): each fifth of it gets a share.
    fifths = {int(offset // 3600) for offset in offsets}
    assert fifths == {0, 1, 2, 3, 4}


def test_no_jitter_is_exactly_the_grace_period() -> None:
    assert next_rescan(NOW, grace_seconds=30, jitter_seconds=0) == NOW + timedelta(seconds=30)


def test_the_plugins_cron_wins_then_its_interval() -> None:
    assert next_rescan(NOW, grace_seconds=86_400, jitter_seconds=100, cron="0 3 * * *") == datetime(
        2026, 3, 2, 3, 0, tzinfo=UTC
    )
    assert next_rescan(NOW, grace_seconds=86_400, jitter_seconds=100, interval_minutes=90) == NOW + timedelta(
        minutes=90
    )
    assert next_rescan(NOW, grace_seconds=60, jitter_seconds=0, interval_minutes=0) == NOW + timedelta(seconds=60)


def test_the_grace_period_is_the_plugins_interval_when_it_has_one() -> None:
    assert grace_of(86_400, None) == timedelta(days=1)
    assert grace_of(86_400, 30) == timedelta(minutes=30)
    assert grace_of(-5, None) == timedelta(0)


def test_checks_in_mulas_order() -> None:
    hostname = ObjectView(True, "Hostname", 2)
    assert judge("dns-records", DNS, hostname).outcome is Outcome.RUN
    assert judge("dns-records", None, hostname).reason == PLUGIN_NOT_ENABLED
    assert judge("dns-records", None, None).reason == PLUGIN_NOT_ENABLED  # no call needed to know that
    assert judge("dns-records", DNS, ObjectView(False, "Hostname")).reason == OBJECT_GONE
    assert judge("dns-records", DNS, ObjectView(True, "IPAddressV4", 4)).reason == TYPE_NOT_CONSUMED
    low = judge("dns-records", DNS, ObjectView(True, "Hostname", 0))
    assert (low.outcome, low.reason) == (Outcome.DISABLE, SCAN_LEVEL_TOO_LOW)
    assert low.detail is not None and "level 0" in low.detail


def test_an_unanswered_check_waits_and_never_disables() -> None:
    assert judge("dns-records", DNS, None).outcome is Outcome.WAIT


def test_without_octopoes_the_level_is_not_checked() -> None:
    assert judge("dns-records", DNS, ObjectView(True, "Hostname", None)).outcome is Outcome.RUN


def test_a_job_without_an_object_checks_the_plugin_only() -> None:
    assert judge_without_object("dns-records", DNS).outcome is Outcome.RUN
    gone = judge_without_object("dns-records", None)
    assert (gone.outcome, gone.reason) == (Outcome.DISABLE, PLUGIN_NOT_ENABLED)


def test_the_type_of_a_reference() -> None:
    assert object_type_of("Hostname|internet|example.com") == "Hostname"
    assert object_type_of("Network") == "Network"
