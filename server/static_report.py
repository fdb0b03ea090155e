"""A run's report as static HTML: ``cachewatch report --html DIR [--run RUN]`` and
``cachewatch run --html DIR``.

The report is the dashboard, frozen: the service's own pages for one run are rendered in
this process (no server, no socket) and written as files that link to each other by
relative paths, with their scripts and styles (plotly.js from the installed ``plotly``
package) copied beside them. A reader opens ``index.html`` from disk with no network.

What it holds: the pages reached from the run's overview that belong to the run (the
overview, functions, storms, cache, each function's page and its pages of compiles, the
flame graph of each compile's program and of each diff they link to), breadth first up to
``MAX_PAGES`` pages and ``MAX_PROGRAMS`` flame graphs. A link to anything else (another
run, a sort order, the fleet pages) stays as text, marked as not in the report.

    written = static_report.write("sqlite:///cachewatch.db", Path("report"), run="exp-42")
    print(written.index)
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import html
import os
import posixpath
import re
import time
import urllib.parse
from pathlib import Path
from typing import Any

from cachewatch.store import engine as enginemod
from cachewatch.store import runs

from .dashboard.pages import STATIC_HEADER
from .settings import load

MAX_PAGES = 2000
MAX_PROGRAMS = 300
# Rows per page of the lists: one page holds a run's functions and storms.
LIST_ROWS = 500

# The pages a report follows, by path: the query keys each may carry besides the run.
_FOLLOWED: tuple[tuple[re.Pattern[str], frozenset[str]], ...] = (
    (re.compile(r"/"), frozenset()),
    (re.compile(r"/functions"), frozenset({"per_page"})),
    (re.compile(r"/functions/[0-9a-f]{1,64}"), frozenset({"page"})),
    (re.compile(r"/storms"), frozenset({"per_page", "function_hash", "page"})),
    (re.compile(r"/cache"), frozenset()),
)
_PROGRAM = re.compile(r"/programs/[0-9a-f]{1,32}/flamegraph")
_LINK = re.compile(r'\b(href|src)="([^"]*)"')
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class ReportError(RuntimeError):
    """The report could not be written (no such run, a page that failed to render)."""


@dataclasses.dataclass(frozen=True)
class Written:
    directory: Path
    index: Path
    run_id: str
    pages: int
    programs: int
    left_out: int  # pages past the caps, linked as text
    seconds: float


@dataclasses.dataclass(frozen=True)
class _Target:
    """One page of the report: its dashboard path and query (the run left out)."""

    path: str
    query: tuple[tuple[str, str], ...]

    @property
    def is_program(self) -> bool:
        return bool(_PROGRAM.fullmatch(self.path))

    def url(self, run_id: str) -> tuple[str, str]:
        query = dict(self.query)
        if not self.is_program:
            query["run_id"] = run_id
        return self.path, urllib.parse.urlencode(sorted(query.items()))

    def file_name(self) -> str:
        """Where the page lies in the report, relative to its top."""
        if self.path == "/":
            stem = "index"
        elif self.is_program:
            stem = "programs/" + self.path.split("/")[2]
        else:
            stem = self.path.strip("/")
        for key, value in self.query:
            if key != "per_page":
                stem += f"-{key}-{_UNSAFE.sub('_', value)[:40]}"
        return stem + ".html"


def write(
    store: str,
    directory: Path,
    *,
    run: str | None = None,
    max_pages: int = MAX_PAGES,
    max_programs: int = MAX_PROGRAMS,
) -> Written:
    """Write the report of ``run`` (an id, a unique prefix, a name or a job; the latest run
    when None) into ``directory``, made if missing. Raises ReportError."""
    started = time.perf_counter()
    run_id = _run_of(store, run)
    settings = load(store=store)
    from .main import create_app  # the whole service: only when a report is asked for

    app = create_app(settings)
    secret = settings.read_secret()
    headers = [(STATIC_HEADER.encode(), b"1")]
    if secret:
        headers.append((b"authorization", f"Bearer {secret}".encode()))
    directory.mkdir(parents=True, exist_ok=True)
    crawl = _Crawl(app, headers, run_id, directory, max_pages, max_programs)
    asyncio.run(crawl.run())
    return Written(
        directory,
        directory / "index.html",
        run_id,
        crawl.pages,
        crawl.programs,
        len(crawl.left_out),
        time.perf_counter() - started,
    )


def _run_of(store: str, run: str | None) -> str:
    with enginemod.connection(store) as conn:
        if run is not None:
            try:
                return runs.find_run(conn, run).run_id
            except runs.RunNotFound as exc:
                raise ReportError(str(exc.args[0])) from None
        latest = runs.latest_run(conn)
    if latest is None:
        raise ReportError(f"no run in {enginemod.redact_url(store)} yet")
    return latest.run_id


class _Crawl:
    """Breadth first from the overview: fetch a page, note the report's pages it links
    to, write it with its links made relative."""

    def __init__(
        self,
        app: Any,
        headers: list[tuple[bytes, bytes]],
        run_id: str,
        directory: Path,
        max_pages: int,
        max_programs: int,
    ):
        self.app = app
        self.headers = headers
        self.run_id = run_id
        self.directory = directory
        self.max_pages = max_pages
        self.max_programs = max_programs
        self.queued: dict[_Target, str] = {}  # target -> its file
        self.queue: collections.deque[_Target] = collections.deque()
        self.assets: dict[str, str] = {}  # dashboard asset path -> its file
        self.left_out: set[_Target] = set()
        self.pages = 0
        self.programs = 0  # flame graphs written
        self.programs_queued = 0  # flame graphs written or waiting

    async def run(self) -> None:
        for path in ("/", "/functions", "/storms", "/cache"):
            per_page = (("per_page", str(LIST_ROWS)),) if path in ("/functions", "/storms") else ()
            self._enqueue(_Target(path, per_page))
        while self.queue:
            target = self.queue.popleft()
            path, query = target.url(self.run_id)
            status, body = await _get(self.app, path, query, self.headers)
            # A compile whose program was not kept answers 404 with a page that says why.
            if status != 200 and not (target.is_program and status == 404):
                raise ReportError(f"the page {path}?{query} answered {status}")
            name = self.queued[target]
            text = self._relinked(body.decode("utf-8"), name)
            _write(self.directory / name, text.encode("utf-8"))
            self.pages += 1
            self.programs += target.is_program
        for path, name in self.assets.items():
            status, body = await _get(self.app, path, "", self.headers)
            if status != 200:
                raise ReportError(f"the asset {path} answered {status}")
            _write(self.directory / name, body)

    def _enqueue(self, target: _Target) -> str | None:
        """The file of ``target`` in the report, queued if new; None past the caps."""
        if target in self.queued:
            return self.queued[target]
        if target in self.left_out:
            return None
        full = len(self.queued) >= self.max_pages
        if target.is_program and self.programs_queued >= self.max_programs:
            full = True
        if full:
            self.left_out.add(target)
            return None
        name = self.queued[target] = target.file_name()
        self.queue.append(target)
        self.programs_queued += target.is_program
        return name

    def _relinked(self, page: str, name: str) -> str:
        here = posixpath.dirname(name)

        def relink(match: re.Match[str]) -> str:
            attribute, raw = match.group(1), html.unescape(match.group(2))
            found = self._file_for(raw)
            if found is None:
                return match.group(0)
            if found == "":
                # Not in the report: the link stays readable as text, and says why.
                return f'data-dashboard-{attribute}="{html.escape(raw)}" title="not in this report"'
            fragment = raw.partition("#")[2]
            relative = posixpath.relpath(found, here or ".") + (f"#{fragment}" if fragment else "")
            return f'{attribute}="{html.escape(relative)}"'

        return _LINK.sub(relink, page)

    def _file_for(self, raw: str) -> str | None:
        """The report's file for a link: None to leave the link as it is (a fragment, a data
        URL), "" for a page the report does not hold."""
        if not raw or raw.startswith(("#", "data:", "mailto:")):
            return None
        parts = urllib.parse.urlsplit(raw)
        if parts.scheme or parts.netloc or not parts.path.startswith("/"):
            return None if parts.scheme in ("http", "https") else ""
        if parts.path.startswith("/static/"):
            name = "static/" + _UNSAFE.sub("_", parts.path.rsplit("/", 1)[-1])
            self.assets.setdefault(parts.path, name)
            return name
        target = self._target(parts.path, urllib.parse.parse_qsl(parts.query))
        if target is None:
            return ""
        return self._enqueue(target) or ""

    def _target(self, path: str, query: list[tuple[str, str]]) -> _Target | None:
        """The report's page for a dashboard link, or None when the report does not follow it."""
        params = dict(query)
        if _PROGRAM.fullmatch(path):
            extra = set(params) - {"against"}
            return None if extra else _Target(path, tuple(sorted(params.items())))
        if params.pop("run_id", None) != self.run_id:
            return None  # all runs, or another run
        for pattern, allowed in _FOLLOWED:
            if pattern.fullmatch(path):
                if set(params) - allowed:
                    return None
                if path in ("/functions", "/storms"):
                    params["per_page"] = str(LIST_ROWS)
                return _Target(path, tuple(sorted(params.items())))
        return None


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)


async def _get(app: Any, path: str, query: str, headers: list[tuple[bytes, bytes]]) -> tuple[int, bytes]:
    """GET ``path?query`` from the ASGI app in this process: (status, body)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"report.local"), *headers],
        "client": ("127.0.0.1", 0),
        "server": ("report.local", 80),
        "state": {},
    }
    status = 500
    body: list[bytes] = []
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await asyncio.Event().wait()  # nothing more comes: the client never disconnects
        sent = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
        elif message["type"] == "http.response.body":
            body.append(bytes(message.get("body", b"")))

    await app(scope, receive, send)
    return status, b"".join(body)
