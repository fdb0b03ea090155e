"""Stand-in for matplotlib.pyplot (see _standin.py): draws nothing."""

from __future__ import annotations

from typing import Any

from _standin import Nothing, module_getattr


def subplots(nrows: int = 1, ncols: int = 1, **kwargs: Any) -> tuple[Nothing, Any]:
    if nrows == ncols == 1:
        return Nothing(), Nothing()
    if nrows == 1 or ncols == 1:
        return Nothing(), [Nothing() for _ in range(nrows * ncols)]
    return Nothing(), [[Nothing() for _ in range(ncols)] for _ in range(nrows)]


__getattr__ = module_getattr
