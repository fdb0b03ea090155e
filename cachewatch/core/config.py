"""Settings of the library, in one declarative table.

Precedence: explicit arguments to :func:`cachewatch.configure` > ``CACHEWATCH_*``
environment variables > the defaults below.

    >>> import cachewatch
    >>> cachewatch.configure(store="sqlite:///exp.db", run_name="exp-42")
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Mapping


class ConfigError(ValueError):
    """A setting has a value cachewatch cannot use."""


def _parse_bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected a boolean (1/0, true/false), got {raw!r}")


def _optional_int(raw: str) -> int | None:
    return int(raw) if raw.strip() else None


ON_LIMIT_ACTIONS = ("warn", "raise", "record")


def _data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "cachewatch"


def default_store_url() -> str:
    """The SQLite file shared by the library and the command line when nothing is set."""
    return "sqlite:///" + str(_data_dir() / "cachewatch.db")


def default_spool_dir() -> str:
    return str(_data_dir() / "spool")


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    parse: Callable[[str], Any]
    default: Any
    doc: str

    @property
    def env_var(self) -> str:
        return "CACHEWATCH_" + self.name.upper()


SETTINGS: tuple[Setting, ...] = (
    Setting("store", str, default_store_url, "Where events go: sqlite:///path, postgresql://..., or http(s)://server."),
    Setting("run_name", str, "", "A human name for this process's run (shown beside the run id)."),
    Setting("enabled", _parse_bool, True, "Record anything at all; off makes cachewatch.jit plain jax.jit."),
    Setting(
        "sample_every",
        int,
        100,
        "Time the first cache hit after each compile, then one call in this many (0 turns run-time sampling off).",
    ),
    Setting(
        "sample_max_per_second",
        float,
        5.0,
        "Upper bound on timed calls per second per function (the first hit after a compile is always timed).",
    ),
    Setting("queue_size", int, 10_000, "Events held in memory before new ones are dropped and counted."),
    Setting("batch_size", int, 500, "Most events the writer sends to the store in one statement."),
    Setting("flush_interval", float, 1.0, "Seconds the writer waits to fill a batch."),
    Setting("stats_interval", float, 10.0, "Seconds between writes of per-function call statistics."),
    Setting("exit_timeout", float, 5.0, "Seconds the process waits at exit for queued events to be written."),
    Setting("spool_dir", str, default_spool_dir, "Directory for batches the store could not take yet."),
    Setting("spool_max_bytes", int, 64 * 1024 * 1024, "Cap on the bytes kept in the spool directory."),
    Setting("write_token", str, "", "Bearer token sent to an http(s) store."),
    Setting("storm_threshold", int, 5, "Non-first_call compiles within storm_window that make a storm."),
    Setting("storm_window", float, 600.0, "Seconds over which storm_threshold is counted."),
    Setting(
        "warmup_seconds",
        float,
        0.0,
        "If set, warm-up (compiles never counted in a storm) is the run's first this many seconds, instead of until the user's jitted code runs a second time.",
    ),
    Setting("eager_baseline", _parse_bool, False, "Once per signature, time a run op by op beside the compiled run."),
    Setting("cost_analysis", _parse_bool, False, "Lower each new compile once more to record HLO size and XLA cost."),
    Setting(
        "stale_capture_check",
        _parse_bool,
        True,
        "On sampled calls, check that globals baked in at trace time still hold.",
    ),
    Setting("max_recompiles", int, 0, "Recompiles allowed per watched function before on_limit acts (0: no limit)."),
    Setting("on_limit", str, "warn", "Past max_recompiles: warn (once), raise RecompileLimitError, or record only."),
    Setting("job", str, "", "Name shared by the ranks of one multi-process job (compared by the service)."),
    Setting(
        "process_index",
        _optional_int,
        None,
        "This process's rank in the job (default: jax.process_index() when distributed).",
    ),
    Setting("process_count", _optional_int, None, "Ranks in the job (default: jax.process_count() when distributed)."),
    Setting(
        "program_view",
        _parse_bool,
        True,
        "Read what each compile compiled (equations by primitive and line, XLA figures, fingerprint) from the compile itself.",
    ),
    Setting(
        "program_texts",
        str,
        "jaxpr,hlo",
        "Program texts kept per distinct program, comma-separated: jaxpr, hlo, stablehlo (empty: none).",
    ),
    Setting(
        "program_worker_share",
        float,
        0.25,
        "Most of the wall time the writer's thread spends reading programs' figures while the program runs (it sleeps the rest; a flush or exit reads at full speed).",
    ),
    Setting(
        "program_backlog",
        int,
        64,
        "Compiles whose executables may wait for the writer's thread; past it the compiling thread reads the figures itself.",
    ),
    Setting(
        "program_text_max_bytes",
        int,
        8_000_000,
        "Cap on one program's kept texts (characters before compression); a text over it is left out.",
    ),
    Setting(
        "program_store_max_bytes",
        int,
        512 * 1024 * 1024,
        "Cap on the compressed program texts a store keeps; past it new texts are not stored.",
    ),
    Setting("persistent_cache_dir", str, "", "Turn JAX's persistent compilation cache on in this directory."),
    Setting(
        "warmup_from",
        str,
        "",
        "A run (id or name) whose signatures each cachewatch.jit function compiles ahead of time, in the background, as it is defined (cachewatch run --warmup-from).",
    ),
    Setting("warmup_threads", int, 2, "Worker threads of each warm-up that warmup_from starts."),
    Setting(
        "install",
        _parse_bool,
        False,
        "Call cachewatch.install() at interpreter start (read by the cachewatch-install.pth that the package ships).",
    ),
    Setting("raise_internal_errors", _parse_bool, False, "Re-raise cachewatch's own errors (for cachewatch's tests)."),
)

_BY_NAME = {s.name: s for s in SETTINGS}


@dataclasses.dataclass(frozen=True)
class Config:
    store: str
    run_name: str
    enabled: bool
    sample_every: int
    sample_max_per_second: float
    queue_size: int
    batch_size: int
    flush_interval: float
    stats_interval: float
    exit_timeout: float
    spool_dir: str
    spool_max_bytes: int
    write_token: str
    storm_threshold: int
    storm_window: float
    warmup_seconds: float
    eager_baseline: bool
    cost_analysis: bool
    stale_capture_check: bool
    raise_internal_errors: bool
    max_recompiles: int = 0
    on_limit: str = "warn"
    job: str = ""
    process_index: int | None = None
    process_count: int | None = None
    persistent_cache_dir: str = ""
    warmup_from: str = ""
    warmup_threads: int = 2
    install: bool = False
    program_view: bool = True
    program_texts: str = "jaxpr,hlo"
    program_worker_share: float = 0.25
    program_backlog: int = 64
    program_text_max_bytes: int = 8_000_000
    program_store_max_bytes: int = 512 * 1024 * 1024


def resolve(overrides: dict[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Build a Config from explicit overrides, then the environment, then defaults."""
    overrides = dict(overrides or {})
    env: Mapping[str, str] = os.environ if environ is None else environ
    unknown = set(overrides) - set(_BY_NAME)
    if unknown:
        raise ConfigError(f"unknown cachewatch setting(s): {', '.join(sorted(unknown))}; known: {', '.join(_BY_NAME)}")
    values: dict[str, Any] = {}
    for setting in SETTINGS:
        if setting.name in overrides and overrides[setting.name] is not None:
            value = overrides[setting.name]
            if isinstance(value, str) and setting.parse is not str:
                value = _parse(setting, value, source="argument")
        elif setting.env_var in env:
            value = _parse(setting, env[setting.env_var], source=setting.env_var)
        else:
            value = setting.default() if callable(setting.default) else setting.default
        values[setting.name] = value
    _check(values)
    return Config(**values)


