"""Results cross the layers as types: no public function of the library or the service
returns an untyped ``dict[str, Any]`` (a renamed key would fail at run time in whichever of
the CLI, the API, the dashboard, the notebook and the runner read it). A dict stays where
it is the thing itself: JSON made at the edge for the wire or the browser."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Methods that turn a typed value into its JSON at the edge: the one place a dict is made.
SERIALISERS = {"as_dict", "as_json", "to_wire"}
# Functions whose result is a mapping by nature, each with its reason.
_EVENT_FIELD = "entries of a compile event's stored JSON field, the event's own shape on the wire and in the store"
_PLOTLY = "a Plotly figure, handed as it is to the browser's plotting library"
_TEMPLATE = "the parts of a signature leaf as the dashboard's templates show them"
MAPPINGS_BY_NATURE: dict[tuple[str, str], str] = {
    ("cachewatch/capture/program.py", "top_lines"): _EVENT_FIELD,
    ("cachewatch/capture/program.py", "event_fields"): "the program view's event fields by name, set on the event",
    ("cachewatch/capture/program.py", "texts_payload"): "the program texts as the writer and the ingest API carry them",
    ("cachewatch/capture/cachestate.py", "readings"): "the compile event fields read around a compile, by name",
    ("cachewatch/capture/captures.py", "read"): "the values of the names a function read, keyed by the user's names",
    (
        "cachewatch/core/jaxcompat/accessors.py",
        "primitive_params",
    ): "a JAX primitive's own parameters, keyed by JAX's names",
    ("cachewatch/core/results.py", "fields_of"): "a result's own fields, the JSON its as_json() gives",
    ("cachewatch/notebook.py", "summary"): "the documented plain dictionary of cachewatch.report().summary",
    ("cachewatch/store/http.py", "post"): "the service's JSON reply, read by the HTTP sink",
    ("server/main.py", "openapi"): "the OpenAPI document FastAPI serves",
    ("server/dashboard/render.py", "parse_described"): _TEMPLATE,
    ("server/dashboard/render.py", "signature_parts"): _TEMPLATE,
    ("server/dashboard/render.py", "histogram_table"): "the rows of a chart's table, as the template shows them",
    ("server/dashboard/pictures.py", "payoff_chart"): _PLOTLY,
    ("server/dashboard/pictures.py", "timeline_chart"): _PLOTLY,
    ("server/static_report.py", "receive"): "an ASGI message, as the ASGI specification spells it",
    **{
        ("server/dashboard/render.py", name): _PLOTLY
        for name in (
            "causes_chart",
            "cost_chart",
            "histogram_chart",
            "hit_rate_chart",
            "ladder_chart",
            "live_executables_chart",
            "recompiles_chart",
            "timeline_chart",
        )
    },
}
# Results not typed yet, each leaving when its function is typed (none now).
NOT_YET_TYPED: set[tuple[str, str]] = set()


def untyped(annotation: ast.expr | None) -> bool:
    """Whether a return annotation is an untyped mapping or a list of them."""
    if annotation is None:
        return False
    text = ast.unparse(annotation).replace("typing.", "").replace("'", "").replace('"', "")
    for optional in (" | None", "None | "):
        text = text.replace(optional, "")
    mappings = {"dict", "dict[str, Any]", "dict[str, object]"}
    return text in mappings or text in {f"list[{m}]" for m in mappings}


def untyped_public_results(source: str) -> list[str]:
    """The public functions and methods of a module that return an untyped dict."""
    return [
        node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and not node.name.startswith("_")
        and node.name not in SERIALISERS
        and untyped(node.returns)
    ]


def test_no_public_function_returns_an_untyped_dict():
    found = sorted(
        f"{path.relative_to(ROOT).as_posix()} {name}"
        for folder in ("cachewatch", "server")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for name in untyped_public_results(path.read_text())
        if (path.relative_to(ROOT).as_posix(), name) not in MAPPINGS_BY_NATURE.keys() | NOT_YET_TYPED
    )
    assert not found, "return a dataclass or typed row instead:\n" + "\n".join(found)


def test_every_allowed_mapping_is_still_one():
    for path, name in MAPPINGS_BY_NATURE.keys() | NOT_YET_TYPED:
        assert name in untyped_public_results((ROOT / path).read_text()), (path, name)


def test_the_check_sees_untyped_results_and_spares_typed_ones():
    source = (
        "from typing import Any\n"
        "def a() -> dict[str, Any]: ...\n"
        "def b() -> list[dict[str, Any]]: ...\n"
        "def c() -> dict: ...\n"
        "def d() -> dict[str, int]: ...\n"
        "def _e() -> dict[str, Any]: ...\n"
        "class F:\n"
        "    def as_json(self) -> dict[str, Any]: ...\n"
        "    def g(self) -> 'Row | None': ...\n"
        "    def h(self) -> tuple[tuple[Any, ...], dict[str, Any]]: ...\n"
        "    def i(self) -> 'dict[str, Any] | None': ...\n"
    )
    assert untyped_public_results(source) == ["a", "b", "c", "i"]
