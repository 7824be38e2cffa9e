"""import-mula reads mula's next batches on a thread of its own while it writes the one before
(service/mula_import.py `read_ahead`): the batches keep their order, a reading error reaches the caller,
and a caller that stops early stops the reading and closes the source (its server-side cursor)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from baton.service.mula_import import read_ahead


def test_batches_come_in_order_and_all_of_them() -> None:
    assert list(read_ahead(iter([[1], [2, 3], [], [4]]))) == [[1], [2, 3], [], [4]]
    assert list(read_ahead(iter([]))) == []


def test_a_reading_error_reaches_the_caller_after_the_batches_before_it() -> None:
    def failing() -> Iterator[list[int]]:
        yield [1]
        raise ConnectionError("mula's database went away")

    seen = []
    with pytest.raises(ConnectionError, match="went away"):
        for batch in read_ahead(failing()):
            seen.append(batch)
    assert seen == [[1]]


def test_a_caller_that_stops_early_stops_the_reading_and_closes_the_source() -> None:
    closed = threading.Event()
    read = []

    def endless() -> Iterator[list[int]]:
        try:
            number = 0
            while True:
                read.append(number)
                yield [number]
                number += 1
        finally:
            closed.set()

    for batch in read_ahead(endless(), depth=2):
        if batch == [3]:
            break
    assert closed.is_set()
    assert len(read) <= 3 + 1 + 2 + 1  # read at most `depth` (and the one in hand) beyond the last taken
