"""Stand-in for pandas, which the corpus programs import only to shape the tables they plot
and which is not installed: every call is accepted and computes nothing. It is found only by
the corpus programs (their folder is first on sys.path when they run); it reads no array
handed to it, so it compiles nothing and moves nothing off the device."""

from __future__ import annotations

from typing import Any


class Nothing:
    """A DataFrame, a Series, an index: any attribute, call or index gives another."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Nothing:
        if name.startswith("__"):
            raise AttributeError(name)
        return Nothing()

    def __call__(self, *args: Any, **kwargs: Any) -> Nothing:
        return Nothing()

    def __getitem__(self, key: Any) -> Nothing:
        return Nothing()


# A capitalised name is a type (DataFrame, Series, Index): a class of its own, so that a
# library's isinstance(x, pandas.DataFrame) check answers False instead of failing.
_TYPES: dict[str, type[Nothing]] = {}


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    if name[:1].isupper():
        return _TYPES.setdefault(name, type(name, (Nothing,), {}))
    return Nothing()
