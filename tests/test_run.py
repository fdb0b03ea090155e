"""``cachewatch run`` runs a program as ``python`` does, with every jit recorded: the same
events as ``python`` plus ``install()``, and call counts for the jits a library made at its
import only under ``run``; the same argv, ``__main__``, ``__file__``, exit codes, stdin and
tracebacks; a summary that names a storm; CI limits that fail with their own exit code;
and ``cachewatch compare`` of two runs of one program."""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import scenarios
import sqlalchemy as sa

from cachewatch import runner
from cachewatch.store import engine as enginemod
from cachewatch.store import models
from cachewatch.store.columns import cost_expr

PROGRAM = str(Path(__file__).with_name("programs") / "optax_first.py")
CLI = [sys.executable, "-m", "cachewatch"]


def _env(store: str | None = None) -> dict[str, str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "CACHEWATCH_RAISE_INTERNAL_ERRORS": "1"}
    for name in ("CACHEWATCH_RUN_NAME", "CACHEWATCH_INSTALL", "CACHEWATCH_JOB"):
        env.pop(name, None)
    if store:
        env["CACHEWATCH_STORE"] = store
    return env


def sh(args: list[str], store: str | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=_env(store), capture_output=True, text=True, timeout=300, **kwargs)


def compiled(url: str) -> list[tuple[str, str]]:
    e, f = models.compile_events, models.functions
    with enginemod.connection(url) as conn:
        rows = conn.execute(
            sa.select(f.c.qualname, e.c.cause).join(f, f.c.function_hash == e.c.function_hash).where(e.c.compiled)
        )
        return sorted((name, cause) for name, cause in rows)


def calls(url: str) -> dict[str, int]:
    s, f = models.call_stats, models.functions
    with enginemod.connection(url) as conn:
        rows = conn.execute(
            sa.select(f.c.qualname, sa.func.sum(s.c.calls))
            .join(f, f.c.function_hash == s.c.function_hash)
            .group_by(f.c.qualname)
        )
        return {name: int(n) for name, n in rows}


def program_json(stdout: str) -> dict:
    return json.loads(stdout.splitlines()[0])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The program three ways: under python with install(), under run, and under run with a
    batch size that changes at every step (a storm), the last two in one store."""
    work = tmp_path_factory.mktemp("run")
    python_store = f"sqlite:///{work / 'python.db'}"
    run_store = f"sqlite:///{work / 'run.db'}"
    by_python = sh([sys.executable, PROGRAM, "--steps", "3"], python_store)
    by_run = sh([*CLI, "run", "--store", run_store, PROGRAM, "--steps", "3"])
    storm = sh(
        [*CLI, "run", "--store", run_store, "--summary", "json", "--max-compiles", "5", PROGRAM]
        + ["--steps", "9", "--vary-batch"]
    )
    return {
        "python_store": python_store,
        "run_store": run_store,
        "python": by_python,
        "run": by_run,
        "storm": storm,
    }


def test_run_records_what_python_with_install_records_and_counts_the_calls_of_import_time_jits(runs):
    assert runs["python"].returncode == 0, runs["python"].stderr[-3000:]
    assert runs["run"].returncode == 0, runs["run"].stderr[-3000:]
    with enginemod.connection(runs["run_store"]) as conn:
        first_run = conn.execute(sa.select(models.runs.c.run_id).order_by(models.runs.c.started_at)).scalars().first()
    assert first_run is not None
    e = models.compile_events
    with enginemod.connection(runs["run_store"]) as conn:
        # Only the first run of that store: the storm run shares it.
        later = conn.execute(sa.select(models.runs.c.run_id).where(models.runs.c.run_id != first_run)).scalars().all()
        assert later
        assert conn.execute(sa.select(sa.func.count()).where(e.c.run_id == first_run)).scalar_one()
    by_python = compiled(runs["python_store"])
    under_run = [row for row in _compiled_in_run(runs["run_store"], first_run)]
    assert collections.Counter(under_run) == collections.Counter(by_python)
    assert ("tree_bias_correction", "first_call") in by_python  # Optax's jit, made at its import
    # Call counts for Optax's import-time jit only when install() came before Optax's import.
    # (Adam corrects both its moments at every step.)
    assert _calls_in_run(runs["run_store"], first_run).get("tree_bias_correction", 0) == 2 * 3
    assert "tree_bias_correction" not in calls(runs["python_store"])
    assert calls(runs["python_store"])["grad_step"] == 3
    # The program saw what python gives it.
    assert program_json(runs["run"].stdout) == program_json(runs["python"].stdout)
    assert runs["run"].stdout == runs["python"].stdout


def _costliest(url: str) -> str:
    """The short name of the function with the most compile seconds in the store's first run."""
    e, f, r = models.compile_events, models.functions, models.runs
    with enginemod.connection(url) as conn:
        first = conn.execute(sa.select(r.c.run_id).order_by(r.c.started_at).limit(1)).scalar_one()
        seconds = sa.func.sum(cost_expr(e))
        name = conn.execute(
            sa.select(f.c.name)
            .join(f, f.c.function_hash == e.c.function_hash)
            .where(e.c.run_id == first, e.c.compiled)
            .group_by(f.c.name)
            .order_by(seconds.desc())
            .limit(1)
        ).scalar_one()
    return str(name)


