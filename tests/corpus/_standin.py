"""What the corpus's stand-ins for plotting and table libraries share: an object that takes
every call and computes nothing. The stand-ins (matplotlib/, pandas/, plotnine/, seaborn/)
are found only by the corpus programs (their folder is first on sys.path when they run);
they read no array handed to them, so they compile nothing and move nothing off the device."""

from __future__ import annotations

from typing import Any


class Nothing:
    """A figure, an axis, a plot, a table: any attribute, call or index gives another, and so
    does arithmetic with it (a plot is built as ``ggplot(df) + aes(...)``, a figure resized
    by ``1.5 * fig.get_size_inches()[1]``)."""

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

    def _arithmetic(self, other: Any) -> Nothing:
        return Nothing()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _arithmetic
    __truediv__ = __rtruediv__ = _arithmetic


def module_getattr(name: str) -> Any:
    """A stand-in module's ``__getattr__``: every public name is a Nothing."""
    if name.startswith("__"):
        raise AttributeError(name)
    return Nothing()
