"""cachewatch's scalars beside a loss curve, in TensorBoard's own UI, offline.

A tiny training loop (tests/programs/tensorboard_loop.py) runs under
``cachewatch run --log-to tensorboard:runs/exp-42 --log-every 1`` and logs its own loss
into the same directory with tensorboardX. TensorBoard's server, from the installed
package, serves that directory on a free loopback port; its data API must give the
run's compiles as the store counts them (``cachewatch report --format json``), and
its scalars dashboard, in real headless Chromium, must draw the cachewatch tags and the
loss with no request leaving 127.0.0.1. The picture goes to
docs/images/tensorboard-scalars.png.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_dashboard import chromium  # noqa: F401  (the browser fixture, shared)

from cachewatch import cli

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "programs" / "tensorboard_loop.py"
IMAGES = ROOT / "docs" / "images"
LOGDIR = "runs/exp-42"  # under the test's folder, which every command runs in
RUN = "exp-42"  # TensorBoard's name for it, served with --logdir runs
COMPILES = "cachewatch/compiles"
RECOMPILES = "cachewatch/recompiles"
# The charts in the picture, and the filter that puts them side by side.
SHOWN = (COMPILES, RECOMPILES, "cachewatch/compile_seconds", "loss")
TAG_FILTER = "cachewatch/(compiles|recompiles|compile_seconds)|loss"
EVERY_TAG = (*SHOWN, "cachewatch/live_executables", "cachewatch/compile_share")
SERVER_START_S = 60  # until TensorBoard answers with every tag loaded
DRAWN_MS = 60_000  # until the dashboard has drawn every chart


@dataclasses.dataclass(frozen=True)
class Trained:
    folder: Path
    store: str
    run_id: str
    steps: int


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Trained:
    """The training loop, run by ``cachewatch run --log-to tensorboard:runs/exp-42``."""
    folder = tmp_path_factory.mktemp("tensorboard")
    store = f"sqlite:///{folder / 'store.db'}"
    env = {
        **os.environ,
        "CACHEWATCH_STORE": store,
        "JAX_PLATFORMS": "cpu",
        "CACHEWATCH_RAISE_INTERNAL_ERRORS": "1",
    }
    command = [sys.executable, "-m", "cachewatch", "run", "--log-to", f"tensorboard:{LOGDIR}", "--log-every", "1"]
    done = subprocess.run(
        [*command, str(PROGRAM), LOGDIR], cwd=folder, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ran = json.loads(done.stdout.strip().splitlines()[-1])
    files = sorted(p.name for p in (folder / LOGDIR).iterdir())
    assert len(files) == 2, files  # cachewatch's event file and the program's
    return Trained(folder, store, ran["run_id"], ran["steps"])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy


def _get(url: str) -> Any:
    with OPENER.open(url, timeout=10) as response:
        return json.loads(response.read())


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)


def _serve(folder: Path, port: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", "runs", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--load_fast=false"]  # one process, its Python loader
    log = (folder / f"tensorboard-{port}.log").open("wb")
    try:
        return subprocess.Popen(
            command,
            cwd=folder,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "no_proxy": "127.0.0.1", "NO_PROXY": "127.0.0.1"},
            start_new_session=True,  # its own process group, ended as a whole
        )
    finally:
        log.close()


def _loaded(base: str) -> bool:
    """Whether the server answers and has read every tag of the run."""
    try:
        tags = _get(base + "/data/plugin/scalars/tags")
    except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
        return False
    return set(EVERY_TAG) <= set(tags.get(RUN, {}))


@pytest.fixture(scope="module")
def tensorboard(trained) -> Iterator[str]:
    """TensorBoard serving runs/ on a free loopback port: its base URL."""
    failures: list[str] = []
    for _ in range(3):  # a port taken between finding it and binding it: another one
        port = _free_port()
        server = _serve(trained.folder, port)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + SERVER_START_S
            while server.poll() is None and time.monotonic() < deadline:
                if _loaded(base):
                    yield base
                    return
                time.sleep(0.25)
            if server.poll() is None:
                log = (trained.folder / f"tensorboard-{port}.log").read_text(errors="replace")
                pytest.fail(f"TensorBoard ran but did not serve the run's tags in {SERVER_START_S} s:\n{log[-3000:]}")
            failures.append((trained.folder / f"tensorboard-{port}.log").read_text(errors="replace")[-1500:])
        finally:
            _stop(server)
    pytest.skip("TensorBoard's server cannot start on this machine:\n" + "\n---\n".join(failures))


def _store_compiles(trained: Trained, capsys) -> dict[str, float]:
    """The run's compiles and recompiles as ``cachewatch report --format json`` sums them."""
    capsys.readouterr()
    assert cli.main(["report", "--store", trained.store, "--run", trained.run_id, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    return {COMPILES: sum(r["compiles"] for r in rows), RECOMPILES: sum(r["recompiles"] for r in rows)}


def _served(base: str, tag: str) -> list[list[float]]:
    """[wall time, step, value] per point, as TensorBoard's scalars API serves them."""
    query = urllib.parse.urlencode({"tag": tag, "run": RUN})
    return list(_get(f"{base}/data/plugin/scalars/scalars?{query}"))


def test_tensorboard_serves_the_runs_compiles_as_the_store_counts_them(trained, tensorboard, capsys):
    store = _store_compiles(trained, capsys)
    assert store[COMPILES] >= 6  # the first batch size and five others
    assert store[RECOMPILES] == store[COMPILES] - 1
    for tag in (COMPILES, RECOMPILES):
        points = _served(tensorboard, tag)
        values = [value for _, _, value in points]
        assert values == sorted(values), tag  # running totals
        assert values[-1] == store[tag], tag  # the last point is the run's total
    loss = _served(tensorboard, "loss")
    assert [step for _, step, _ in loss] == list(range(trained.steps))
    assert loss[-1][2] < loss[0][2]  # it trained


# Every scalar card, through the dashboard's shadow roots: tag -> points drawn on its line.
DRAWN = """() => {
  const all = (root, selector, found = []) => {
    root.querySelectorAll('*').forEach(el => {
      if (el.matches(selector)) found.push(el);
      if (el.shadowRoot) all(el.shadowRoot, selector, found);
    });
    return found;
  };
  const drawn = {};
  for (const card of all(document, 'tf-scalar-card')) {
    const lines = all(card.shadowRoot || card, 'path.line').map(p => p.getAttribute('d') || '');
    const points = Math.max(0, ...lines.map(d => (d.match(/[ML]/g) || []).length));
    if (card.tag) drawn[card.tag] = Math.max(drawn[card.tag] || 0, points);
  }
  return drawn;
}"""


def test_the_scalars_dashboard_draws_them_beside_the_loss(trained, tensorboard, chromium):  # noqa: F811
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    requests: list[str] = []
    outside: list[str] = []
    errors: list[str] = []

    def route(r: Any) -> None:
        if urllib.parse.urlsplit(r.request.url).hostname == "127.0.0.1":
            r.continue_()
        else:  # nothing is let out: it would be a request off the machine
            outside.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.on("request", lambda request: requests.append(request.url))
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    try:
        state = urllib.parse.urlencode({"tagFilter": TAG_FILTER, "_smoothingWeight": "0"}, quote_via=urllib.parse.quote)
        page.goto(f"{tensorboard}/#scalars&{state}")
        page.get_by_role("checkbox", name="Ignore outliers in chart scaling").uncheck(timeout=DRAWN_MS)
        # Each chart of the picture drawn: the loss with a point per step, cachewatch's with any.
        least = {tag: 1 for tag in SHOWN} | {"loss": trained.steps}
        every_drawn = (
            f"least => {{ const drawn = ({DRAWN})(); return Object.keys(least).every(t => drawn[t] >= least[t]); }}"
        )
        page.wait_for_function(every_drawn, arg=least, timeout=DRAWN_MS)
        drawn = page.evaluate(DRAWN)
        assert drawn["loss"] == trained.steps  # one point per step
        for tag in (COMPILES, "loss"):  # the charts' titles, on screen
            assert page.get_by_text(tag, exact=True).first.is_visible(), tag
        pane = page.locator("tf-category-paginated-view").first  # the filter's
        assert sorted(pane.locator("tf-scalar-card").evaluate_all("cards => cards.map(c => c.tag)")) == sorted(SHOWN)
        box = pane.bounding_box()
        assert box is not None
        IMAGES.mkdir(parents=True, exist_ok=True)
        height = min(900.0, box["y"] + box["height"] + 12)
        page.screenshot(
            path=str(IMAGES / "tensorboard-scalars.png"), clip={"x": 0, "y": 0, "width": 1400, "height": height}
        )
        assert not outside, f"TensorBoard's page asked for something off the machine: {outside}"
        assert requests
        assert {urllib.parse.urlsplit(u).hostname for u in requests} == {"127.0.0.1"}, requests
        assert not errors, errors
    finally:
        page.close()
