"""The library a training program imports never reaches up into the service."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path


def test_the_library_never_imports_the_service():
    script = textwrap.dedent("""
        import sys
        import cachewatch, cachewatch.cli, cachewatch.storms.diagnosis, cachewatch.store.queries, cachewatch.pytest_plugin
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


# The floors of the library, bottom up, and what each may import (besides itself). The
# package's top level (cachewatch/__init__.py, cli.py, cli_report.py, runner.py, notebook.py,
# autoinstall.py, pytest_plugin.py, __main__.py) is the interfaces' floor: it may import every layer, and no layer imports it.
LAYERS = ("core", "explain", "store", "record", "capture") + (
    # The errands: a package per question a user asks, each with its reads, its reasoning and
    # its kept results; they stand on the shared store and on each other only as drawn here.
    ("programs", "cache", "callpaths", "comparison", "fleet", "whatif", "payoff", "storms", "views", "exports")
)
_SHARED = {"core", "explain", "store"}
MAY_IMPORT = {
    "core": set(),
    "explain": {"core"},
    "store": {"core"},
    "record": {"core", "store"},
    "capture": {"core", "explain", "record"},
    "programs": _SHARED,
    "cache": _SHARED | {"programs"},
    "callpaths": _SHARED,
    "comparison": _SHARED,
    "fleet": _SHARED,
    "whatif": _SHARED,
    "payoff": _SHARED,
    "storms": _SHARED | {"programs", "whatif", "callpaths"},
    # What every interface shows, composed once from the errands.
    "views": _SHARED | {"programs", "cache", "callpaths", "comparison", "fleet", "whatif", "payoff", "storms"},
    # A run taken elsewhere: its trace (the store's rows and its storms), and the scalars of
    # log_scalars, which the process itself knows (the recorder's events, what cachestate
    # holds) and which the service never imports.
    "exports": _SHARED | {"storms", "record", "capture"},
}
# The service may read through any layer but capture and the recorder: it serves a store.
SERVICE_MAY_IMPORT = set(LAYERS) - {"capture", "record"}


