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
import sys
import sysconfig
import types
from collections.abc import Callable
from typing import Any

import jax

from ..core import sources
from ..core.events import FunctionInfo
from ..core.warmup import USER_FRAMES


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


def _library_dirs() -> tuple[str, ...]:
    """Where installed libraries and the standard library live: code there is not the user's."""
    dirs: set[str] = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.update((os.path.abspath(path), os.path.realpath(path)))
    for path in sys.path:
        if path.rstrip(os.sep).endswith(("site-packages", "dist-packages")) or _holds_installed(path):
            dirs.update((os.path.abspath(path), os.path.realpath(path)))
    return tuple(sorted(d + os.sep for d in dirs))


def _holds_installed(path: str) -> bool:
    """Whether a folder on the import path holds installed distributions (``pip install
    --target DIR`` put on PYTHONPATH: a ``*.dist-info`` beside each package), never the
    folder of the program itself or the working directory, which are the user's."""
    if not path or os.path.realpath(path) in (os.path.realpath(os.getcwd()), _program_dir()):
        return False
    try:
        return any(name.endswith(".dist-info") for name in os.listdir(path))
    except OSError:
        return False


def _program_dir() -> str:
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    return os.path.realpath(os.path.dirname(main)) if main else ""


# cachewatch itself, every layer (this module sits one floor down in capture/).
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_JAX_DIR = os.path.dirname(os.path.abspath(jax.__file__)) + os.sep
LIBRARY_DIRS = _library_dirs()


def is_library_file(filename: str) -> bool:
    """True for code of an installed library (JAX, Flax, Optax ...), the standard library or
    cachewatch: this interpreter's folders for them, and every file the store's readers
    call a library's by its path (core/sources.py), so that both agree."""
    return (
        filename.startswith(LIBRARY_DIRS)
        or filename.startswith(_PACKAGE_DIR)
        or filename.startswith("<frozen")
        or sources.is_installed(filename)
    )


_STANDARD_DIRS = tuple(
    d + os.sep
    for key in ("stdlib", "platstdlib")
    if (path := sysconfig.get_paths().get(key))
    for d in {os.path.abspath(path), os.path.realpath(path)}
)


def in_stack(filename: str) -> bool:
    """Whether a frame is one an equation's stack shows: the user's code or a library's
    (Flax, Optax, NumPyro ...), not JAX's, cachewatch's or the standard library's."""
    if filename.startswith((_JAX_DIR, _PACKAGE_DIR, "<frozen")):
        return False
    # A library installed without a virtualenv lives under the standard library's directory.
    return not filename.startswith(_STANDARD_DIRS) or sources.is_installed(filename)


def code_file(fun: Any) -> str | None:
    """The file a function's code (or a callable object's ``__call__``) comes from."""
    code = getattr(fun, "__code__", None)
    if code is None:
        call = getattr(type(fun), "__call__", None)  # noqa: B004  (the method itself, not a test)
        code = getattr(call, "__code__", None)
    return os.path.realpath(code.co_filename) if code is not None else None


# Attributes under which library wrappers (nnx.jit's JitFn, functools.wraps, ...) keep
# the function they wrap.
_WRAPPED_ATTRS = ("__wrapped__", "f", "fun", "func", "fn", "_fun", "function")


def user_function(fun: Callable[..., Any]) -> Callable[..., Any]:
    """The user's function behind a library's wrapper, or ``fun`` itself.

    ``nnx.jit(step)`` hands ``jax.jit`` a Flax object holding ``step``; a decorator made
    with ``functools.wraps`` keeps it in ``__wrapped__``. Only code that lives in an
    installed library is looked through, so a user's own function is never replaced.
    """
    return _looked_through(fun)[0]


def _transformation(inner: Any, filename: str) -> str | None:
    """The JAX transformation a wrapper of JAX's own is (``value_and_grad_f`` is
    ``value_and_grad``, ``vmap_f`` is ``vmap``), or None for any other library's."""
    code = getattr(inner, "__code__", None)
    if code is None or not filename.startswith(_JAX_DIR):
        return None
    if code.co_name == "reraise_with_filtered_traceback":
        # JAX's API boundary around the transformation's own function, which it closes over.
        cells = [cell.cell_contents for cell in getattr(inner, "__closure__", None) or () if _filled(cell)]
        wrapped = [
            c for c in cells if isinstance(c, types.FunctionType) and c.__code__.co_filename.startswith(_JAX_DIR)
        ]
        if not wrapped:
            return None
        code = wrapped[0].__code__
    name = code.co_name
    for suffix in ("_f_aux", "_f"):
        name = name.removesuffix(suffix)
    return "jacobian" if name == "jacfun" else name


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018  (an empty cell raises)
    except ValueError:
        return False
    return True


def _looked_through(fun: Callable[..., Any]) -> tuple[Callable[..., Any], list[str]]:
    """The user's function behind library wrappers, and the JAX transformations among
    those wrappers, outermost first: ``jax.value_and_grad(f)`` is ``f`` transformed, a
    different program from ``f``'s own."""
    seen = 0
    current = fun
    transformations: list[str] = []
    while seen < 8:
        inner, _ = unwrap_callable(current)
        filename = code_file(inner)
        if filename is None or not is_library_file(filename):
            return current, transformations  # the user's own (a partial or bound method keeps its wrapping)
        transformation = _transformation(inner, filename)
        for attr in _WRAPPED_ATTRS:
            try:
                candidate = inspect.getattr_static(inner, attr, None)
                if isinstance(candidate, property):
                    candidate = getattr(inner, attr, None)
            except Exception:  # a library object's property may raise anything
                candidate = None
            if candidate is not None and candidate is not inner and callable(candidate):
                current = candidate
                if transformation:
                    transformations.append(transformation)
                break
        else:
            return current, transformations
        seen += 1
    return current, transformations


