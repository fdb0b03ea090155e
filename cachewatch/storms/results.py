"""What the storm finder finds, as frozen dataclasses: a burst of recompiles, told as a
storm or as a first pass, and the functions it holds.

The command line, the notebook, ``cachewatch run``, the service's routes and its
dashboard read these by attribute; ``as_json()`` gives the JSON the service and
``--format json`` have always returned, with the same fields in the same order.

    storm = diagnosis.detect_storms(conn)[0]
    print(storm.short_name, storm.dominant_cause, storm.fix)
    json.dumps(storm.as_json())
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class BurstFunction:
    """One function of a burst and how many of its compiles the burst holds."""

    function_hash: str
    name: str
    compiles: int


@dataclasses.dataclass(frozen=True)
class Burst:
    """A burst of compiles of one group (a jit of the user's, or a line of user code that
    reached eager code and library jits) in one run: what a storm and a first pass share."""

    key: str  # the function hash, or ``site:<call site>`` for a line of user code
    function_hash: str  # the jit, or the function that compiled most at the line
    function_hashes: tuple[str, ...]  # most compiles first
    call_site: str | None  # the line (a jit's: where most of its recompiles were called)
    functions: tuple[BurstFunction, ...]
    name: str
    qualname: str
    short_name: str
    start: float
    end: float
    compiles: int
    causes: dict[str, int]
    dominant_cause: str
    active: bool  # its last compile is within the window of now
    run_id: str
    run_ids: tuple[str, ...]
    fix: str

    @property
    def of_line(self) -> bool:
        """Whether the burst is a line of user code's (eager code, library jits), not a jit's."""
        return self.key.startswith("site:")

    def _burst_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["function_hashes"] = list(self.function_hashes)
        out["functions"] = [dataclasses.asdict(f) for f in self.functions]
        out["run_ids"] = list(self.run_ids)
        return out

    @classmethod
    def _json_fields(cls, data: dict[str, Any], changed: dict[str, Any]) -> dict[str, Any]:
        """The fields of ``_burst_json``'s output (and the subclass's), as the dataclass
        holds them, with ``changed`` over them."""
        fields = {
            **data,
            "function_hashes": tuple(data["function_hashes"]),
            "functions": tuple(BurstFunction(**f) for f in data["functions"]),
            "run_ids": tuple(data["run_ids"]),
            "causes": dict(data["causes"]),
        }
        return {**fields, **changed}


@dataclasses.dataclass(frozen=True)
class Storm(Burst):
    """A function (or a line of user code) that keeps compiling, with its fix."""

    recurs_in_runs: int = 1  # runs in which its group storms
    identical_programs: int = 0  # recompiles that produced the program compiled before
    identical_seconds: float = 0.0
    priced_fix: str | None = None  # padding priced over the run, for a new-shape storm of a jit

    def as_json(self) -> dict[str, Any]:
        """The storm as ``/api/v1/storms`` and ``cachewatch storms --format json`` give it
        (``priced_fix`` only where there is one)."""
        out = self._burst_json()
        if self.priced_fix is None:
            del out["priced_fix"]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], **changed: Any) -> Storm:
        """The storm :meth:`as_json` gave (less any of its fields ``changed`` names)."""
        return cls(**cls._json_fields(data, changed))


@dataclasses.dataclass(frozen=True)
class FirstPass(Burst):
    """A burst that is no storm: each new signature compiled once, none of them again."""

    seconds: float  # what the pass cost: its compiles' trace, lowering and compile seconds
    signatures: int  # new signatures compiled once each

    def as_json(self) -> dict[str, Any]:
        return self._burst_json()

    @classmethod
    def from_json(cls, data: dict[str, Any], **changed: Any) -> FirstPass:
        """The first pass :meth:`as_json` gave (less any of its fields ``changed`` names)."""
        return cls(**cls._json_fields(data, changed))


@dataclasses.dataclass(frozen=True)
class Finding:
    """One root cause of recompiles in one run, across the functions it drives."""

    finding_id: str
    run_id: str
    cause: str  # the cause most of its compiles name
    varying: str  # what changes: an argument axis, a static value, a re-created object
    entry: str | None  # the user's line where it enters (file:line)
    entry_text: str  # how the entry is told: "the loop at train.py:41", "train.py:12"
    functions: tuple[str, ...]  # the functions it drives, most compiles first
    function_hashes: tuple[str, ...]
    compiles: int
    compile_seconds: float
    share_of_run: float | None  # of the run's length so far; None when unknown
    fix: str
    fix_kind: str
    library: str | None  # the library the entry line calls into
    storms: tuple[str, ...]  # the keys of the storms it gathers (its detail)
    active: bool
    # What it costs, what findings rank by: its compile seconds, or for calls on JAX's
    # Python dispatch path (cause ``slow_path``), the time those calls took.
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for name in ("functions", "function_hashes", "storms"):
            out[name] = list(out[name])
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Finding:
        fields = {**data}
        for name in ("functions", "function_hashes", "storms"):
            fields[name] = tuple(fields[name])
        return cls(**fields)
