"""Whose code a source file is, by its path alone: an installed library's (JAX's own
for jax, jaxlib and its plugins), the standard library's, or the user's.

The store's readers have only the path: the run may have been recorded on another
machine, with other folders. Capture knows more (capture/identity.py adds the running
interpreter's own folders and a library installed with ``pip install --target`` on the
import path) and decides by this rule first, so that a file is a library's to both
wherever its path says so."""

from __future__ import annotations

import re
import sysconfig

# Where installers put libraries, on every platform and distribution.
INSTALLED_MARKERS = ("/site-packages/", "/dist-packages/")
JAX_PACKAGES = frozenset({"jax", "jaxlib", "jax_plugins"})
# Any interpreter's standard library, where the path was recorded on another machine.
_ANY_STDLIB = re.compile(r"/lib/python3\.\d+/")


def _stdlib_dirs() -> tuple[str, ...]:
    found = {sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib")}
    return tuple(sorted(path.replace("\\", "/").rstrip("/") + "/" for path in found if path))


_STDLIB_DIRS = _stdlib_dirs()


def installed_package(file: str) -> str | None:
    """The top-level package of an installed library's file (``flax`` for
    ``.../site-packages/flax/linen/module.py``); None for any other file."""
    path = file.replace("\\", "/")
    for marker in INSTALLED_MARKERS:
        at = path.rfind(marker)
        if at >= 0:
            return path[at + len(marker) :].split("/", 1)[0]
    return None


def is_installed(file: str) -> bool:
    """Whether ``file`` is an installed library's, JAX's included."""
    return installed_package(file) is not None


def is_jax(file: str) -> bool:
    """Whether ``file`` is JAX's own (installed, or a checkout installed for development)."""
    package = installed_package(file)
    if package is not None:
        return package in JAX_PACKAGES
    return "/jax/_src/" in file.replace("\\", "/")


def is_standard_library(file: str) -> bool:
    """Whether ``file`` is the standard library's (this interpreter's, any interpreter's
    by its folder's name, or a frozen module), not a library installed beneath it."""
    path = file.replace("\\", "/")
    if is_installed(path):
        return False
    return path.startswith("<frozen") or path.startswith(_STDLIB_DIRS) or bool(_ANY_STDLIB.search(path))


def is_library(file: str) -> bool:
    """Whether ``file`` is not the user's: an installed library's or the standard library's."""
    return is_installed(file) or is_standard_library(file)