def _compiled_in_run(url: str, run_id: str) -> list[tuple[str, str]]:
    e, f = models.compile_events, models.functions
    with enginemod.connection(url) as conn:
        rows = conn.execute(
            sa.select(f.c.qualname, e.c.cause)
            .join(f, f.c.function_hash == e.c.function_hash)
            .where(e.c.compiled, e.c.run_id == run_id)
        )
        return sorted((name, cause) for name, cause in rows)


def _calls_in_run(url: str, run_id: str) -> dict[str, int]:
    s, f = models.call_stats, models.functions
    with enginemod.connection(url) as conn:
        rows = conn.execute(
            sa.select(f.c.qualname, sa.func.sum(s.c.calls))
            .join(f, f.c.function_hash == s.c.function_hash)
            .where(s.c.run_id == run_id)
            .group_by(f.c.qualname)
        )
        return {name: int(n) for name, n in rows}


def test_the_summary_goes_to_stderr_and_says_where_to_look(runs):
    done = runs["run"]
    assert "cachewatch: run " in done.stderr
    assert " compiles (" in done.stderr
    # The costliest function leads the top functions (which five make the list depends on
    # how long each compile took on this machine; the costliest is far ahead).
    assert f"\n  {_costliest(runs['run_store'])}: " in done.stderr
    assert f"cachewatch report --store {runs['run_store']} --run " in done.stderr
    assert "cachewatch" not in done.stdout  # stdout is the program's


def test_the_summary_names_the_storm_and_max_compiles_fails_the_program_that_succeeded(runs):
    done = runs["storm"]
    assert done.returncode == runner.EXIT_LIMIT, done.stderr[-3000:]
    summary = json.loads(done.stderr.strip().splitlines()[-1])
    storms = {s["short_name"]: s for s in summary["storms"]}
    assert storms["grad_step"]["dominant_cause"] == "new_shape"
    assert "pad" in storms["grad_step"]["fix"]
    assert summary["compiles"] > 5
    assert summary["exit_code"] == 0
    assert summary["limits_broken"] == [f"{summary['compiles']} compiles, more than --max-compiles 5"]
    top = {f["name"]: f for f in summary["functions"]}
    assert top["grad_step"]["compiles"] == 9
    assert top["grad_step"]["causes"]["new_shape"] == 8


