"""Stand-in for pandas, which the corpus programs import only to shape the tables they plot
and which is not installed: every call is accepted and computes nothing. It is found only by
the corpus programs (their folder is first on sys.path when they run); it reads no array
handed to it, so it compiles nothing and moves nothing off the device."""

from __future__ import annotations

from typing import Any


class Nothing:
    """A DataFrame, a Series, an index: any attribute, call or index gives another."""

    def __getattr__(self, name: str) -> Nothing:
        if name.startswith("__"):
            raise AttributeError(name)
        return Nothing()

    def __call__(self, *args: Any, **kwargs: Any) -> Nothing:
        return Nothing()

    def __getitem__(self, key: Any) -> Nothing:
        return Nothing()


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return Nothing()
