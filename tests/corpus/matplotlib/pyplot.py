"""Stand-in for matplotlib.pyplot (see matplotlib/__init__.py): draws nothing."""

from __future__ import annotations

from typing import Any

from . import Nothing


def subplots(nrows: int = 1, ncols: int = 1, **kwargs: Any) -> tuple[Nothing, Any]:
    if nrows == ncols == 1:
        return Nothing(), Nothing()
    if nrows == 1 or ncols == 1:
        return Nothing(), [Nothing() for _ in range(nrows * ncols)]
    return Nothing(), [[Nothing() for _ in range(ncols)] for _ in range(nrows)]


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return Nothing()