def test_compare_names_the_function_its_cause_and_the_extra_seconds_and_fails_past_the_threshold(runs):
    store = runs["run_store"]
    # The run name defaults to the program's: the two latest runs of it are compared.
    done = sh([*CLI, "compare", "--store", store, "optax_first.py", "--max-extra-compiles", "3"])
    assert done.returncode == 1, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if line.strip().startswith("more  grad_step"))
    # The extra seconds in whichever unit suits them (ms on a fast machine, s on a slow one).
    assert "+8 compiles (new_shape +8)" in line, line
    assert re.search(r"\+[\d.]+ (s|ms|us) \(1 -> 9\)", line), line
    assert "FAIL: " in done.stdout
    assert "grad_step: +8 compiles (new_shape +8)" in done.stdout
    within = sh([*CLI, "compare", "--store", store, "--max-extra-compiles", "100", "--format", "json"])
    assert within.returncode == 0, within.stderr
    result = json.loads(within.stdout)
    grad = next(f for f in result["functions"] if f["short_name"] == "grad_step")
    assert grad["cause"] == "new_shape"
    assert grad["extra_compiles"] == 8
    assert grad["extra_seconds"] > 0
    assert grad["baseline"]["compiles"] == 1
    assert grad["run"]["compiles"] == 9
    assert result["limits_broken"] == []
    assert result["run"]["run_name"] == "optax_first.py"
    # The compile-time limit, either side of the ratio the two runs measured (each run's
    # seconds depend on the machine; the limit's test does not).
    measured = result["compile_time_ratio"]
    ratio = sh([*CLI, "compare", "--store", store, "--max-compile-time-ratio", f"{measured * 0.99:.4f}"])
    assert ratio.returncode == 1
    assert "compile time " in ratio.stdout
    under = sh([*CLI, "compare", "--store", store, "--max-compile-time-ratio", f"{measured * 1.01:.4f}"])
    assert under.returncode == 0, under.stdout
    missing = sh([*CLI, "compare", "--store", store, "no-such-run"])
    assert missing.returncode == 2
    assert "no run has the id, run name or job 'no-such-run'" in missing.stderr


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A program without JAX that shows how it was started, and a package to run with -m."""
    work = tmp_path_factory.mktemp("tiny")
    show = textwrap.dedent("""
        import json, sys
        print(json.dumps({"argv": sys.argv, "name": __name__, "file": __file__, "path0": sys.path[0],
                          "main": sys.modules["__main__"].__dict__.get("__file__"),
                          "spec": getattr(__spec__, "name", None), "package": __package__}))
        data = sys.stdin.read()
        if data:
            print("stdin:", data.strip())
        if len(sys.argv) > 1 and sys.argv[1] == "fail":
            def deeper():
                raise ValueError("the program's own failure")
            deeper()
        if len(sys.argv) > 1 and sys.argv[1] == "message":
            sys.exit("a message instead of a code")
        sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    """)
    (work / "show.py").write_text(show)
    (work / "pkg").mkdir()
    (work / "pkg" / "__init__.py").write_text("")
    (work / "pkg" / "mod.py").write_text(show)
    (work / "pkg" / "__main__.py").write_text(show)
    return work


@pytest.mark.parametrize(
    "program",
    [
        ["show.py", "7", "--flag"],
        ["show.py", "0"],
        ["show.py", "fail"],
        ["show.py", "message"],
        ["-m", "pkg.mod", "3", "-x"],
        ["-m", "pkg", "0"],
        ["missing.py"],
        ["-m", "pkg.missing"],
    ],
)
def test_a_program_sees_and_ends_as_under_python(tiny, tmp_path, program):
    store = f"sqlite:///{tmp_path / 's.db'}"
    by_python = sh([sys.executable, *program], store, cwd=tiny, input="from stdin\n")
    by_run = sh([*CLI, "run", "--quiet", *program], store, cwd=tiny, input="from stdin\n")
    assert by_run.returncode == by_python.returncode
    assert by_run.stdout == by_python.stdout
    if by_python.stdout:
        shown = program_json(by_run.stdout)
        assert shown["name"] == "__main__"
        assert shown["path0"] == str(tiny)
    if "fail" in program:
        assert by_run.returncode == 1
        # The traceback is the program's: its frames only, as python prints them.
        assert by_run.stderr == by_python.stderr
    elif by_python.stderr:
        assert by_run.stderr.splitlines()[-1].split(": ", 1)[-1] == by_python.stderr.splitlines()[-1].split(": ", 1)[-1]


def test_a_failing_program_keeps_its_own_exit_code_past_a_limit(tiny, tmp_path):
    store = f"sqlite:///{tmp_path / 's.db'}"
    done = sh([*CLI, "run", "--max-compiles", "0", "--fail-on-storm", "show.py", "5"], store, cwd=tiny)
    assert done.returncode == 5
    passed = sh([*CLI, "run", "--max-compiles", "0", "show.py", "0"], store, cwd=tiny)
    assert passed.returncode == 0, passed.stderr  # it compiled nothing
    assert "0 compiles" in passed.stderr


def test_the_program_s_arguments_are_its_own(tmp_path):
    """Options after the program's name go to the program, even those `run` has itself."""
    options, target = runner.split_argv(["--quiet", "--store", "x", "train.py", "--store", "y", "-m", "z"])
    assert options == ["--quiet", "--store", "x"]
    assert target == runner.Target("train.py", None, ("--store", "y", "-m", "z"))
    options, target = runner.split_argv(["--max-compiles=3", "-m", "pkg.mod", "--quiet"])
    assert options == ["--max-compiles=3"]
    assert target == runner.Target(None, "pkg.mod", ("--quiet",))
    assert runner.split_argv(["--quiet"]) == (["--quiet"], None)
    done = sh([*CLI, "run", "--quiet"])
    assert done.returncode == 2
    assert "name a script to run" in done.stderr


