"""A forked child resets cachewatch's process state through one handler, concern by
concern in the order core/process.py states, whatever order the modules were imported in."""

from __future__ import annotations

import functools
import os
import re
import select
import signal
from pathlib import Path

import pytest

from cachewatch.core import process
from cachewatch.record import current, recorder

ROOT = Path(__file__).resolve().parent.parent


def test_resets_run_in_the_order_of_their_concerns(monkeypatch):
    monkeypatch.setattr(process, "_resets", {concern: [] for concern in process.Concern})
    ran: list[object] = []
    for concern in reversed(process.Concern):  # registered last-first, as an import order might
        process.on_fork_in_child(concern, functools.partial(ran.append, concern))
    process.on_fork_in_child(process.Concern.RUN, lambda: ran.append("second of RUN"))
    process.after_fork_in_child()
    assert ran == [process.Concern.RUN, "second of RUN", *list(process.Concern)[1:]]


def test_only_the_process_module_registers_a_fork_handler():
    registering = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "cachewatch").rglob("*.py")) + sorted((ROOT / "server").rglob("*.py"))
        if re.search(r"\bregister_at_fork\(", path.read_text())
    ]
    assert registering == ["cachewatch/core/process.py"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_is_a_new_run_with_its_own_writer():
    parent_run = current.run_id()
    recorder._get_writer()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it sees, then leave without running the parent's exit hooks
        try:
            seen = f"{current.run_id() != parent_run} {recorder._writer is None} {current.steady()}"
        except BaseException as exc:  # the parent must hear of any failure, not wait on the pipe
            seen = repr(exc)
        os.write(write, seen.encode())
        os._exit(0)
    os.close(write)
    seen = os.read(read, 1000).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert seen == "True True False"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_child_forked_while_the_guard_was_held_can_still_report():
    from cachewatch.core import _guard

    read, write = os.pipe()
    with _guard._lock:  # as a parent's thread reporting an error at the moment of the fork
        pid = os.fork()
        if pid == 0:
            try:
                _guard.report("fork.test", ValueError("after fork"))  # would wait forever on the inherited lock
                seen = str(_guard.internal_errors().get("fork.test"))
            except BaseException as exc:
                seen = repr(exc)
            os.write(write, seen.encode())
            os._exit(0)
    os.close(write)
    answered, _, _ = select.select([read], [], [], 60)  # a child stuck on the lock never answers
    seen = os.read(read, 1000).decode() if answered else "no answer"
    os.close(read)
    if not answered:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert seen == "1"
