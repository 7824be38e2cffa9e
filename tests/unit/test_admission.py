"""The admission rule (`baton.core.admission`) without a database: disabled, twin, full, in that order."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from baton.core.admission import Admission, OnDuplicate, admit
from baton.core.errors import ConflictError, DuplicateTaskError, QueueDisabledError, QueueFullError

policies = st.sampled_from(["reprioritise", "refuse"])
sizes = st.integers(min_value=0, max_value=50)


def test_each_refusal_names_the_queue_and_why() -> None:
    with pytest.raises(QueueDisabledError, match=r"^queue 'boefje-acme' is disabled$"):
        admit("boefje-acme", enabled=False, maxsize=0, queued=0, twin=False, on_duplicate="reprioritise")
    with pytest.raises(DuplicateTaskError, match=r"^a task with hash 'h1' is already queued in 'boefje-acme'$"):
        admit("boefje-acme", enabled=True, maxsize=0, queued=0, twin=True, on_duplicate="refuse", task_hash="h1")
    with pytest.raises(QueueFullError, match=r"^queue 'boefje-acme' is full \(maxsize 3\)$"):
        admit("boefje-acme", enabled=True, maxsize=3, queued=3, twin=False, on_duplicate="refuse")


def test_the_refusals_answer_409_and_429() -> None:
    assert issubclass(QueueDisabledError, ConflictError)
    assert issubclass(DuplicateTaskError, ConflictError)
    assert not issubclass(QueueFullError, ConflictError)  # 429, not 409 (api/errors.py)


@given(maxsize=sizes, queued=sizes, twin=st.booleans(), on_duplicate=policies)
def test_a_disabled_queue_takes_nothing(maxsize: int, queued: int, twin: bool, on_duplicate: OnDuplicate) -> None:
    with pytest.raises(QueueDisabledError):
        admit("q", enabled=False, maxsize=maxsize, queued=queued, twin=twin, on_duplicate=on_duplicate)


@given(maxsize=sizes, queued=sizes)
def test_a_queued_twin_is_reprioritised_even_in_a_full_queue(maxsize: int, queued: int) -> None:
    admission = admit("q", enabled=True, maxsize=maxsize, queued=queued, twin=True, on_duplicate="reprioritise")
    assert admission is Admission.REPRIORITISE


@given(maxsize=sizes, queued=sizes)
def test_a_queued_twin_is_refused_before_fullness_is_looked_at(maxsize: int, queued: int) -> None:
    with pytest.raises(DuplicateTaskError):
        admit("q", enabled=True, maxsize=maxsize, queued=queued, twin=True, on_duplicate="refuse")


@given(maxsize=sizes, queued=sizes, on_duplicate=policies)
def test_without_a_twin_only_room_decides(maxsize: int, queued: int, on_duplicate: OnDuplicate) -> None:
    room = maxsize == 0 or queued < maxsize
    if room:
        assert admit("q", enabled=True, maxsize=maxsize, queued=queued, twin=False, on_duplicate=on_duplicate) is (
            Admission.CREATE
        )
    else:
        with pytest.raises(QueueFullError):
            admit("q", enabled=True, maxsize=maxsize, queued=queued, twin=False, on_duplicate=on_duplicate)


@dataclass
class QueueModel:
    """A queue as the rule sees it: its settings and the hashes of its queued tasks (None: no hash)."""

    maxsize: int
    enabled: bool = True
    queued: list[str | None] = field(default_factory=list)

    def push(self, task_hash: str | None, on_duplicate: OnDuplicate) -> str:
        try:
            admission = admit(
                "q",
                enabled=self.enabled,
                maxsize=self.maxsize,
                queued=len(self.queued),
                twin=task_hash is not None and task_hash in self.queued,
                on_duplicate=on_duplicate,
                task_hash=task_hash,
            )
        except (QueueDisabledError, DuplicateTaskError, QueueFullError) as exc:
            return type(exc).__name__
        if admission is Admission.CREATE:
            self.queued.append(task_hash)
        return admission.value


steps = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.sampled_from([None, "a", "b", "c"]), policies),
        st.tuples(st.just("pop"), st.none(), policies),
        st.tuples(st.just("toggle"), st.none(), policies),
    ),
    max_size=60,
)


@given(maxsize=st.integers(min_value=0, max_value=4), steps=steps)
def test_pushes_by_the_rule_keep_a_queue_within_its_bounds(
    maxsize: int, steps: list[tuple[str, str | None, OnDuplicate]]
) -> None:
    """Whatever the pushes, pops and switches: never more than `maxsize` queued, never two queued tasks
    with one hash, and a push changes the queue only when it is admitted as a new task."""
    queue = QueueModel(maxsize)
    for action, task_hash, on_duplicate in steps:
        if action == "pop" and queue.queued:
            queue.queued.pop(0)
        elif action == "toggle":
            queue.enabled = not queue.enabled
        elif action == "push":
            before = list(queue.queued)
            answer = queue.push(task_hash, on_duplicate)
            assert (queue.queued != before) == (answer == "create")
        hashes = [h for h in queue.queued if h is not None]
        assert len(hashes) == len(set(hashes))
        assert maxsize == 0 or len(queue.queued) <= maxsize
