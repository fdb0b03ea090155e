"""Stand-in for matplotlib.patches (see _standin.py): draws nothing."""

from __future__ import annotations

from _standin import module_getattr

__getattr__ = module_getattr
