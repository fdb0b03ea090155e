"""``cachewatch report --html DIR``: a run's report as static pages that open from disk.

A real program (tests/programs/rebuilt_solver.py: a storm of a jit rebuilt per call) runs
under ``cachewatch run``; the report of its run is written by the command, and read back
as files (every link lands on a file of the report) and in Chromium with the network off
(nothing requested but the report's own files, no console error, the charts drawn)."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
import sqlalchemy as sa
from test_dashboard import Tab, chromium  # noqa: F401  (the browser fixture, shared)
from test_verdicts import run_program

from cachewatch.store import engine as enginemod
from cachewatch.store import models

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
LINK = re.compile(r'\b(href|src)="([^"]*)"')


def _cachewatch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cachewatch", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )


@pytest.fixture(scope="module")
def reported(tmp_path_factory) -> tuple[str, Path, str]:
    """(store URL, report directory, run id) of one run of a storming program."""
    tmp = tmp_path_factory.mktemp("html-report")
    ran = run_program(tmp, "rebuilt_solver")
    with enginemod.connection(ran.url) as conn:
        run_id = conn.execute(sa.select(models.runs.c.run_id)).scalar_one()
    directory = tmp / "report"
    done = _cachewatch("report", "--store", ran.url, "--html", str(directory), "--run", run_id[:8])
    assert done.returncode == 0, done.stderr
    assert f"open {directory / 'index.html'}" in done.stdout
    return ran.url, directory, run_id


def _pages(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.html"))


def test_every_link_lands_on_a_file_of_the_report(reported):
    _, directory, _ = reported
    for page in _pages(directory):
        text = page.read_text()
        for attribute, raw in LINK.findall(text):
            target = html.unescape(raw)
            if target.startswith(("#", "data:")):
                continue
            parts = urllib.parse.urlsplit(target)
            assert not parts.scheme, f"{page.name}: {attribute}={target!r} leaves the report"
            assert not target.startswith("/"), f"{page.name}: {attribute}={target!r} needs a server"
            assert (page.parent / parts.path).resolve().is_file(), f"{page.name}: {target!r} is not in the report"
        # Links to what the report does not hold stay as text, marked as such.
        assert 'action="' not in text, f"{page.name} has a form that needs a server"


def test_it_holds_the_runs_pages(reported):
    url, directory, run_id = reported
    with enginemod.connection(url) as conn:
        e = models.compile_events
        functions = set(conn.execute(sa.select(e.c.function_hash).where(e.c.run_id == run_id).distinct()).scalars())
        programs = set(
            conn.execute(
                sa.select(e.c.event_id).where(e.c.run_id == run_id, e.c.compiled, e.c.jaxpr_eqns > 0)
            ).scalars()
        )
    for name in ("index.html", "functions.html", "storms.html", "cache.html"):
        assert (directory / name).is_file(), name
    index = (directory / "index.html").read_text()
    # Every function of the run has its page, linked from the report's list of functions.
    listed = {p.stem for p in (directory / "functions").glob("*.html") if "-" not in p.stem}
    assert {h[: len(next(iter(listed)))] for h in functions} == listed
    functions_page = (directory / "functions.html").read_text()
    assert all(f'href="functions/{name}.html"' in functions_page for name in listed)
    # Each compile whose program was read has its flame graph.
    drawn = {p.stem for p in (directory / "programs").glob("*.html") if "-against-" not in p.stem}
    assert programs <= drawn
    # The finding the runner printed leads the overview and the storms page, as on the dashboard.
    assert index.index('id="findings-title"') < index.index('id="storms-title"')
    assert "made afresh on every call" in index
    assert "made afresh on every call" in (directory / "storms.html").read_text()
    assert run_id in index


def test_a_run_that_is_not_there_is_refused(reported, tmp_path):
    url, _, _ = reported
    done = _cachewatch("report", "--store", url, "--html", str(tmp_path / "none"), "--run", "no-such-run")
    assert done.returncode == 2
    assert "no-such-run" in done.stderr
    assert not (tmp_path / "none" / "index.html").exists()


def test_it_opens_from_disk_with_the_network_off(reported, chromium, tmp_path):  # noqa: F811
    _, directory, _ = reported
    context = chromium.new_context(viewport={"width": 1360, "height": 900}, offline=True)
    page = context.new_page()
    page.set_default_timeout(20000)
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    tab = Tab(page, "", IMAGES)
    try:
        page.goto((directory / "index.html").as_uri())
        tab.settle()
        assert page.evaluate("() => document.documentElement.getAttribute('data-charts')") == "ready"
        tab.shot("html-report")
        tab.follow(lambda: page.click("nav a:text-is('Functions')"))
        assert page.url.endswith("/functions.html")
        tab.follow(lambda: page.click("#functions-table tbody a >> nth=0"))
        assert "/functions/" in page.url
        # A compile's program, from the function's list of compiles.
        link = page.locator("a.event-flamegraph").first
        with page.expect_navigation():
            link.click()
        page.wait_for_function("() => document.documentElement.getAttribute('data-flamegraph') === 'ready'")
        tab.assert_clean()
        outside = [url for url in requests if not url.startswith(directory.as_uri())]
        assert not outside, outside
    finally:
        context.close()


def test_the_runner_writes_it_at_exit(tmp_path):
    """``cachewatch run --html DIR``: the report of the run just made, written after the
    summary's flush; the program's output and exit code are its own."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    program = ROOT / "tests" / "programs" / "rebuilt_solver.py"
    done = _cachewatch("run", "--store", url, "--html", str(tmp_path / "report"), str(program))
    assert done.returncode == 0, done.stderr
    assert f"the run's report is in {tmp_path / 'report' / 'index.html'}" in done.stderr
    with enginemod.connection(url) as conn:
        run_id = conn.execute(sa.select(models.runs.c.run_id)).scalar_one()
    assert run_id in (tmp_path / "report" / "index.html").read_text()
    plain = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=300)
    assert done.stdout == plain.stdout
