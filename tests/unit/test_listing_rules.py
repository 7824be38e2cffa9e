"""The rules of keyset pages (`baton.core.listing`): cursors, limits, searches, where a page ends."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from baton.core.listing import (
    MAX_LIMIT,
    InvalidListingError,
    PageRequest,
    cut_page,
    decode_cursor,
    encode_cursor,
    prefix_range,
)

IDS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,20}", fullmatch=True)


def raw_cursor(document: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(document).encode()).decode().rstrip("=")


@given(IDS, IDS)
def test_a_cursor_carries_its_key_back(organisation: str, scheduler_id: str) -> None:
    cursor = encode_cursor("schedulers", (organisation, scheduler_id))
    assert decode_cursor("schedulers", cursor) == (organisation, scheduler_id)
    assert "=" not in cursor and "+" not in cursor and "/" not in cursor  # safe in a query string as it is


def test_a_cursor_belongs_to_one_listing() -> None:
    cursor = encode_cursor("queues", ("acme", "boefje-acme"))
    with pytest.raises(InvalidListingError, match="another listing") as caught:
        decode_cursor("schedulers", cursor)
    assert caught.value.field == "cursor"
    with pytest.raises(InvalidListingError):
        decode_cursor("organisations", cursor)


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "not base64!",
        "%%%",
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),  # not UTF-8
        raw_cursor({"after": "acme"}),  # not an array
        raw_cursor([2, "organisations", "acme"]),  # another version
        raw_cursor([1, "organisations"]),  # no key
        raw_cursor([1, "organisations", "acme", "extra"]),  # too many parts
        raw_cursor([1, "organisations", 7]),  # not a string
        raw_cursor([1, "organisations", ""]),  # empty
        raw_cursor([1, "organisations", "a b"]),  # a character no id holds
        raw_cursor([1, "organisations", "x" * 129]),  # too long
        "A" * 513,
    ],
)
def test_anything_but_a_cursor_this_release_wrote_is_refused_naming_the_field(cursor: str) -> None:
    with pytest.raises(InvalidListingError) as caught:
        decode_cursor("organisations", cursor)
    assert caught.value.field == "cursor"
    assert str(caught.value).startswith("cursor: ")


def test_a_cursor_has_the_listings_number_of_key_parts() -> None:
    with pytest.raises(ValueError):
        encode_cursor("organisations", ("acme", "boefje-acme"))


@pytest.mark.parametrize("limit", [0, -1, MAX_LIMIT + 1])
def test_limit_out_of_range_is_refused_naming_limit(limit: int) -> None:
    with pytest.raises(InvalidListingError) as caught:
        PageRequest.of("queues", limit=limit)
    assert caught.value.field == "limit"


@pytest.mark.parametrize(
    ("field", "value"), [("organisation", "a b"), ("q", "x%"), ("q", "ä"), ("organisation", "x" * 65)]
)
def test_searches_take_only_identifier_characters(field: str, value: str) -> None:
    with pytest.raises(InvalidListingError) as caught:
        PageRequest.of("queues", **{field: value})  # type: ignore[arg-type]
    assert caught.value.field == field


def test_an_empty_prefix_searches_nothing_out() -> None:
    assert PageRequest.of("organisations", q="").prefix is None


@given(IDS, st.lists(IDS, max_size=30))
def test_the_prefix_range_holds_exactly_the_ids_with_that_prefix(prefix: str, ids: list[str]) -> None:
    low, high = prefix_range(prefix)
    # Byte order, as the databases compare (BINARY, "C"): Python compares str by code point, the same for ASCII.
    assert {i for i in ids if low <= i < high} == {i for i in ids if i.startswith(prefix)}


def test_a_page_says_whether_there_is_a_next_one() -> None:
    request = PageRequest.of("organisations", limit=2)
    full = cut_page(request, ["a", "b", "c"], lambda row: (row,))
    assert full.rows == ["a", "b"]
    assert full.next_cursor is not None and decode_cursor("organisations", full.next_cursor) == ("b",)
    last = cut_page(request, ["a", "b"], lambda row: (row,))
    assert last.rows == ["a", "b"] and last.next_cursor is None
    assert cut_page(request, [], lambda row: (row,)).next_cursor is None
