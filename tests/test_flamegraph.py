"""A compile's program as a flame graph: a real MLP training step recorded into a store,
drawn from its equation profile, checked against the profile's own counts, and opened
in real headless Chromium from a file (no request but the page, no console error)."""

from __future__ import annotations

import collections
import functools
import os
import re
import sys
import sysconfig
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest
import serverkit as kit
from cachewatch_server.main import create_app
from cachewatch_server.settings import ServerSettings
from conftest import new_run
from fastapi.testclient import TestClient
from test_dashboard import Tab, chromium  # noqa: F401  (the browser fixture, shared)

import cachewatch
from cachewatch import cli
from cachewatch.capture.identity import is_library_file
from cachewatch.core.events import CompileEvent
from cachewatch.programs import flamegraph, program_reads
from cachewatch.programs.flamegraph import FrameKind
from cachewatch.record import current, recorder
from cachewatch.store import engine as enginemod

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
SOURCE = Path(__file__).read_text().splitlines()
NAME = Path(__file__).name


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(SOURCE, 1) if text in line and "line_of" not in line)


# ------------------------------------------------------------------ the program: an MLP's training step


def init_params(key: jax.Array, sizes: tuple[int, ...]) -> list[dict[str, jax.Array]]:
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        key, sub = jax.random.split(key)
        params.append({"w": jax.random.normal(sub, (fan_in, fan_out)) / jnp.sqrt(fan_in), "b": jnp.zeros(fan_out)})
    return params


def forward(params: list[dict[str, jax.Array]], x: jax.Array) -> jax.Array:
    for layer in params[:-1]:
        x = jax.nn.gelu(x @ layer["w"] + layer["b"])  # mlp-layer
    return x @ params[-1]["w"] + params[-1]["b"]  # mlp-head


def loss_fn(params: list[dict[str, jax.Array]], x: jax.Array, y: jax.Array) -> jax.Array:
    logits = forward(params, x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()  # mlp-loss


TX = optax.adam(1e-3)


@cachewatch.jit
def train_step(params: Any, opt_state: Any, x: jax.Array, y: jax.Array) -> Any:
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)  # mlp-grad
    updates, opt_state = TX.update(grads, opt_state, params)  # mlp-update
    return optax.apply_updates(params, updates), opt_state, loss  # mlp-apply


def _train(sizes: tuple[int, ...]) -> None:
    params = init_params(jax.random.key(0), sizes)
    x, y = jnp.ones((16, sizes[0])), jnp.zeros(16, dtype=jnp.int32)
    train_step(params, TX.init(params), x, y)


def _record(url: str, work: Callable[[], object], flush_seconds: float) -> list[CompileEvent]:
    """The events ``work`` records into a new run of the store at ``url``."""
    current.reset_configuration()
    current.configure(store=url)
    new_run()
    seen: list[CompileEvent] = []
    recorder.add_listener(seen.append)
    try:
        work()
        assert recorder.flush(flush_seconds)
    finally:
        recorder.remove_listener(seen.append)
        current.reset_configuration()
    return seen


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Any:
    """Two compiles of the training step in a store: three hidden layers, then four."""
    url = f"sqlite:///{tmp_path_factory.mktemp('flamegraph') / 'store.db'}"

    def train_twice() -> None:
        _train((32, 64, 64, 64, 10))
        _train((32, 64, 64, 64, 64, 10))

    seen = _record(url, train_twice, 30)
    first, second = [e for e in seen if e.function.name == "train_step" and e.compiled]
    return url, first, second


def _profile(url: str, event_id: str) -> list[list[Any]]:
    with enginemod.connection(url) as conn:
        row = program_reads.event(conn, event_id)
        assert row is not None
        kept = program_reads.profile(conn, row["program_fingerprint"])
    assert kept is not None
    assert kept.rows
    return kept.rows


# ------------------------------------------------------------------ the graph against the profile