def _parse(setting: Setting, raw: str, source: str) -> Any:
    try:
        return setting.parse(raw)
    except ValueError as exc:
        raise ConfigError(f"{source}={raw!r} is not a valid {setting.name}: {exc}") from None


def _check(values: dict[str, Any]) -> None:
    if values["sample_every"] < 0:
        raise ConfigError("sample_every must be 0 (off) or a positive number of calls")
    for name in ("queue_size", "batch_size", "storm_threshold", "warmup_threads"):
        if values[name] < 1:
            raise ConfigError(f"{name} must be at least 1, got {values[name]}")
    for name in ("flush_interval", "stats_interval", "exit_timeout", "storm_window", "sample_max_per_second"):
        if values[name] < 0:
            raise ConfigError(f"{name} must not be negative, got {values[name]}")
    if values["max_recompiles"] < 0:
        raise ConfigError(f"max_recompiles must be 0 (no limit) or a positive number, got {values['max_recompiles']}")
    if values["on_limit"] not in ON_LIMIT_ACTIONS:
        raise ConfigError(f"on_limit must be one of {', '.join(ON_LIMIT_ACTIONS)}, got {values['on_limit']!r}")
    index, count = values["process_index"], values["process_count"]
    if (
        (index is not None and index < 0)
        or (count is not None and count < 1)
        or (index is not None and count is not None and index >= count)
    ):
        raise ConfigError(f"process_index must be in [0, process_count), got {index} of {count}")
    formats = [f.strip() for f in values["program_texts"].split(",") if f.strip()]
    unknown = [f for f in formats if f not in ("jaxpr", "hlo", "stablehlo")]
    if unknown:
        raise ConfigError(f"program_texts takes jaxpr, hlo, stablehlo; got {', '.join(unknown)}")
    values["program_texts"] = ",".join(formats)
    for name in ("program_text_max_bytes", "program_store_max_bytes", "program_backlog"):
        if values[name] < 0:
            raise ConfigError(f"{name} must not be negative, got {values[name]}")
    if not 0.0 < values["program_worker_share"] <= 1.0:
        raise ConfigError(f"program_worker_share must be in (0, 1], got {values['program_worker_share']}")
    if not values["store"]:
        raise ConfigError("store must be a URL such as sqlite:///cachewatch.db")


def describe() -> str:
    """One line per setting: environment variable, default, meaning (for --help and the README)."""
    lines = []
    for s in SETTINGS:
        default = s.default() if callable(s.default) else s.default
        lines.append(f"{s.env_var:34} default {default!r:12}  {s.doc}")
    return "\n".join(lines)
