"""Storms, fixes and waste on programs written the way people write them (tests/programs/):
a NumPyro refit loop, covariance factorisations at many sizes, a graph network fed graphs
of varying size, a text classifier padded to the longest sentence, an RL loop logging
through a debug callback. Each is run under ``cachewatch run`` beside JAX's own compile
log, and what it must and must not report is checked."""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys

import pytest
import sqlalchemy as sa

from cachewatch.analysis import diagnosis, programs, runsummary, steady
from cachewatch.core.events import Cause
from cachewatch.store import engine as enginemod
from cachewatch.store import models
from cachewatch.store.evidence import Recompile

PROGRAMS = os.path.join(os.path.dirname(__file__), "programs")
_JAX_COMPILED = re.compile(r"Finished XLA compilation of jit\((.*?)\) in")


class Ran:
    def __init__(self, url: str, done: subprocess.CompletedProcess) -> None:
        self.url = url
        self.stdout, self.stderr = done.stdout, done.stderr
        self.logged = collections.Counter(_JAX_COMPILED.findall(done.stderr))
        with enginemod.connection(url) as conn:
            self.run_id = conn.execute(sa.select(models.runs.c.run_id)).scalar_one()
            self.storms, self.passes = diagnosis.storms_and_first_passes(conn, threshold=5, window=600)
            e, f = models.compile_events, models.functions
            self.compiles = collections.Counter(
                name
                for (name,) in conn.execute(
                    sa.select(f.c.name).join(e, e.c.function_hash == f.c.function_hash).where(e.c.compiled)
                )
            )
        self.summary = runsummary.for_store(url, self.run_id)

    def storm_at(self, line: int, program: str) -> dict:
        (storm,) = [s for s in self.storms if s["call_site"] == f"{os.path.join(PROGRAMS, program)}:{line}"]
        return storm

    def storms_of(self, name: str) -> list[dict]:
        return [s for s in self.storms if s["name"] == name or name in [f["name"] for f in s["functions"]]]


