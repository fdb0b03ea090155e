"""Stand-in for plotnine, which the corpus programs import to plot their results and which
is not installed: every call is accepted and draws nothing (no file is written). It is found
only by the corpus programs (their folder is first on sys.path when they run); it reads no
array or table handed to it, so it compiles nothing and moves nothing off the device."""

from __future__ import annotations

from typing import Any


class Nothing:
    """A plot, a layer, a theme: any attribute, call or index gives another, and so does
    adding one to another (a plot is built as ``ggplot(df) + aes(...) + geom_line()``)."""

    def __getattr__(self, name: str) -> Nothing:
        if name.startswith("__"):
            raise AttributeError(name)
        return Nothing()

    def __call__(self, *args: Any, **kwargs: Any) -> Nothing:
        return Nothing()

    def __getitem__(self, key: Any) -> Nothing:
        return Nothing()

    def __add__(self, other: Any) -> Nothing:
        return Nothing()

    def __radd__(self, other: Any) -> Nothing:
        return Nothing()


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return Nothing()
