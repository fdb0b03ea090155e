"""The library a training program imports never reaches up into the service."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path


def test_the_library_never_imports_the_service():
    script = textwrap.dedent("""
        import sys
        import cachewatch, cachewatch.cli, cachewatch.analysis, cachewatch.store.queries, cachewatch.pytest_plugin
        import jax.numpy as jnp
        cachewatch.jit(lambda x: x + 1)(jnp.ones(3))
        loaded = sorted(m for m in sys.modules
                        if m.split(".")[0] in ("cachewatch_server", "server", "fastapi", "uvicorn", "starlette"))
        print(",".join(loaded))
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={"JAX_PLATFORMS": "cpu", "CACHEWATCH_ENABLED": "0", "PATH": ""},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == ""


def _module_imports() -> dict[str, set[str]]:
    """cachewatch's modules and the cachewatch modules each imports, at any depth of its code
    (an import inside a function counts: it is how a circle hides)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "cachewatch"
    files = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        files[name] = path
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                found = [f"{target}.{a.name}" if f"{target}.{a.name}" in files else target for a in node.names]
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                continue
            # The package itself is what users import; only its entry modules (the CLI, the
            # pytest plugin) import it, and they are imported by nothing.
            graph[name].update(t for t in found if t in files and t not in (name, "cachewatch"))
    return graph


def test_the_library_has_no_import_circle():
    graph = _module_imports()
    assert graph["cachewatch.recorder"] and graph["cachewatch.jit"]  # the walk found imports at all
    state: dict[str, int] = {}
    path: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for imported in sorted(graph[module]):
            if state.get(imported) == 1:
                circles.append(path[path.index(imported) :] + [imported])
            elif imported not in state:
                visit(imported)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_the_store_and_the_worker_know_nothing_of_capture():
    graph = _module_imports()
    capture = {
        "cachewatch.jit",
        "cachewatch._tracking",
        "cachewatch.foreign",
        "cachewatch.opbyop",
        "cachewatch.guards",
        "cachewatch.captures",
        "cachewatch.causes",
        "cachewatch.signature",
    }
    # The worker, the run it records and the store only carry what capture made.
    for module, imported in graph.items():
        if module.startswith("cachewatch.store") or module in ("cachewatch.recorder", "cachewatch.current"):
            assert not imported & capture, (module, imported & capture)


def test_the_store_writes_through_one_module():
    graph = _module_imports()
    writers = {module for module, imported in graph.items() if "cachewatch.store.writes" in imported}
    # In the library only its SQL sink writes rows (the service's ingest is the other writer).
    assert writers == {"cachewatch.store.sinks"}


def test_the_package_builds_without_deprecation_warnings_and_ships_what_it_names(tmp_path):
    """A wheel built as pip builds it: setuptools has nothing to deprecate in the project's
    metadata, and the wheel holds the library, its typing, its migrations and the service."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--verbose", "--no-deps", "--no-cache-dir", "-w", str(tmp_path), "."],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    output = done.stdout + done.stderr
    deprecations = [line for line in output.splitlines() if "deprecat" in line.lower()]
    assert deprecations == []
    (wheel,) = tmp_path.glob("cachewatch-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in (
        "cachewatch/py.typed",
        "cachewatch/_fastcall.pyi",
        "cachewatch/migrations/env.py",
        "cachewatch/migrations/script.py.mako",
        "cachewatch_server/main.py",
        "cachewatch_server/dashboard/templates/base.html",
    ):
        assert shipped in names
    assert not any(name.startswith(("server/", "tests/", "benchmarks/")) for name in names)