DISTRIBUTED = textwrap.dedent("""
    import sys
    import jax
    rank, port = int(sys.argv[1]), int(sys.argv[2])
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=rank,
                               initialization_timeout=120)
    import jax.numpy as jnp
    step = jax.jit(lambda w, x: jnp.tanh(x @ w).sum())  # plain jax.jit: the program knows nothing of cachewatch
    for size in [8, 8, 4] + ([6] if rank == 1 else []):
        step(jnp.ones((3, 2)), jnp.ones((size, 3)))
    jax.distributed.shutdown()
""")


def test_each_process_of_a_distributed_program_records_its_own_run_under_one_job(tmp_path):
    """Two ranks of a jax.distributed program, each started with `cachewatch run`."""
    import serverkit

    (tmp_path / "ranks.py").write_text(DISTRIBUTED)
    store = f"sqlite:///{tmp_path / 's.db'}"
    port = serverkit.free_port()
    procs = [
        subprocess.Popen(
            [*CLI, "run", "--quiet", "--store", store, "--run-name", "ranks", "ranks.py", str(rank), str(port)],
            cwd=tmp_path,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out[-3000:]
    r = models.runs
    with enginemod.connection(store) as conn:
        runs = conn.execute(sa.select(r.c.run_id, r.c.job, r.c.process_index, r.c.process_count)).all()
    assert sorted((job, index, count) for _, job, index, count in runs) == [("ranks", 0, 2), ("ranks", 1, 2)]
    done = sh([*CLI, "compare", "--store", store, runs[0].run_id, runs[1].run_id, "--format", "json"])
    assert done.returncode == 0
    result = json.loads(done.stdout)
    (lam,) = [f for f in result["functions"] if f["name"] == "<lambda>"]
    # Rank 1 met one more batch size than rank 0.
    assert abs(lam["extra_compiles"]) == 1


def test_the_summary_counts_the_recompiles_that_produced_a_program_compiled_before(tmp_path):
    """A lambda re-jitted in a loop compiles the same program each time: pure waste, which
    the summary names with its seconds (a batch-size change is no such waste)."""
    script = tmp_path / "rejit.py"
    script.write_text(
        textwrap.dedent("""
            import jax, jax.numpy as jnp
            x = jnp.arange(8.0)
            for _ in range(4):
                x = jax.jit(lambda v: v * 2.0 + 1.0)(x)
            for n in (3, 5):
                jax.jit(lambda v: v * 2.0)(jnp.ones(n))
        """)
    )
    done = sh([*CLI, "run", "--store", f"sqlite:///{tmp_path / 'store.db'}", "--summary", "json", str(script)])
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stderr.strip().splitlines()[-1])
    assert summary["identical_recompiles"] == 3  # the three re-jits after the first
    assert summary["identical_seconds"] > 0
    assert summary["first_pass_compiles"] == 0  # four compiles are no burst of five


def test_the_summary_says_what_the_program_left_in_jaxs_caches(tmp_path):
    script = tmp_path / "shapes.py"
    script.write_text(
        textwrap.dedent("""
            import jax, jax.numpy as jnp
            step = jax.jit(lambda v: v * 2.0)
            for n in (3, 4, 5):
                step(jnp.ones(n))
            step(jnp.ones(5))                  # served from the cache
            jax.jit(lambda v: v - 1.0)(jnp.ones(2))
        """)
    )
    done = sh([*CLI, "run", "--store", f"sqlite:///{tmp_path / 'store.db'}", "--summary", "json", str(script)])
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stderr.strip().splitlines()[-1])
    # Nothing cleared a cache: every compile left its executable alive.
    assert summary["live_executables"] == summary["compiles"]
    assert summary["live_executable_bytes"] > 0
    assert summary["never_called_again"] >= 3  # shapes 3 and 4, and the one-call lambda


