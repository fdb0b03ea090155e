"""What the docs name and the code holds agree: the settings table of docs/configuration.md
is the one the declarations make, and with the service's table lists every CACHEWATCH_*
variable the code reads; the causes are the table of docs/recording.md and the design's
words, and every page the README links to exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cachewatch_server.settings import ServerSettings

from cachewatch.core import config
from cachewatch.core.events import Cause

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
    page = (ROOT / "docs" / "configuration.md").read_text()
    return {
        name
        for row in re.findall(r"^\|([^|]*)\|", page, re.M)
        for name in re.findall(r"CACHEWATCH_[A-Z0-9_]+[A-Z0-9]", row)
    }


REGENERATE = "python -c 'from cachewatch.core import config; print(config.markdown_table())'"


def settings_block(page: str) -> str:
    """What docs/configuration.md holds between its settings table's two markers."""
    start, end = "<!-- settings table:", "<!-- end of settings table -->"
    assert start in page, "the settings table's markers are gone"
    assert end in page, "the settings table's markers are gone"
    return page.split(start, 1)[1].split("-->", 1)[1].split(end, 1)[0].strip()


def test_the_docs_settings_table_is_the_one_the_declarations_make():
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert settings_block(page) == config.markdown_table(), f"paste the output of {REGENERATE} between the markers"


def test_the_docs_name_the_variables_the_service_shares_with_the_library():
    """The sentence before the service's table names the library's variables it reads too."""
    page = (ROOT / "docs" / "configuration.md").read_text()
    sentence = page.split("`cachewatch serve` reads these (and ", 1)[1].split("above)", 1)[0]
    named = set(re.findall(r"CACHEWATCH_[A-Z0-9_]+[A-Z0-9]", sentence))
    shared = {s.env_var for s in config.SETTINGS if s.name in ServerSettings.model_fields}
    assert named == shared


def test_every_variable_the_code_reads_is_in_the_settings_table():
    missing = variables_read() - documented()
    assert not missing, f"add to the settings table of docs/configuration.md: {sorted(missing)}"


def test_the_table_lists_nothing_the_code_does_not_read():
    assert documented() <= variables_read()


# The causes a compile can have; stale_capture is an event of its own, not a reason to compile.
COMPILE_CAUSES = {c.value for c in Cause} - {Cause.STALE_CAPTURE}


def cause_table(text: str) -> list[str]:
    """The words of the "| cause | meaning |" table, in the order it lists them."""
    head = "| cause | meaning |"
    assert head in text, f"no {head!r} table"
    table = text.split(head, 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \|", table, re.M)


def test_the_causes_are_the_words_the_docs_table_lists():
    """Cause spells the vocabulary once for the code; the table of docs/recording.md
    explains each of its words to users, and nothing else (checked in the repository
    itself, whether or not the design document is beside it)."""
    words = cause_table((ROOT / "docs" / "recording.md").read_text())
    assert len(words) == len(set(words)), f"listed twice in the cause table: {words}"
    assert set(words) == COMPILE_CAUSES, (
        f"missing from the cause table of docs/recording.md: {sorted(COMPILE_CAUSES - set(words))}; "
        f"not causes: {sorted(set(words) - COMPILE_CAUSES)}"
    )


def test_the_causes_are_the_words_the_design_fixes():
    """Cause spells the vocabulary once for the code; its words are the design's table
    (the API and metrics tests spell them as a client reads them)."""
    design = ROOT.parent / "shared" / "DESIGN.md"
    if not design.exists():
        pytest.skip("the design document is not beside the repository (the docs' table is checked)")
    section = design.read_text().split("### Causes", 1)[1].split("\n#", 1)[0]
    words = re.findall(r"^\| `([a-z_]+)` \|", section, re.M)
    # The design adds a word in prose ("The vocabulary grows by one word, `new_context`")
    # before its table has the row.
    words += re.findall(r"grows by one word, `([a-z_]+)`", section)
    assert words
    assert set(words) == COMPILE_CAUSES


def test_every_page_the_readme_and_the_docs_link_to_exists():
    """The README is a front page: its reference lives in docs/, and no link leads nowhere."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []
    linked = set(re.findall(r"\(docs/([\w.-]+\.md)\)", (ROOT / "README.md").read_text()))
    assert linked == {p.name for p in (ROOT / "docs").glob("*.md")}  # every page is reachable from the front page