def test_the_widest_user_frame_is_the_line_with_most_equations(recorded):
    url, first, _ = recorded
    rows = _profile(url, first.event_id)
    root = flamegraph.tree(flamegraph.samples(rows), "train_step")
    # The profile's own counts, per innermost user line.
    per_line: collections.Counter[tuple[str, int, str]] = collections.Counter()
    for file, line, function, _primitive, _loop, count, *_ in rows:
        per_line[(file, line, function)] += count
    (file, line, function), most = per_line.most_common(1)[0]
    assert root.eqns == sum(per_line.values()) == first.jaxpr_eqns
    # Each equation is drawn under its stack, outermost frame first, the primitive last:
    # the innermost user frame above each primitive is the profile's line for it.
    inner: collections.Counter[str] = collections.Counter()
    notes: dict[str, str] = {}
    for path, eqns in _leaf_paths(root):
        assert path[-1].frame.kind == FrameKind.JAX  # the primitive
        users = [node for node in path if node.frame.kind == FrameKind.USER]
        if users:
            inner[users[-1].frame.label] += eqns
            notes[users[-1].frame.label] = users[-1].frame.note
    widest = f"{function} ({NAME}:{line})"
    # An inner jit's equations with no user line of their own are drawn at the line that
    # called it: a line's width is at least its own equations.
    assert inner.most_common(1)[0][0] == widest
    assert inner[widest] >= most
    assert notes[widest] == f"{file}:{line}"
    # What the event recorded as its top line.
    assert first.eqns_by_line is not None
    assert (first.eqns_by_line[0]["line"], first.eqns_by_line[0]["eqns"]) == (line, most)
    # The user's lines of this file are in the graph with their counts.
    mine = {label: n for label, n in inner.items() if notes[label].startswith(__file__)}
    own = {f"{fn} ({NAME}:{ln})": n for (f, ln, fn), n in per_line.items() if f == __file__}
    assert set(mine) == set(own)
    assert all(mine[label] >= n for label, n in own.items())
    assert sum(mine.values()) - sum(own.values()) <= per_line[("", 0, "")]
    for marker in ("# mlp-layer", "# mlp-update", "# mlp-loss", "# mlp-apply"):
        assert any(label.endswith(f":{line_of(marker)})") for label in mine), marker
    # The stack nests: the test's own frames stand above the lines they called.
    assert any(len([n for n in path if n.frame.kind == FrameKind.USER]) > 1 for path, _ in _leaf_paths(root))


def _leaf_paths(node: flamegraph.Node, path: tuple = ()) -> list[tuple[tuple, int]]:
    here = (*path, node) if node.frame.kind != FrameKind.ROOT else path
    if not node.children:
        return [(here, node.eqns)]
    return [found for child in node.children for found in _leaf_paths(child, here)]


def _walk(node: flamegraph.Node) -> list[flamegraph.Node]:
    return [node] + [n for child in node.children for n in _walk(child)]


def test_frame_widths_sum_to_their_parents(recorded):
    url, first, _ = recorded
    root = flamegraph.tree(flamegraph.samples(_profile(url, first.event_id)), "train_step")
    for node in _walk(root):
        if node.children:
            assert sum(child.eqns for child in node.children) == node.eqns, node.frame
    # Drawn: each frame's children tile it, left to right, and their rectangles' widths
    # add up to the frame's.
    picture = ET.fromstring(flamegraph.svg(root))
    ns = {"s": "http://www.w3.org/2000/svg"}
    drawn = []
    for g in picture.findall("s:g", ns):
        rect = g.find("s:rect", ns)
        assert rect is not None
        assert g.find("s:title", ns) is not None
        drawn.append((int(g.get("data-depth", "")), float(rect.get("x", "")), float(rect.get("width", ""))))
    assert drawn[0] == (0, 0.0, flamegraph.WIDTH)
    assert len(drawn) == len(_walk(root))
    for i, (depth, x, width) in enumerate(drawn):
        children = []
        for other in drawn[i + 1 :]:
            if other[0] <= depth:
                break
            if other[0] == depth + 1:
                children.append(other)
        if children:
            assert sum(w for _, _, w in children) == pytest.approx(width, abs=0.01 * len(children))
            assert children[0][1] == pytest.approx(x, abs=0.01)


def test_the_users_frames_carry_the_user_class(recorded, tmp_path):
    url, first, _ = recorded
    out = tmp_path / "graph.html"
    assert cli.main(["program", first.event_id, "--store", url, "--format", "flamegraph", "-o", str(out)]) == 0
    document = out.read_text()
    frames = re.findall(r'<g class="f (\w+)" [^>]*data-label="([^"]*)"', document)
    assert frames
    mine = [kind for kind, label in frames if f"({NAME}:" in label]
    assert len(mine) >= 5
    assert set(mine) == {"user"}
    assert {kind for kind, _ in frames} <= {"root", "user", "library", "jax"}
    # One document, nothing fetched: no src or href, no URL but the SVG namespace.
    assert not re.search(r"\s(src|href)=", document)
    assert set(re.findall(r"https?://[^\s\"'<>]+", document)) == {"http://www.w3.org/2000/svg"}
    # The plain SVG: the same frames, no script.
    picture = tmp_path / "graph.svg"
    assert cli.main(["program", first.event_id, "--store", url, "--format", "flamegraph", "-o", str(picture)]) == 0
    text = picture.read_text()
    assert text.startswith("<svg")
    assert "<script" not in text
    assert re.findall(r'<g class="f (\w+)" [^>]*data-label="([^"]*)"', text) == frames


