"""Settings of the library, declared once: the fields of :class:`Config`.

Each field carries its type, its default and one line that says what it does; the
environment variables (``SETTINGS``), ``cachewatch settings``, the table of
docs/configuration.md and the service's shared settings are all read off those fields.
Precedence: explicit arguments to :func:`cachewatch.configure` > ``CACHEWATCH_*``
environment variables > the defaults below.

    >>> import cachewatch
    >>> cachewatch.configure(store="sqlite:///exp.db", run_name="exp-42")
"""

from __future__ import annotations

import dataclasses
import os
import re
import typing
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

_T = TypeVar("_T")


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


# How an environment variable's text becomes a value, by the field's type.
_PARSERS: dict[Any, Callable[[str], Any]] = {
    str: str,
    int: int,
    float: float,
    bool: _parse_bool,
    int | None: _optional_int,
}

ON_LIMIT_ACTIONS = ("warn", "raise", "record")


def _data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "cachewatch"


def default_store_url() -> str:
    """The SQLite file shared by the library and the command line when nothing is set."""
    return "sqlite:///" + str(_data_dir() / "cachewatch.db")


def default_spool_dir() -> str:
    return str(_data_dir() / "spool")


def setting(default: _T, doc: str, *, shown: str = "") -> _T:
    """A field of :class:`Config`: its default, one line of Markdown that says what it does,
    and ``shown``, the default as the docs write it where the value alone would not do.
    Typed as the default, so a type checker sees ``Config.queue_size`` as an ``int``."""
    return dataclasses.field(default=default, metadata={"doc": doc, "shown": shown})


def computed_setting(factory: Callable[[], _T], doc: str, *, shown: str) -> _T:
    """A field whose default is computed when a Config is made (a path under the user's home)."""
    return dataclasses.field(default_factory=factory, metadata={"doc": doc, "shown": shown})


