"""JAX's caches as a cache: executables per function and variant, their hits, memory and
releases; the host memory a compile needs; the persistent compilation cache per compile
and its directory audited."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
import serverkit as kit
from cachewatch_server.main import create_app
from cachewatch_server.settings import ServerSettings
from fastapi.testclient import TestClient
from test_dashboard import SCREENSHOTS, Tab, chromium  # noqa: F401  (chromium: the browser fixture)

import cachewatch
from cachewatch.cache import cache_directory, cache_reads, cache_view
from cachewatch.capture import sampling
from cachewatch.core.events import Batch, CallStats, CompileEvent, FunctionInfo, RunInfo, held_bytes, new_event_id
from cachewatch.record import current
from cachewatch.store import columns
from cachewatch.store import engine as enginemod
from cachewatch.store.sinks import SqlSink


def report_of(url: str, function: str | None = None) -> cache_view.CacheReport:
    cachewatch.flush(30)
    with enginemod.connection(url) as conn:
        filters = columns.Filters(run_id=current.run_id())
        pairs = [(r, f) for r, f, _ in cache_reads.cache_functions(conn, filters)]
        report = cache_view.cache_report(cache_reads.read_cache(conn, filters, pairs))
    if function is not None:
        return cache_view.CacheReport(tuple(fn for fn in report.functions if fn.name == function), report.persistent)
    return report


def test_storm_leaves_live_executables_whose_memory_grows_until_clear_caches(sqlite_url, use_store):
    use_store(sqlite_url)

    @cachewatch.jit
    def storm_step(x):
        return (x * 2.0).sum(axis=0) + x.mean()

    for n in range(1, 41):
        storm_step(jnp.ones((n, 8)))
    (fn,) = report_of(sqlite_url, "storm_step").functions
    assert len(fn.variants) == 40
    assert fn.live == 40
    assert fn.peak_live == 40
    # Every variant has XLA's figures; the executables' memory grows with each one kept.
    assert all(v.memory is not None for v in fn.variants)
    sizes = [p.bytes for p in fn.timeline]
    assert [p.live for p in fn.timeline] == list(range(1, 41))
    assert all(b > a for a, b in zip(sizes, sizes[1:], strict=False))

    jax.clear_caches()
    (fn,) = report_of(sqlite_url, "storm_step").functions
    assert fn.live == 0
    assert fn.live_bytes == 0
    assert fn.peak_live == 40
    assert {v.released_by for v in fn.variants} == {"jax.clear_caches()"}
    assert fn.timeline[-1].live == 0
    assert "jax.clear_caches()" in cache_view.text(report_of(sqlite_url))


def test_a_variant_compiled_for_one_call_is_named(sqlite_url, use_store):
    use_store(sqlite_url, sample_every=3, sample_max_per_second=1e9)

    @cachewatch.jit
    def once_step(x):
        return x + 1

    for _ in range(12):
        once_step(jnp.ones(8))
    once_step(jnp.ones(9))  # compiled for this call, never used again
    for _ in range(12):
        once_step(jnp.ones(8))
    report = report_of(sqlite_url, "once_step")
    (never,) = report.never_hit
    assert never.signature_hash
    assert never.calls == 0
    assert never.compile_seconds > 0
    (fn,) = report.functions
    kept = [v for v in fn.variants if v is not never]
    assert kept[0].calls
    assert kept[0].calls > 15
    text = cache_view.text(report)
    assert "never called again (1" in text
    assert "once_step  signature " + never.signature_hash[:12] in text


@pytest.mark.parametrize("how", ["jit", "install"])
def test_calls_per_variant_match_the_programs_own_counts(sqlite_url, use_store, how):
    use_store(sqlite_url, sample_every=3, sample_max_per_second=1e9)

    def counted_step(x):
        return x * 3

    step: Callable[..., Any]
    if how == "install":
        cachewatch.install()
        try:
            step = jax.jit(counted_step)
        finally:
            cachewatch.uninstall()
    else:
        step = cachewatch.jit(counted_step)
    plan = [(4, 30), (5, 50), (6, 1), (4, 20), (5, 7)]
    expected_hits = {4: 30 + 20 - 1, 5: 50 + 7 - 1, 6: 0}
    for n, calls in plan:
        for _ in range(calls):
            step(jnp.ones(n))

    def exact_step(x):
        return x - 1

    exact = cachewatch.jit(exact_step)
    for _ in range(25):
        exact(jnp.ones(3))

    report = report_of(sqlite_url)
    (fn,) = [f for f in report.functions if f.name == "counted_step"]
    assert fn.calls_counted == "sampled"
    assert len(fn.variants) == 3
    got = {v.created_at: v for v in fn.variants}
    ordered = [got[t] for t in sorted(got)]  # compiled in the order 4, 5, 6
    for v, n in zip(ordered, (4, 5, 6), strict=False):
        assert not v.calls_exact
        assert v.calls is not None, (n, v.calls)
        assert abs(v.calls - expected_hits[n]) <= max(1, 0.1 * expected_hits[n]), (n, v.calls)
    (one,) = [f for f in report.functions if f.name == "exact_step"]
    (variant,) = one.variants
    assert one.calls_counted == "exact"
    assert variant.calls_exact
    assert variant.calls == 24


def test_calls_per_variant_at_the_default_sampling(sqlite_url, use_store, monkeypatch):
    """At the default settings (a sample in 100 calls, 5 timed a second) a loop faster than
    the cap still gets per-variant counts within 10%: the calls past the cap are named, and
    a compile or a collection gives the calls after the last sample to its signature. The
    loop asks for 42 samples (one in 100 calls): how fast the machine runs it changes only
    which of them are timed and which named. The time allowed for naming is lifted, so a
    busy machine that stalls one naming cannot end the naming early."""
    use_store(sqlite_url)
    monkeypatch.setattr(sampling, "NAMING_SECONDS_PER_SECOND", 1.0)

    def default_step(x):
        return x * 3

    step = cachewatch.jit(default_step)
    # Each size returns once without a compile (4 after 6, 5 after 4): the stretch is
    # found by sampling, not by a compile.
    plan = [(4, 1000), (5, 1500), (6, 1), (4, 1000), (5, 700)]
    expected_hits = {4: 1999, 5: 2199, 6: 0}
    for n, calls in plan:
        for _ in range(calls):
            step(jnp.ones(n))
    report = report_of(sqlite_url)
    (fn,) = [f for f in report.functions if f.name == "default_step"]
    assert fn.calls_counted == "sampled"
    got = {v.created_at: v for v in fn.variants}
    ordered = [got[t] for t in sorted(got)]
    assert len(ordered) == 3
    for v, n in zip(ordered, (4, 5, 6), strict=True):
        assert v.calls is not None, n
        assert abs(v.calls - expected_hits[n]) <= 0.1 * expected_hits[n], (n, v.calls)


def test_cache_command_table_json_and_bad_directory(sqlite_url, use_store, tmp_path):
    use_store(sqlite_url)

    @cachewatch.jit
    def shown_step(x):
        return x * 5

    shown_step(jnp.ones(3))
    cachewatch.flush(30)
    cache_dir = tmp_path / "jaxcache"
    cache_dir.mkdir()
    (cache_dir / "notes.txt").write_text("mine")
    (cache_dir / "jit_shown_step-0123abcd-cache").write_bytes(b"")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    base = [sys.executable, "-m", "cachewatch", "cache", "--store", sqlite_url, "--run", current.run_id()]
    out = subprocess.run([*base, "--cache-dir", str(cache_dir)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "shown_step" in out.stdout
    assert "notes.txt" in out.stdout
    assert "corrupt entry" in out.stdout
    out = subprocess.run(
        [*base, "--function", "shown_step", "--format", "json", "--cache-dir", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0
    data = json.loads(out.stdout)
    assert [fn["name"] for fn in data["functions"]] == ["shown_step"]
    assert data["functions"][0]["variants"][0]["persistent_cache"] in ("off", "hit", "written", "not_written")
    assert data["directory"]["readable"] is False
    assert "cannot read the cache directory" in out.stderr
    bad = subprocess.run([*base[:-2], "--run", "nosuchrun"], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2
    assert "no run" in bad.stderr


PERSISTENT_WORKER = textwrap.dedent(
    """
    import sys
    import jax, jax.numpy as jnp
    import cachewatch

    store, cache_dir, later_min = sys.argv[1], sys.argv[2], float(sys.argv[3])
    cachewatch.configure(store=store, persistent_cache_dir=cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

    @cachewatch.jit
    def kept_step(x):
        return jnp.sin(x) * 2 + 1

    kept_step(jnp.ones(8))
    kept_step(jnp.ones(16))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", later_min)
    kept_step(jnp.ones(24 if later_min else 8))
    assert cachewatch.flush(30)
    """
)


def test_persistent_cache_per_compile_across_two_runs(tmp_path):
    store = f"sqlite:///{tmp_path / 'store.db'}"
    worker = tmp_path / "worker.py"
    worker.write_text(PERSISTENT_WORKER)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("CACHEWATCH_RAISE_INTERNAL_ERRORS", None)
    for later_min in ("0", "1000000"):
        proc = subprocess.run(
            [sys.executable, str(worker), store, str(tmp_path / "cache"), later_min],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert proc.returncode == 0, proc.stderr
    with enginemod.connection(store) as conn:
        runs = [r for r, _, _ in cache_reads.cache_functions(conn, columns.Filters())]
        records = cache_reads.read_cache(conn, columns.Filters())
        report = cache_view.cache_report(records)
        audit = cache_directory.audit_directory(
            str(tmp_path / "cache"), lambda keys: cache_reads.entry_origins(conn, keys)
        )
    second, first = runs[0], runs[-1]
    kept = [c for c in records.compiles if records.functions[c.function_hash].name == "kept_step"]
    first_run = [(c.persistent_cache, c.persistent_cache_reason) for c in kept if c.run_id == first]
    second_run = [(c.persistent_cache, c.persistent_cache_reason) for c in kept if c.run_id == second]
    assert first_run == [("written", None), ("written", None)]
    assert second_run == [("hit", None), ("hit", None), ("not_written", "min_compile_time")]
    keys = {c.persistent_cache_key or "" for c in kept if c.run_id == first}
    assert all(k and k.startswith("jit_kept_step-") for k in keys)
    assert {c.persistent_cache_key for c in kept if c.persistent_cache == "hit"} == keys
    by_run = {p.run_id: p for p in report.persistent}
    assert by_run[second].results["hit"] >= 2
    assert set(by_run[second].not_written) == {"min_compile_time"}
    second_rate = by_run[second].hit_rate
    assert second_rate
    assert second_rate > (by_run[first].hit_rate or 0.0)
    # Per function and run: kept_step wrote both entries, then read both and compiled one
    # it did not write; a hit would have saved that compile's XLA seconds (as the event has them).
    per_run = {fn.run_id: fn.persistent for fn in report.functions if fn.name == "kept_step"}
    first_fn, second_fn = per_run[first], per_run[second]
    assert first_fn is not None
    assert second_fn is not None
    assert first_fn.results == {"written": 2}
    assert second_fn.results == {"hit": 2, "not_written": 1}
    assert second_fn.not_written == {"min_compile_time": 1}
    missed = [c.xla_seconds or 0.0 for c in kept if c.run_id == second and c.persistent_cache == "not_written"]
    assert second_fn.missed_seconds == pytest.approx(sum(missed))
    assert second_fn.missed_seconds > 0
    assert first_fn.missed_seconds == pytest.approx(sum(c.xla_seconds or 0.0 for c in kept if c.run_id == first))
    shown = cache_view.text(report)
    assert "  kept_step: 2 hit, 1 not written (not written: min_compile_time 1); hit rate 67%" in shown
    # The function over its runs, from the command.
    over_runs = subprocess.run(
        [sys.executable, "-m", "cachewatch", "cache", "--store", store, "--all-runs", "--function", "kept_step"]
        + ["--format", "json", "--cache-dir", str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert over_runs.returncode == 0, over_runs.stderr
    items = json.loads(over_runs.stdout)["functions"]
    assert [item["run_id"] for item in items] == [second, first]
    assert [item["persistent"]["results"] for item in items] == [{"hit": 2, "not_written": 1}, {"written": 2}]
    # The directory: both of kept_step's entries, written by it and read in the second run.
    entries = {e.key: e for e in audit.entries}
    assert audit.problems == ()
    assert all(e.problem is None for e in audit.entries)
    assert keys <= set(entries)
    assert all(entries[k].function == "kept_step" and entries[k].hits == 1 for k in keys)
    written = [c for c in kept if c.persistent_cache == "written"]
    assert all(c.persistent_cache_bytes == entries[c.persistent_cache_key or ""].bytes for c in written)
    all_written = {
        c.persistent_cache_key: c.persistent_cache_bytes for c in records.compiles if c.persistent_cache == "written"
    }
    with TestClient(create_app(ServerSettings(store=store))) as client:
        gauges = _gauges(client)
    assert gauges[("cachewatch_persistent_cache_entries", ())] == len(all_written)
    sizes = [size for size in all_written.values() if size is not None]
    assert len(sizes) == len(all_written)
    assert gauges[("cachewatch_persistent_cache_bytes", ())] == sum(sizes)


EVICTING_WORKER = textwrap.dedent(
    """
    import sys
    import jax, jax.numpy as jnp
    import cachewatch

    store, cache_dir, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cachewatch.configure(store=store, persistent_cache_dir=cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax.config.update("jax_compilation_cache_max_size", limit)

    @cachewatch.jit
    def evicted_step(x):
        return jnp.sin(x) * 2 + 1

    for n in range(1, 9):
        evicted_step(jnp.ones(n))
    assert cachewatch.flush(30)
    """
)


def test_entries_the_size_limit_evicted_are_named_with_their_function(tmp_path):
    store = f"sqlite:///{tmp_path / 'store.db'}"
    worker = tmp_path / "worker.py"
    worker.write_text(EVICTING_WORKER)
    cache_dir = tmp_path / "cache"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("CACHEWATCH_RAISE_INTERNAL_ERRORS", None)
    # Room for about three of the eight entries (each is a few KB).
    proc = subprocess.run(
        [sys.executable, str(worker), store, str(cache_dir), "12000"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    on_disk = {name[: -len("-cache")] for name in os.listdir(cache_dir) if name.endswith("-cache")}
    with enginemod.connection(store) as conn:
        records = cache_reads.read_cache(conn, columns.Filters())
        audit = cache_directory.audit_directory(
            str(cache_dir),
            lambda keys: cache_reads.entry_origins(conn, keys),
            lambda d: cache_reads.entries_written_to(conn, d),
        )
    written = {
        c.persistent_cache_key or "": c
        for c in records.compiles
        if c.persistent_cache == "written" and records.functions[c.function_hash].name == "evicted_step"
    }
    assert len(written) == 8
    # What JAX's size limit removed, as the test sees it on disk: evicted_step's entries no
    # longer there. The audit names each, and no entry still there.
    evicted = set(written) - on_disk
    assert evicted
    assert len(evicted) < 8
    gone = {e.key: e for e in audit.gone}
    assert evicted <= set(gone)
    assert not set(gone) & on_disk
    for key in evicted:
        assert gone[key].function == "evicted_step"
        assert gone[key].bytes == written[key].persistent_cache_bytes
        assert gone[key].run_id == written[key].run_id
    assert {e.key for e in audit.entries} == on_disk
    # The command finds the directory from the run's compiles when none is named.
    cmd = [sys.executable, "-m", "cachewatch", "cache", "--store", store, "--format", "json"]
    env_plain = {
        k: v for k, v in env.items() if k not in ("CACHEWATCH_PERSISTENT_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR")
    }
    shown = subprocess.run(cmd, capture_output=True, text=True, env=env_plain, timeout=120)
    assert shown.returncode == 0, shown.stderr
    directory = json.loads(shown.stdout)["directory"]
    assert directory["path"] == os.path.realpath(cache_dir)
    assert directory["gone"] == len(gone)
    assert {item["key"] for item in directory["gone_items"]} == set(gone)
    table = subprocess.run(cmd[:-2], capture_output=True, text=True, env=env_plain, timeout=120)
    assert "evicted by JAX's size limit, or deleted" in table.stdout
    assert "evicted_step:" in table.stdout


def test_proc_files_are_read_as_the_os_module_reads_them(tmp_path):
    """The host-memory readings' pread and write (the C extension's, which keep the GIL)
    give what os.pread and os.write give, and fail as they fail."""
    from cachewatch.capture import _fastcall, cachestate

    assert cachestate._pread is _fastcall.pread
    path = tmp_path / "figures"
    path.write_bytes(b"VmHWM:  123 kB\nVmRSS:  100 kB\n")
    fd = os.open(path, os.O_RDWR)
    try:
        assert _fastcall.pread(fd, 8192, 0) == os.pread(fd, 8192, 0)
        assert _fastcall.pread(fd, 5, 7) == os.pread(fd, 5, 7)
        assert _fastcall.pread(fd, 10, 1000) == b""
        assert _fastcall.write(fd, b"5") == 1
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        _fastcall.pread(fd, 10, 0)  # closed
    with pytest.raises(ValueError, match="65536"):
        _fastcall.pread(0, 1 << 20, 0)
    resident = cachestate.resident_bytes()
    assert resident is not None
    assert resident > 0


PEAK_WORKER = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    import jax, jax.numpy as jnp
    import cachewatch

    cachewatch.configure(store=sys.argv[1])
    page = os.sysconf("SC_PAGE_SIZE")

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page

    def high_water():  # the kernel's own peak of the resident set, exact however busy the machine
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

    constant = np.random.default_rng(0).random(30_000_000, dtype=np.float32)  # 120 MB, baked in

    @cachewatch.jit
    def heavy_compile(x):
        return x + jnp.asarray(constant) * 2 + 1

    x = jnp.ones(30_000_000, jnp.float32)
    before = rss()
    heavy_compile(x).block_until_ready()
    peak = high_water()  # since cachewatch reset it as the compile began: the compile and its run
    assert cachewatch.flush(60)
    print(json.dumps({"before": before, "peak": peak}))
    """
)


