"""The fair-queuing tag a pushed task gets (start-time fair queuing across organisations).

    tag = max(min(clock + step, head + queued * step), head)
    step = FAIR_UNIT // organisation weight; clock = the largest tag the queue handed out;
    head = the smallest queued tag at the task's type and priority (0: none queued);
    queued = the queue's queued tasks

A pop by type takes ties of priority by this tag, so backlogged organisations are served round
robin (weight w: w/sum of the weights), and a quiet organisation's task starts at the head: it
cannot bank credit while idle. The `min` bounds an organisation's lead over the head by its own
backlog (`storage/queues/statements.py` says why at length).

The same arithmetic runs in SQL in the push statements (`storage/queues/statements.py`, `_new_tag`) and
here for the batched push (`storage/queues/batch_push.py`), which plans a batch's tags in Python.
"""

from __future__ import annotations

# One unit of virtual time per task for an organisation of weight 1; weight w advances by UNIT / w.
FAIR_UNIT = 1_000_000


def fair_step(weight: int) -> int:
    """How far one task advances an organisation of this weight (integer division, as in SQL)."""
    return FAIR_UNIT // weight


def fair_tag(clock: int, step: int, head: int, queued: int) -> int:
    """The tag of a task pushed now (see the module's description)."""
    return max(min(clock + step, head + queued * step), head)
