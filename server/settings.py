"""Settings of the service, in one declarative table (``CACHEWATCH_*`` environment variables).

    >>> ServerSettings(store="sqlite:///cachewatch.db", write_token="a-long-random-token")

Unsafe values are refused when the service starts, with the setting named: a token
short enough to guess, a page or batch limit that would let one request exhaust memory.
A variable the library reads too takes its default and its meaning from the library's
declaration (:class:`cachewatch.core.config.Config`), so the two cannot drift: the store
default is the library's, so a script run with no settings is visible in
``cachewatch serve`` with no settings.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from cachewatch.core import config as configmod
from cachewatch.store.retention import Policy, RetentionError, parse_age, parse_policy

MIN_TOKEN_LENGTH = 16


_LIBRARY = {setting.name: setting for setting in configmod.SETTINGS}


def _library(name: str, *, description: str = "", **constraints: Any) -> Any:
    """A field for a variable the library reads too: the library's default and meaning,
    with the service's own bounds (``description`` only where the service's side differs)."""
    setting = _LIBRARY[name]
    default: dict[str, Any] = (
        {"default_factory": setting.default} if callable(setting.default) else {"default": setting.default}
    )
    return Field(**default, description=description or setting.doc, **constraints)


class SettingsError(ValueError):
    """The service's settings cannot be used; the message names the setting."""


class ServerSettings(BaseSettings):
    # The library reads other CACHEWATCH_* variables from the same environment.
    model_config = SettingsConfigDict(env_prefix="CACHEWATCH_", extra="ignore", frozen=True)

    # The service reads a SQL store only; the library may also write to an http(s) one.
    store: str = _library("store", description="Store URL: `sqlite:///path` or `postgresql://user@host/db`.")
    # The same variable as the library's, from the other side: the token the service requires
    # of the recorders that send to it (a secret, and unset rather than empty).
    write_token: SecretStr | None = Field(
        None, description="Bearer token required by POST /api/v1/events; unset means ingest is open."
    )
    read_token: SecretStr | None = Field(
        None, description="Bearer token required by the read API and /metrics; unset means reads are open."
    )
    metrics_top_n: int = Field(
        50,
        ge=1,
        le=1000,
        description="Functions with their own `function` label on "
        "/metrics (by all-time compiles); the rest are `other`.",
    )
    max_body_bytes: int = Field(
        10 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024, description="Largest request body accepted, in bytes."
    )
    max_batch_events: int = Field(
        5000, ge=1, le=100_000, description="Most events (and most call-statistics rows) in one ingest batch."
    )
    max_page_size: int = Field(1000, ge=1, le=10_000, description="Largest `limit` a query may ask for.")
    storm_threshold: int = _library("storm_threshold", ge=1)
    storm_window: float = _library("storm_window", gt=0)
    # A recorder writing over HTTP leaves the store's cap to the service.
    program_store_max_bytes: int = _library("program_store_max_bytes", ge=0)

    retention: str | None = Field(
        None,
        description="Prune the store on a schedule: an age (30d: runs with nothing recorded for 30 days), "
        "runs:N (keep the N newest runs), either with a texts: prefix to drop only program texts; unset: never.",
    )
    retention_interval: float = Field(
        3600.0,
        gt=0,
        description="Time between scheduled prunes, in seconds or as an age (6h); the first runs at start.",
    )

    @field_validator("retention", mode="before")
    @classmethod
    def _retention_policy(cls, value):
        if value in ("", None):
            return None
        try:
            parse_policy(value)
        except RetentionError as exc:
            raise ValueError(str(exc)) from None
        return str(value).strip()

    @field_validator("retention_interval", mode="before")
    @classmethod
    def _interval(cls, value):
        if isinstance(value, str) and value.strip() and value.strip()[-1:].isalpha():
            try:
                return parse_age(value)
            except RetentionError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("write_token", "read_token", mode="before")
    @classmethod
    def _empty_is_unset(cls, value):
        # docker-compose passes unset variables as empty strings.
        return None if value in ("", None) else value

    @field_validator("write_token", "read_token")
    @classmethod
    def _strong_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        token = value.get_secret_value()
        if len(token) < MIN_TOKEN_LENGTH:
            raise ValueError(
                f"a token must be at least {MIN_TOKEN_LENGTH} characters long "
                f"(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
            )
        if any(c.isspace() for c in token) or not token.isprintable():
            raise ValueError("a token must be printable and contain no whitespace")
        return value

    @field_validator("store")
    @classmethod
    def _known_store(cls, value: str) -> str:
        from cachewatch.store import engine as enginemod

        try:
            enginemod.normalize_url(value)
        except enginemod.InvalidStoreURL as exc:
            raise ValueError(str(exc)) from None
        return value

    def retention_policy(self) -> Policy | None:
        return parse_policy(self.retention) if self.retention else None

    def write_secret(self) -> str | None:
        return self.write_token.get_secret_value() if self.write_token else None

    def read_secret(self) -> str | None:
        return self.read_token.get_secret_value() if self.read_token else None


def load(**overrides) -> ServerSettings:
    """Settings from the environment (and ``overrides``), or :class:`SettingsError` naming the bad ones."""
    try:
        return ServerSettings(**overrides)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            name = ".".join(str(p) for p in error["loc"]) or "settings"
            message = error["msg"].removeprefix("Value error, ")
            problems.append(f"CACHEWATCH_{name.upper()}: {message}")
        raise SettingsError("cachewatch serve cannot start: " + "; ".join(problems)) from None
