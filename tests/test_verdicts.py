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
import time
from pathlib import Path

import pytest
import scenarios
import sqlalchemy as sa

from cachewatch.core.events import OP_BY_OP_MODULE, Cause
from cachewatch.payoff import verdicts
from cachewatch.programs import program_texts
from cachewatch.store import engine as enginemod
from cachewatch.store import models, rollup
from cachewatch.storms import diagnosis, fixes, steady
from cachewatch.storms.results import Storm
from cachewatch.storms.storm_reads import Recompile
from cachewatch.views import runsummary

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
        summary = runsummary.for_store(url, self.run_id)
        assert summary.figures is not None
        self.figures = summary.figures

    def storm_at(self, line: int, program: str) -> Storm:
        (storm,) = [s for s in self.storms if s.call_site == f"{os.path.join(PROGRAMS, program)}:{line}"]
        return storm

    def storms_of(self, name: str) -> list[Storm]:
        return [s for s in self.storms if s.name == name or name in [f.name for f in s.functions]]


# Programs that need more than one device: four CPU devices.
FOUR_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
ENV = {"pmap_step": FOUR_DEVICES, "sharded_mlp": FOUR_DEVICES}


def run_program(tmp_path, name: str) -> Ran:
    url = f"sqlite:///{tmp_path / (name + '.db')}"
    done = scenarios.run_program_file(os.path.join(PROGRAMS, f"{name}.py"), url, ENV.get(name))
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
    assert storm.dominant_cause == Cause.NEW_FUNCTION_OBJECT
    assert storm.compiles == 6
    assert [f.name for f in storm.functions] == ["body_fn"]
    with enginemod.connection(ran.url) as conn:  # as the function's page asks for it
        (same,) = diagnosis.detect_storms(conn, threshold=5, window=600, function_hashes=[storm.function_hash])
    assert same.call_site == storm.call_site
    assert same.compiles == storm.compiles
    assert "numpyro makes afresh each time `SVI.run` runs" in storm.fix
    assert "call `svi.update` in the loop instead of `svi.run`" in storm.fix
    # Warm-up ended with the second svi.run: the summary no longer counts its compiles as set-up.
    assert ran.figures.warmup_compiles < ran.figures.report.compiles - 6
    assert f"Storm [ACTIVE] svi_refit.py:{line} (body_fn 6x)" in ran.stderr
    # Waste is only a recompile of body_fn that produced body_fn's program again.
    assert storm.identical_programs <= storm.compiles
    with enginemod.connection(ran.url) as conn:
        wasted = program_texts.identical_recompiles(conn)
        e, earlier = models.compile_events, models.compile_events.alias("earlier")
        first_wasted = conn.execute(
            sa.select(sa.func.count())
            .select_from(e)
            .join(earlier, earlier.c.event_id == e.c.identical_to)
            .where(e.c.cause == Cause.FIRST_CALL.value)
        ).scalar_one()
    assert all(item.cause != Cause.FIRST_CALL for item in wasted)
    assert sum(item.recompiles for item in wasted) == ran.figures.identical_recompiles
    if first_wasted:  # a store that links first compiles across functions: never waste
        assert ran.figures.identical_recompiles < sum(ran.compiles.values()) - len(ran.compiles)


def test_a_jax_function_called_at_many_sizes_with_no_jit_of_the_users_is_a_storm(tmp_path):
    ran = run_program(tmp_path, "cholesky_sizes")
    assert ran.compiles["cholesky"] == ran.logged["cholesky"] == 8
    storm = ran.storm_at(_line_of("cholesky_sizes.py", "jnp.linalg.cholesky("), "cholesky_sizes.py")
    assert storm.dominant_cause == Cause.NEW_SHAPE
    assert storm.compiles == 7
    assert "axis 0 of `cholesky`'s a took 8 sizes between 4 and 11" in storm.fix
    assert ran.figures.warmup_compiles < ran.figures.report.compiles // 2


# ------------------------------------------------------------------ padding


