"""What the docs name and the code holds agree: the README's settings table lists every
CACHEWATCH_* variable the code reads, and the causes are the design's words."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cachewatch import config
from cachewatch.events import Cause
from cachewatch_server.settings import ServerSettings

ROOT = Path(__file__).resolve().parent.parent


def variables_read() -> set[str]:
    names = {setting.env_var for setting in config.SETTINGS}
    names |= {"CACHEWATCH_" + field.upper() for field in ServerSettings.model_fields}
    # Read by name outside the two tables (the pure-Python switch, the demo's port).
    for folder in ("cachewatch", "server", "scripts"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".sh"):
                names |= set(re.findall(r"CACHEWATCH_[A-Z0-9_]+[A-Z0-9]", path.read_text()))
    return names


def documented() -> set[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    return {
        name
        for row in re.findall(r"^\|([^|]*)\|", section, re.M)
        for name in re.findall(r"CACHEWATCH_[A-Z0-9_]+[A-Z0-9]", row)
    }


def test_every_variable_the_code_reads_is_in_the_readme_table():
    missing = variables_read() - documented()
    assert not missing, f"add to the README's settings table: {sorted(missing)}"


def test_the_table_lists_nothing_the_code_does_not_read():
    assert documented() <= variables_read()


def test_the_causes_are_the_words_the_design_fixes():
    """Cause spells the vocabulary once for the code; its words are the design's table
    (the API and metrics tests spell them as a client reads them)."""
    design = ROOT.parent / "shared" / "DESIGN.md"
    if not design.exists():
        pytest.skip("the design document is not beside the repository")
    section = design.read_text().split("### Causes", 1)[1].split("\n#", 1)[0]
    words = re.findall(r"^\| `([a-z_]+)` \|", section, re.M)
    assert words and set(words) == {c.value for c in Cause} - {Cause.STALE_CAPTURE}