def test_peak_host_memory_of_a_compile_against_the_kernels_high_water_mark(tmp_path):
    store = f"sqlite:///{tmp_path / 'store.db'}"
    worker = tmp_path / "peak.py"
    worker.write_text(PEAK_WORKER)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("CACHEWATCH_RAISE_INTERNAL_ERRORS", None)
    proc = subprocess.run([sys.executable, str(worker), store], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    measured = json.loads(proc.stdout.strip().splitlines()[-1])
    with enginemod.connection(store) as conn:
        records = cache_reads.read_cache(conn, columns.Filters())
    (compile_,) = [c for c in records.compiles if records.functions[c.function_hash].name == "heavy_compile"]
    assert compile_.peak_host_bytes is not None
    assert compile_.host_bytes_before is not None
    # The compile needed well over 200 MB more than the process held before it ...
    assert compile_.peak_host_bytes - compile_.host_bytes_before >= 200e6
    assert measured["peak"] - measured["before"] >= 200e6
    # ... and what cachewatch kept agrees within 20% with the kernel's peak read after the
    # compile and its run (never above it), whatever the machine was doing meanwhile.
    assert compile_.peak_host_bytes <= measured["peak"]
    assert abs(compile_.peak_host_bytes - measured["peak"]) <= 0.2 * measured["peak"]


def _batch(run_id: str) -> Batch:
    info = FunctionInfo("f" * 20, "stored_step", "stored_step", "mod", "mod.py", 1)
    run = RunInfo(run_id, "r", "host", 1, 1.8e9, "0", "0", "cpu", ("cpu:0",), "3.11")
    event = CompileEvent(
        event_id=new_event_id(),
        function=info,
        run_id=run_id,
        timestamp=1.8e9 + 1,
        kind="trace",
        cause="first_call",
        explanation="",
        diff=(),
        signature=(),
        signature_hash="s1",
        compiled=True,
        nested=False,
        compile_seconds=0.5,
        memory={"generated_code": 10, "argument": 20, "output": 30, "temp": 40},
        host_bytes=-4096,
        host_bytes_before=10_000_000,
        peak_host_bytes=300_000_000,
        persistent_cache="not_written",
        persistent_cache_reason="min_compile_time",
        persistent_cache_key="jit_stored_step-abc",
        persistent_cache_dir="/srv/jaxcache",
    )
    stats = [
        CallStats(run_id, info, 1.8e9 + 2, 5, 0, 0.0, sample_every=100),
        CallStats(run_id, info, 1.8e9 + 3, 0, 0, 0.0, released_by="clear_cache()"),
    ]
    return Batch(run, [event], stats)


@pytest.mark.parametrize("writer", ["library", "service"])
def test_new_fields_through_both_writers(store_url, writer):
    run_id = "a" * 32
    batch = _batch(run_id)
    if writer == "library":
        enginemod.upgrade(store_url)
        SqlSink(store_url).write(batch)
    else:
        with TestClient(create_app(ServerSettings(store=store_url))) as client:
            response = client.post("/api/v1/events", json=batch.to_wire())
            assert response.status_code == 200, response.text
    with enginemod.connection(store_url) as conn:
        report = cache_view.cache_report(cache_reads.read_cache(conn, columns.Filters(run_id=run_id)))
        directory = cache_reads.run_cache_directory(conn, run_id)
    assert directory == "/srv/jaxcache"
    (fn,) = report.functions
    (v,) = fn.variants
    assert (v.host_bytes, v.peak_host_bytes) == (-4096, 300_000_000)
    assert (v.persistent_cache, v.persistent_cache_reason, v.persistent_cache_key) == (
        "not_written",
        "min_compile_time",
        "jit_stored_step-abc",
    )
    assert v.calls == 4
    assert v.calls_exact
    assert v.released_by == "clear_cache()"
    assert fn.live == 0
    # The cache holds the code; a call's arguments, outputs and temporaries are not its.
    assert v.executable_bytes == 10


def test_service_refuses_an_unknown_persistent_cache_result(sqlite_url):
    wire = _batch("b" * 32).to_wire()
    wire["events"][0]["persistent_cache"] = "maybe"
    with TestClient(create_app(ServerSettings(store=sqlite_url))) as client:
        response = client.post("/api/v1/events", json=wire)
    assert response.status_code == 422
    assert "persistent_cache" in response.text


def test_audit_names_foreign_files_and_corrupt_entries_and_changes_nothing(tmp_path):
    (tmp_path / "jit_a-00ff-cache").write_bytes(zlib.compress(b"x" * 100))
    (tmp_path / "jit_c-22dd-cache").write_bytes(b"garbage, not an entry")
    (tmp_path / "jit_a-00ff-atime").write_bytes(b"1")
    (tmp_path / "jit_b-11ee-cache").write_bytes(b"")
    (tmp_path / "stray.bin").write_bytes(b"??")
    (tmp_path / ".lockfile").write_bytes(b"")  # JAX's, beside a size limit
    before = sorted(os.listdir(tmp_path))
    audit = cache_directory.audit_directory(str(tmp_path), lambda keys: {})
    assert sorted(os.listdir(tmp_path)) == before
    assert {e.key for e in audit.entries} == {"jit_a-00ff", "jit_b-11ee", "jit_c-22dd"}
    assert audit.foreign == ("stray.bin",)
    assert audit.total_bytes == len(zlib.compress(b"x" * 100)) + len(b"garbage, not an entry")
    assert any("corrupt entry jit_b-11ee-cache: empty" in line for line in audit.problems)
    assert any("corrupt entry jit_c-22dd-cache: not compressed" in line for line in audit.problems)
    assert [e.key for e in audit.entries if e.problem is None] == ["jit_a-00ff"]
    unreadable = cache_directory.audit_directory(str(tmp_path / "nope"), lambda keys: {})
    assert not unreadable.readable
    assert "cannot read the cache directory" in unreadable.problems[0]


def test_cache_api_per_function_and_variant_paged(sqlite_url, use_store):
    use_store(sqlite_url)

    @cachewatch.jit
    def api_first(x):
        return x + 2

    @cachewatch.jit
    def api_second(x):
        return x * 2

    for n in (2, 3, 4):
        api_first(jnp.ones(n))
    api_second(jnp.ones(2))
    api_second.clear_cache()
    cachewatch.flush(30)
    run_id = current.run_id()
    with TestClient(create_app(ServerSettings(store=sqlite_url))) as client:
        first = client.get("/api/v1/cache", params={"run_id": run_id, "limit": 1}).json()
        assert len(first["items"]) == 1
        assert first["next_cursor"]
        names = {first["items"][0]["name"]}
        cursor = first["next_cursor"]
        while cursor:
            page = client.get("/api/v1/cache", params={"run_id": run_id, "limit": 1, "cursor": cursor}).json()
            names.update(item["name"] for item in page["items"])
            cursor = page["next_cursor"]
        assert {"api_first", "api_second"} <= names
        only = client.get("/api/v1/cache", params={"run_id": run_id, "function": "api_first"}).json()
        (fn,) = only["items"]
        assert fn["executables"] == 3
        assert fn["live"] == 3
        assert len(fn["variants"]) == 3
        assert [p["live"] for p in fn["timeline"]] == [1, 2, 3]
        second = client.get("/api/v1/cache", params={"run_id": run_id, "function": "api_second"}).json()["items"][0]
        assert second["live"] == 0
        assert second["releases"][0]["by"] == "clear_cache()"
        assert second["variants"][0]["released_by"] == "clear_cache()"
        assert only["persistent"][0]["run_id"] == run_id
        later = client.get("/api/v1/cache", params={"run_id": run_id, "since": 4.0e9 - 1}).json()
        assert later["items"] == []
        assert client.get("/api/v1/cache", params={"cursor": "garbage"}).status_code == 422
        assert client.get("/api/v1/cache", params={"function": "no_such_function"}).json()["items"] == []


def _gauges(client: TestClient) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_metrics_live_executables_bytes_and_persistent_entries(sqlite_url, use_store):
    use_store(sqlite_url)

    @cachewatch.jit
    def metric_step(x):
        return x.sum() * 2

    for n in range(1, 6):
        metric_step(jnp.ones((n, 4)))
    cachewatch.flush(30)
    with TestClient(create_app(ServerSettings(store=sqlite_url))) as client:
        _gauges(client)  # the first scrape decides the function's label
        before = _gauges(client)
        assert before[("cachewatch_live_executables", (("function", "metric_step"),))] == 5
        assert before[("cachewatch_executable_bytes", (("function", "metric_step"),))] > 0
        assert ("cachewatch_persistent_cache_entries", ()) in before
        assert ("cachewatch_persistent_cache_bytes", ()) in before
        metric_step.clear_cache()
        cachewatch.flush(30)
        after = _gauges(client)
        assert after[("cachewatch_live_executables", (("function", "metric_step"),))] == 0
        assert after[("cachewatch_executable_bytes", (("function", "metric_step"),))] == 0


def test_dashboard_cache_page_in_chromium(chromium, sqlite_url, use_store):  # noqa: F811
    use_store(sqlite_url)

    @cachewatch.jit
    def page_storm(x):
        return x * 2 + 1

    for n in range(1, 13):
        page_storm(jnp.ones(n))
    for _ in range(5):
        page_storm(jnp.ones(12))
    jax.clear_caches()
    page_storm(jnp.ones(3))
    cachewatch.flush(30)
    with kit.live_server(create_app(ServerSettings(store=sqlite_url))) as live:
        context = chromium.new_context(viewport={"width": 1360, "height": 900})
        tab = Tab(context.new_page(), live.url, SCREENSHOTS / "cache")
        try:
            tab.open("/cache?run_id=" + current.run_id())
            live_chart = tab.chart("chart-live")
            assert live_chart["plotly"]
            assert live_chart["drawn"] >= 1
            (storm_line,) = [t for t in live_chart["traces"] if t["name"].startswith("page_storm")]
            # 12 executables, all released by jax.clear_caches(), then one compiled again.
            assert storm_line["y"] == [*range(1, 13), 0, 1]
            assert tab.chart("chart-bytes")["drawn"] >= 1
            row = tab.page.locator("#cache-functions tr", has_text="page_storm")
            assert row.get_attribute("data-live") == "1"
            assert "jax.clear_caches()" in row.inner_text()
            never = tab.text("#never-hit")
            assert "page_storm" in never  # sizes 1..11 served no call after compiling
            assert tab.page.locator("#never-hit tbody tr").count() >= 11
            assert "Cache" in tab.text("nav")
            tab.shot("cache")
            tab.assert_clean()
        finally:
            context.close()


def test_metrics_live_counts_agree_with_the_report(store_url, use_store):
    use_store(store_url)

    @cachewatch.jit
    def agree_step(x):
        return x - 3

    for n in range(1, 8):
        agree_step(jnp.ones(n))
    jax.clear_caches()
    for n in range(1, 4):
        agree_step(jnp.ones(n))
    report = report_of(store_url, "agree_step")
    (fn,) = report.functions
    with enginemod.connection(store_url) as conn:
        found = {x.function_hash: x for x in cache_reads.live_executables(conn, 20, held_bytes)}
    assert fn.live == 3
    assert fn.peak_live == 7
    assert (found[fn.function_hash].live, found[fn.function_hash].memory_bytes) == (fn.live, fn.live_bytes)