def test_graphs_of_varying_size_are_advised_a_node_and_edge_budget(tmp_path):
    ran = run_program(tmp_path, "graph_net")
    assert ran.compiles["train_step"] == ran.logged["train_step"] == 12
    (storm,) = ran.storms_of("train_step")
    # A jit's storm is keyed by the jit and names the line whose calls recompile it.
    assert storm.key == storm.function_hash
    assert storm.call_site == f"{PROGRAMS}/graph_net.py:{_line_of('graph_net.py', 'params = train_step(')}"
    fix = storm.fix
    assert "do not pad" not in fix
    assert "nodes axis 0: 11 sizes between 5 and 39 (buckets 8, 16, 32, 64)" in fix
    assert "edges/senders/receivers axis 0:" in fix
    assert "jraph.pad_with_graphs" in fix


def test_text_padded_to_its_longest_sentence_is_advised_to_bucket_the_sequence(tmp_path):
    ran = run_program(tmp_path, "text_classifier")
    assert ran.compiles["train_step"] == ran.logged["train_step"]
    (storm,) = ran.storms_of("train_step")
    fix = storm.fix
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
    fix = fixes.suggest_fix("step", Cause.NEW_SHAPE, tokens)
    assert fix.startswith("Argument ids axis 1 took 11 sizes between 10 and 40; pad to powers of two: 3 compile(s)")
    assert "(buckets 16, 32, 64; or pad to 40 for one)" in fix
    assert "sequence length" in fix
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
    fix = fixes.suggest_fix("step", Cause.NEW_SHAPE, graphs)
    assert "graph.nodes axis 0: 9 sizes between 6 and 14 (buckets 8, 16)" in fix
    assert "graph.senders/graph.receivers axis 0: 9 sizes between 12 and 31 (buckets 16, 32)" in fix
    assert "jraph.pad_with_graphs" in fix
    assert "do not pad" not in fix


# ------------------------------------------------------------------ eager code in a callback


def test_a_boolean_mask_in_a_debug_callback_is_one_finding_per_line_with_numpy_as_the_fix(tmp_path):
    ran = run_program(tmp_path, "rl_callback")
    masked = _line_of("rl_callback.py", "returns[done]")
    sites = collections.Counter(s.call_site for s in ran.storms)
    assert all(count == 1 for count in sites.values()), sites
    storm = ran.storm_at(masked, "rl_callback.py")
    assert storm.dominant_cause == Cause.NEW_SHAPE
    assert Cause.NEW_DTYPE not in storm.causes  # the dtypes never change
    assert "a host callback" in storm.fix
    assert "np.asarray" in storm.fix
    assert "Move that code inside a jitted function" not in storm.fix
    # The count of compiles of each primitive is JAX's.
    assert ran.compiles["gather"] == ran.logged["gather"]
    assert all("log_episodes" in s.fix for s in ran.storms)


# ------------------------------------------------------------------ warm-up


def _loop_body():  # stands for the user's code: its lines are the call sites below
    first = 1  # site-a
    second = 2  # site-b
    return first + second


def _called_back():
    return 3  # site-c


def _site(mark: str) -> str:
    return f"{__file__}:{_line_in_this_file(mark)}"


def _line_in_this_file(mark: str) -> int:
    with open(__file__) as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(mark))


class _Compile:
    def __init__(self, t: float, function_hash: str, cause: str, site: str, module: str = "jax._src.numpy") -> None:
        self.timestamp, self.function_hash, self.cause, self.call_site, self.module = (
            t,
            function_hash,
            cause,
            site,
            module,
        )
        self.remade_static = False
        self.user_stack: list[dict[str, str]] | None = None


