"""Stand-in for seaborn, which JAX MD's examples import to style their plots and which is
not installed: every call is accepted and draws nothing (see _standin.py)."""

from __future__ import annotations

from _standin import module_getattr

__getattr__ = module_getattr
