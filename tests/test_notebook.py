"""Notebooks: a real .ipynb executed through a Jupyter kernel (nbclient, ipykernel), with
``%load_ext cachewatch`` and ``%%cachewatch`` on a cell that storms: the table under that
cell names the function, its cause with the diff, and the storm with its fix. In this
process, the cell's report and a compile event render themselves as HTML and text."""

from __future__ import annotations

import os
import re

import jax.numpy as jnp
import nbformat
import pytest
from nbclient import NotebookClient

import cachewatch
from cachewatch.core.events import CompileEvent
from cachewatch.notebook import CellReport
from cachewatch.record import recorder

CELLS = [
    "%load_ext cachewatch\nimport jax, jax.numpy as jnp",
    # A storm: a new batch size at every step, each a compile.
    "%%cachewatch\n@jax.jit\ndef step(x):\n    return (x * 2.0).sum()\nfor n in range(1, 11):\n    step(jnp.ones((n, 3)))",
    "%%cachewatch\nstep(jnp.ones((4, 3)))  # served by the cache",
    "%cachewatch on",
    "step(jnp.ones((5, 3)))",
    "step(jnp.ones((64, 3))).shape",
    "%cachewatch off",
    "step(jnp.ones((65, 3))).shape",
    # NumPy inputs: the jit's own executables and nothing eager beside them.
    "%%cachewatch\nimport numpy as np\nadd = jax.jit(lambda x: x + 1)\n"
    "for n in range(1, 4):\n    add(np.ones(n, np.float32))",
    "add._cache_size()",
    "%%cachewatch\njax.clear_caches()\nadd(np.ones(1, np.float32)).shape",
]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    work = tmp_path_factory.mktemp("notebook")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    path = work / "storm.ipynb"
    nbformat.write(notebook, path)
    env = {
        "JAX_PLATFORMS": "cpu",
        "CACHEWATCH_STORE": f"sqlite:///{work / 'store.db'}",
        "CACHEWATCH_RAISE_INTERNAL_ERRORS": "1",
    }
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        notebook = nbformat.read(path, as_version=4)
        NotebookClient(
            notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(work)}}
        ).execute()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return notebook


def outputs(cell, mime: str) -> list[str]:
    return [
        o["data"][mime] for o in cell.outputs if o.get("output_type") == "display_data" and mime in o.get("data", {})
    ]


def rows(html: str, table_class: str) -> list[list[str]]:
    table = html.split(f'class="{table_class}"', 1)[1].split("</table>", 1)[0]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]]


def test_the_storm_cell_shows_its_compiles_causes_and_the_storm(executed):
    (html,) = outputs(executed.cells[1], "text/html")
    assert "this cell compiled" in html
    steps = [r for r in rows(html, "cachewatch-compiles") if r[0] == "step"]
    assert [r[1] for r in steps] == ["first_call (warm-up)"] + ["new_shape"] * 9
    assert "x: float32[1,3] -&gt; float32[2,3]" in steps[1][2]
    (storm,) = [r for r in rows(html, "cachewatch-storms") if r[0] == "step"]
    assert storm[1] == "new_shape"
    assert int(storm[2]) >= 5
    assert "pad" in storm[3]
    (text,) = outputs(executed.cells[1], "text/plain")
    assert "Storm in step:" in text
    assert "new_shape" in text


def test_a_cell_that_compiled_nothing_says_so_and_on_shows_only_cells_that_compiled(executed):
    assert outputs(executed.cells[2], "text/plain") == ["cachewatch: this cell compiled nothing."]
    assert outputs(executed.cells[4], "text/html") == []  # cached shape (5, 3): nothing to show
    (html,) = outputs(executed.cells[5], "text/html")  # a new shape, with %cachewatch on
    assert [r[1] for r in rows(html, "cachewatch-compiles") if r[0] == "step"] == ["new_shape"]
    assert outputs(executed.cells[7], "text/html") == []  # off again
    # The cells' own results are shown as ever.
    results = [o["data"]["text/plain"] for o in executed.cells[5].outputs if o["output_type"] == "execute_result"]
    assert results == ["()"]


def test_a_compile_event_and_a_cell_report_render_themselves(use_store, sqlite_url):
    use_store(sqlite_url)
    seen: list[CompileEvent] = []
    recorder.add_listener(seen.append, at_once=True)
    try:

        @cachewatch.jit
        def double(x):
            return x * 2

        double(jnp.ones(2))
        double(jnp.ones(3))
    finally:
        recorder.remove_listener(seen.append)
    events = [e for e in seen if e.function.name == "double" and e.compiled]
    html = events[1]._repr_html_()
    assert "<td" in html
    assert "new_shape" in html
    assert "x: float32[2] -&gt; float32[3]" in html
    report = CellReport(events, [])
    report_html = report._repr_html_()
    assert report_html is not None
    assert "this cell compiled 2 times (1 function," in report_html
    assert repr(report).splitlines()[2].split()[:2] == ["double", "first_call"]
    assert CellReport([], [], always=False)._repr_html_() is None


def test_the_run_report_renders_itself(use_store, sqlite_url):
    use_store(sqlite_url)

    @cachewatch.jit
    def grow(x):
        return x + 1

    for n in range(1, 4):
        grow(jnp.ones(n))
    report = cachewatch.report()
    row = next(f for f in report.summary["functions"] if f["name"].endswith("grow"))
    assert row["compiles"] == 3
    assert row["causes"] == {"new_shape": 2, "first_call": 1}
    assert row["calls"] == 3
    html = report._repr_html_()
    assert 'class="cachewatch-functions"' in html
    assert "new_shape=2" in html
    assert repr(report).startswith(f"cachewatch: run {report.summary['run_id'][:12]}: ")


def test_a_cell_says_how_many_executables_it_left_alive(executed):
    (text,) = outputs(executed.cells[8], "text/plain")
    # JAX's own count of the jit's executables, read in the notebook.
    held = [o["data"]["text/plain"] for o in executed.cells[9].outputs if o["output_type"] == "execute_result"]
    assert held == ["3"]
    assert "it left 3 executables alive in JAX's caches (" in text
    assert " of code)" in text
    # After jax.clear_caches(), only what the cell compiled again is alive.
    (again,) = outputs(executed.cells[10], "text/plain")
    assert "this cell compiled 1 time" in again
    assert "it left 1 executable alive" in again