def test_set_up_from_one_line_stays_warm_up_and_a_loop_coming_back_ends_it():
    a, b, c = _site("# site-a"), _site("# site-b"), _site("# site-c")
    init = [_Compile(i, "normal", Cause.NEW_SHAPE, a) for i in range(6)]
    assert steady.warmup_end(init) is None
    # A loop's body: two lines of one function, the first compiling again.
    loop = [_Compile(0, "eye", Cause.FIRST_CALL, a), _Compile(1, "chol", Cause.FIRST_CALL, b)]
    loop += [_Compile(2, "eye", Cause.NEW_SHAPE, a), _Compile(3, "chol", Cause.NEW_SHAPE, b)]
    assert steady.warmup_end(loop) == 2
    # A model a library evaluates twice from one line of the caller: no loop of the user's.
    nested = [_Compile(0, "exp", Cause.FIRST_CALL, c), _Compile(1, "log", Cause.FIRST_CALL, a)]
    nested += [_Compile(2, "exp", Cause.NEW_SHAPE, c), _Compile(3, "log", Cause.NEW_SHAPE, a)]
    assert steady.warmup_end(nested) is None
    # Unreadable source is never taken for a loop.
    assert steady.warmup_end([_Compile(0, "f", Cause.FIRST_CALL, "/nowhere.py:3")] + loop[1:3]) is None
    # A library's jit made afresh from the same line.
    remade = [_Compile(0, "body_fn", Cause.FIRST_CALL, c, "numpyro.infer.svi")]
    remade.append(_Compile(1, "body_fn", Cause.NEW_FUNCTION_OBJECT, c, "numpyro.infer.svi"))
    assert steady.warmup_end(remade) == 1
    # JAX's own jit lowered afresh under an eager transformation is no such sign.
    jax_own = [
        _Compile(0, "_reduce_sum", Cause.FIRST_CALL, c),
        _Compile(1, "_reduce_sum", Cause.NEW_FUNCTION_OBJECT, c),
    ]
    assert steady.warmup_end(jax_own) is None
    # A primitive compiled again from the same line for a parameter made anew (the same
    # text: an eager lax.cond's lambdas traced again): that line ran again, nothing between.
    cond = [_Compile(0, "cond", Cause.FIRST_CALL, c, OP_BY_OP_MODULE)]
    cond.append(_Compile(1, "cond", Cause.NEW_STATIC_VALUE, c, OP_BY_OP_MODULE))
    assert steady.warmup_end(cond) is None  # another value (or unknown): one pass may compile several
    cond[1].remade_static = True
    assert steady.warmup_end(cond) == 1
    # ... unless one jax.tree.map over a pytree's leaves brought it back (set-up, one call).
    mapped = [_Compile(0, "cond", Cause.FIRST_CALL, c, OP_BY_OP_MODULE)]
    mapped.append(_Compile(1, "cond", Cause.NEW_STATIC_VALUE, c, OP_BY_OP_MODULE))
    for compiled in mapped:
        compiled.user_stack = [{"site": c, "into": "jax._src.tree"}]
    mapped[1].remade_static = True
    assert steady.warmup_end(mapped) is None


@pytest.mark.parametrize("program", ["linen_seq", "eager_loss", "numpyro_nuts", "pmap_step", "sharded_mlp"])
def test_a_storm_free_program_reports_no_storm(tmp_path, program):
    ran = run_program(tmp_path, program)
    assert not ran.storms, [diagnosis.describe_storm(s) for s in ran.storms]
    assert "Storm" not in ran.stderr
    # Every compile JAX logged is recorded (a pmap under JAX's own name for it).
    assert sum(ran.compiles.values()) == sum(ran.logged.values())
    if program in ("pmap_step", "sharded_mlp"):
        assert ran.stdout.startswith("4 ")
    with enginemod.connection(ran.url) as conn:
        e = models.compile_events
        causes = set(conn.execute(sa.select(e.c.cause).where(e.c.compiled)).scalars())
    assert Cause.UNKNOWN not in causes
    assert Cause.CACHE_CLEARED not in causes


# ------------------------------------------------------------------ judged from the store


NOW = 1_700_000_000.0


def _store(url: str) -> str:
    enginemod.ensure_schema(url)
    with enginemod.connection(url) as conn:
        conn.execute(
            sa.insert(models.runs), [{"run_id": "r1", "started_at": NOW, "jax_version": "0.10.2", "devices": []}]
        )
        conn.execute(
            sa.insert(models.functions),
            [
                {
                    "function_hash": h,
                    "name": h,
                    "qualname": h,
                    "module": "train",
                    "file": "/p/train.py",
                    "first_seen": NOW,
                }
                for h in ("step", "evaluate", "twin")
            ],
        )
    return url


def _event(function_hash: str, t: float, cause: str, signature: str, **fields) -> dict:
    return {
        "event_id": fields.pop("event_id", f"{function_hash}-{t}"),
        "function_hash": function_hash,
        "run_id": "r1",
        "timestamp": NOW + t,
        "kind": "trace",
        "cause": cause,
        "compiled": True,
        "nested": False,
        "warmup": False,
        "signature_hash": signature,
        "trace_seconds": 0.01,
        "program_fingerprint": None,
        "identical_to": None,
        "same_program_as": None,
        **fields,  # every row the same keys: one insert takes its columns from the first
    }


