"""Batches the store would not take, kept on disk until it will.

One JSON file per batch, written atomically (temporary name, then rename) and
replayed oldest first. The directory is capped in bytes: past the cap a new batch is
refused (and counted as dropped by the writer) rather than deleting older history.
Replays are idempotent because every event carries its client-made id.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from ..core.config import Config
from ..core.events import Batch

_SUFFIX = ".batch.json"


def _dir(cfg: Config) -> Path:
    # One subdirectory per store, so a batch is only ever replayed to its own store.
    return Path(cfg.spool_dir) / hashlib.sha256(cfg.store.encode()).hexdigest()[:16]


def used_bytes(cfg: Config) -> int:
    directory = _dir(cfg)
    if not directory.is_dir():
        return 0
    return sum(p.stat().st_size for p in directory.glob("*" + _SUFFIX))


def save(cfg: Config, batch: Batch) -> bool:
    """Write a batch to the spool; False when the spool is full or unwritable."""
    try:
        data = json.dumps(batch.to_wire()).encode()
        if used_bytes(cfg) + len(data) > cfg.spool_max_bytes:
            return False
        directory = _dir(cfg)
        directory.mkdir(parents=True, exist_ok=True)
        name = f"{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp = directory / (name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, directory / (name + _SUFFIX))
        return True
    except OSError:
        return False


def pending_batches(cfg: Config) -> int:
    """Batches waiting in the spool of this store (being replayed included)."""
    try:
        return sum(1 for p in _dir(cfg).iterdir() if p.name.endswith(_SUFFIX) or ".batch.json.sending-" in p.name)
    except OSError:
        return 0


def has_pending(cfg: Config) -> bool:
    """Anything for a replay to look at: batches, and files a killed process left behind."""
    directory = _dir(cfg)
    try:
        return any(not p.name.endswith((".bad", ".reason")) for p in directory.iterdir())
    except OSError:
        return False


# A batch that fails while the batches behind it go through is not waiting for the
# store: after this many such failures it is set aside, so it cannot block the spool.
MAX_STRIKES = 3
_STRIKE = re.compile(r"~(\d+)$")


@dataclasses.dataclass
class Replayed:
    """What one replay did: batches (and their events) sent, and those set aside by reason."""

    batches: int = 0
    events: int = 0
    set_aside: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # reason -> batches
    set_aside_events: int = 0


def _stem(path: Path) -> str:
    return path.name[: -len(_SUFFIX)]


def _set_aside(path: Path, reason: str, result: Replayed, events: int) -> None:
    """Keep the file for a person to look at (``.bad``, its reason beside it), out of the replay."""
    bad = path.with_name(path.name.split(".sending-")[0] + ".bad")
    try:
        os.replace(path, bad)
        bad.with_name(bad.name + ".reason").write_text(reason + "\n")
    except OSError:
        path.unlink(missing_ok=True)
    result.set_aside[reason] += 1
    result.set_aside_events += events


def _strike(path: Path) -> tuple[int, Path]:
    """Count one failure of this batch into its name; returns the failures so far and the new path."""
    stem = _stem(path)
    found = _STRIKE.search(stem)
    strikes = int(found.group(1)) + 1 if found else 1
    base = stem[: found.start()] if found else stem
    struck = path.with_name(f"{base}~{strikes}{_SUFFIX}")
    try:
        os.replace(path, struck)
    except OSError:
        return strikes, path
    return strikes, struck


def sweep_torn(cfg: Config, result: Replayed) -> None:
    """Files a process began writing and never finished (it was killed mid-write): counted, removed."""
    directory = _dir(cfg)
    try:
        temporary = list(directory.glob("*.tmp"))
    except OSError:
        return
    for path in temporary:
        try:
            pid = int(path.name.split("-")[1])
        except (IndexError, ValueError):
            pid = -1
        if pid == os.getpid() or _alive(pid):
            continue
        path.unlink(missing_ok=True)
        result.set_aside["torn write"] += 1
    # A batch claimed by a process that died while sending it goes back in line.
    for path in directory.glob("*.sending-*"):
        name, _, sender = path.name.rpartition(".sending-")
        if sender.isdigit() and int(sender) != os.getpid() and not _alive(int(sender)):
            with contextlib.suppress(OSError):
                os.rename(path, path.with_name(name))


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


# What a replay's send answers for one batch.
Outcome = Literal["sent", "failed", "refused"]


def replay(cfg: Config, send: Callable[[Batch], Outcome], store_up: bool = False) -> Replayed:
    """Send spooled batches oldest first.

    ``send`` answers "sent", "failed" (try again later) or "refused" (the store will
    never take it). A refused or unreadable batch is set aside at once. A batch that
    fails while the store is known to be up (``store_up``: a write just went through)
    or while the batch behind it goes through is struck, and set aside after
    MAX_STRIKES. Two failures in a row mean the store is down: stop until next time.
    """
    result = Replayed()
    sweep_torn(cfg, result)
    failed: Path | None = None
    in_a_row = 0
    try:
        paths = sorted(_dir(cfg).glob("*" + _SUFFIX))
    except OSError:
        return result
    for path in paths:
        # Claim the file by renaming it, so two processes never replay the same batch.
        claimed = path.with_name(path.name + f".sending-{os.getpid()}")
        try:
            os.rename(path, claimed)
        except OSError:
            continue
        try:
            batch = Batch.from_wire(json.loads(claimed.read_bytes()))
        except (OSError, ValueError, KeyError, TypeError):
            # A torn or foreign file: set it aside rather than retrying it forever.
            _set_aside(claimed, "unreadable", result, 0)
            continue
        outcome = send(batch)
        if outcome == "failed":
            os.rename(claimed, path)
            in_a_row += 1
            if in_a_row > 1:
                break  # two in a row: the store is down, not this batch
            if store_up:
                _strike_or_set_aside(path, result)
            else:
                failed = path
            continue
        in_a_row = 0
        if outcome == "refused":
            _set_aside(claimed, "refused by the store", result, len(batch.events))
        else:
            claimed.unlink(missing_ok=True)
            result.batches += 1
            result.events += len(batch.events)
        if failed is not None:  # the batch before this one failed alone
            _strike_or_set_aside(failed, result)
            failed = None
    return result


def _strike_or_set_aside(path: Path, result: Replayed) -> None:
    strikes, struck = _strike(path)
    if strikes >= MAX_STRIKES:
        _set_aside(
            struck, f"failed {MAX_STRIKES} times while the store took other batches", result, _count_events(struck)
        )


def _count_events(path: Path) -> int:
    try:
        return len(json.loads(path.read_bytes()).get("events") or ())
    except (OSError, ValueError, AttributeError):
        return 0
