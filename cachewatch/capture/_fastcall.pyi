# Types of the C extension cachewatch/capture/_fastcall.c (the cache-hit path of cachewatch.jit).
from collections.abc import Callable
from typing import Any

class Counter:
    """Calls of one function, and the count at which the next is sampled."""

    calls: int
    next_sample: int

class Watched:
    """A jitted function's cache-hit path: count the call, sample it, or hand it on."""

    __wrapped__: Callable[..., Any]
    def __init__(
        self,
        jitted: Callable[..., Any],
        counter: Counter,
        sampled: Callable[..., Any],
        finish: Callable[[int, tuple[Any, ...], dict[str, Any], BaseException | None], None],
    ) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    # Carries a __dict__, like the function it stands for (__name__, __doc__, ...).
    def __getattr__(self, name: str) -> Any: ...
    def __setattr__(self, name: str, value: Any) -> None: ...

def bump() -> int: ...
def activity() -> int: ...
def pread(fd: int, size: int, offset: int, /) -> bytes: ...
def write(fd: int, data: bytes, /) -> int: ...
