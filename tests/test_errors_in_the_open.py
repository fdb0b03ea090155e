"""cachewatch swallows no error of its own where nobody can see it.

A handler that catches everything (``except:``, ``except Exception``, ``except
BaseException``, or a tuple holding one of them) in ``cachewatch/`` or ``server/`` is
allowed in three places only:

- the internal guard itself (``cachewatch/core/_guard.py``), which counts and reports
  the error, and which the tests' autouse check watches;
- a handler that hands the error to the guard (its body calls ``_guard.report``);
- a handler whose reason is written beside it: a ``#`` comment in words on the
  ``except`` line or on the line just above it, saying why catching everything is the
  point (a wrapper that must never break the user's program, a re-raise, a user's
  object that may raise anything). A lint directive alone (``# noqa: BLE001``,
  ``# type: ignore``, ``# pragma: ...``) is no reason.

Anything else names what it expects, e.g. ``except (OSError, ValueError):``.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GUARD = ROOT / "cachewatch" / "core" / "_guard.py"
BROAD = {"Exception", "BaseException"}
LINT_DIRECTIVE = re.compile(r"noqa(:\s*[A-Z]+[0-9]+(\s*,\s*[A-Z]+[0-9]+)*)?|type:\s*ignore(\[[^\]]*\])?|pragma:[^#]*")


def _is_broad(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    for kind in kinds:
        if kind is None:
            return True
        name = kind.attr if isinstance(kind, ast.Attribute) else getattr(kind, "id", None)
        if name in BROAD:
            return True
    return False


def _reports_to_guard(handler: ast.ExceptHandler) -> bool:
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "report"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "_guard"
        for node in ast.walk(handler)
    )


def _reasons_by_line(source: str) -> tuple[dict[int, bool], set[int]]:
    """For each line with a comment, whether it says something in words; and the lines
    that hold nothing but a comment."""
    reasons: dict[int, bool] = {}
    code_lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            words = LINT_DIRECTIVE.sub("", token.string.replace("#", " "))
            reasons[token.start[0]] = reasons.get(token.start[0], False) or bool(re.search(r"[A-Za-z]{2}", words))
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code_lines.add(token.start[0])
    comment_only = {line for line in reasons if line not in code_lines}
    return reasons, comment_only


def unexplained_broad_excepts(path: Path) -> list[str]:
    """``file:line`` of each broad handler in ``path`` with neither the guard nor a reason."""
    source = path.read_text()
    reasons, comment_only = _reasons_by_line(source)
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ExceptHandler) or not _is_broad(node) or _reports_to_guard(node):
            continue
        above = node.lineno - 1
        if reasons.get(node.lineno) or (above in comment_only and reasons.get(above)):
            continue
        found.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{node.lineno}")
    return found


def test_every_broad_except_is_the_guards_or_says_why():
    files = sorted((ROOT / "cachewatch").rglob("*.py")) + sorted((ROOT / "server").rglob("*.py"))
    found = [where for path in files if path != GUARD for where in unexplained_broad_excepts(path)]
    assert not found, (
        "a broad except that swallows silently; name what it expects, hand the error to _guard.report, "
        f"or say why on its line or the line above: {found}"
    )


def test_the_check_sees_a_silent_broad_except(tmp_path):
    module = tmp_path / "module.py"
    module.write_text(
        "def a():\n"
        "    try:\n        pass\n    except Exception:\n        pass\n"  # line 4: silent
        "    try:\n        pass\n    except (OSError, BaseException):  # noqa: BLE001\n        pass\n"  # 8: no words
        "    try:\n        pass\n    except:\n        pass\n"  # 12: bare
        "    try:\n        pass\n    except Exception:  # the user's repr may raise anything\n        pass\n"
        "    try:\n        pass\n    # a re-raise: the caller sees it\n    except BaseException:\n        raise\n"
        "    try:\n        pass\n    except Exception as exc:\n        _guard.report('here', exc)\n"
        "    try:\n        pass\n    except (OSError, ValueError):\n        pass\n"
    )
    assert [where.rsplit(":", 1)[1] for where in unexplained_broad_excepts(module)] == ["4", "8", "12"]
