"""The persistent cache's directory audited: each entry on disk, which function and run
wrote it (the store's record of its key), the entries no run of the store wrote, and
the ones that are unreadable or cut short.

    audit = audit_directory(
        path, lambda keys: cache_reads.entry_origins(conn, keys), lambda d: cache_reads.entries_written_to(conn, d)
    )
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..core.figures import bytes_text
from .cache_reads import EntryOrigin, WrittenEntry

# JAX's file names in a persistent cache directory (jax._src.lru_cache).
CACHE_SUFFIX = "-cache"


ATIME_SUFFIX = "-atime"


LOCK_FILE = ".lockfile"  # JAX's, where the directory has a size limit


@dataclass(frozen=True)
class DirectoryEntry:
    key: str
    bytes: int
    modified: float
    function: str | None  # the function cachewatch saw write (or first ask for) it
    function_hash: str | None
    run_id: str | None
    hits: int  # compiles recorded reading it
    problem: str | None = None  # a corrupt (empty, unreadable) entry

    def as_dict(self) -> dict[str, object]:
        return {
            "key": self.key,
            "bytes": self.bytes,
            "modified": self.modified,
            "function": self.function,
            "function_hash": self.function_hash,
            "run_id": self.run_id,
            "hits": self.hits,
            "never_read": self.hits == 0,
            "problem": self.problem,
        }


@dataclass(frozen=True)
class DirectoryAudit:
    path: str
    entries: tuple[DirectoryEntry, ...] = ()
    foreign: tuple[str, ...] = ()  # files that are not JAX cache entries
    problems: tuple[str, ...] = ()  # one line each: an unreadable directory, a corrupt entry
    readable: bool = True
    # Entries recorded as written here and no longer in it: evicted by JAX's size limit
    # (jax_compilation_cache_max_size), or deleted. ``bytes`` as written, ``modified`` when.
    gone: tuple[DirectoryEntry, ...] = ()

    @property
    def total_bytes(self) -> int:
        return sum(e.bytes for e in self.entries)

    @property
    def never_read(self) -> tuple[DirectoryEntry, ...]:
        return tuple(e for e in self.entries if e.hits == 0)

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "readable": self.readable,
            "entries": len(self.entries),
            "bytes": self.total_bytes,
            "never_read": len(self.never_read),
            "unattributed": sum(1 for e in self.entries if e.function is None),
            "foreign": list(self.foreign),
            "problems": list(self.problems),
            "items": [e.as_dict() for e in self.entries],
            "gone": len(self.gone),
            "gone_bytes": sum(e.bytes for e in self.gone),
            "gone_items": [e.as_dict() for e in self.gone],
        }


def audit_directory(
    path: str,
    origins: Callable[[Sequence[str]], Mapping[str, EntryOrigin]],
    written: Callable[[str], Sequence[WrittenEntry]] | None = None,
) -> DirectoryAudit:
    """The persistent cache directory's entries, each with the function that wrote it (as
    the store saw) and whether any recorded compile read it, and (given ``written``, the
    entries the store saw written to a directory) those written here and gone since.
    Nothing is changed on disk; what cannot be read is named, one line each."""
    path = os.path.expanduser(path)
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        return DirectoryAudit(path, readable=False, problems=(f"cannot read the cache directory {path}: {exc}",))
    foreign: list[str] = []
    problems: list[str] = []
    found: dict[str, tuple[int, float, str | None]] = {}
    for name in names:
        full = os.path.join(path, name)
        if (name.endswith(ATIME_SUFFIX) and name[: -len(ATIME_SUFFIX)]) or name == LOCK_FILE:
            continue  # JAX's access-time companion of an entry, or the lock of its size limit
        if not name.endswith(CACHE_SUFFIX) or not name[: -len(CACHE_SUFFIX)]:
            foreign.append(name)
            continue
        key = name[: -len(CACHE_SUFFIX)]
        try:
            st = os.stat(full)
        except OSError as exc:
            problems.append(f"cannot read entry {name}: {exc}")
            found[key] = (0, 0.0, f"unreadable: {exc}")
            continue
        if not os.path.isfile(full):
            foreign.append(name)
            continue
        problem = _entry_problem(full, st.st_size)
        if problem is not None:
            problems.append(f"corrupt entry {name}: {problem} (JAX will compile it again)")
            problem = f"corrupt: {problem}"
        found[key] = (st.st_size, st.st_mtime, problem)
    known = origins(list(found)) if found else {}
    entries = []
    for key, (size, modified, problem) in found.items():
        origin = known.get(key)
        entries.append(
            DirectoryEntry(
                key=key,
                bytes=size,
                modified=modified,
                function=origin.name if origin else None,
                function_hash=origin.function_hash if origin else None,
                run_id=origin.run_id if origin else None,
                hits=origin.hits if origin else 0,
                problem=problem,
            )
        )
    gone = _gone(path, set(found), written) if written is not None else ()
    return DirectoryAudit(path, tuple(entries), tuple(foreign), tuple(problems), gone=gone)


def _gone(path: str, present: set[str], written: Callable[[str], Sequence[WrittenEntry]]) -> tuple[DirectoryEntry, ...]:
    """The entries recorded as written to ``path`` that it no longer holds. Compiles record
    their directory as JAX's cache names it (absolute, links resolved), so the audited
    path is compared the same way."""
    directory = path if "://" in path else os.path.realpath(path)
    return tuple(
        DirectoryEntry(
            key=w.origin.key,
            bytes=w.bytes or 0,
            modified=w.origin.written_at,
            function=w.origin.name,
            function_hash=w.origin.function_hash,
            run_id=w.origin.run_id,
            hits=w.origin.hits,
        )
        for w in written(directory)
        if w.origin.key not in present
    )


# How JAX's compressed entries begin: zstd's frame magic, or a zlib header (CMF 0x78).
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _entry_problem(path: str, size: int) -> str | None:
    """Why an entry cannot be one JAX wrote (read from its first bytes only), or None."""
    if size == 0:
        return "empty"
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    if head.startswith(_ZSTD_MAGIC) or (len(head) >= 2 and head[0] == 0x78 and (head[0] * 256 + head[1]) % 31 == 0):
        return None
    return "not compressed as JAX writes its entries (zstd or zlib)"


def _by_function(entries: Sequence[DirectoryEntry], unknown: str) -> list[tuple[str, list[DirectoryEntry]]]:
    """Entries per function that wrote them, by name (``unknown`` where none is known)."""
    grouped: dict[str, list[DirectoryEntry]] = {}
    for e in entries:
        grouped.setdefault(e.function or unknown, []).append(e)
    return sorted(grouped.items())


def directory_text(audit: DirectoryAudit) -> list[str]:
    """The persistent cache's directory: its entries per function, and what could not be read."""
    if not audit.readable:
        return list(audit.problems)
    unattributed = sum(1 for e in audit.entries if e.function is None)
    lines = [
        f"Cache directory {audit.path}: {len(audit.entries)} entries, {bytes_text(audit.total_bytes)}, "
        f"{len(audit.never_read)} never read, {unattributed} written where cachewatch did not see it"
    ]
    for name, entries in _by_function(audit.entries, "(not seen written)"):
        lines.append(
            f"  {name}: {len(entries)} entries, {bytes_text(sum(e.bytes for e in entries))}, "
            f"{sum(1 for e in entries if e.hits == 0)} never read"
        )
    if audit.gone:
        lines.append(
            f"  gone since cachewatch saw them written (evicted by JAX's size limit, or deleted): "
            f"{len(audit.gone)} entries, {bytes_text(sum(e.bytes for e in audit.gone))}"
        )
        for name, entries in _by_function(audit.gone, "?"):
            read = sum(1 for e in entries if e.hits)
            lines.append(f"    {name}: {len(entries)} gone, {read} of them read before they went")
    if audit.foreign:
        lines.append(f"  not cache entries (left alone): {', '.join(audit.foreign[:10])}")
    lines.extend(f"  {p}" for p in audit.problems)
    return lines