def _stats(function_hash: str, t: float, calls: int, released_by: str | None = None) -> dict:
    return {
        "run_id": "r1",
        "function_hash": function_hash,
        "timestamp": NOW + t,
        "calls": calls,
        "released_by": released_by,
    }


def _write(url: str, events: list[dict], stats: list[dict]) -> None:
    with enginemod.connection(url) as conn:
        conn.execute(sa.insert(models.compile_events), events)
        if stats:
            conn.execute(sa.insert(models.call_stats), stats)
        # Written behind the write path's back: its runs marked as it marks them.
        rollup.mark_runs_stale(conn, {row["run_id"] for row in (*events, *stats)})


def _burst(function_hash: str, start: float, n: int) -> list[dict]:
    first = [_event(function_hash, start, Cause.FIRST_CALL, "s0")]
    return first + [_event(function_hash, start + i, Cause.NEW_SHAPE, f"s{i}") for i in range(1, n + 1)]


def test_the_exit_flush_is_no_sign_that_the_program_went_on(sqlite_url):
    url = _store(sqlite_url)
    # A short program storming to its end: the statistics written at exit, long after the
    # last compile, count only the calls that compiled.
    _write(url, _burst("step", 0.0, 6), [_stats("step", 100.0, 7)])
    with enginemod.connection(url) as conn:
        storms, passes = diagnosis.storms_and_first_passes(conn, threshold=5, window=600, now=NOW + 200)
    assert [s.name for s in storms] == ["step"]
    assert storms[0].active
    assert not passes


def test_calls_served_from_the_cache_after_a_burst_make_it_a_first_pass(sqlite_url):
    url = _store(sqlite_url)
    # The writer collects statistics with the burst's compiles (at 6.5: the seven calls
    # that compiled); the 43 calls counted at exit came after that collection.
    _write(url, _burst("step", 0.0, 6), [_stats("step", 6.5, 7), _stats("step", 100.0, 43)])
    with enginemod.connection(url) as conn:
        storms, passes = diagnosis.storms_and_first_passes(conn, threshold=5, window=600, now=NOW + 200)
    assert not storms
    assert [p.name for p in passes] == ["step"]


def _late_flush_of_calls_made_before_a_burst(collected_after_burst: list[dict]) -> list[dict]:
    """Another function's served calls, written at exit (100 s) after a burst at 10-16 s,
    with the run's other statistics ``collected_after_burst``."""
    return [_stats("evaluate", 100.0, 30), *collected_after_burst]


@pytest.mark.parametrize(
    ("collected", "first_pass"),
    [
        # No collection between the burst and the exit: the exit's served calls of
        # evaluate may all have been made before the burst (a busy writer's late flush).
        ([], False),
        # A release of executables is written at its own time, not by a collection.
        ([_stats("evaluate", 50.0, 0, released_by="jax.clear_caches()")], False),
        # A collection after the burst read every counter: evaluate's calls counted at
        # exit came after it, 84 s of the program going on.
        ([_stats("step", 16.5, 7)], True),
    ],
)
def test_served_calls_count_as_going_on_only_when_made_after_the_burst(sqlite_url, collected, first_pass):
    url = _store(sqlite_url)
    events = [_event("evaluate", 0.0, Cause.FIRST_CALL, "e0"), *_burst("step", 10.0, 6)]
    _write(url, events, _late_flush_of_calls_made_before_a_burst(collected))
    with enginemod.connection(url) as conn:
        storms, passes = diagnosis.storms_and_first_passes(conn, threshold=5, window=600, now=NOW + 200)
    assert [p.name for p in passes] == (["step"] if first_pass else [])
    assert [s.name for s in storms] == ([] if first_pass else ["step"])


def test_a_flush_long_after_a_burst_of_calls_made_before_it_leaves_it_a_storm(sqlite_url, use_store, wall_clock):
    import numpy as np

    import cachewatch

    # A busy writer: it writes nothing and collects no counter until the exit's flush
    # (no batch comes due in the test's time), so the exit's statistics are the only ones
    # and count served_early's calls.
    url = use_store(sqlite_url, flush_interval=3600, stats_interval=3600)

    @cachewatch.jit
    def served_early(x):
        return x * 2

    @cachewatch.jit
    def storming_last(x):
        return x.sum()

    for _ in range(20):
        served_early(np.ones(3, np.float32))  # served from the cache, all before the burst
    for n in range(2, 9):
        storming_last(np.ones(n, np.float32))  # NumPy inputs: no eager compiles beside it
    # The program ends with its burst; the exit's statistics come a minute after it (as a
    # busy writer's would), far longer than seven small compiles last, and count
    # served_early's calls. The clock is moved on, not slept through, by a fixed stretch
    # that owes nothing to how long the burst took on this machine.
    wall_clock.advance(60.0)
    assert cachewatch.flush(30)
    with enginemod.connection(url) as conn:
        storms, passes = diagnosis.storms_and_first_passes(conn, threshold=5, window=600)
    assert [s.name for s in storms] == ["storming_last"]
    assert not passes