def test_frames_are_classified_by_path_as_the_capture_tells_them_apart():
    purelib = sysconfig.get_paths()["purelib"]
    cases = {
        __file__: FrameKind.USER,
        jax.__file__: FrameKind.JAX,
        os.path.join(purelib, "jaxlib", "xla_client.py"): FrameKind.JAX,
        optax.__file__: FrameKind.LIBRARY,
        functools.__file__: FrameKind.LIBRARY,
        "/opt/venv/lib/python3.12/site-packages/flax/linen/linear.py": FrameKind.LIBRARY,
        "/usr/lib/python3.12/functools.py": FrameKind.LIBRARY,
        "<frozen importlib._bootstrap>": FrameKind.LIBRARY,
        "/home/me/project/model.py": FrameKind.USER,
        "": FrameKind.JAX,
    }
    assert {path: flamegraph.frame_kind(path) for path in cases} == cases
    for path in (__file__, jax.__file__, optax.__file__, functools.__file__):  # as the capture judges them here
        assert (flamegraph.frame_kind(path) == FrameKind.USER) == (not is_library_file(path)), path


def test_every_reader_and_the_capture_call_the_same_files_a_librarys():
    """One rule by path (core/sources.py) for the flame graph, the storms' library fixes,
    the unrolled-loop check and the capture: a Debian dist-packages library, a user-site
    one and a virtualenv's are libraries to all of them; the user's files to none."""
    from cachewatch.storms.fixes import is_library_function

    installed = [
        "/usr/lib/python3/dist-packages/optax/_src/alias.py",
        "/home/me/.local/lib/python3.11/site-packages/flax/linen/module.py",
        "/opt/venv/lib/python3.12/site-packages/numpyro/infer/mcmc.py",
    ]
    for path in installed:
        assert flamegraph.frame_kind(path) == FrameKind.LIBRARY, path
        assert is_library_function("somewhere", path), path
        assert is_library_file(path), path
    for path in ("/home/me/project/train.py", __file__):
        assert flamegraph.frame_kind(path) == FrameKind.USER, path
        assert not is_library_function("train", path), path
        assert not is_library_file(path), path


# ------------------------------------------------------------------ the diff of two compiles


def test_diff_colours_what_grew(recorded, capsys):
    url, first, second = recorded
    before = flamegraph.tree(flamegraph.samples(_profile(url, first.event_id)), "train_step")
    after = flamegraph.tree(flamegraph.samples(_profile(url, second.event_id)), "train_step")
    assert flamegraph.diff(before, after) == []  # the same lines, one layer more
    layer = next(n for n in _walk(after) if n.frame.label.endswith(f":{line_of('# mlp-layer')})"))
    earlier = next(n for n in _walk(before) if n.frame == layer.frame)
    assert layer.before == earlier.eqns
    assert layer.eqns > earlier.eqns  # a fourth hidden layer
    assert after.before == first.jaxpr_eqns
    assert after.eqns == second.jaxpr_eqns
    assert cli.main(["diff", first.event_id, second.event_id, "--store", url, "--format", "flamegraph"]) == 0
    document = capsys.readouterr().out
    assert document.startswith("<!DOCTYPE html>")
    found = re.search(
        rf'data-label="{re.escape(layer.frame.label)}"[^>]*data-before="(\d+)"[^>]*>.*?fill="#(\w\w)(\w\w)(\w\w)"',
        document,
        re.DOTALL,
    )
    assert found is not None
    assert int(found.group(1)) == earlier.eqns
    red, _, blue = (int(found.group(i), 16) for i in (2, 3, 4))
    assert red > blue  # grew: red
    # Gone frames are listed: the same graph against a program without the head line.
    head = line_of("# mlp-head")
    fewer = [r for r in _profile(url, first.event_id) if r[1] != head]
    gone = flamegraph.diff(
        flamegraph.tree(flamegraph.samples(_profile(url, first.event_id))), flamegraph.tree(flamegraph.samples(fewer))
    )
    assert [g.path[-1] for g in gone] == [f"forward ({NAME}:{head})"]
    assert gone[0].eqns == sum(r[5] for r in _profile(url, first.event_id) if r[1] == head)


