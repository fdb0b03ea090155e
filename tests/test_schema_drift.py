"""The service's responses hold every field of the library's results they serialise.

The command line's ``--format json`` and the API give the same JSON (each result's
``as_json()``); the API's pydantic models validate it on the way out and drop what they do
not declare. A field added to a result must reach the API, or be named here as left out on
purpose, with the reason: otherwise it vanishes at ``model_validate`` without a word.
"""

from __future__ import annotations

import dataclasses
import typing

import pytest
from cachewatch_server import schemas
from cachewatch_server.main import create_app
from cachewatch_server.settings import ServerSettings
from pydantic import BaseModel

from cachewatch.cache import cache_view
from cachewatch.comparison import side_by_side
from cachewatch.fleet import divergence
from cachewatch.payoff import results as payoff_results
from cachewatch.programs import program_texts
from cachewatch.store import columns
from cachewatch.storms import results as storm_results
from cachewatch.views import compose
from cachewatch.whatif import policies

# Each library result and the response model that carries it.
PAIRS: list[tuple[type, type[BaseModel]]] = [
    (storm_results.Storm, schemas.StormOut),
    (storm_results.FirstPass, schemas.FirstPassOut),
    (storm_results.BurstFunction, schemas.BurstFunctionOut),
    (payoff_results.Verdict, schemas.VerdictOut),
    (payoff_results.SignatureVerdict, schemas.SignatureVerdictOut),
    (payoff_results.CostModelRow, schemas.CostModelOut),
    (payoff_results.Regression, schemas.RegressionOut),
    (compose.Summary, schemas.Summary),
    (compose.Diagnosis, schemas.DiagnosisOut),
    (compose.FunctionDetail, schemas.FunctionDetail),
    (columns.FunctionReport, schemas.FunctionOut),
    (columns.EventRow, schemas.EventOut),
    (side_by_side.Comparison, schemas.RunComparisonOut),
    (side_by_side.ComparedRun, schemas.ComparedRunOut),
    (side_by_side.FunctionChange, schemas.ComparedFunctionOut),
    (side_by_side.Figures, schemas.ComparedFiguresOut),
    (divergence.JobReport, schemas.JobOut),
    (divergence.RankCompiles, schemas.RankOut),
    (divergence.Divergence, schemas.DivergenceOut),
    (policies.Whatif, schemas.WhatifOut),
    (policies.Price, schemas.WhatifPriceOut),
    (policies.Fit, schemas.WhatifFitOut),
    (policies.SizeRow, schemas.WhatifSizeOut),
    (policies.OtherFix, schemas.WhatifFixOut),
    (cache_view.Variant, schemas.CacheVariantOut),
    (cache_view.LivePoint, schemas.CacheLivePoint),
    (cache_view.FunctionCache, schemas.CacheFunctionOut),
    (cache_view.PersistentFigures, schemas.PersistentCacheFiguresOut),
    (cache_view.PersistentRun, schemas.PersistentCacheRunOut),
    (program_texts.ProgramDiff, schemas.ProgramDiffOut),
    (program_texts.CountChange, schemas.CountChangeOut),
    (program_texts.FigureChange, schemas.FigureChangeOut),
]

# Fields of a result its response leaves out on purpose, each with the reason.
LEFT_OUT: dict[tuple[type, str], str] = {
    (columns.EventRow, "id"): "the store's row number: the API names an event by its event_id",
}
# Fields whose own fields the response holds at its top level instead of nested.
FLATTENED: dict[tuple[type, str], type] = {
    (compose.FunctionDetail, "report"): columns.FunctionReport,
}


def _fields(result: type) -> set[str]:
    if dataclasses.is_dataclass(result):
        return {field.name for field in dataclasses.fields(result)}
    return set(typing.get_type_hints(result))  # a TypedDict row


def missing_fields(result: type, model: type[BaseModel]) -> list[str]:
    """The result's fields its model does not carry, less those named above."""
    declared = set(model.model_fields)
    missing = []
    for name in sorted(_fields(result)):
        if (result, name) in LEFT_OUT:
            continue
        if (result, name) in FLATTENED:
            missing += [f"{name}.{inner}" for inner in sorted(_fields(FLATTENED[result, name]) - declared)]
        elif name not in declared:
            missing.append(name)
    return missing


@pytest.mark.parametrize(("result", "model"), PAIRS, ids=[f"{r.__name__}->{m.__name__}" for r, m in PAIRS])
def test_every_field_of_a_result_reaches_its_response(result, model):
    assert missing_fields(result, model) == []


def test_a_field_a_result_gains_is_caught():
    @dataclasses.dataclass(frozen=True)
    class Grown(storm_results.Storm):
        new_finding: str = ""

    assert missing_fields(Grown, schemas.StormOut) == ["new_finding"]


def test_a_storm_survives_its_response_model_whole():
    """What ``routes/storms.py`` does to each storm keeps every key and value of its JSON,
    the priced fix and the functions of a line included."""
    storm = storm_results.Storm(
        key="site:train.py:12",
        function_hash="f" * 16,
        function_hashes=("f" * 16, "e" * 16),
        call_site="train.py:12",
        functions=(storm_results.BurstFunction("f" * 16, "dot", 4), storm_results.BurstFunction("e" * 16, "add", 2)),
        name="dot",
        qualname="dot",
        short_name="train.py:12 (dot 4x, add 2x)",
        start=1.0,
        end=2.0,
        compiles=6,
        causes={"new_shape": 6},
        dominant_cause="new_shape",
        active=False,
        run_id="r" * 32,
        run_ids=("r" * 32,),
        fix="Pad it.",
        recurs_in_runs=2,
        identical_programs=1,
        identical_seconds=0.5,
        priced_fix="pad x axis 0 to 16, 32",
    )
    told = storm.as_json()
    assert schemas.StormOut.model_validate(told).model_dump() == told


# Routes whose answer is not JSON, each with what it gives instead.
NOT_JSON = {
    "/api/v1/events/{event_id}/program": "a program's text, or a gzip-compressed pprof profile",
}


def test_every_json_route_declares_its_response(sqlite_url):
    """In the OpenAPI document, every read of the API answers with a named schema: a
    route without a response model documents its JSON as ``{}`` (anything)."""
    spec = create_app(ServerSettings(store=sqlite_url)).openapi()
    reads = {path: ops["get"] for path, ops in spec["paths"].items() if path.startswith("/api/") and "get" in ops}
    assert "/api/v1/storms" in reads  # the walk sees the API's routes
    undeclared = sorted(
        path
        for path, op in reads.items()
        if path not in NOT_JSON
        and not op["responses"]["200"].get("content", {}).get("application/json", {}).get("schema")
    )
    assert undeclared == []