def test_an_evaluation_pass_served_by_the_next_epoch_is_no_active_storm(sqlite_url):
    url = _store(sqlite_url)
    # The evaluation pass compiles five new sizes over five seconds; the next epoch, two
    # seconds later, evaluates again from the cache, and the program ends.
    _write(url, _burst("evaluate", 0.0, 5), [_stats("evaluate", 5.5, 6), _stats("evaluate", 7.0, 6)])
    with enginemod.connection(url) as conn:
        storms, passes = diagnosis.storms_and_first_passes(conn, threshold=5, window=600, now=NOW + 8)
    assert not storms
    assert [p.name for p in passes] == ["evaluate"]


def test_waste_counts_only_recompiles_of_one_function(sqlite_url):
    url = _store(sqlite_url)
    events = [
        _event("step", 0.0, Cause.FIRST_CALL, "a", event_id="e1", program_fingerprint="P"),
        # Another function's first compile of the same program: as older stores linked it
        # (identical_to) and as they link it now (same_program_as). Never waste.
        _event(
            "twin",
            1.0,
            Cause.FIRST_CALL,
            "b",
            event_id="e2",
            program_fingerprint="P",
            identical_to="e1",
            same_program_as="e1",
        ),
        _event("twin", 1.5, Cause.NEW_SHAPE, "c", event_id="e4", program_fingerprint="P", same_program_as="e1"),
        # The same function compiling its own program again: waste.
        _event("step", 2.0, Cause.NEW_FUNCTION_OBJECT, "a", event_id="e3", program_fingerprint="P", identical_to="e1"),
    ]
    _write(url, events, [])
    with enginemod.connection(url) as conn:
        from cachewatch.store import rollup

        rollup.rebuild(conn)
        wasted = program_texts.identical_recompiles(conn)
        shared = program_texts.shared_programs(conn)
        assert program_texts.wasted_between(conn, ["step", "twin"], "r1", NOW, NOW + 10) == (1, pytest.approx(0.01))
        # Many storms' spans in one read: each as alone (before the waste, another run, no function).
        spans = [
            program_texts.Span(("twin",), "r1", NOW, NOW + 10),
            program_texts.Span(("step", "twin"), "r1", NOW, NOW + 10),
            program_texts.Span(("step",), "r1", NOW, NOW + 1.9),
            program_texts.Span(("step",), "r2", NOW, NOW + 10),
            program_texts.Span((), "r1", NOW, NOW + 10),
            program_texts.Span(("step",), "r1", NOW + 2.0, NOW + 2.0),
        ]
        assert program_texts.wasted_in_spans(conn, spans) == [
            (0, 0.0),
            (1, pytest.approx(0.01)),
            (0, 0.0),
            (0, 0.0),
            (0, 0.0),
            (1, pytest.approx(0.01)),
        ]
        # A recompile is diffed with the function's own earlier program, never another function's.
        from cachewatch.programs import program_reads

        e3, e2 = program_reads.event(conn, "e3"), program_reads.event(conn, "e2")
        assert e3 is not None
        assert e2 is not None
        assert program_texts.default_against(conn, e3) == "e1"
        assert program_texts.default_against(conn, e2) is None
    assert [(w.function_hash, w.recompiles) for w in wasted] == [("step", 1)]
    assert [(s.function_hash, s.other_hash, s.compiles) for s in shared] == [("twin", "step", 2)]
    assert "could share one jit" in shared[0].text
    summary = runsummary.for_store(url, "r1")
    assert summary.figures is not None
    assert summary.figures.identical_recompiles == 1
    assert summary.figures.shared_program_compiles == 2
    text = runsummary.text(summary)
    assert "1 recompile produced a program compiled before" in text
    assert "2 compiles produced the same program as another function's (no waste" in text


