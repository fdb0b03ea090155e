"""Who a jitted function is: name, source location and a hash stable across hosts.

The hash covers the module, qualified name and source text (not the file path, which
differs between checkouts), so the same code run on two machines lands on one row.
A ``functools.partial`` or a bound method is identified by the function inside it:
``jax.jit(partial(body))`` re-created in a loop is the same function every time,
which is exactly what lets cachewatch say "new jit object, same function".
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import types
from typing import Any, Callable

from .events import FunctionInfo


def unwrap_callable(fun: Callable[..., Any]) -> tuple[Callable[..., Any], str]:
    """The innermost plain function behind partials and bound methods, and a tag for the wrapping."""
    tags = []
    while True:
        if isinstance(fun, functools.partial):
            tags.append("partial")
            fun = fun.func
        elif isinstance(fun, types.MethodType):
            tags.append("method")
            fun = fun.__func__
        else:
            break
    return fun, "/".join(tags)


def _source_text(fun: Callable[..., Any]) -> str:
    try:
        return inspect.getsource(fun)
    except (OSError, TypeError):
        code = getattr(fun, "__code__", None)
        if code is not None:
            # No source on disk (REPL, exec): the bytecode is the next best fingerprint.
            return code.co_code.hex() + repr(code.co_names)
        return type(fun).__qualname__


def describe_function(fun: Callable[..., Any]) -> FunctionInfo:
    inner, tag = unwrap_callable(fun)
    target = inner
    if not isinstance(inner, (types.FunctionType, types.BuiltinFunctionType)) and callable(inner):
        # A callable object: identify it by its class's __call__.
        call = getattr(type(inner), "__call__", None)
        if isinstance(call, types.FunctionType):
            target = call
    name = getattr(inner, "__name__", None) or type(inner).__name__
    qualname = getattr(inner, "__qualname__", None) or type(inner).__qualname__
    module = getattr(inner, "__module__", None) or getattr(type(inner), "__module__", "") or ""
    code = getattr(target, "__code__", None)
    file = os.path.abspath(code.co_filename) if code is not None else ""
    line = code.co_firstlineno if code is not None else 0
    if "partial" in tag:
        qualname = f"partial({qualname})"
    digest = hashlib.sha256()
    for part in (module, qualname, tag, _source_text(target)):
        digest.update(part.encode("utf-8", "replace"))
        digest.update(b"\0")
    return FunctionInfo(
        function_hash=digest.hexdigest()[:20],
        name=name,
        qualname=qualname,
        module=module,
        file=file,
        line=line,
    )
