"""Stand-in for matplotlib, which the corpus programs import to plot their results: every
call is accepted and draws nothing. It is found only by the corpus programs, and by them
ahead of an installed matplotlib (evosax brings one): their folder is first on sys.path
when they run. It touches no array, so it compiles nothing and moves nothing off the device."""

from __future__ import annotations

from typing import Any


class Nothing:
    """A figure, an axis, an artist: any attribute, call or index gives another."""

    def __getattr__(self, name: str) -> Nothing:
        if name.startswith("__"):
            raise AttributeError(name)
        return Nothing()

    def __call__(self, *args: Any, **kwargs: Any) -> Nothing:
        return Nothing()

    def __getitem__(self, key: Any) -> Nothing:
        return Nothing()


def use(*args: Any, **kwargs: Any) -> None:
    pass


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return Nothing()
