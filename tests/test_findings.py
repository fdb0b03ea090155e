"""Findings: the storms of one run gathered by root cause, told at the user's line with
one fix and its whole price. Programs of tests/programs/ run under ``cachewatch run``
beside JAX's compile log; the fix a finding gives is applied to the program and checked
(fewer compiles, the same output)."""

from __future__ import annotations

import os

import sqlalchemy as sa
from test_verdicts import PROGRAMS, _line_of, run_program

from cachewatch.core.events import Cause
from cachewatch.store import engine as enginemod
from cachewatch.store import models
from cachewatch.store.columns import Filters
from cachewatch.storms import findings
from cachewatch.storms.finding_reads import StormCompile
from cachewatch.storms.results import BurstFunction, Storm


def _findings(url: str) -> list[findings.Finding]:
    with enginemod.connection(url) as conn:
        return findings.find(conn, Filters())


def test_a_count_that_grows_through_eager_code_is_one_finding_at_the_loop(tmp_path):
    ran = run_program(tmp_path, "growing_gp")
    # Every compile JAX logged is recorded; warm-up ends with the loop's second step.
    assert sum(ran.compiles.values()) == sum(ran.logged.values())
    assert ran.figures.warmup_compiles < sum(ran.compiles.values()) // 4
    # One line per operation storms (the kernel, the factor, the solve, the append) ...
    assert len(ran.storms) >= 5
    # ... and one finding: the observation count, entering at the loop that grows it.
    (found,) = _findings(ran.url)
    loop = _line_of("growing_gp.py", "for _step in range(STEPS)")
    assert found.entry == f"{os.path.join(PROGRAMS, 'growing_gp.py')}:{loop}"
    assert found.entry_text.startswith(f"the loop at growing_gp.py:{loop}")
    assert found.varying.startswith("a count that grows")
    assert found.fix_kind == "pad_and_mask"
    assert "mask the unused entries" in found.fix
    assert "read it at the last real one" in found.fix
    assert found.library is None
    assert sorted(found.storms) == sorted(s.key for s in ran.storms)
    assert found.compiles == sum(s.compiles for s in ran.storms)
    assert {"cholesky", "append"} <= set(found.functions)
    assert found.share_of_run is not None
    assert 0.0 < found.share_of_run <= 1.0
    # The runner's summary leads with it, its storms as detail.
    assert ran.stderr.count("  Finding [ACTIVE] a count that grows") == 1
    assert f"the loop at growing_gp.py:{loop}" in ran.stderr
    # The storms of the finding: its compiles are theirs, priced as the events say.
    with enginemod.connection(ran.url) as conn:
        e = models.compile_events
        seconds = conn.execute(
            sa.select(
                sa.func.sum(
                    sa.func.coalesce(e.c.trace_seconds, 0)
                    + sa.func.coalesce(e.c.lower_seconds, 0)
                    + sa.func.coalesce(e.c.compile_seconds, 0)
                )
            ).where(e.c.compiled)
        ).scalar_one()
    assert 0 < found.compile_seconds < seconds


def test_the_findings_fix_applied_compiles_once_and_changes_nothing(tmp_path):
    before = run_program(tmp_path, "growing_gp")
    after = run_program(tmp_path, "growing_gp_fixed")
    assert after.stdout == before.stdout  # the same observations, the same best value
    assert sum(after.compiles.values()) * 5 < sum(before.compiles.values())
    assert after.compiles["posterior"] == after.logged["posterior"] == 1
    assert _findings(after.url) == []
    assert "Finding" not in after.stderr


def _storm(key: str, start: float, end: float, compiles: int, cause: str = Cause.NEW_SHAPE) -> Storm:
    return Storm(
        key=key,
        function_hash=key,
        function_hashes=(key,),
        call_site=None,
        functions=(BurstFunction(key, key, compiles),),
        name=key,
        qualname=key,
        short_name=key,
        start=start,
        end=end,
        compiles=compiles,
        causes={cause: compiles},
        dominant_cause=cause,
        active=True,
        run_id="r",
        run_ids=("r",),
        fix=f"fix of {key}",
    )


def _shape_compiles(key: str, sizes: list[int], start: float, site: str) -> list[StormCompile]:
    return [
        StormCompile(
            key,
            start + i,
            Cause.NEW_SHAPE,
            0.5,
            site,
            [{"path": "x", "change": "shape", "before": f"float32[{a}]", "after": f"float32[{b}]", "axes": [0]}],
            [],
        )
        for i, (a, b) in enumerate(zip(sizes, sizes[1:], strict=False))
    ]


def test_storms_of_different_sizes_stay_apart_and_rank_by_seconds():
    batch = _storm("step", 0, 10, 6)
    other = _storm("eval", 0, 10, 6)
    same = _storm("loss", 0, 10, 6)
    compiles = {
        ("r", "step", 0): _shape_compiles("step", [8, 12, 16, 20, 24, 28, 32], 0, "/u/t.py:10"),
        ("r", "eval", 0): _shape_compiles("eval", [100, 200, 300, 400, 500, 600, 700], 0, "/u/t.py:20"),
        ("r", "loss", 0): _shape_compiles("loss", [8, 12, 16, 20, 24, 28, 32], 0, "/u/t.py:11"),
    }
    compiles[("r", "eval", 0)] = [
        StormCompile(c.function_hash, c.timestamp, c.cause, 2.0, c.call_site, c.diff, c.user_stack)
        for c in compiles[("r", "eval", 0)]
    ]
    found = findings.gather([batch, other, same], compiles, {"r": 100.0})
    # The eval sizes share nothing with the batch sizes: two findings, the costlier first.
    assert [sorted(f.storms) for f in found] == [["eval"], ["loss", "step"]]
    assert found[0].compile_seconds == 12.0
    assert found[0].share_of_run == 0.12
    assert found[1].compiles == 12
    # Sizes the same but months apart are not one cause.
    later = _storm("loss", 1000, 1010, 6)
    compiles[("r", "loss", 1000)] = _shape_compiles("loss", [8, 12, 16, 20, 24, 28, 32], 1000, "/u/t.py:11")
    apart = findings.gather([batch, later], compiles, {"r": 2000.0})
    assert len(apart) == 2
