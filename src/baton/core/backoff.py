"""The one retry policy: exponential backoff with a cap, reset after success."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Backoff:
    """`next()` gives the delay before the next attempt: initial, doubling, never above maximum."""

    initial: float = 0.5
    maximum: float = 30.0
    factor: float = 2.0
    _current: float = field(default=0.0, init=False)

    def next(self) -> float:
        self._current = self.initial if self._current == 0 else min(self.maximum, self._current * self.factor)
        return self._current

    def reset(self) -> None:
        self._current = 0.0

    @property
    def failures_seen(self) -> bool:
        return self._current != 0.0


# Reconnecting to a broker: quick first retries, at most 1 s apart (as the database pools reconnect),
# so consumers are back within a second of a restarted broker taking connections. At 15 s apart a
# broker back after 9 s was found 16 s after its restart; at 2 s apart, 2 s after it took connections
# again (docs/replication-containers.md). An attempt at a broker that is down is a refused connection.
RECONNECT = Backoff(initial=0.5, maximum=1.0)
# Restarting a scheduler that died: 1 s, doubling to 5 s (a crashing one restarts every 5 s; one that
# died with a database outage is back within seconds of it, not half a minute).
RESTART = Backoff(initial=1.0, maximum=5.0)


def fresh(policy: Backoff) -> Backoff:
    """A new, independent backoff with the given policy's parameters."""
    return Backoff(initial=policy.initial, maximum=policy.maximum, factor=policy.factor)
