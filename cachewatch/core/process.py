"""The process's own state after ``fork``: one handler, each concern reset in a stated order.

A forked child inherits the parent's memory but only the thread that forked: a lock may
be held by a thread that is gone, the writer thread did not come along, and what the
parent counted is the parent's to report. Each module that keeps such state registers a
reset here under its concern, and the one handler (registered with
``os.register_at_fork`` when this module is first imported) runs them in this order,
whatever order Python imported the modules in:

1. ``RUN`` (record/current): a new run id, start time and warm-up, and a fresh lock.
   First, because the state of every concern below belongs to a run: a reset, or the
   child's first event, that asks for the run gets the child's.
2. ``HISTORIES`` (explain/causes, and what follows its reset): what the run traced, so
   that the child's first compile of each function is its own first call.
3. ``REPORTS`` (capture/counters, capture/cachestate): the parent's calls and cache
   releases, which the parent reports.
4. ``WRITER`` (record/recorder): the parent's writer thread is not running here; the
   child starts its own on its first event. After the memory above: it is what the
   writer would write.
5. ``CONNECTIONS`` (store/engine): the parent's pooled connections, which a child must
   never share. Last: the writer writes through them.

Within a concern, resets run in the order they were registered. Before them all, the
guard gets a fresh lock (a parent's thread may have held it while reporting). A reset that fails is
reported through the guard, and the others still run (under cachewatch's own tests the
guard re-raises, so the failure shows).
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable

from . import _guard


class Concern(enum.IntEnum):
    """What a reset after fork is for; the handler runs the concerns in this order."""

    RUN = 1
    HISTORIES = 2
    REPORTS = 3
    WRITER = 4
    CONNECTIONS = 5


_resets: dict[Concern, list[Callable[[], None]]] = {concern: [] for concern in Concern}


def on_fork_in_child(concern: Concern, reset: Callable[[], None]) -> None:
    """Call ``reset()`` in a forked child, in ``concern``'s turn."""
    _resets[concern].append(reset)


def after_fork_in_child() -> None:
    """Reset the process's state, concern by concern (the handler ``fork`` calls). The
    guard's own lock first: every reset runs under the guard."""
    _guard.after_fork_in_child()
    for concern in Concern:
        for reset in _resets[concern]:
            with _guard.guard(f"fork.{concern.name.lower()}"):
                reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=after_fork_in_child)