def _imports_of(root: Path, package: str) -> dict[str, set[str]]:
    """Each module under ``root`` (named as ``package``) and the cachewatch modules it imports,
    at any depth of its code: an import inside a function counts, it is how a circle hides."""
    import ast

    files = {}
    for path in root.rglob("*.py"):
        parts = (package,) + path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        files[name] = path
    library = _library_modules()
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        parent = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = parent.split(".")[: len(parent.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                found = [f"{target}.{a.name}" if f"{target}.{a.name}" in library else target for a in node.names]
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                continue
            graph[name].update(t for t in found if t in library and t != name)
    return graph


def _library_modules() -> set[str]:
    root = Path(__file__).resolve().parent.parent / "cachewatch"
    names = {"cachewatch"}
    for path in root.rglob("*.py"):
        parts = ("cachewatch",) + path.relative_to(root).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    names.add("cachewatch.capture._fastcall")  # the C extension
    return names


def _module_imports() -> dict[str, set[str]]:
    return _imports_of(Path(__file__).resolve().parent.parent / "cachewatch", "cachewatch")


def _layer(module: str) -> str:
    """The floor a library module stands on: its subpackage, or the interfaces on top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYERS) else "interfaces"


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, imported in sorted(graph.items()):
        layer = _layer(module)
        if layer == "interfaces":
            continue
        for target in sorted(imported):
            floor = _layer(target)
            if floor != layer and floor not in MAY_IMPORT[layer]:
                wrong.append(f"{module} ({layer}) imports {target} ({floor})")
    return wrong


def test_every_module_stands_on_a_known_floor():
    graph = _module_imports()
    floors = {_layer(m) for m in graph}
    assert floors == set(LAYERS) | {"interfaces"}
    top = sorted(m for m in graph if _layer(m) == "interfaces")
    assert top == [
        "cachewatch",
        "cachewatch.__main__",
        "cachewatch.ahead",
        "cachewatch.autoinstall",
        "cachewatch.cli",
        "cachewatch.cli_export",
        "cachewatch.cli_report",
        "cachewatch.doctor",
        "cachewatch.notebook",
        "cachewatch.pytest_plugin",
        "cachewatch.runner",
    ]


def test_imports_run_downhill():
    graph = _module_imports()
    assert graph["cachewatch.record.recorder"]
    assert graph["cachewatch.capture.jit"]
    assert layer_violations(graph) == []


def test_the_layer_check_sees_an_import_that_climbs(tmp_path):
    """The direction check itself: a made-up store module importing the recorder, and a
    recorder importing capture from inside a function, are both caught; the resolver
    reads a relative import hidden in a function of a real file."""
    graph = {
        "cachewatch.store.bad": {"cachewatch.record.recorder"},
        "cachewatch.record.recorder": {"cachewatch.capture.counters"},
        "cachewatch.capture.jit": {"cachewatch.record.recorder", "cachewatch.core.events"},
        "cachewatch.cli": {"cachewatch.capture.jit"},
    }
    assert layer_violations(graph) == [
        "cachewatch.record.recorder (record) imports cachewatch.capture.counters (capture)",
        "cachewatch.store.bad (store) imports cachewatch.record.recorder (record)",
    ]
    store = tmp_path / "store"
    store.mkdir()
    (store / "__init__.py").write_text("")
    (store / "bad.py").write_text("def later():\n    from ..capture import counters\n    return counters\n")
    found = _imports_of(tmp_path, "cachewatch")
    assert found["cachewatch.store.bad"] == {"cachewatch.capture.counters"}
    assert layer_violations(found) == ["cachewatch.store.bad (store) imports cachewatch.capture.counters (capture)"]


def test_the_service_reads_a_store_and_never_capture():
    server = Path(__file__).resolve().parent.parent / "server"
    graph = _imports_of(server, "cachewatch_server")
    wrong = [
        f"{module} imports {target}"
        for module, imported in sorted(graph.items())
        for target in sorted(imported)
        if _layer(target) not in SERVICE_MAY_IMPORT
    ]
    assert wrong == []


def test_the_library_has_no_import_circle():
    graph = _module_imports()
    state: dict[str, int] = {}
    path: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for imported in sorted(graph[module]):
            if state.get(imported) == 1:
                circles.append(path[path.index(imported) :] + [imported])
            elif imported not in state and imported in graph:
                visit(imported)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


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
        "cachewatch/capture/_fastcall.pyi",
        "cachewatch/migrations/env.py",
        "cachewatch/migrations/script.py.mako",
        "cachewatch_server/main.py",
        "cachewatch_server/dashboard/templates/base.html",
        # at the top, so that it lands in site-packages, where Python reads it at start
        "cachewatch-install.pth",
    ):
        assert shipped in names
    pth = zipfile.ZipFile(wheel).read("cachewatch-install.pth").decode()
    assert pth == (root / "cachewatch" / "cachewatch-install.pth").read_text()
    assert pth.startswith("import os;")
    assert not any(name.startswith(("server/", "tests/", "benchmarks/")) for name in names)


# ------------------------------------------------------------------ JAX's internals
#
# Only the seam (cachewatch/core/jaxcompat/) reaches into JAX beyond its public API:
# it imports jax._src, walks JAX's frames and reads their locals and closures, and reads
# JAX's log records; capture asks it through typed accessors. Elsewhere each of these is
# refused, so a new one cannot slip past the capabilities that say when JAX changed it.
SEAM = ("cachewatch/core/jaxcompat/",)
# Files that still read JAX's internals themselves, each until it moves into the seam.
# Add nothing here: a new read belongs in the seam.
STILL_OUTSIDE_THE_SEAM: dict[str, str] = {}
# Not JAX's internals: these read the user's own code, the user's call site (the first
# frame outside the libraries) and the values the user's function closes over.
READS_USER_CODE = {
    "cachewatch/capture/identity.py": "the user's call site and the user's function inside a library's closure",
    "cachewatch/capture/captures.py": "the globals and closure values the user's function reads (stale captures)",
}
_FRAME_READS = {"_getframe", "currentframe", "f_locals", "f_back", "__closure__", "cell_contents"}
_LOG_READS = {"addFilter", "CACHE_KEY_LOGGER", "CACHE_KEY_MESSAGE"}


def _docstrings(tree) -> set[int]:
    import ast

    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def jax_internal_reads(source: str) -> list[str]:
    """What a module reads of JAX's internals itself: ``line: what`` for each jax._src
    import or name, frame or closure read, and JAX log record read."""
    import ast

    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found += [f"{line}: import {a.name}" for a in node.names if a.name.startswith("jax._src")]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            module = node.module or ""
            names = {a.name for a in node.names}
            if module.startswith("jax._src") or (module == "jax" and "_src" in names):
                found.append(f"{line}: from {module} import {', '.join(sorted(names))}")
            found += [f"{line}: imports {name}" for name in sorted(names & (_FRAME_READS | _LOG_READS))]
        elif isinstance(node, ast.Attribute) and node.attr in _FRAME_READS | _LOG_READS:
            found.append(f"{line}: .{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if node.value.startswith("jax._src") or node.value in _FRAME_READS:
                found.append(f"{line}: {node.value!r}")
        elif isinstance(node, ast.ClassDef):
            bases = [ast.unparse(base) for base in node.bases]
            found += [
                f"{line}: a log {base} subclass" for base in bases if base.split(".")[-1] in ("Filter", "Handler")
            ]
    return sorted(found, key=lambda read: (int(read.split(":", 1)[0]), read))


def _reads_outside_the_seam() -> dict[str, list[str]]:
    root = Path(__file__).resolve().parent.parent
    found = {}
    for path in sorted([*(root / "cachewatch").rglob("*.py"), *(root / "server").rglob("*.py")]):
        name = path.relative_to(root).as_posix()
        if name.startswith(SEAM):
            continue
        reads = jax_internal_reads(path.read_text())
        if name in READS_USER_CODE:
            # The user's frames and closures only: no jax._src, no JAX log records.
            reads = [r for r in reads if r.split(": ", 1)[1].strip(".'\"") not in _FRAME_READS]
        if reads:
            found[name] = reads
    return found


def test_only_the_seam_reads_jax_internals():
    found = _reads_outside_the_seam()
    seam = Path(__file__).resolve().parent.parent / SEAM[0]
    reads = [r for path in sorted(seam.glob("*.py")) for r in jax_internal_reads(path.read_text())]
    assert len(reads) > 10  # the scan sees the reads where they are
    new = {name: reads for name, reads in found.items() if name not in STILL_OUTSIDE_THE_SEAM}
    assert new == {}, "JAX internals read outside cachewatch/core/jaxcompat/ (add an accessor there): " + str(new)


def test_the_seam_check_sees_every_kind_of_read():
    source = textwrap.dedent('''
        """Docstrings may name jax._src.pjit and f_locals."""
        import logging, sys
        import jax._src.core
        from jax._src import dispatch
        from jax import _src
        from sys import _getframe
        import importlib

        class Parts(logging.Filter):
            pass

        def read():
            frame = sys._getframe(1)
            fun = frame.f_back.f_locals.get("fun")
            cells = getattr(fun, "__closure__", None) or fun.__closure__
            logging.getLogger("jax._src.cache_key").addFilter(Parts())
            return importlib.import_module("jax._src.pjit"), cells[0].cell_contents
    ''')
    assert jax_internal_reads(source) == [
        "4: import jax._src.core",
        "5: from jax._src import dispatch",
        "6: from jax import _src",
        "7: imports _getframe",
        "10: a log logging.Filter subclass",
        "14: ._getframe",
        "15: .f_back",
        "15: .f_locals",
        "16: '__closure__'",
        "16: .__closure__",
        "17: 'jax._src.cache_key'",
        "17: .addFilter",
        "18: 'jax._src.pjit'",
        "18: .cell_contents",
    ]


# A function reads in one screen: 60 lines or more is a function doing several things.
LONGEST_FUNCTION = 60
# The functions allowed to stay longer, each for a reason; none is ever added for convenience.
LONG_FUNCTIONS_ALLOWED: set[tuple[str, str]] = set()


def long_functions(source: str) -> list[tuple[str, int]]:
    """Every function (nested and methods included) of ``LONGEST_FUNCTION`` lines or more,
    from its ``def`` to its last line, with its length."""
    import ast

    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 >= LONGEST_FUNCTION
    ]


def test_no_function_runs_to_sixty_lines():
    root = Path(__file__).resolve().parent.parent
    found = {
        (path.relative_to(root).as_posix(), name): length
        for folder in ("cachewatch", "server")
        for path in sorted((root / folder).rglob("*.py"))
        for name, length in long_functions(path.read_text())
    }
    too_long = sorted(
        f"{path} {name}: {n} lines" for (path, name), n in found.items() if (path, name) not in LONG_FUNCTIONS_ALLOWED
    )
    assert not too_long, "split these into functions that each say what they do:\n" + "\n".join(too_long)
    # An entry whose function got short (or went) leaves the list.
    assert set(LONG_FUNCTIONS_ALLOWED) <= set(found), sorted(set(LONG_FUNCTIONS_ALLOWED) - set(found))


# A module holds one job: past this many lines it holds several, and a newcomer cannot
# read it through.
LONGEST_MODULE = 700


def test_no_module_runs_past_seven_hundred_lines():
    root = Path(__file__).resolve().parent.parent
    too_long = sorted(
        f"{path.relative_to(root).as_posix()}: {n} lines"
        for folder in ("cachewatch", "server")
        for path in (root / folder).rglob("*.py")
        if (n := len(path.read_text().splitlines())) > LONGEST_MODULE
    )
    assert not too_long, "split these by what each part does:\n" + "\n".join(too_long)


def test_the_length_check_counts_from_def_to_last_line():
    body = "\n".join(f"    x{i} = {i}" for i in range(LONGEST_FUNCTION - 2))
    short = f"def short():\n{body}\n"
    long = f"def long():\n{body}\n    return x0\n"
    assert long_functions(short) == []
    assert long_functions(long) == [("long", LONGEST_FUNCTION)]


# What runs SQL: the shared store's modules and each errand's reads and kept results
# (``*_reads.py``, ``kept_*.py``), and nothing else of the library or the service: an
# errand's reasoning, the views and the service get frozen records from those.
_SQL = re.compile(r"\bsa\.(select|insert|update|delete|text)\(|\bconn\.execute\(|\.execute\(sa\.")


def _may_run_sql(path: Path) -> bool:
    return path.parts[-2] == "store" or path.stem.endswith("_reads") or path.stem.startswith("kept_")


def test_only_the_store_and_the_errands_reads_run_sql():
    root = Path(__file__).resolve().parent.parent
    runs_sql = [
        path.relative_to(root)
        for folder in ("cachewatch", "server")
        for path in (root / folder).rglob("*.py")
        if _SQL.search(path.read_text())
    ]
    assert Path("cachewatch/storms/storm_reads.py") in runs_sql  # the scan sees SQL where it is
    found = sorted(str(path) for path in runs_sql if not _may_run_sql(path))
    assert found == [], "move these reads into a *_reads.py of their errand, or cachewatch/store/: " + ", ".join(found)


def test_the_sql_check_sees_a_query():
    assert _SQL.search("rows = conn.execute(q)")
    assert _SQL.search("q = sa.select(t.c.x)")
    assert not _SQL.search("found = storm_reads.flushes_of(conn, runs, hashes)")


def _bindings_of_modules() -> dict[str, dict[str, set[str]]]:
    """Each cachewatch module imported by name in the library or the service, the names it
    is bound to there, and where each name is used."""
    import ast

    names: dict[str, dict[str, set[str]]] = {}
    library = _library_modules()
    root = Path(__file__).resolve().parent.parent
    for folder, package in (("cachewatch", "cachewatch"), ("server", "cachewatch_server")):
        for path in (root / folder).rglob("*.py"):
            parts = (package,) + path.relative_to(root / folder).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            parent = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom):
                    continue
                if node.level:
                    kept = parent.split(".")[: len(parent.split(".")) - node.level + 1]
                    base = ".".join(kept + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:
                    if f"{base}.{alias.name}" in library:
                        bound = names.setdefault(f"{base}.{alias.name}", {})
                        bound.setdefault(alias.asname or alias.name, set()).add(str(path.relative_to(root)))
    return names


def test_each_module_goes_by_one_name():
    """A module read under one name everywhere: ``cache_reads.x`` means the same module in
    every file, so a reader never has to look up which of several aliases it is."""
    bindings = _bindings_of_modules()
    assert len(bindings["cachewatch.store.engine"]) == 1  # the scan sees the library's and the service's imports
    several = {module: sorted(bound) for module, bound in bindings.items() if len(bound) > 1}
    assert several == {}