def test_the_summary_tells_a_value_read_at_trace_time_that_changed_since(tmp_path):
    """A global the loop anneals, read inside a jit: the program compiled once and keeps
    using the first value. That is a wrong result, not a slow one, and the summary says so
    with the fix; passed as an argument, the value is read at each call and nothing is told."""
    body = """
        import jax, jax.numpy as jnp
        temperature = 1.0
        @jax.jit
        def loss(logits{arg}):
            return jnp.mean(jax.nn.log_softmax(logits / temperature))
        logits = jnp.linspace(-2.0, 2.0, 16)
        for epoch in range(6):
            temperature = 1.0 / (epoch + 1)
            print(round(float(loss(logits{pass_it})), 4))
    """
    outputs = {}
    for name, arg, pass_it in (("frozen", "", ""), ("passed", ", temperature", ", temperature")):
        script = tmp_path / f"{name}.py"
        script.write_text(textwrap.dedent(body.format(arg=arg, pass_it=pass_it)))
        done = sh([*CLI, "run", "--store", f"sqlite:///{tmp_path / (name + '.db')}", str(script)])
        assert done.returncode == 0, done.stderr[-3000:]
        outputs[name] = (done.stdout.split(), done.stderr)
    frozen, told = outputs["frozen"]
    assert len(set(frozen)) == 1  # every epoch printed the first temperature's loss
    assert "Stale value: `loss` read `temperature` when it was traced (1.0)" in told
    assert "Pass `temperature` as an argument" in told
    passed, quiet = outputs["passed"]
    assert len(set(passed)) == len(passed)
    assert "Stale value" not in quiet


def test_fail_on_storm_fails_a_program_that_succeeded_and_never_one_that_failed(tmp_path):
    """The storm program (a batch size per step) under --fail-on-storm alone: its storm
    fails it with the limit's code and says why; without the flag it passes; a program that
    failed keeps its own code, with the storm reported."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    storm = [PROGRAM, "--steps", "9", "--vary-batch"]
    failed = sh([*CLI, "run", "--store", store, "--fail-on-storm", *storm])
    assert failed.returncode == runner.EXIT_LIMIT, failed.stderr[-3000:]
    assert "Storm [ACTIVE] grad_step: " in failed.stderr
    assert (
        f"cachewatch: limit broken (exit {runner.EXIT_LIMIT}): recompilation storm (grad_step) and --fail-on-storm"
        in failed.stderr.splitlines()
    )
    passed = sh([*CLI, "run", "--store", store, "--summary", "json", *storm])
    assert passed.returncode == 0, passed.stderr[-3000:]
    summary = json.loads(passed.stderr.strip().splitlines()[-1])
    # The same storm, which fails nothing without the flag.
    assert [s["short_name"] for s in summary["storms"]] == ["grad_step"]
    assert summary["limits_broken"] == []
    own = sh([*CLI, "run", "--store", store, "--summary", "json", "--fail-on-storm", *storm, "--exit", "4"])
    assert own.returncode == 4, own.stderr[-3000:]
    summary = json.loads(own.stderr.strip().splitlines()[-1])
    assert summary["exit_code"] == 4
    assert summary["limits_broken"] == ["recompilation storm (grad_step) and --fail-on-storm"]


INTERRUPTED = textwrap.dedent("""
    import atexit
    import time
    import jax
    import jax.numpy as jnp
    atexit.register(print, "the program's atexit handler ran")
    step = jax.jit(lambda x: x * 2.0 + 1.0)  # plain jax.jit: the program knows nothing of cachewatch
    for size in (3, 4):
        step(jnp.ones(size)).block_until_ready()
    print("ready", flush=True)
    time.sleep(600)
