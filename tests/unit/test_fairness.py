"""The fair-queuing tag (`baton.core.fairness`) without a database: its bounds, and the round robin it
makes of a pop by type."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from baton.core.fairness import FAIR_UNIT, fair_step, fair_tag

ticks = st.integers(min_value=0, max_value=10**9)
steps = st.integers(min_value=1, max_value=FAIR_UNIT)
backlogs = st.integers(min_value=0, max_value=10_000)


def test_the_step_is_the_statements_integer_division() -> None:
    assert fair_step(1) == FAIR_UNIT
    assert fair_step(3) == 333_333
    assert fair_step(FAIR_UNIT * 2) == 0


@given(clock=ticks, step=steps, head=ticks, queued=backlogs)
def test_a_tag_is_never_behind_the_head(clock: int, step: int, head: int, queued: int) -> None:
    assert fair_tag(clock, step, head, queued) >= head


@given(clock=ticks, step=steps, head=ticks, queued=backlogs)
def test_a_tag_is_at_most_one_step_past_the_clock_or_the_head(clock: int, step: int, head: int, queued: int) -> None:
    tag = fair_tag(clock, step, head, queued)
    assert tag <= max(clock + step, head)
    assert tag <= head + queued * step or tag == head  # the lead over the head: the backlog at most


@given(clock=ticks, step=steps, head=ticks)
def test_an_idle_queue_starts_at_the_head(clock: int, step: int, head: int) -> None:
    """A stale clock (far ahead or behind) does not matter once the queue is empty: no banked credit."""
    assert fair_tag(clock, step, head, 0) == head


@given(clock=ticks, step=steps, queued=st.integers(min_value=1, max_value=10_000))
def test_a_backlogged_queue_runs_on_one_step_per_task(clock: int, step: int, queued: int) -> None:
    head = clock - (queued - 1) * step  # the queue's own tasks reach from the head to the clock
    assert fair_tag(clock, step, max(head, 0), queued) == clock + step or head < 0


@dataclass
class TypeModel:
    """Queued tasks of one type and priority across organisations, tagged by `fair_tag` as a push
    does (each queue's clock and backlog; the head is the smallest queued tag), popped fairly."""

    weights: dict[str, int]
    clocks: dict[str, int] = field(default_factory=dict)
    queued: list[tuple[int, int, str]] = field(default_factory=list)  # (tag, seq, organisation)
    seq: int = 0

    def push(self, organisation: str) -> None:
        head = min((tag for tag, _, _ in self.queued), default=0)
        backlog = sum(1 for _, _, org in self.queued if org == organisation)
        clock = self.clocks.get(organisation, 0)
        tag = fair_tag(clock, fair_step(self.weights[organisation]), head, backlog)
        self.clocks[organisation] = max(clock, tag)
        self.seq += 1
        self.queued.append((tag, self.seq, organisation))

    def pop(self) -> str:
        best = min(self.queued)
        self.queued.remove(best)
        return best[2]


organisations = st.lists(st.sampled_from("abcd"), min_size=1, max_size=80)


@given(pushes=organisations)
def test_backlogged_organisations_are_served_round_robin(pushes: list[str]) -> None:
    """However the pushes interleave, pops by tag alternate between the organisations with work: at
    every point of the pop order no organisation has had two more turns than another with work left."""
    model = TypeModel(dict.fromkeys("abcd", 1))
    for organisation in pushes:
        model.push(organisation)
    remaining = Counter(pushes)
    served: Counter[str] = Counter()
    while model.queued:
        organisation = model.pop()
        served[organisation] += 1
        remaining[organisation] -= 1
        waiting = [org for org, left in remaining.items() if left > 0]
        assert all(served[organisation] <= served[other] + 1 for other in waiting)


@given(
    earlier=st.integers(min_value=0, max_value=30),
    pushes=organisations,
    pops=st.integers(min_value=0, max_value=80),
    late=st.sampled_from("abcd"),
)
def test_an_organisation_with_nothing_queued_waits_at_most_one_round(
    earlier: int, pushes: list[str], pops: int, late: str
) -> None:
    """A task of an organisation with nothing queued (new, or its backlog served long ago: its clock
    far ahead) is popped before any organisation with work gets a second turn after it (weights 1)."""
    model = TypeModel(dict.fromkeys("abcd", 1))
    for _ in range(earlier):
        model.push(late)
    while any(organisation == late for _, _, organisation in model.queued):
        model.pop()
    for organisation in pushes:
        if organisation != late:
            model.push(organisation)
    for _ in range(min(pops, len(model.queued))):
        model.pop()
    model.push(late)
    turns: Counter[str] = Counter()
    while (popped := model.pop()) != late:
        turns[popped] += 1
        assert turns[popped] <= 1


@given(pushes=st.integers(min_value=1, max_value=60))
def test_weights_share_the_pops(pushes: int) -> None:
    """Weight 3 against weight 1, both backlogged: three pops to one, within a task."""
    model = TypeModel({"heavy": 3, "light": 1})
    for _ in range(pushes):
        model.push("heavy")
        model.push("light")
    first = Counter(model.pop() for _ in range(pushes))
    assert abs(first["heavy"] - 3 * first["light"]) <= 3