# ------------------------------------------------------------------ in the dashboard


def test_the_dashboard_serves_it_and_links_it(recorded):
    url, first, second = recorded
    with TestClient(create_app(ServerSettings(store=url, write_token=None, read_token=None))) as client:
        response = client.get(f"/programs/{first.event_id}/flamegraph")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/html")
        assert response.headers["content-security-policy"] == flamegraph.CONTENT_SECURITY_POLICY
        assert response.text == cli_output(url, first.event_id)
        diffed = client.get(f"/programs/{second.event_id}/flamegraph", params={"against": first.event_id})
        assert diffed.status_code == 200
        assert "data-before=" in diffed.text
        missing = client.get("/programs/nope/flamegraph")
        assert missing.status_code == 404
        assert "no event" in missing.text
        page = client.get(f"/functions/{first.function.function_hash}").text
        assert f'href="/programs/{second.event_id}/flamegraph"' in page  # the largest program
        assert f'href="/programs/{second.event_id}/flamegraph?against={first.event_id}"' in page
    # Behind the read token like every page.
    settings = ServerSettings(store=url, write_token=None, read_token=kit.READ_TOKEN)
    with TestClient(create_app(settings)) as client:
        refused = client.get(f"/programs/{first.event_id}/flamegraph", follow_redirects=False)
        assert refused.status_code == 303
        assert refused.headers["location"].startswith("/login")


def cli_output(url: str, event_id: str) -> str:
    with enginemod.connection(url) as conn:
        return flamegraph.for_event(conn, event_id)


# ------------------------------------------------------------------ in the browser


def _open(browser: Any, path: Path, shots: Path) -> tuple[Any, Tab, list[str]]:
    page = browser.new_page(viewport={"width": 1260, "height": 200})
    tab = Tab(page, "", shots)
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(path.as_uri())
    page.wait_for_function("() => document.documentElement.getAttribute('data-flamegraph') === 'ready'")
    return page, tab, requests


def _width(page: Any, label: str) -> float:
    return float(page.eval_on_selector(f'g.f[data-label="{label}"] rect', "r => r.getAttribute('width')"))


def test_it_zooms_in_chromium_with_nothing_fetched(recorded, chromium, tmp_path):  # noqa: F811
    url, first, second = recorded
    document = tmp_path / "flamegraph.html"
    assert cli.main(["program", first.event_id, "--store", url, "--format", "flamegraph", "-o", str(document)]) == 0
    page, tab, requests = _open(chromium, document, IMAGES)
    try:
        root = flamegraph.tree(flamegraph.samples(_profile(url, first.event_id)), "train_step")
        widest = max((n for n in root.children if n.frame.kind == FrameKind.USER), key=lambda n: n.eqns)
        label, total = widest.frame.label, root.eqns
        assert _width(page, label) == pytest.approx(flamegraph.WIDTH * widest.eqns / total, abs=0.01)
        assert page.get_attribute(f'g.f[data-label="{label}"]', "class") == "f user"
        page.hover(f'g.f[data-label="{label}"]')
        detail = page.inner_text("#detail")
        assert detail.startswith(f"{label}: {widest.eqns:,} equations, {100 * widest.eqns / total:.1f}% of the program")
        tab.shot("flamegraph")
        page.click(f'g.f[data-label="{label}"]')
        assert _width(page, label) == pytest.approx(flamegraph.WIDTH, abs=0.01)
        leaf = widest.children[0]
        assert float(
            page.eval_on_selector(
                f'g.f[data-label="{label}"] ~ g.f[data-label="{leaf.frame.label}"] rect', "r => r.getAttribute('width')"
            )
        ) == pytest.approx(flamegraph.WIDTH * leaf.eqns / widest.eqns, abs=0.01)
        page.click('g.f[data-depth="0"]')
        assert _width(page, label) == pytest.approx(flamegraph.WIDTH * widest.eqns / total, abs=0.01)
        tab.assert_clean()
        assert requests == [document.as_uri()]
    finally:
        page.close()
    diffed = tmp_path / "flamegraph-diff.html"
    with enginemod.connection(url) as conn:
        diffed.write_text(flamegraph.for_diff(conn, second.event_id, first.event_id))
    page, tab, requests = _open(chromium, diffed, IMAGES)
    try:
        page.hover('g.f[data-id="1"]')
        assert "before" in page.inner_text("#detail")
        tab.shot("flamegraph-diff")
        tab.assert_clean()
        assert requests == [diffed.as_uri()]
    finally:
        page.close()


