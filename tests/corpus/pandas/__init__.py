"""Stand-in for pandas, which the corpus programs import only to shape the tables they plot
and which is not installed: every call is accepted and computes nothing (see _standin.py)."""

from __future__ import annotations

from typing import Any

from _standin import Nothing, module_getattr

# A capitalised name is a type (DataFrame, Series, Index): a class of its own, so that a
# library's isinstance(x, pandas.DataFrame) check answers False instead of failing.
_TYPES: dict[str, type[Nothing]] = {}


def __getattr__(name: str) -> Any:
    if name[:1].isupper() and not name.startswith("__"):
        return _TYPES.setdefault(name, type(name, (Nothing,), {}))
    return module_getattr(name)