# ------------------------------------------------------------------ in this process


def test_a_jit_traced_only_inside_another_is_no_recompile_and_gets_no_verdict(sqlite_url, use_store):
    import jax.numpy as jnp

    import cachewatch
    from cachewatch.store import queries

    url = use_store(sqlite_url)

    @cachewatch.jit
    def verdict_inner(x):
        return jnp.sin(x) * 2

    @cachewatch.jit
    def verdict_outer(x):
        return verdict_inner(x) + 1

    with scenarios.jax_compile_log() as messages:
        for n in range(2, 9):
            verdict_outer(jnp.ones(n))
    assert cachewatch.flush(30)
    with enginemod.connection(url) as conn:
        report = {r["name"]: r for r in queries.function_report(conn)}
        storms = diagnosis.detect_storms(conn, threshold=5, window=600)
        weighed = verdicts.verdicts(conn, list(report.values()))
    inner, outer = report["verdict_inner"], report["verdict_outer"]
    assert outer["compiles"] == scenarios.jax_compile_count(messages, "verdict_outer") == 7
    assert inner["traces"] == 7
    assert inner["compiles"] == 0
    assert inner["recompiles"] == 0
    assert not [s for s in storms if inner["function_hash"] in s.function_hashes]
    assert inner["function_hash"] not in weighed  # it never ran on its own: nothing to weigh


def test_an_optimizer_update_over_many_leaves_is_no_unrolled_loop(sqlite_url, use_store):
    import jax
    import jax.numpy as jnp
    import optax

    import cachewatch

    url = use_store(sqlite_url)
    seen: list = []
    from cachewatch.record import recorder

    recorder.add_listener(seen.append)
    tx = optax.adam(1e-3)
    params = {f"w{i}": jnp.ones((i + 1, 3)) for i in range(24)}  # 24 leaves, 24 shapes

    @cachewatch.jit
    def optimizer_step(params, state):
        grads = jax.tree.map(jnp.ones_like, params)
        updates, state = tx.update(grads, state, params)  # over-every-leaf
        return optax.apply_updates(params, updates), state

    optimizer_step(params, tx.init(params))
    assert cachewatch.flush(30)
    recorder.remove_listener(seen.append)
    (event,) = [e for e in seen if e.function.name == "optimizer_step" and e.compiled]
    with enginemod.connection(url) as conn:
        profile = program_texts.compile_profile(conn, event.function.function_hash)
    update_line = next(
        i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "# over-every-leaf" in text
    )
    top = profile.top_lines[0]
    # The line repeats its operations once per leaf, as an unrolled loop would ...
    assert top["line"] == update_line
    assert min(top["primitives"].values()) >= program_texts.UNROLLED_MIN_REPEATS
    # ... but leaves of 24 shapes are no loop a scan could take.
    assert not [f for f in profile.fixes if f.kind == "unrolled_loop"], profile.fixes


def test_capture_can_end_warm_up_on_a_library_loop_by_the_same_rule(sqlite_url, use_store):
    from cachewatch.record import current

    a, b, c = _site("# site-a"), _site("# site-b"), _site("# site-c")
    use_store(sqlite_url)
    for _ in range(3):  # set-up from one line: many shapes of one library jit
        current.note_compile("normal", Cause.NEW_SHAPE, a, module="jax.random")
    current.note_compile("exp", Cause.NEW_SHAPE, c, module="jax.random")  # a model called back ...
    current.note_compile("normal", Cause.NEW_SHAPE, a, module="jax.random")
    current.note_compile("exp", Cause.NEW_SHAPE, c, module="jax.random")  # ... twice from one line
    assert not current.steady()
    use_store(sqlite_url)
    current.note_compile("eye", Cause.FIRST_CALL, a, module="jax.random")
    current.note_compile("chol", Cause.FIRST_CALL, b, module="jax.random")
    current.note_compile("eye", Cause.NEW_SHAPE, a, module="jax.random")  # the loop came back
    assert current.steady()
    assert not current.in_warmup(time.time())
    use_store(sqlite_url)
    current.note_compile("body_fn", Cause.FIRST_CALL, c, module="jax.random")
    current.note_compile("body_fn", Cause.NEW_FUNCTION_OBJECT, c, module="numpyro.infer.svi")
    assert current.steady()