# ------------------------------------------------------------------ a 13,000-equation step


def test_a_large_steps_widest_user_line_is_drawn_widest(chromium, tmp_path):  # noqa: F811
    """A transformer-like training step (benchmarks/program_view.py, 13 blocks: the
    recorded program is over 13,000 equations) recorded and drawn in Chromium: the user's
    line with most equations is the widest user frame at its depth, its frames as wide as
    its equations."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from program_view import make_transformer

    url = f"sqlite:///{tmp_path / 'store.db'}"

    def compile_step() -> None:
        step, args = make_transformer(13)
        jax.block_until_ready(cachewatch.jit(step)(*args))

    seen = _record(url, compile_step, 60)
    (event,) = [e for e in seen if e.function.name == "step" and e.compiled]
    assert event.jaxpr_eqns is not None
    assert event.jaxpr_eqns > 13_000
    rows = _profile(url, event.event_id)
    per_line: collections.Counter[tuple[str, int, str]] = collections.Counter()
    for file, line, function, _primitive, _loop, count, *_ in rows:
        per_line[(file, line, function)] += count
    (file, line, function), most = per_line.most_common(1)[0]
    assert file.endswith("program_view.py")
    label = f"{function} (program_view.py:{line})"
    root = flamegraph.tree(flamegraph.samples(rows), "step")
    assert root.eqns == event.jaxpr_eqns
    document = tmp_path / "flamegraph-large.html"
    assert cli.main(["program", event.event_id, "--store", url, "--format", "flamegraph", "-o", str(document)]) == 0
    page, tab, requests = _open(chromium, document, IMAGES)
    try:
        drawn = page.eval_on_selector_all(
            "g.f",
            "gs => gs.map(g => [g.dataset.label, g.getAttribute('class'), Number(g.dataset.depth),"
            " Number(g.querySelector('rect').getAttribute('width'))])",
        )
        tab.shot("flamegraph-large")
        tab.assert_clean()
        assert requests == [document.as_uri()]
    finally:
        page.close()
    # Drawn in the tree's order (each frame, then its children): the frames of the line,
    # each as wide as the tree's node, the outermost of them together as wide as the
    # line's equations (or wider: an inner jit's equations with no line of their own are
    # drawn at the line that called it).
    nodes = [(node, depth) for node, depth in _depths(root) if depth > 0]
    assert [(d[0], d[2]) for d in drawn[1:]] == [(node.frame.label, depth) for node, depth in nodes]
    for (node, _), (_, _, _, width) in zip(nodes, drawn[1:], strict=True):
        assert width == pytest.approx(flamegraph.WIDTH * node.eqns / root.eqns, abs=0.01)
    mine = [i for i, (name, _, _, _) in enumerate(drawn) if name == label]
    assert mine
    assert all(kind == "f user" for name, kind, _, _ in drawn if name == label)
    outermost = [i for i in mine if label not in _ancestors(drawn, i)]
    assert sum(drawn[i][3] for i in outermost) >= flamegraph.WIDTH * most / root.eqns - 0.01 * len(outermost)
    # The line's widest frame is the widest user frame drawn at its depth.
    widest = max(mine, key=lambda i: drawn[i][3])
    depth = drawn[widest][2]
    users = [d for d in drawn if d[2] == depth and d[1] == "f user"]
    assert max(users, key=lambda d: d[3])[0] == label, (depth, sorted(users, key=lambda d: -d[3])[:3])


def _depths(node: flamegraph.Node, depth: int = 0) -> list[tuple[flamegraph.Node, int]]:
    return [(node, depth)] + [found for child in node.children for found in _depths(child, depth + 1)]


def _ancestors(drawn: list[list[Any]], i: int) -> list[str]:
    """The labels of the frames above the ``i``-th drawn frame (drawn parent first)."""
    found, depth = [], drawn[i][2]
    for name, _, d, _ in reversed(drawn[:i]):
        if d < depth:
            found.append(name)
            depth = d
    return found