@dataclasses.dataclass(frozen=True)
class Config:
    """Every setting of the library, in the order ``cachewatch settings`` and the docs list them."""

    store: str = computed_setting(
        default_store_url,
        "where events go: `sqlite:///path`, `postgresql://user@host/db`, or `http(s)://server`",
        shown="`sqlite:///$XDG_DATA_HOME/cachewatch/cachewatch.db`",
    )
    run_name: str = setting("", "a name for this process's run (shown beside the run id)")
    enabled: bool = setting(True, "record anything at all; `0` makes `cachewatch.jit` plain `jax.jit`")
    sample_every: int = setting(
        100, "time the first cache hit after each compile, then one cache-hit call in this many (`0`: never)"
    )
    sample_max_per_second: float = setting(
        5.0,
        "cap on timed calls per second per function (the first hit after a compile is always timed); past it, "
        "sampled calls have their signature named, untimed, for per-variant counts (at most 0.5% of the time)",
    )
    queue_size: int = setting(10_000, "events held in memory before new ones are dropped (and counted)")
    batch_size: int = setting(500, "most events the writer sends to the store in one statement")
    flush_interval: float = setting(1.0, "seconds the writer waits to fill a batch")
    stats_interval: float = setting(
        10.0, "seconds between writes of per-function call statistics (written with every batch of compiles too)"
    )
    exit_timeout: float = setting(5.0, "seconds the process waits at exit for queued events to be written")
    spool_dir: str = computed_setting(
        default_spool_dir,
        "directory for batches the store could not take yet",
        shown="`$XDG_DATA_HOME/cachewatch/spool`",
    )
    spool_max_bytes: int = setting(64 * 1024 * 1024, "cap on the bytes kept in the spool directory")
    write_token: str = setting("", "bearer token sent to an `http(s)` store")
    storm_threshold: int = setting(
        5, "a storm: this many recompiles (compiles that are not `first_call`) within `storm_window`"
    )
    storm_window: float = setting(600.0, "seconds over which `storm_threshold` is counted")
    warmup_seconds: float = setting(
        0.0,
        "if set, warm-up (never part of a storm) is the run's first this many seconds, "
        "instead of until the user's jitted code runs a second time",
    )
    eager_baseline: bool = setting(False, "once per signature, time a run op by op beside the compiled run")
    stale_capture_check: bool = setting(True, "on sampled calls, check that globals read at trace time still hold")
    max_recompiles: int = setting(0, "recompiles allowed per watched function before `on_limit` acts (`0`: no limit)")
    on_limit: str = setting(
        "warn", "past `max_recompiles`: `warn` (once), `raise` `RecompileLimitError`, or `record` only"
    )
    job: str = setting("", "the job this process is a rank of (the service compares the ranks of one job)")
    process_index: int | None = setting(
        None,
        "this process's rank in the job (default: `jax.process_index()` when distributed)",
        shown="JAX's, when distributed",
    )
    process_count: int | None = setting(
        None,
        "ranks in the job (default: `jax.process_count()` when distributed)",
        shown="JAX's, when distributed",
    )
    program_view: bool = setting(
        True,
        "read what each compile compiled (equations by primitive and line, XLA figures, fingerprint) "
        "from the compile itself; see [program.md](program.md)",
    )
    program_texts: str = setting(
        "jaxpr,hlo",
        "program texts kept per distinct program, comma-separated: `jaxpr`, `hlo`, `stablehlo` (empty: none)",
    )
    program_worker_share: float = setting(
        0.25,
        "the most of the wall time the writer's thread spends reading programs' figures while the program "
        "runs (it sleeps the rest; a flush or the exit reads at full speed)",
    )
    program_backlog: int = setting(
        64,
        "compiles whose executables may wait for the writer's thread; past it the compiling thread reads "
        "the figures itself (counted: `recorder.program_work().read_inline`)",
    )
    program_text_max_bytes: int = setting(
        8_000_000,
        "cap on one program's kept texts (characters before compression); a text over it is left out",
    )
    program_store_max_bytes: int = setting(
        512 * 1024 * 1024,
        "cap on the compressed program texts a store keeps; past it, new texts are not stored "
        "(the events keep their figures). `cachewatch serve` applies it to what it ingests: "
        "a recorder writing over `http(s)` leaves the cap to the service",
    )
    persistent_cache_dir: str = setting("", "turn JAX's persistent compilation cache on in this directory")
    warmup_from: str = setting(
        "",
        "a run (id or name) whose signatures each `cachewatch.jit` function compiles ahead of time, "
        "in background threads, as it is defined (`cachewatch run --warmup-from`)",
    )
    warmup_threads: int = setting(2, "worker threads of each warm-up that `warmup_from` starts")
    install: bool = setting(
        False,
        "`1`: `cachewatch.install()` at interpreter start (read by the `cachewatch-install.pth` the package "
        "ships), for programs a launcher starts ([docs/run.md](run.md)); `cachewatch run` sets it for the "
        "processes the program starts",
    )
    otel_endpoint: str = setting(
        "",
        "send each compile as an OpenTelemetry span to this OTLP/HTTP collector (`http://host:4318`); empty: "
        "to `OTEL_EXPORTER_OTLP_ENDPOINT` when that is set; `off`: never ([integrations.md](integrations.md#opentelemetry-spans))",
    )
    raise_internal_errors: bool = setting(
        False, "re-raise cachewatch's own errors instead of logging them once (for cachewatch's own tests)"
    )
    pure_python: bool = setting(
        False,
        "`1` makes `cachewatch.jit` use the pure-Python cache-hit path even where the C one is built "
        "(for debugging); read once, from the environment, when cachewatch is imported",
    )


@dataclasses.dataclass(frozen=True)
class Setting:
    """One field of :class:`Config` as the environment, the CLI and the docs see it."""

    name: str
    parse: Callable[[str], Any]
    default: Any  # the value, or the function that computes it
    doc: str
    shown_default: str = ""

    @property
    def env_var(self) -> str:
        return "CACHEWATCH_" + self.name.upper()

    def default_value(self) -> Any:
        return self.default() if callable(self.default) else self.default