def user_function_in(args: Any, name: str, limit: int = 64) -> Callable[..., Any] | None:
    """A function called ``name`` defined outside the libraries, found among ``args``.

    ``eqx.filter_jit`` jits one function of its own (renamed after the user's) and passes
    the user's function in as a static argument; this finds it there.
    """
    stack = [args]
    visited = 0
    while stack and visited < limit:
        value = stack.pop()
        visited += 1
        if isinstance(value, (tuple, list)):
            stack.extend(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif (
            isinstance(value, types.FunctionType)
            and value.__name__ == name
            and not is_library_file(os.path.realpath(value.__code__.co_filename))
        ):
            return value
    return None


def user_function_closed_over(fun: Any, limit: int = 16) -> Callable[..., Any] | None:
    """The user's function a library's inner function closes over, or None.

    ``jax.pmap`` jits a function of its own (``_cached_shard_map.<locals>._fun``) that
    holds the user's, wrapped for tracing (``.f``), in its closure; this finds it there.
    """
    stack = [cell for cell in getattr(fun, "__closure__", None) or ()]
    visited = 0
    while stack and visited < limit:
        cell = stack.pop(0)
        visited += 1
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        for candidate in (value, getattr(value, "f", None)):
            if isinstance(candidate, types.FunctionType):
                if not is_library_file(os.path.realpath(candidate.__code__.co_filename)):
                    return candidate
                stack.extend(candidate.__closure__ or ())
    return None


class Site(str):
    """A call site (``file:line``) that also carries the user's frames around it.

    ``stack``: the user's frames from the call site outwards, each ``{"site": "file:line"}``
    with ``"into"`` and ``"callee"`` where the next frame in is a library's: the library
    module and the qualified name of the function it called (``numpyro.infer.mcmc``,
    ``MCMC.run``), up to :data:`~cachewatch.core.warmup.USER_FRAMES`. The line where one varying value
    enters several functions (the loop, the call into a library) is the frame their
    stacks share; see cachewatch/storms/findings.py."""

    stack: tuple[dict[str, str], ...] = ()


def call_site(depth: int = 1) -> str | None:
    """The user's line that led here: the first frame up the stack outside the libraries
    (JAX, the library that wraps the user's function, the standard library, cachewatch);
    failing that, the first frame outside JAX and cachewatch. A :class:`Site` with the
    user's frames further out where there is one."""
    frame: Any = sys._getframe(depth)
    fallback = None
    stack: list[dict[str, str]] = []
    inner_module = ""  # the library module of the frame just inside the one walked
    inner_function = ""  # and the function it runs
    while frame is not None and len(stack) < USER_FRAMES:
        filename = frame.f_code.co_filename
        if not is_library_file(filename):
            where = {"site": f"{filename}:{frame.f_lineno}"}
            if inner_module:
                where["into"] = inner_module
                if inner_function:
                    where["callee"] = inner_function
            stack.append(where)
            inner_module = inner_function = ""
        else:
            if not stack and fallback is None and not filename.startswith((_PACKAGE_DIR, _JAX_DIR, "<frozen")):
                fallback = f"{filename}:{frame.f_lineno}"
            module = frame.f_globals.get("__name__", "")
            # The outermost library frame inside a user's: the library the user called.
            inner_module = module if isinstance(module, str) and not module.startswith("cachewatch") else ""
            inner_function = getattr(frame.f_code, "co_qualname", frame.f_code.co_name) if inner_module else ""
        frame = frame.f_back
    if not stack:
        return fallback
    site = Site(stack[0]["site"])
    site.stack = tuple(stack)
    return site


def transformation_site(site: str | None) -> str | None:
    """The user's line that applied the JAX transformation a call runs under (an eager
    ``jax.grad(f)(...)``): the nearest frame out from the call whose next frame in is JAX's
    (the call itself, the first frame, calls the jit); the call's own line where no frame
    further out calls into JAX."""
    stack = stack_of(site) or []
    for frame in stack[1:]:
        if frame.get("into", "").split(".", 1)[0] == "jax":
            return frame["site"]
    return str(site) if site else None


def stack_of(site: str | None) -> list[dict[str, str]] | None:
    """The user's frames a call site carries (None for a plain string)."""
    stack = getattr(site, "stack", None)
    return list(stack) if stack else None


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
    """Name, place and stable hash of ``fun`` (of the user's function inside a library
    wrapper; a JAX transformation of it is named with it: ``value_and_grad(loss)``)."""
    fun, transformations = _looked_through(fun)
    inner, tag = unwrap_callable(fun)
    target = inner
    if not isinstance(inner, (types.FunctionType, types.BuiltinFunctionType)) and callable(inner):
        # A callable object: identify it by its class's __call__.
        call = getattr(type(inner), "__call__", None)  # noqa: B004  (the method itself, not a test)
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
    for transformation in reversed(transformations):
        qualname = f"{transformation}({qualname})"
    digest = hashlib.sha256()
    for part in (module, qualname, tag, _source_text(target)):
        digest.update(part.encode("utf-8", "replace"))
        digest.update(b"\0")
    return function_info(digest, name=name, qualname=qualname, module=module, file=file, line=line)


def function_info(digest: Any, *, name: str, qualname: str, module: str, file: str, line: int) -> FunctionInfo:
    """A function's info, hashed by ``digest`` (a sha256 of what makes it the same function
    on every host): the hash is its first 20 hex digits, for a wrapped function and one
    known only by name alike."""
    return FunctionInfo(
        function_hash=digest.hexdigest()[:20],
        name=name,
        qualname=qualname,
        module=module,
        file=file,
        line=line,
    )
