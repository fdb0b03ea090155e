"""The typed results of the diagnosis give the JSON the service and ``--format json`` have
always given: the same fields, in the same order, with the same optional ones."""

from __future__ import annotations

import dataclasses
import json

from cachewatch.payoff import verdicts
from cachewatch.payoff.results import SignatureVerdict
from cachewatch.storms import diagnosis
from cachewatch.storms.results import Burst, BurstFunction, FirstPass, Storm
from cachewatch.views import runsummary

BURST_FIELDS = [
    "key",
    "function_hash",
    "function_hashes",
    "call_site",
    "functions",
    "name",
    "qualname",
    "short_name",
    "start",
    "end",
    "compiles",
    "causes",
    "dominant_cause",
    "active",
    "run_id",
    "run_ids",
    "fix",
]


def _burst() -> Burst:
    return Burst(
        key="site:/p/train.py:3",
        function_hash="h1",
        function_hashes=("h1", "h2"),
        call_site="/p/train.py:3",
        functions=(BurstFunction("h1", "dot", 4), BurstFunction("h2", "add", 2)),
        name="dot",
        qualname="dot (op-by-op)",
        short_name="train.py:3 (dot 4x, add 2x)",
        start=10.0,
        end=12.0,
        compiles=6,
        causes={"new_shape": 6},
        dominant_cause="new_shape",
        active=True,
        run_id="r" * 32,
        run_ids=("r" * 32,),
        fix="Pad it.",
    )


def _fields(burst: Burst) -> dict:
    return {f.name: getattr(burst, f.name) for f in dataclasses.fields(Burst)}


def test_a_storm_as_json_keeps_its_fields_and_their_order():
    storm = Storm(**_fields(_burst()), recurs_in_runs=2, identical_programs=1, identical_seconds=0.5)
    found = storm.as_json()
    assert list(found) == [*BURST_FIELDS, "recurs_in_runs", "identical_programs", "identical_seconds"]
    assert found["function_hashes"] == ["h1", "h2"]
    assert found["run_ids"] == ["r" * 32]
    assert found["functions"] == [
        {"function_hash": "h1", "name": "dot", "compiles": 4},
        {"function_hash": "h2", "name": "add", "compiles": 2},
    ]
    priced = dataclasses.replace(storm, priced_fix="pad to 8").as_json()
    assert list(priced)[-1] == "priced_fix"
    assert priced["priced_fix"] == "pad to 8"
    assert "Recurs in 2 runs." in diagnosis.describe_storm(storm)


def test_a_first_pass_as_json_ends_with_its_cost():
    found = FirstPass(**{**_fields(_burst()), "active": False}, seconds=0.25, signatures=6)
    assert list(found.as_json()) == [*BURST_FIELDS, "seconds", "signatures"]
    assert "6 compiles of 6 new signatures" in diagnosis.describe_first_pass(found)


def test_a_verdict_as_json_keeps_its_fields_and_their_order():
    sig = SignatureVerdict("s1", 1, 0.25, 0.01, 0.02, 25)
    verdict = verdicts.jit_verdict(3.0, 12, 41, 0.01, 0.02, signatures=[sig])
    found = verdict.as_json()
    assert list(found) == [
        "compiles",
        "calls",
        "compile_seconds",
        "run_seconds_mean",
        "run_seconds_est",
        "compile_share",
        "eager_seconds_mean",
        "compile_seconds_per_compile",
        "break_even_calls",
        "break_even_calls_total",
        "jit_saves_seconds",
        "repaid",
        "signatures",
        "few_calls",
        "text",
        "worth_it",
    ]
    assert found["signatures"] == [dataclasses.asdict(sig)]
    assert found["worth_it"] is found["repaid"] is False


def test_a_run_summary_of_an_http_store_says_where_to_look_and_no_more():
    summary = runsummary.for_store("http://127.0.0.1:8000", "r" * 32, flushed=False)
    assert summary.figures is None
    found = summary.as_json()
    assert list(found) == [
        "run_id",
        "store",
        "flushed",
        "compiles",
        "recompiles",
        "compile_seconds",
        "warmup_compiles",
        "identical_recompiles",
        "identical_seconds",
        "first_pass_compiles",
        "first_pass_advice",
        "shared_program_compiles",
        "shared_programs",
        "stale_captures",
        "live_executables",
        "live_executable_bytes",
        "never_called_again",
        "functions",
        "findings",
        "storms",
        "next",
    ]
    assert found["compiles"] is None
    assert found["functions"] == []
    assert found["flushed"] is False
    assert json.loads(json.dumps(found)) == found
    assert runsummary.text(summary).startswith(f"cachewatch: run {'r' * 12}: events sent to http://127.0.0.1:8000.")


def test_a_run_summary_from_a_store_ends_with_its_function_count(sqlite_url):
    from test_analysis import _insert_compiles

    from cachewatch.store import engine as enginemod

    enginemod.ensure_schema(sqlite_url)
    _insert_compiles(sqlite_url, "step", [10.0 + i for i in range(6)])
    summary = runsummary.for_store(sqlite_url, "r" * 32)
    assert summary.figures is not None
    found = summary.as_json()
    assert list(found)[-2:] == ["next", "function_count"]
    assert found["function_count"] == 1
    assert found["compiles"] == summary.figures.report.compiles == 6
    assert found["functions"] == [dataclasses.asdict(f) for f in summary.figures.report.functions]
    assert found["storms"] == [dataclasses.asdict(s) for s in summary.figures.report.storms]
    assert runsummary.text(summary).startswith(f"cachewatch: run {'r' * 12}: 6 compiles (6 recompiles")