""")


def _interrupted(args: list[str], cwd: Path, store: str) -> subprocess.CompletedProcess:
    """Start the program, wait for its ready line, and Ctrl-C it as a terminal would."""
    proc = subprocess.Popen(args, cwd=cwd, env=_env(store), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        ready = proc.stdout.readline()
        if ready == "ready\n":
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert ready == "ready\n", err[-3000:]
    return subprocess.CompletedProcess(args, proc.returncode, ready + out, err)


def _frames(stderr: str) -> list[tuple[str, str]]:
    return re.findall(r'^  File "([^"]+)", line \d+, in (\S+)$', stderr, re.MULTILINE)


def test_a_program_stopped_by_ctrl_c_ends_as_under_python_with_its_events_written(tmp_path):
    """Ctrl-C ends the program as it ends python's (the traceback, the program's atexit
    handlers, then death by SIGINT, so a shell sees the signal), after the compiles it
    made before it were written and summed up."""
    (tmp_path / "waits.py").write_text(INTERRUPTED)
    store = f"sqlite:///{tmp_path / 's.db'}"
    by_python = _interrupted([sys.executable, "waits.py"], tmp_path, store)
    by_run = _interrupted([*CLI, "run", "waits.py"], tmp_path, store)
    assert by_python.returncode in (-signal.SIGINT, 128 + signal.SIGINT), by_python.stderr[-3000:]
    assert by_run.returncode == by_python.returncode, by_run.stderr[-3000:]
    assert by_run.stdout == by_python.stdout == "ready\nthe program's atexit handler ran\n"
    # The traceback is python's, of the program's frames only (where in its last line the
    # signal landed may differ); the summary follows it.
    for done in (by_python, by_run):
        assert done.stderr.startswith("Traceback (most recent call last):\n")
        assert "\nKeyboardInterrupt\n" in done.stderr
    assert _frames(by_run.stderr) == _frames(by_python.stderr) == [(str(tmp_path / "waits.py"), "<module>")]
    assert "cachewatch: run " in by_run.stderr
    assert "<lambda>: 2 compiles" in by_run.stderr
    # Python alone recorded nothing; the store holds what the run compiled before Ctrl-C.
    assert sorted(cause for name, cause in compiled(store) if name == "<lambda>") == ["first_call", "new_shape"]


def test_a_library_installed_into_a_folder_on_pythonpath_is_a_library(tmp_path):
    """``pip install --target DIR`` with DIR on PYTHONPATH: code there (a ``*.dist-info``
    beside it) is a library's, so a compile it makes is placed at the user's line that
    called it, not at the library's own."""
    site = tmp_path / "site"
    (site / "fakelib-1.0.dist-info").mkdir(parents=True)
    (site / "fakelib").mkdir()
    (site / "fakelib" / "__init__.py").write_text(
        "import jax.numpy as jnp\n\n\ndef scaled(x):\n    return jnp.tanh(x) * 3.0\n"
    )
    program = tmp_path / "uses_fakelib.py"
    program.write_text("import jax.numpy as jnp\nimport fakelib\n\nprint(float(fakelib.scaled(jnp.ones(3)).sum()))\n")
    url = f"sqlite:///{tmp_path / 'fakelib.db'}"
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    scenarios.run_program_file(str(program), url, {"PYTHONPATH": path}, cwd=tmp_path)
    with enginemod.connection(url) as conn:
        e = models.compile_events
        sites = set(conn.execute(sa.select(e.c.call_site).where(e.c.compiled)).scalars())
    assert sites == {f"{program}:4"}
