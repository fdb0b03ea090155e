"""The settings are declared once, as the fields of Config: the environment variables,
``cachewatch settings``, the service's shared settings and a type checker all read them
from there, and a field declared any other way is refused at import."""

from __future__ import annotations

import dataclasses

import pytest
from cachewatch_server.settings import ServerSettings
from mypy import api as mypy_api

from cachewatch import cli
from cachewatch.core import config
from cachewatch.core.config import Config, setting

NAMES = [s.name for s in config.SETTINGS]

# Text values the checks accept, for the str settings whose values are constrained.
TEXT_SAMPLES = {"store": "sqlite:///elsewhere.db", "on_limit": "raise", "program_texts": "stablehlo"}


def test_the_settings_are_the_fields_of_config_in_their_order():
    assert [field.name for field in dataclasses.fields(Config)] == NAMES
    assert len(NAMES) == len(set(NAMES))
    made = Config()
    for s in config.SETTINGS:
        assert getattr(made, s.name) == s.default_value(), s.name
        assert s.env_var == "CACHEWATCH_" + s.name.upper()


def test_the_defaults_are_the_ones_users_rely_on():
    resolved = config.resolve({}, environ={})
    assert resolved == Config()
    assert (resolved.queue_size, resolved.batch_size, resolved.sample_every) == (10_000, 500, 100)
    assert (resolved.storm_threshold, resolved.storm_window, resolved.on_limit) == (5, 600.0, "warn")
    assert resolved.program_store_max_bytes == 512 * 1024 * 1024
    assert resolved.spool_max_bytes == 64 * 1024 * 1024
    assert resolved.process_index is None
    assert resolved.enabled
    assert not resolved.install
    assert resolved.store == config.default_store_url()
    assert resolved.spool_dir == config.default_spool_dir()


def _other_value(s: config.Setting) -> tuple[str, object]:
    """A value unlike the default, as an environment variable spells it and as Config holds it."""
    default = s.default_value()
    if isinstance(default, bool):
        return ("0", False) if default else ("1", True)
    if isinstance(default, int) or default is None:
        return str((default or 0) + 1), (default or 0) + 1
    if isinstance(default, float):
        return str(default + 0.5), default + 0.5
    text = TEXT_SAMPLES.get(s.name, "some-text")
    return text, text


@pytest.mark.parametrize("name", NAMES)
def test_every_setting_reaches_config_from_the_environment_and_from_configure(name):
    s = next(s for s in config.SETTINGS if s.name == name)
    raw, value = _other_value(s)
    assert value != s.default_value()
    assert getattr(config.resolve({}, environ={s.env_var: raw}), name) == value
    assert getattr(config.resolve({name: raw}, environ={}), name) == value  # configure(name="...")
    assert getattr(config.resolve({name: value}, environ={s.env_var: "junk"}), name) == value


def test_a_field_declared_without_setting_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Undocumented:
        documented: int = setting(1, "a line for the docs")
        bare: int = 2

    with pytest.raises(TypeError, match="Undocumented.bare"):
        config.settings_of(Undocumented)


def test_a_type_no_variable_can_spell_or_an_unshown_default_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Listed:
        names: list = setting(None, "names")  # type: ignore[arg-type]  # the list is the point, not the default

    @dataclasses.dataclass(frozen=True)
    class Unshown:
        rank: int | None = setting(None, "a rank")

    with pytest.raises(TypeError, match="Listed.names"):
        config.settings_of(Listed)
    with pytest.raises(TypeError, match="shown"):
        config.settings_of(Unshown)


def test_cachewatch_settings_prints_one_line_per_declaration(capsys):
    assert cli.main(["settings"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [s.env_var for s in config.SETTINGS]
    for line, s in zip(lines, config.SETTINGS, strict=False):
        assert repr(s.default_value()) in line
        assert "`" not in line  # Markdown is the docs'; a terminal gets plain text
    by_var = dict(zip((s.env_var for s in config.SETTINGS), lines, strict=False))
    assert by_var["CACHEWATCH_PROGRAM_VIEW"].endswith("see program.md")


# The service's side of these differs from the library's: it reads SQL stores only, and it
# requires the write token (a secret, unset rather than empty) that a recorder sends.
SERVICE_OWN_MEANING = {"store", "write_token"}


def test_the_service_takes_the_shared_settings_from_the_library():
    shared = set(ServerSettings.model_fields) & set(NAMES)
    assert shared == {"store", "write_token", "storm_threshold", "storm_window", "program_store_max_bytes"}
    for s in config.SETTINGS:
        if s.name not in shared or s.name == "write_token":
            continue
        field = ServerSettings.model_fields[s.name]
        default = field.get_default(call_default_factory=True)
        assert default == s.default_value(), s.name
        if s.name not in SERVICE_OWN_MEANING:
            assert field.description == s.doc, f"{s.name}: the service copies the library's text"


def test_a_type_checker_sees_the_type_of_each_setting(tmp_path):
    wrong = tmp_path / "wrong_setting.py"
    wrong.write_text(
        "from cachewatch.core.config import Config, resolve\n\n"
        "size: str = resolve().queue_size\n"
        "Config(process_index='first')\n"
        "rank: int = Config().process_index\n"
    )
    out, err, status = mypy_api.run(
        ["--no-incremental", "--cache-dir", "/dev/null", "--follow-imports=silent", str(wrong)]
    )
    errors = [line for line in (out + err).splitlines() if line.startswith(str(wrong))]
    assert status == 1, out + err
    assert [line.split(":")[1] for line in errors] == ["3", "4", "5"], out + err
