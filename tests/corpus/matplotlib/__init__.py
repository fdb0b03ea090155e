"""Stand-in for matplotlib, which the corpus programs import to plot their results: every
call is accepted and draws nothing (see _standin.py). Found ahead of an installed
matplotlib (evosax brings one)."""

from __future__ import annotations

from typing import Any

from _standin import Nothing, module_getattr

__all__ = ["Nothing", "use"]


def use(*args: Any, **kwargs: Any) -> None:
    pass


__getattr__ = module_getattr
