"""Stand-in for plotnine, which the corpus programs import to plot their results and which
is not installed: every call is accepted and draws nothing, no file is written (see
_standin.py)."""

from __future__ import annotations

from _standin import module_getattr

__getattr__ = module_getattr
