"""Batches the store would not take, kept on disk until it will.

One JSON file per batch, written atomically (temporary name, then rename) and
replayed oldest first. The directory is capped in bytes: past the cap a new batch is
refused (and counted as dropped by the writer) rather than deleting older history.
Replays are idempotent because every event carries its client-made id.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from ..config import Config
from ..events import event_from_dict, event_to_dict, run_from_dict, stats_from_dict, stats_to_dict

_SUFFIX = ".batch.json"


def _dir(cfg: Config) -> Path:
    # One subdirectory per store, so a batch is only ever replayed to its own store.
    return Path(cfg.spool_dir) / hashlib.sha256(cfg.store.encode()).hexdigest()[:16]


def encode(batch: Any) -> dict[str, Any]:
    return {"run": batch.run.as_dict(), "events": [event_to_dict(e) for e in batch.events],
            "stats": [stats_to_dict(s) for s in batch.stats], "dropped": getattr(batch, "dropped", 0)}


def decode(data: dict[str, Any]) -> Any:
    from ..recorder import Batch

    return Batch(run=run_from_dict(data["run"]), events=[event_from_dict(e) for e in data["events"]],
                 stats=[stats_from_dict(s) for s in data["stats"]], dropped=int(data.get("dropped") or 0))


def used_bytes(cfg: Config) -> int:
    directory = _dir(cfg)
    if not directory.is_dir():
        return 0
    return sum(p.stat().st_size for p in directory.glob("*" + _SUFFIX))


def save(cfg: Config, batch: Any) -> bool:
    """Write a batch to the spool; False when the spool is full or unwritable."""
    try:
        data = json.dumps(encode(batch)).encode()
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


def has_pending(cfg: Config) -> bool:
    directory = _dir(cfg)
    try:
        return any(directory.glob("*" + _SUFFIX))
    except OSError:
        return False


def replay(cfg: Config, send: Callable[[Any], str]) -> int:
    """Send spooled batches oldest first; returns batches sent.

    ``send`` answers "sent", "failed" (stop, try again later) or "refused" (the store
    will never take it: set it aside as .bad so it cannot block the batches behind it).
    """
    sent = 0
    for path in sorted(_dir(cfg).glob("*" + _SUFFIX)):
        # Claim the file by renaming it, so two processes never replay the same batch.
        claimed = path.with_name(path.name + f".sending-{os.getpid()}")
        try:
            os.rename(path, claimed)
        except OSError:
            continue
        try:
            batch = decode(json.loads(claimed.read_bytes()))
        except (OSError, ValueError, KeyError, TypeError):
            # A torn or foreign file: set it aside rather than retrying it forever.
            claimed.rename(path.with_name(path.name + ".bad"))
            continue
        outcome = send(batch)
        if outcome == "failed":
            os.rename(claimed, path)
            break
        if outcome == "refused":
            claimed.rename(path.with_name(path.name + ".bad"))
            continue
        claimed.unlink(missing_ok=True)
        sent += 1
    return sent