def settings_of(config_class: type) -> tuple[Setting, ...]:
    """The settings a dataclass declares with :func:`setting`; a field declared any other
    way, or of a type no environment variable can spell, is refused here, at import."""
    types = typing.get_type_hints(config_class)
    found = []
    for field in dataclasses.fields(config_class):
        where = f"{config_class.__name__}.{field.name}"
        doc, shown = field.metadata.get("doc", ""), field.metadata.get("shown", "")
        if not doc or "|" in doc or "\n" in doc:
            raise TypeError(f"{where}: declare it with setting(default, doc), doc one line with no '|'")
        if types[field.name] not in _PARSERS:
            raise TypeError(f"{where}: no environment variable can spell a {types[field.name]}")
        default = field.default_factory if field.default is dataclasses.MISSING else field.default
        if not shown and (default is None or callable(default)):
            raise TypeError(f"{where}: say how the docs show its default (shown=...)")
        found.append(Setting(field.name, _PARSERS[types[field.name]], default, doc, shown or _shown(default)))
    return tuple(found)


def _shown(default: Any) -> str:
    """A default as the docs write it: as it would be set in the environment."""
    if isinstance(default, bool):
        return "`1`" if default else "`0`"
    return f"`{default}`" if default != "" else "empty"


SETTINGS: tuple[Setting, ...] = settings_of(Config)

_BY_NAME = {s.name: s for s in SETTINGS}
# Settings that did something once and are accepted, with a warning, so a script that
# still passes one keeps working; the environment's are no longer read.
_REMOVED = {
    "cost_analysis": "XLA's figures come from each compile's own executable (program_view); nothing is lowered again",
}


def resolve(overrides: dict[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Build a Config from explicit overrides, then the environment, then defaults."""
    overrides = dict(overrides or {})
    for name in sorted(set(overrides) & set(_REMOVED)):
        warnings.warn(f"cachewatch setting {name!r} has no effect: {_REMOVED[name]}", DeprecationWarning, stacklevel=3)
        del overrides[name]
    env: Mapping[str, str] = os.environ if environ is None else environ
    unknown = set(overrides) - set(_BY_NAME)
    if unknown:
        raise ConfigError(f"unknown cachewatch setting(s): {', '.join(sorted(unknown))}; known: {', '.join(_BY_NAME)}")
    values: dict[str, Any] = {}
    for declared in SETTINGS:
        if declared.name in overrides and overrides[declared.name] is not None:
            value = overrides[declared.name]
            if isinstance(value, str) and declared.parse is not str:
                value = _parse(declared, value, source="argument")
        elif declared.env_var in env:
            value = _parse(declared, env[declared.env_var], source=declared.env_var)
        else:
            value = declared.default_value()
        values[declared.name] = value
    _check(values)
    return Config(**values)


def from_environment(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """One setting as the environment gives it (its default when unset or unreadable):
    for the few read once, at import, before anything is configured."""
    declared = _BY_NAME[name]
    raw = (os.environ if environ is None else environ).get(declared.env_var)
    if raw is None:
        return declared.default_value()
    try:
        return _parse(declared, raw, source=declared.env_var)
    except ConfigError:
        return declared.default_value()


def _parse(declared: Setting, raw: str, source: str) -> Any:
    try:
        return declared.parse(raw)
    except ValueError as exc:
        raise ConfigError(f"{source}={raw!r} is not a valid {declared.name}: {exc}") from None


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
    """One line per setting: environment variable, default, meaning (``cachewatch settings``)."""
    lines = []
    for s in SETTINGS:
        lines.append(f"{s.env_var:34} default {s.default_value()!r:12}  {_plain(s.doc)}")
    return "\n".join(lines)


def _plain(markdown: str) -> str:
    """A line of the docs as a terminal shows it: links as their text, code without backticks."""
    return re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", markdown).replace("`", "")


def markdown_table() -> str:
    """The settings table of docs/configuration.md, which a test keeps equal to this."""
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    rows += [f"| `{s.env_var}` | {s.shown_default} | {s.doc} |" for s in SETTINGS]
    return "\n".join(rows)
