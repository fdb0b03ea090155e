"""Findings: the storms of one run gathered by root cause, told at the user's line with
one fix and its whole price. Programs of tests/programs/ run under ``cachewatch run``
beside JAX's compile log; the fix a finding gives is applied to the program and checked
(fewer compiles, the same output)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest
import sqlalchemy as sa
from test_server_api import make_client
from test_verdicts import PROGRAMS, Ran, _line_of, run_program

from cachewatch.core.events import Cause
from cachewatch.store import engine as enginemod
from cachewatch.store import models
from cachewatch.store.columns import Filters
from cachewatch.storms import findings, fixes, steady
from cachewatch.storms.finding_reads import StormCompile
from cachewatch.storms.results import BurstFunction, Storm
from cachewatch.storms.sizes import new_sizes
from cachewatch.storms.storm_reads import Recompile


def _findings(url: str) -> list[findings.Finding]:
    with enginemod.connection(url) as conn:
        return findings.find(conn, Filters())


@pytest.fixture(scope="module")
def grown(tmp_path_factory) -> Ran:
    return run_program(tmp_path_factory.mktemp("grown"), "growing_gp")


def test_a_count_that_grows_through_eager_code_is_one_finding_at_the_loop(grown):
    ran = grown
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


def test_the_command_line_the_api_and_the_dashboard_say_the_same(grown):
    (found,) = _findings(grown.url)
    env = {**os.environ, "CACHEWATCH_STORE": grown.url}
    listed = subprocess.run(
        [sys.executable, "-m", "cachewatch", "findings", "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    (told,) = json.loads(listed.stdout)
    assert {**told, "active": found.active} == found.as_json()
    storms = subprocess.run(
        [sys.executable, "-m", "cachewatch", "storms"], env=env, capture_output=True, text=True, check=True
    ).stdout
    # The storms command leads with the finding, its storms after it.
    assert storms.index("Findings (1, by root cause") < storms.index("Storms (")
    assert found.fix.split(".")[0] in storms
    with make_client(grown.url) as client:
        (item,) = client.get("/api/v1/findings").json()["items"]
        page = client.get("/storms").text
    assert {k: v for k, v in item.items() if k not in ("text", "active")} == {
        k: v for k, v in found.as_json().items() if k != "active"
    }
    assert page.index('id="findings"') < page.index('id="storms"')
    assert f'data-compiles="{found.compiles}"' in page
    assert 'data-fix-kind="pad_and_mask"' in page
    summary = subprocess.run(
        [sys.executable, "-m", "cachewatch", "report", "--run", grown.run_id],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Findings (1, by root cause" in summary


def test_the_findings_fix_applied_compiles_once_and_changes_nothing(grown, tmp_path):
    before = grown
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
    compiles: dict[tuple[str, str, float], list[StormCompile]] = {
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


def test_an_object_rebuilt_per_call_is_pointed_at_its_construction_and_the_fix_holds(tmp_path):
    ran = run_program(tmp_path, "rebuilt_solver")
    assert sum(ran.compiles.values()) == sum(ran.logged.values())
    (found,) = _findings(ran.url)
    built = _line_of("rebuilt_solver.py", "solver = GradientSolver(loss)")
    assert found.entry == f"{os.path.join(PROGRAMS, 'rebuilt_solver.py')}:{built}"
    assert found.fix_kind == "hoist_object"
    assert f"`solver` is built anew at rebuilt_solver.py:{built} each time `half_step` runs" in found.fix
    assert found.functions == ("GradientSolver._step",)
    fixed = run_program(tmp_path, "rebuilt_solver_fixed")
    assert fixed.stdout == ran.stdout
    assert fixed.compiles["_step"] == fixed.logged["_step"] == 1
    assert ran.compiles["_step"] > 10
    assert _findings(fixed.url) == []


def _fix_compiles_once(tmp_path, ran: Ran, program: str, function: str, losses: bool = False) -> None:
    """``program`` (the run's program with the printed fix applied) compiles ``function``
    once, prints what the run printed (the same losses to float32's last bits, with
    ``losses``: see :func:`_losses`) and leaves no finding."""
    fixed = run_program(tmp_path, program)
    if losses:
        assert _losses(fixed.stdout) == pytest.approx(_losses(ran.stdout), rel=1e-4)
    else:
        assert fixed.stdout == ran.stdout
    assert fixed.compiles[function] == fixed.logged[function] == 1
    assert _findings(fixed.url) == []


def _losses(printed: str) -> list[float]:
    """The losses a program printed, one per step. A divisor held static is a constant XLA
    may fold (a multiply by its reciprocal); traced, it is divided by: the same training
    up to the last bits of float32."""
    return [float(line.split()[1]) for line in printed.splitlines()]


def test_a_float_field_that_filter_jit_holds_static_is_told_to_be_an_array_and_the_fix_holds(tmp_path):
    ran = run_program(tmp_path, "annealed_field")
    assert ran.compiles["step"] == ran.logged["step"] == 12
    (found,) = _findings(ran.url)
    # The field that changed is named, not Equinox's whole static argument.
    assert "the leaf model.temperature took 12 distinct values" in found.fix
    assert "jax.lax.stop_gradient" in found.fix
    assert "static_argnums" not in found.fix
    assert "PyTreeDef" not in found.varying
    _fix_compiles_once(tmp_path, ran, "annealed_field_fixed", "step", losses=True)


def test_a_scheduled_rate_passed_to_filter_jit_as_a_float_is_named_by_its_parameter_and_the_fix_holds(tmp_path):
    """A learning rate computed in Python at each step and passed to eqx.filter_jit's step:
    the finding names the parameter ``lr`` (not Equinox's ``static[2][0][1]``) and tells
    to pass an array, never to drop it from static_argnums, which the user never set."""
    ran = run_program(tmp_path, "scheduled_rate")
    assert ran.compiles["step"] == ran.logged["step"] == 12
    (found,) = _findings(ran.url)
    assert re.search(r"its argument lr took 1[12] distinct values", found.fix)
    assert "jnp.asarray(value, jnp.float32)" in found.fix
    assert "static_argnums" not in found.fix
    assert "stop_gradient" not in found.fix
    _fix_compiles_once(tmp_path, ran, "scheduled_rate_fixed", "step", losses=True)


def test_a_plain_attribute_of_an_nnx_module_is_told_to_be_a_variable_and_the_fix_holds(tmp_path):
    ran = run_program(tmp_path, "nnx_attribute")
    assert ran.compiles["step"] == ran.logged["step"] == 12
    (found,) = _findings(ran.url)
    assert found.varying.startswith("a static value: 12 values (temperature=")
    assert "changes only in `temperature`" in found.fix
    assert "nnx.Variable(jnp.asarray(value, jnp.float32))" in found.fix
    assert "dict keys" not in found.fix
    with enginemod.connection(ran.url) as conn:
        told = conn.execute(sa.select(models.compile_events.c.explanation)).scalars().all()
    # The structure's change is shown where it is, not as the first characters of two treedefs.
    assert any("('temperature', Static(value=1.0))" in text for text in told)
    _fix_compiles_once(tmp_path, ran, "nnx_attribute_fixed", "step", losses=True)


def test_an_object_made_each_epoch_as_a_static_self_is_pointed_at_its_construction_and_the_fix_holds(tmp_path):
    ran = run_program(tmp_path, "static_self")
    assert ran.compiles["step"] == ran.logged["step"] == 8
    (found,) = _findings(ran.url)
    built = _line_of("static_self.py", "trainer = Trainer(0.1)")
    loop = _line_of("static_self.py", "for epoch in range(EPOCHS):")
    assert found.entry == f"{os.path.join(PROGRAMS, 'static_self.py')}:{built}"
    assert found.fix_kind == "hoist_object"
    assert f"built anew at static_self.py:{built} on each pass of the loop at static_self.py:{loop}" in found.fix
    assert "hashed by identity" in found.fix
    assert "static_argnums" not in found.fix
    _fix_compiles_once(tmp_path, ran, "static_self_fixed", "step")


def test_an_optimizer_built_each_epoch_is_told_to_be_built_once_and_the_fix_holds(tmp_path):
    ran = run_program(tmp_path, "remade_optimizer")
    assert ran.compiles["train_step"] == ran.logged["train_step"] == 8
    (found,) = _findings(ran.url)
    assert "made anew each time and compared by identity" in found.fix
    assert "optax.inject_hyperparams" in found.fix
    assert "dict keys" not in found.fix
    _fix_compiles_once(tmp_path, ran, "remade_optimizer_fixed", "train_step")


def test_an_optimizer_made_each_epoch_as_a_static_argument_is_told_to_be_made_once_and_the_fix_holds(tmp_path):
    ran = run_program(tmp_path, "static_optimizer")
    assert ran.compiles["step"] == ran.logged["step"] == 8
    (found,) = _findings(ran.url)
    assert "Static argument tx of `step` is an object made anew each time (8 of them" in found.fix
    assert "drop it from static_argnums" not in found.fix
    _fix_compiles_once(tmp_path, ran, "static_optimizer_fixed", "step")


def test_a_library_the_user_calls_gets_no_advice_to_jit_the_call(tmp_path):
    ran = run_program(tmp_path, "four_models")
    assert sum(ran.compiles.values()) == sum(ran.logged.values())
    run_line = f"{os.path.join(PROGRAMS, 'four_models.py')}:{_line_of('four_models.py', 'mcmc.run(')}"
    (found,) = [f for f in _findings(ran.url) if f.entry == run_line]
    assert found.library == "numpyro"
    assert found.fix_kind == "library_boundary"
    assert "not one to wrap in jax.jit" in found.fix
    assert found.varying.startswith("what numpyro is given at each call")
    # Neither the finding nor any storm of the run tells the user to jit the call.
    told_to_jit = [f"{s.short_name}: {s.fix}" for s in ran.storms if "inside a jitted function" in s.fix]
    assert not told_to_jit
    assert "Move that code inside a jitted function" not in ran.stderr


def test_a_library_jit_remade_by_each_call_is_a_finding_with_the_librarys_own_api(tmp_path):
    ran = run_program(tmp_path, "svi_refit")
    (found,) = _findings(ran.url)
    assert found.functions == ("body_fn",)
    assert found.library == "numpyro"
    assert found.fix_kind == "library_api"
    assert "call `svi.update` in the loop instead of `svi.run`" in found.fix


def test_a_growing_context_is_told_to_mask_and_read_the_last_real_position(tmp_path):
    ran = run_program(tmp_path, "char_generate")
    assert sum(ran.compiles.values()) == sum(ran.logged.values())
    # The jit's storm and the list conversion's are one cause: the context's length.
    (found,) = _findings(ran.url)
    assert set(found.functions) == {"next_logits", "convert_element_type (op-by-op)"}
    assert found.fix_kind == "pad_and_mask"
    listed = _line_of("char_generate.py", "context = jnp.array(tokens)")
    assert f"At char_generate.py:{listed}, `jnp.array(tokens)` makes a new array" in found.fix
    last = _line_of("char_generate.py", "return logits[-1]")
    assert f"`next_logits` reads the last position (`[-1]` at char_generate.py:{last})" in found.fix
    assert "read position n - 1 instead" in found.fix
    # Applied (a fixed buffer, the count passed, position n - 1 read): the same text, one compile.
    fixed = run_program(tmp_path, "char_generate_fixed")
    assert fixed.stdout == ran.stdout
    assert fixed.compiles["next_logits"] == fixed.logged["next_logits"] == 1
    assert _findings(fixed.url) == []


def test_the_users_own_jit_behind_a_librarys_wrapper_is_theirs_to_pad(tmp_path):
    ran = run_program(tmp_path, "nnx_ragged")
    assert sum(ran.compiles.values()) == sum(ran.logged.values())
    (found,) = _findings(ran.url)
    # nnx.jit is Flax's, the function and its batch sizes are the user's: no library boundary.
    assert found.library is None
    assert found.fix_kind == "pad"
    assert "mean_score" in found.functions
    assert "pad to powers of two" in found.fix
    fixed = run_program(tmp_path, "nnx_ragged_fixed")
    assert fixed.stdout == ran.stdout  # the masked mean over padded batches is the same
    assert fixed.compiles["mean_score"] < ran.compiles["mean_score"]
    assert _findings(fixed.url) == []


def test_batches_cut_to_their_known_rows_met_once_each_are_a_first_pass_told_how_a_mask_spares_them(tmp_path):
    """A boolean mask cuts each batch to its labelled rows before the jitted step: the step
    and the eager conversion at that line meet a new size whenever a count comes first,
    and the next epochs are served. The conversion's calls are not counted; the step's,
    at the same line of the same loop, say the loop came round: no storm for either, and
    the first pass says what a fixed shape with a mask would spare, which applied compiles
    the step once and trains the same."""
    ran = run_program(tmp_path, "masked_rows")
    assert sum(ran.compiles.values()) == sum(ran.logged.values())
    assert ran.storms == []
    assert _findings(ran.url) == []
    line = f"{os.path.join(PROGRAMS, 'masked_rows.py')}:{_line_of('masked_rows.py', 'params, state, loss = step(')}"
    (step,) = [p for p in ran.passes if p.name == "step"]
    eager = [p for p in ran.passes if p.call_site == line and p.name != "step"]
    assert eager
    assert all(f.name.endswith("(op-by-op)") for p in eager for f in p.functions)
    assert step.compiles == ran.compiles["step"] - 1 >= 8
    assert "as the loop at masked_rows.py:" in step.fix
    assert "padding each batch to 128 with a mask" in step.fix
    # The run's summary tells it once for the line (the step and the conversion beside it).
    assert ran.stderr.count("padding each batch to 128 with a mask") == 1
    with make_client(ran.url) as client:
        page = client.get("/storms").text
    assert "padding each batch to 128 with a mask" in page.split('id="first-passes"', 1)[1]
    _fix_compiles_once(tmp_path, ran, "masked_rows_fixed", "step")


def test_eager_cond_branches_made_in_the_loop_are_a_storm_told_to_define_them_once_and_the_fix_holds(tmp_path):
    """No jit of the user's and no other compile between two of ``cond``'s: the same line
    compiling a parameter made anew (the same text) is the loop coming round, so warm-up
    ends there and the storm is told, at the line, with the fix that fits."""
    ran = run_program(tmp_path, "eager_cond")
    assert ran.compiles["cond"] == ran.logged["cond"] == 10
    (found,) = _findings(ran.url)
    line = f"{os.path.join(PROGRAMS, 'eager_cond.py')}:{_line_of('eager_cond.py', 'jax.lax.cond(')}"
    assert found.entry == line
    assert found.fix_kind == "hoist_function"
    assert found.compiles == 9
    assert found.varying.startswith("`cond`'s parameter `branches` made afresh at each pass")
    assert "define them once, outside the loop, and pass what changes as operands" in found.fix
    assert "pad" not in found.fix
    with enginemod.connection(ran.url) as conn:
        told = conn.execute(
            sa.select(models.compile_events.c.explanation).where(models.compile_events.c.cause == "new_static_value")
        ).scalars()
        assert all("was made anew with the same text" in text for text in told)
        # The store's readers end warm-up by the same rule, for a run whose flags stand.
        e = models.compile_events
        conn.execute(sa.update(e).values(warmup=True))
        (run_id,) = conn.execute(sa.select(e.c.run_id).distinct()).scalars()
        remade = sa.select(e.c.timestamp).where(e.c.cause == "new_static_value").order_by(e.c.timestamp)
        assert steady.steady_since(conn, [run_id]) == {run_id: conn.execute(remade).scalars().first()}
    _fix_compiles_once(tmp_path, ran, "eager_cond_fixed", "cond")


def test_a_kept_sample_list_grown_with_append_is_a_storm_however_long_the_run_goes_on_and_the_fix_holds(tmp_path):
    """``samples = jnp.append(samples, x)`` in a sampling loop, then a long stretch without
    it: a count that grows is no first pass over a few shapes, however quiet the run was
    after it (the calls of JAX's own append are not counted). The fix collects the samples
    in a list and stacks them once."""
    ran = run_program(tmp_path, "growing_append")
    assert ran.compiles["append"] == ran.logged["append"] == 30
    (found,) = _findings(ran.url)
    assert (
        found.entry == f"{os.path.join(PROGRAMS, 'growing_append.py')}:{_line_of('growing_append.py', 'jnp.append(')}"
    )
    assert found.fix_kind == "host_buffer"
    assert found.varying.startswith("a count that grows: 29 sizes between 1 and 29")
    assert "`jnp.append(samples, x)`" in found.fix
    assert "make the array once, after the loop (`jnp.stack(samples)`)" in found.fix
    fixed = run_program(tmp_path, "growing_append_fixed")
    assert fixed.stdout == ran.stdout
    assert "append" not in fixed.compiles
    assert sum(fixed.compiles.values()) == sum(fixed.logged.values()) < sum(ran.compiles.values()) - 25
    assert _findings(fixed.url) == []


def test_a_context_rebuilt_from_a_growing_list_is_one_finding_with_its_predictor_and_the_fix_holds(tmp_path):
    """``jnp.concatenate([context] + outs)`` each step: the join is given one more operand
    each time (a structure change), the jitted predictor one more row. One cause, one
    finding at the loop; the join is told to keep a fixed buffer, the predictor to read
    position n - 1."""
    ran = run_program(tmp_path, "growing_context")
    assert ran.compiles["predict_next"] == ran.logged["predict_next"] == 24
    (found,) = _findings(ran.url)
    assert set(found.functions) == {"predict_next", "concatenate (op-by-op)"}
    assert found.fix_kind == "pad_and_mask"
    assert found.varying.startswith("a count that grows: 23 sizes between 9 and 31")
    loop = _line_of("growing_context.py", "for _ in range(STEPS):")
    assert found.entry_text.startswith(f"the loop at growing_context.py:{loop}")
    joined = _line_of("growing_context.py", "full_context = jnp.concatenate(")
    assert f"At growing_context.py:{joined}, `jnp.concatenate([context] + outs)` makes a new array" in found.fix
    assert "`predict_next` reads the last position" in found.fix
    with enginemod.connection(ran.url) as conn:
        told = conn.execute(
            sa.select(models.compile_events.c.explanation).where(models.compile_events.c.cause == "new_structure")
        ).scalars()
        assert all("it was given more operands" in text for text in told)
    fixed = run_program(tmp_path, "growing_context_fixed")
    assert fixed.stdout == ran.stdout
    assert fixed.compiles["predict_next"] == fixed.logged["predict_next"] == 1
    assert "concatenate" not in fixed.compiles or fixed.compiles["concatenate"] == 1
    assert _findings(fixed.url) == []


def test_sizes_that_powers_of_two_cannot_make_fewer_are_not_told_to_be_padded_to_them():
    """Eager code run at the widths of three models (1, 2 and 30): powers of two leave
    three sizes, and padding a model's width would change it. The finding says to jit the
    code, not to pad; a jit whose batches are padded to 2**k + 1 already is told to pad to
    the largest, not to powers of two ("4 compiles instead of 4")."""
    key = "site:/u/models.py:20"
    compiles = {("r", key, 0.0): _shape_compiles(key, [1, 2, 30, 1, 2, 30, 1], 0, "/u/models.py:20")}
    (found,) = findings.gather([_storm(key, 0, 10, 6)], compiles, {"r": 100.0})
    assert found.fix_kind == "jit_code"
    assert "Powers of two would not make them fewer" in found.fix
    assert "pad" not in found.fix.replace("padding would change", "")
    padded = [
        Recompile("h", "r", float(i), Cause.NEW_SHAPE, diff, None, f"s{i}")
        for i, diff in enumerate(
            [{"path": "nodes", "change": "shape", "before": f"float32[{a},9]", "after": f"float32[{b},9]", "axes": [0]}]
            for a, b in [(9, 17), (17, 33), (33, 65), (65, 9), (9, 33)]
        )
    ]
    told = fixes.suggest_fix("step", Cause.NEW_SHAPE, padded)
    assert "one for each power of two already" in told
    assert "pad to 65 for one compile" in told
    assert "instead of 4" not in told


def test_a_library_refit_on_data_that_grows_is_told_as_a_count_at_the_library_call(tmp_path):
    """A sampler refit on one more observation each step (`mcmc.run(key, jnp.asarray(x[:n]))`):
    most compiles at that line come from inside the library, a few from JAX converting the
    argument on the same line, and among the sizes met is a broadcast's 1 beside the count.
    The line is still the library's call, and the count still grows: the fix is the
    library's data, never to jit the call."""
    program = tmp_path / "refit.py"
    program.write_text("for n in range(10, 22):\n    mcmc = make()\n    mcmc.run(key, jnp.asarray(xs[:n]))\n")
    site = f"{program}:3"
    sizes = [10, 11, 1, 12, 13, 14, 15, 16, 17, 18]
    compiles = []
    for i, c in enumerate(_shape_compiles("site:" + site, sizes, 0, site)):
        into, callee = (
            ("jax._src.numpy.array_constructors", "asarray") if i % 4 == 3 else ("numpyro.infer.mcmc", "MCMC.run")
        )
        compiles.append(dataclasses.replace(c, user_stack=[{"site": site, "into": into, "callee": callee}]))
    (found,) = findings.gather(
        [_storm("site:" + site, 0, 10, len(compiles))], {("r", "site:" + site, 0.0): compiles}, {"r": 100.0}
    )
    assert found.library == "numpyro"
    assert found.fix_kind == "library_boundary"
    assert found.varying == "a count that grows: 8 sizes between 11 and 18"
    assert "it grows over 8 sizes between 11 and 18" in found.fix
    assert "not one to wrap in jax.jit" in found.fix
    assert "`numpyro.handlers.mask`" in found.fix


def test_a_count_of_prng_keys_joins_the_finding_of_the_sizes_it_drives():
    """`jax.random.split(key, n)` then a vmapped draw per key, n varying per step: the
    draw's keys are an extended dtype (`key<fry>[n]`), whose sizes must be read like any
    array's, or the draw's storm stands apart from the split's and the sum's."""
    assert new_sizes([[{"change": "shape", "before": "key<fry>[38]", "after": "key<fry>[40]", "axes": [0]}]]) == [40]
    keys = [f"site:/u/pf.py:{n}" for n in (12, 13)]
    sizes = [38, 40, 25, 51, 33, 47, 29]
    compiles = {("r", key, 0.0): _shape_compiles(key, sizes, 0, key.removeprefix("site:")) for key in keys}
    compiles[("r", keys[1], 0.0)] = [
        dataclasses.replace(
            c,
            diff=[
                {**e, "before": f"key<fry>[{e['before'][8:-1]}]", "after": f"key<fry>[{e['after'][8:-1]}]"}
                for e in c.diff
            ],
        )
        for c in compiles[("r", keys[1], 0.0)]
    ]
    found = findings.gather([_storm(key, 0, 10, 6) for key in keys], compiles, {"r": 100.0})
    assert [sorted(f.storms) for f in found] == [sorted(keys)]


def test_sizes_entering_at_a_loop_of_several_lines_are_told_to_jit_the_loops_body(tmp_path):
    """Eager code on two lines of a loop meets the same varying lengths: the fix pads, and
    jits the loop's body made one function, not "the code at the loop" (a loop is not what
    jax.jit wraps)."""
    program = tmp_path / "score.py"
    program.write_text("for i in range(60):\n    tokens = draw(i)\n    score(tokens)\n")
    sizes = [12, 30, 7, 25, 18, 39, 9]
    keys = [f"site:{program}:{n}" for n in (2, 3)]
    compiles = {
        ("r", key, 0.0): [
            dataclasses.replace(c, user_stack=[{"site": key.removeprefix("site:")}])
            for c in _shape_compiles(key, sizes, 0, key.removeprefix("site:"))
        ]
        for key in keys
    }
    (found,) = findings.gather([_storm(key, 0, 10, 6) for key in keys], compiles, {"r": 100.0})
    assert found.fix_kind == "pad"
    assert f"make the body of the loop at {program.name}:1 (lines" in found.fix
    assert "one function of what changes each pass, jitted once" in found.fix
    assert "jit the code at the loop" not in found.fix


def test_a_step_jitted_anew_at_every_iteration_is_a_finding_and_the_fix_holds(tmp_path):
    """``jax.jit(step)(...)`` in the loop compiles once (JAX's caches are keyed by the
    function), so no storm says it; its price is jax.jit's set-up at every step, measured.
    The fix, the jit made once before the loop, prints the same and leaves nothing."""
    ran = run_program(tmp_path, "remade_jit")
    assert ran.compiles["step"] == ran.logged["step"] == 1
    (found,) = _findings(ran.url)
    assert found.fix_kind == "hoist_jit"
    assert found.varying == "a jit of `step` made anew for its calls"
    made_at = f"remade_jit.py:{_line_of('remade_jit.py', 'state = jax.jit(step)(')}"
    assert f"2999 of its 3000 calls came through a jit object made at {made_at}" in found.fix
    assert found.entry is not None
    assert found.entry.endswith(os.sep + made_at)  # placed where the jit is made, not where step is defined
    assert found.seconds > 0
    fixed = run_program(tmp_path, "remade_jit_fixed")
    assert fixed.stdout == ran.stdout
    assert fixed.compiles["step"] == 1
    assert _findings(fixed.url) == []


def test_a_library_call_made_once_at_the_top_level_is_a_first_pass_whatever_compiled_twice_inside(tmp_path):
    """JAX MD's energy, called eagerly once at the top level, compiles its jitted
    `safe_mask` once per pair of species (a lambda made anew for each: the same program
    again). Enough for a storm by count, but the line ran once: a first pass, no finding."""
    ran = run_program(tmp_path, "once_energy")
    assert sum(ran.compiles.values()) == sum(ran.logged.values())
    assert ran.compiles["safe_mask"] >= 6  # the six pairs, each a compile (and the jitted loop's none)
    line = f"{os.path.join(PROGRAMS, 'once_energy.py')}:{_line_of('once_energy.py', 'energy before')}"
    (once,) = ran.passes
    assert once.call_site == line
    # Should the one-time cost matter, the function is told to be jitted where it is made.
    made = _line_of("once_energy.py", "energy_fn = energy.soft_sphere_pair(")
    assert f"`energy_fn = jax.jit(energy_fn)` right after it is made (line {made})" in once.fix
    assert ran.storms == []
    assert _findings(ran.url) == []