def run_program(tmp_path, name: str) -> Ran:
    url = f"sqlite:///{tmp_path / (name + '.db')}"
    env = {
        **os.environ,
        "CACHEWATCH_STORE": url,
        "JAX_PLATFORMS": "cpu",
        "JAX_LOG_COMPILES": "1",
        "CACHEWATCH_RAISE_INTERNAL_ERRORS": "1",
        "TQDM_DISABLE": "1",
    }
    path = os.path.join(PROGRAMS, f"{name}.py")
    done = subprocess.run(
        [sys.executable, "-m", "cachewatch", "run", path], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return Ran(url, done)


def _line_of(program: str, text: str) -> int:
    with open(os.path.join(PROGRAMS, program)) as f:
        (number,) = [i for i, line in enumerate(f, 1) if text in line]
    return number


# ------------------------------------------------------------------ library jits


def test_a_library_jit_remade_at_every_step_is_a_storm_at_the_users_line(tmp_path):
    ran = run_program(tmp_path, "svi_refit")
    line = _line_of("svi_refit.py", "svi.run(")
    # Every compile of numpyro's body is recorded, as JAX logged it: one per svi.run.
    assert ran.compiles["body_fn"] == ran.logged["body_fn"] == 7
    storm = ran.storm_at(line, "svi_refit.py")
    assert storm["dominant_cause"] == Cause.NEW_FUNCTION_OBJECT and storm["compiles"] == 6
    assert [f["name"] for f in storm["functions"]] == ["body_fn"]
    assert "numpyro makes afresh each time `SVI.run` runs" in storm["fix"]
    assert "call `svi.update` in the loop instead of `svi.run`" in storm["fix"]
    # Warm-up ended with the second svi.run: the summary no longer counts its compiles as set-up.
    assert ran.summary["warmup_compiles"] < ran.summary["compiles"] - 6
    assert f"Storm [ACTIVE] svi_refit.py:{line} (body_fn 6x)" in ran.stderr
    # Waste is only a recompile of body_fn that produced body_fn's program again.
    assert storm["identical_programs"] <= storm["compiles"]
    with enginemod.connection(ran.url) as conn:
        wasted = programs.identical_recompiles(conn)
        e, earlier = models.compile_events, models.compile_events.alias("earlier")
        first_wasted = conn.execute(
            sa.select(sa.func.count())
            .select_from(e)
            .join(earlier, earlier.c.event_id == e.c.identical_to)
            .where(e.c.cause == Cause.FIRST_CALL.value)
        ).scalar_one()
    assert all(item["cause"] != Cause.FIRST_CALL for item in wasted)
    assert sum(item["recompiles"] for item in wasted) == ran.summary["identical_recompiles"]
    if first_wasted:  # a store that links first compiles across functions: never waste
        assert ran.summary["identical_recompiles"] < sum(ran.compiles.values()) - len(ran.compiles)


def test_a_jax_function_called_at_many_sizes_with_no_jit_of_the_users_is_a_storm(tmp_path):
    ran = run_program(tmp_path, "cholesky_sizes")
    assert ran.compiles["cholesky"] == ran.logged["cholesky"] == 8
    storm = ran.storm_at(_line_of("cholesky_sizes.py", "jnp.linalg.cholesky("), "cholesky_sizes.py")
    assert storm["dominant_cause"] == Cause.NEW_SHAPE and storm["compiles"] == 7
    assert "axis 0 of `cholesky`'s a took 8 sizes between 4 and 11" in storm["fix"]
    assert ran.summary["warmup_compiles"] < ran.summary["compiles"] // 2


# ------------------------------------------------------------------ padding


def test_graphs_of_varying_size_are_advised_a_node_and_edge_budget(tmp_path):
    ran = run_program(tmp_path, "graph_net")
    assert ran.compiles["train_step"] == ran.logged["train_step"] == 12
    (storm,) = ran.storms_of("train_step")
    fix = storm["fix"]
    assert "do not pad" not in fix
    assert "nodes axis 0: 11 sizes between 5 and 39 (buckets 8, 16, 32, 64)" in fix
    assert "edges/senders/receivers axis 0:" in fix
    assert "jraph.pad_with_graphs" in fix


def test_text_padded_to_its_longest_sentence_is_advised_to_bucket_the_sequence(tmp_path):
    ran = run_program(tmp_path, "text_classifier")
    assert ran.compiles["train_step"] == ran.logged["train_step"]
    (storm,) = ran.storms_of("train_step")
    fix = storm["fix"]
    assert "do not pad" not in fix
    assert re.search(r"Argument ids axis 1 took \d+ sizes between \d+ and \d+; pad to powers of two", fix), fix
    assert "It is a sequence length (mask axis 1 with it)" in fix


def _shape(path: str, before: str, after: str, axes: list[int]) -> dict:
    return {"path": path, "change": "shape", "cause": Cause.NEW_SHAPE, "before": before, "after": after, "axes": axes}


def test_padding_advice_per_varying_axis():
    tokens = [
        Recompile("h", "r", float(i), Cause.NEW_SHAPE, [_shape("ids", f"int32[8,{n}]", f"int32[8,{n + 3}]", [1])], None)
        for i, n in enumerate(range(10, 40, 3))
    ]
    fix = diagnosis.suggest_fix("step", Cause.NEW_SHAPE, tokens)
    assert fix.startswith("Argument ids axis 1 took 11 sizes between 10 and 40; pad to powers of two: 3 compile(s)")
    assert "(buckets 16, 32, 64; or pad to 40 for one)" in fix and "sequence length" in fix
    graphs = [
        Recompile(
            "h",
            "r",
            float(i),
            Cause.NEW_SHAPE,
            [
                _shape("graph.nodes", f"float32[{n},4]", f"float32[{n + 1},4]", [0]),
                _shape("graph.senders", f"int32[{2 * n}]", f"int32[{2 * n + 5}]", [0]),
                _shape("graph.receivers", f"int32[{2 * n}]", f"int32[{2 * n + 5}]", [0]),
            ],
            None,
        )
        for i, n in enumerate(range(6, 14))
    ]
    fix = diagnosis.suggest_fix("step", Cause.NEW_SHAPE, graphs)
    assert "graph.nodes axis 0: 9 sizes between 6 and 14 (buckets 8, 16)" in fix
    assert "graph.senders/graph.receivers axis 0: 9 sizes between 12 and 31 (buckets 16, 32)" in fix
    assert "jraph.pad_with_graphs" in fix and "do not pad" not in fix


# ------------------------------------------------------------------ eager code in a callback


def test_a_boolean_mask_in_a_debug_callback_is_one_finding_per_line_with_numpy_as_the_fix(tmp_path):
    ran = run_program(tmp_path, "rl_callback")
    masked = _line_of("rl_callback.py", "returns[done]")
    sites = collections.Counter(s["call_site"] for s in ran.storms)
    assert all(count == 1 for count in sites.values()), sites
    storm = ran.storm_at(masked, "rl_callback.py")
    assert storm["dominant_cause"] == Cause.NEW_SHAPE
    assert Cause.NEW_DTYPE not in storm["causes"]  # the dtypes never change
    assert "a host callback" in storm["fix"] and "np.asarray" in storm["fix"]
    assert "Move that code inside a jitted function" not in storm["fix"]
    # The count of compiles of each primitive is JAX's.
    assert ran.compiles["gather"] == ran.logged["gather"]
    assert all("log_episodes" in s["fix"] for s in ran.storms)


# ------------------------------------------------------------------ warm-up


def test_set_up_from_one_line_stays_warm_up_and_a_line_revisited_ends_it():
    class Row:
        def __init__(self, t, f, cause, site):
            self.timestamp, self.function_hash, self.cause, self.call_site = t, f, cause, site

    init = [Row(i, "normal", Cause.NEW_SHAPE, "m.py:10") for i in range(6)]
    assert steady.warmup_end(init) is None
    loop = [Row(0, "eye", Cause.FIRST_CALL, "m.py:3"), Row(1, "chol", Cause.FIRST_CALL, "m.py:4")]
    loop += [Row(2, "eye", Cause.NEW_SHAPE, "m.py:3"), Row(3, "chol", Cause.NEW_SHAPE, "m.py:4")]
    assert steady.warmup_end(loop) == 2
    remade = [Row(0, "body", Cause.FIRST_CALL, "m.py:7"), Row(1, "body", Cause.NEW_FUNCTION_OBJECT, "m.py:7")]
    assert steady.warmup_end(remade) == 1


@pytest.mark.parametrize("program", ["linen_seq"])
def test_a_storm_free_program_reports_no_storm(tmp_path, program):
    ran = run_program(tmp_path, program)
    assert not ran.storms, [diagnosis.describe_storm(s) for s in ran.storms]
    assert "Storm" not in ran.stderr
