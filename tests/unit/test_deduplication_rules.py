"""Deduplication's pure rules (core/deduplication.py): which pops hand out a group, what a task's key
is, which organisations get a twin, and what the twin carries."""

from __future__ import annotations

import uuid

import orjson
import pytest

from baton.core.deduplication import (
    deduplication_key,
    pops_together,
    target_type,
    twin_document,
    twin_organisations,
)
from baton.core.jobs import BoefjeJob, job_hash

# Fixed, not random: it is part of test ids, which every pytest-xdist worker must collect alike.
KEY = "3f2b8c1e-6d4a-4e5b-9a7c-1b2d3e4f5a6b"


@pytest.mark.parametrize(
    ("task_type", "limit", "enabled", "expected"),
    [
        ("boefje", 2, True, True),
        ("boefje", 1, True, False),  # a pop of one: the head, whatever its key
        ("boefje", 5, False, False),  # BATON_DEDUPLICATE off
        ("normalizer", 5, True, False),  # mula deduplicates boefje tasks only
        ("report", 5, True, False),
        (None, 5, True, False),
    ],
)
def test_which_pops_hand_out_a_group(task_type: str | None, limit: int, enabled: bool, expected: bool) -> None:
    assert pops_together(task_type, limit, enabled) is expected


def test_the_type_a_pop_targets() -> None:
    assert target_type(None, "boefje") == "boefje"
    assert target_type("boefje-acme", None) == "boefje"
    assert target_type("normalizer-acme-corp", None) == "normalizer"
    assert target_type(None, None) is None


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"deduplication_key": KEY}, KEY),
        (orjson.dumps({"boefje": {"id": "x"}, "deduplication_key": KEY}).decode(), KEY),
        (orjson.dumps({"deduplication_key": KEY}), KEY),  # bytes
        ('{"deduplication_key": "' + KEY + '", "input_ooi": "a"}', KEY),  # PostgreSQL's jsonb text, with spaces
        ({"deduplication_key": None}, None),  # mula's tasks without one carry null
        ('{"deduplication_key": null}', None),
        ({"deduplication_key": ""}, None),
        ({"deduplication_key": 7}, None),  # only a string is a key
        ('{"input_ooi": "a"}', None),
        ('{"input_ooi": "mentions \\"deduplication_key\\" in a value"}', None),
        ('not json but names "deduplication_key"', None),
        ("[1, 2]", None),
        (None, None),
    ],
)
def test_a_tasks_key(data: object, expected: str | None) -> None:
    assert deduplication_key(data) == expected  # type: ignore[arg-type]


def test_twins_go_to_the_duplicates_that_hold_the_object_at_a_level_the_boefje_may_scan() -> None:
    duplicates = ["beta", "gamma", "delta", "epsilon", "acme", "beta"]
    holders = {"beta": 2, "delta": 1, "epsilon": None, "acme": 4, "zeta": 4}
    # gamma does not hold it; delta's level is below the boefje's; epsilon has no scan profile; acme is
    # the original's own; zeta holds it but does not share the settings; beta once.
    assert twin_organisations("acme", duplicates, holders, boefje_scan_level=2) == ["beta"]
    assert twin_organisations("acme", duplicates, holders, boefje_scan_level=1) == ["beta", "delta"]
    assert twin_organisations("acme", [], holders, boefje_scan_level=0) == []
    assert twin_organisations("acme", ["beta"], {}, boefje_scan_level=0) == []


def test_a_twin_is_the_same_work_for_another_organisation_keyed_by_the_original() -> None:
    original_id = uuid.uuid4()
    original = {
        "id": str(original_id),
        "boefje": {"id": "dns-records", "name": "DNS", "version": "1.2", "oci_image": "ghcr.io/x/dns:1"},
        "input_ooi": "Hostname|internet|example.com",
        "organization": "acme",
        "deduplication_key": None,
        "dispatches": [],
    }
    twin_id = uuid.uuid4()
    data, task_hash = twin_document(original, "beta", twin_id)
    assert data["id"] == str(twin_id)
    assert data["organization"] == "beta"
    assert data["boefje"] == original["boefje"] and data["input_ooi"] == original["input_ooi"]
    assert data["deduplication_key"] == str(original_id)
    assert task_hash == job_hash(BoefjeJob.model_validate(data))
    assert task_hash != job_hash(BoefjeJob.model_validate(original))  # the organisation is in the hash
    # An original that carries a key already (its own id, as marked) keys its twins by it.
    keyed = {**original, "deduplication_key": str(original_id)}
    assert twin_document(keyed, "gamma", uuid.uuid4())[0]["deduplication_key"] == str(original_id)
