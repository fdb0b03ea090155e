"""The ranks of a job compared, with real ranks: two processes joined by
``jax.distributed.initialize`` on the CPU backend over loopback, each writing its own run."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cachewatch_server.main import create_app
from cachewatch_server.settings import ServerSettings
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from serverkit import free_port

from cachewatch.core import config as configmod

WORKER = Path(__file__).with_name("fleet_worker.py")


def run_job(store: str, job: str, extra_shape_rank: int | None, workdir: Path) -> None:
    """Both ranks of one job, to completion."""
    port = free_port()
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "CACHEWATCH_JOB": job}
    env.pop("CACHEWATCH_RAISE_INTERNAL_ERRORS", None)
    procs = []
    for rank in (0, 1):
        args = [sys.executable, str(WORKER), str(rank), str(port), store]
        if rank == extra_shape_rank:
            args.append("--extra-shape")
        log = open(workdir / f"{job}-rank{rank}.log", "w")  # noqa: SIM115  (closed after the rank ends)
        procs.append((subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    for proc, log in procs:
        try:
            code = proc.wait(timeout=240)
        finally:
            log.close()
        assert code == 0, Path(log.name).read_text()


@pytest.fixture(scope="module")
def fleet_store(tmp_path_factory) -> str:
    work = tmp_path_factory.mktemp("fleet")
    store = f"sqlite:///{work / 'fleet.db'}"
    run_job(store, "diverging", extra_shape_rank=1, workdir=work)
    run_job(store, "agreeing", extra_shape_rank=None, workdir=work)
    return store


@pytest.fixture
def client(fleet_store):
    with TestClient(create_app(ServerSettings(store=fleet_store))) as c:
        yield c


def test_the_rank_that_met_an_extra_shape_is_flagged_with_its_signature(client):
    report = client.get("/api/v1/jobs/diverging").json()
    assert report["process_count"] == 2
    assert [r["process_index"] for r in report["ranks"]] == [0, 1]
    assert report["divergent_ranks"] == [1]
    assert [r["divergent"] for r in report["ranks"]] == [False, True]
    steps = [d for d in report["divergences"] if d["function"] == "fleet_step"]
    assert len(steps) == 1
    step = steps[0]
    assert step["process_index"] == 1
    assert step["reason"] == "only_this_rank"
    assert step["others"] == {"0": 0}
    assert step["compiles"] == 1
    shapes = {leaf["path"]: leaf["shape"] for leaf in step["signature"]}
    assert shapes == {"batch": [24, 8], "w": [8, 4]}
    assert "batch: float32[24,8]" in step["explanation"]
    assert "float32[16,8] -> float32[24,8]" in step["last_explanation"]
    # Whatever else is flagged (JAX's eager compiles of the extra batch) is rank 1's too.
    assert {d["process_index"] for d in report["divergences"]} == {1}


def test_a_job_whose_ranks_agree_is_not_flagged(client):
    report = client.get("/api/v1/jobs/agreeing").json()
    assert [r["process_index"] for r in report["ranks"]] == [0, 1]
    assert report["divergent_ranks"] == []
    assert report["divergences"] == []
    assert report["ranks"][0]["compiles"] == report["ranks"][1]["compiles"] > 0


def test_jobs_listing_metric_and_pages(client):
    listed = {j["job"]: j for j in client.get("/api/v1/jobs").json()}
    assert listed["diverging"]["divergent_ranks"] == [1]
    assert listed["agreeing"]["divergent_ranks"] == []
    assert client.get("/api/v1/jobs/nope").status_code == 404

    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    divergence = {s.labels["job"]: s.value for s in families["cachewatch_rank_divergence"].samples}
    assert divergence == {"diverging": 1.0, "agreeing": 0.0}

    page = client.get("/jobs/diverging")
    assert page.status_code == 200
    assert 'data-rank="1" class="flagged"' in page.text
    assert "batch: float32[24,8]" in page.text
    assert "The ranks agree" in client.get("/jobs/agreeing").text
    assert "diverging" in client.get("/jobs").text
    assert client.get("/jobs/nope").status_code == 404


def test_jobs_compared_together_are_each_job_compared_alone_without_the_names(fleet_store):
    from cachewatch.fleet import divergence
    from cachewatch.store import engine as enginemod

    with enginemod.connection(fleet_store) as conn:
        together = divergence.compare_jobs(conn, ["agreeing", "nope", "diverging"])
        alone = [divergence.compare_job(conn, job) for job in ("agreeing", "diverging")]
    assert [r.job for r in together] == ["agreeing", "diverging"]  # in the order asked, the unknown left out
    for listed, full in zip(together, alone, strict=True):
        assert full is not None
        assert listed.divergences == []
        assert listed == dataclasses.replace(full, divergences=[])
    assert alone[1] is not None
    assert together[1].divergences_total == len(alone[1].divergences) > 0


def test_job_and_rank_come_from_configuration():
    cfg = configmod.resolve({"job": "exp", "process_index": "2", "process_count": 4}, environ={})
    assert (cfg.job, cfg.process_index, cfg.process_count) == ("exp", 2, 4)
    assert configmod.resolve({}, environ={"CACHEWATCH_JOB": "from-env"}).job == "from-env"
    with pytest.raises(configmod.ConfigError, match="process_index"):
        configmod.resolve({"process_index": 4, "process_count": 4}, environ={})


def test_job_rank_and_cache_key_travel_through_ingest(store_url, tmp_path):
    """A recorder on another host posts its batches: the rank and the cache key arrive."""
    import dataclasses
    import time

    import serverkit as kit

    from cachewatch.record import current

    current.configure(store=f"sqlite:///{tmp_path / 'lib.db'}")
    recorded = kit.run_jax_workload()
    with TestClient(create_app(ServerSettings(store=store_url))) as client:
        now = time.time()
        step_events = recorded.by_name("step")
        for rank, events in ((0, step_events[:3]), (1, step_events[:4])):
            run = dataclasses.replace(kit.new_run(recorded.run), job="posted", process_index=rank, process_count=2)
            key = {"computation": "abc", "jax": "0.10.2"}
            copies = [
                kit.copy_event(e, run, now + i, persistent_cache_hit=False, cache_key=key) for i, e in enumerate(events)
            ]
            r = client.post("/api/v1/events", json=kit.payload(run, copies))
            assert r.status_code == 200, r.text
        report = client.get("/api/v1/jobs/posted").json()
        assert report["divergent_ranks"] == [1]
        (extra,) = report["divergences"]
        assert extra["function"].endswith("step")
        assert extra["reason"] == "only_this_rank"
        runs = {r["process_index"]: r for r in client.get("/api/v1/runs").json()["items"] if r["job"] == "posted"}
        assert sorted(runs) == [0, 1]
        assert runs[1]["process_count"] == 2
        function_hash = step_events[0].function.function_hash
        items = client.get(f"/api/v1/functions/{function_hash}/events").json()["items"]
        assert all(e["cache_key"] == {"computation": "abc", "jax": "0.10.2"} for e in items)


def test_a_run_that_declares_a_huge_process_count_lists_the_first_missing_ranks(sqlite_url):
    import sqlalchemy as sa

    from cachewatch.fleet import divergence
    from cachewatch.store import engine as enginemod
    from cachewatch.store import models

    enginemod.ensure_schema(sqlite_url)
    with enginemod.connection(sqlite_url) as conn:
        conn.execute(
            sa.insert(models.runs),
            [
                {"run_id": "a" * 32, "started_at": 1.0, "job": "huge", "process_index": 1, "process_count": 2**31 - 1},
                {"run_id": "b" * 32, "started_at": 1.0, "job": "huge", "process_index": 3, "process_count": 2**31 - 1},
            ],
        )
        report = divergence.compare_job(conn, "huge")
        (listed,) = divergence.compare_jobs(conn, ["huge"])
    assert report is not None
    assert report.process_count == 2**31 - 1
    assert len(report.missing_ranks) == divergence.MAX_MISSING_RANKS
    assert report.missing_ranks[:3] == [0, 2, 4]
    assert listed.missing_ranks == report.missing_ranks


def _reference_divergences(runs: list[dict], events: list[dict]) -> dict[str, dict]:
    """Each job's rank totals and divergences, worked out the plain way from every compile."""
    from collections import Counter, defaultdict

    rank_of = {r["run_id"]: (r["job"], -1 if r["process_index"] is None else r["process_index"]) for r in runs}
    ranks: dict[str, set[int]] = defaultdict(set)
    for job, rank in rank_of.values():
        ranks[job].add(rank)
    per_signature: dict[tuple, Counter] = defaultdict(Counter)
    totals: Counter = Counter()
    for e in events:
        if e["compiled"]:
            job, rank = rank_of[e["run_id"]]
            per_signature[(job, e["function_hash"], e["signature_hash"])][rank] += 1
            totals[(job, rank)] += 1
    out: dict[str, dict] = {
        job: {"totals": {k: totals[(job, k)] for k in ks}, "extra": set()} for job, ks in ranks.items()
    }
    for (job, function_hash, signature_hash), by_rank in per_signature.items():
        counts = [by_rank[k] for k in sorted(ranks[job])]
        tally = Counter(counts)
        reference = min(n for n, times in tally.items() if times == max(tally.values()))
        for k in ranks[job]:
            if len(ranks[job]) > 1 and by_rank[k] > reference:
                out[job]["extra"].add((k, function_hash, signature_hash, by_rank[k]))
    return out


@pytest.mark.parametrize("seed", [3, 4])
def test_ranks_compared_in_the_store_are_the_ranks_compared_from_every_compile(store_url, seed):
    # Jobs of one to four ranks (restarted ranks, a rank without a process index, a rank
    # that compiled nothing), most signatures compiled alike on every rank, some not.
    import random

    import sqlalchemy as sa

    from cachewatch.fleet import divergence
    from cachewatch.store import engine as enginemod
    from cachewatch.store import models, rollup

    rng = random.Random(seed)
    runs: list[dict] = []
    events: list[dict] = []
    for j in range(12):
        job = f"job-{j}"
        ranks = list(range(rng.randint(1, 4) if j % 3 else 3))
        agreeing = j % 3 == 0  # every rank runs once and compiles the same
        slots: list[tuple[int | None, int]] = [
            (k, r) for k in ranks for r in range(1 if agreeing else rng.choice((1, 1, 2)))
        ]
        if not agreeing and rng.random() < 0.3:
            slots.append((None, 0))
        for k, restart in slots:
            run_id = f"{j:02d}{k if k is not None else 9}{restart}".ljust(32, "0")
            runs.append({"run_id": run_id, "started_at": float(j), "job": job, "process_index": k, "process_count": 4})
            if k == 2 and j % 5 == 1:
                continue  # a rank that compiled nothing
            for f in range(6):
                for s in range(1 + f % 3 if agreeing else rng.randint(1, 3)):
                    n = 1 if agreeing or rng.random() < 0.85 or k is None else rng.randint(0, 3)
                    for i in range(n):
                        events.append(
                            {
                                "event_id": f"{len(events):032x}",
                                "function_hash": f"f{f}",
                                "run_id": run_id,
                                "timestamp": float(i),
                                "kind": "trace",
                                "cause": "first_call",
                                "compiled": agreeing or rng.random() < 0.95,
                                "signature_hash": f"s{s}",
                            }
                        )
    enginemod.ensure_schema(store_url)
    with enginemod.connection(store_url) as conn:
        conn.execute(sa.insert(models.runs), runs)
        conn.execute(
            sa.insert(models.functions),
            [{"function_hash": f"f{f}", "name": f"f{f}", "qualname": f"f{f}", "first_seen": 0.0} for f in range(6)],
        )
        conn.execute(sa.insert(models.compile_events), events)
        rollup.mark_all_kept_stale(conn)  # as after a bulk load: every job's comparison is found again
        listed = {r.job: r for r in divergence.compare_jobs(conn, sorted({r["job"] for r in runs}))}
        alone = {job: divergence.compare_job(conn, job) for job in listed}
        assert conn.execute(sa.select(sa.func.count()).select_from(models.stale_jobs)).scalar_one() == 0
        assert _kept_is_compared(conn, sorted(listed)), "what was kept is what the store compares"
    expected = _reference_divergences(runs, events)
    assert set(listed) == set(expected)
    assert any(e["extra"] for e in expected.values()), "some ranks diverge"
    assert any(not e["extra"] and len(e["totals"]) > 1 for e in expected.values()), "some jobs agree"
    for job, report in listed.items():
        assert {r.process_index: r.compiles for r in report.ranks} == expected[job]["totals"], job
        assert report.divergences_total == len(expected[job]["extra"]), job
        assert report.divergent_ranks == sorted({k for k, *_ in expected[job]["extra"]}), job
        named = alone[job]
        assert named is not None
        found = {(d.process_index, d.function_hash, d.signature_hash, d.compiles) for d in named.divergences}
        assert found == expected[job]["extra"], job


def _kept_is_compared(conn, jobs: list[str]) -> bool:
    """The kept comparison of these jobs (read after the stale ones were found again)
    equals the comparison worked out from their compiles."""
    from cachewatch.fleet import fleet_reads

    assert fleet_reads.settle(conn)
    kept, counted = fleet_reads.rank_compiles(conn, jobs), fleet_reads.compare_ranks(conn, jobs)
    return kept.compiles == counted.compiles and sorted(map(dataclasses.astuple, kept.disagreeing)) == sorted(
        map(dataclasses.astuple, counted.disagreeing)
    )


def _job_events(run_id: str, signatures: list[str], start: float) -> list[tuple]:
    from cachewatch.store import writes

    return [
        writes.event_row(
            {
                "event_id": f"{run_id}-{signature}-{start}",
                "function_hash": "step",
                "run_id": run_id,
                "timestamp": start + i,
                "kind": "trace",
                "cause": "first_call" if i == 0 else "new_shape",
                "compiled": True,
                "nested": False,
                "warmup": False,
                "signature_hash": signature,
                "signature": [],
                "explanation": "",
                "diff": [],
                "trace_seconds": 0.01,
            }
        )
        for i, signature in enumerate(signatures)
    ]


def test_a_jobs_kept_comparison_follows_its_writes_and_prunes(store_url):
    # Through the write path and the prune, as a service sees them: each marks the job,
    # and the next listing finds its comparison again.
    import sqlalchemy as sa

    from cachewatch.fleet import divergence
    from cachewatch.store import engine as enginemod
    from cachewatch.store import models, retention, writes

    def run(rank: int | None, started: float, job: str = "j") -> dict:
        name = f"{job}-{rank}-{started:.0f}"
        return {"run_id": name, "started_at": started, "job": job, "process_index": rank, "process_count": 2}

    def stale(conn) -> set[str]:
        return set(conn.execute(sa.select(models.stale_jobs.c.job)).scalars())

    def listed(conn) -> divergence.JobReport:
        (report,) = divergence.compare_jobs(conn, ["j"])
        assert _kept_is_compared(conn, ["j"])
        assert not stale(conn), "the read found the marked job again"
        return report

    step = {"function_hash": "step", "name": "step", "qualname": "step", "first_seen": 0.0}
    enginemod.ensure_schema(store_url)
    with enginemod.connection(store_url) as conn:
        ranks = [run(1, 100.0), run(0, 200.0)]
        for r in ranks:
            events = _job_events(r["run_id"], ["s0", "s1"], r["started_at"] + 10)
            writes.write_rows(conn, writes.TableRows([r], [step], events, []))
        assert stale(conn) == {"j"}
        report = listed(conn)
        assert [(k.process_index, k.compiles) for k in report.ranks] == [(0, 2), (1, 2)]
        assert report.divergences_total == 0

        # A compile on rank 1 alone: the job is marked, and rank 1 diverges.
        writes.write_rows(conn, writes.TableRows([], [], _job_events(ranks[0]["run_id"], ["s2"], 150.0), []))
        assert stale(conn) == {"j"}
        report = listed(conn)
        assert report.divergent_ranks == [1]
        assert report.divergences_total == 1

        # A run that is in no job marks nothing.
        alone = {**run(None, 500.0, job=""), "process_count": None}
        writes.write_rows(conn, writes.TableRows([alone], [], _job_events(alone["run_id"], ["s9"], 500.0), []))
        assert not stale(conn)

        # A third rank starts (its run, no compiles yet): three ranks, rank 2 with none.
        writes.write_rows(conn, writes.TableRows([run(2, 600.0)], [], [], []))
        assert stale(conn) == {"j"}
        report = listed(conn)
        assert [(k.process_index, k.compiles) for k in report.ranks] == [(0, 2), (1, 3), (2, 0)]
    # Rank 1's run (the oldest, ended before the others began) pruned: the job compares the ranks left.
    assert retention.prune(store_url, retention.Policy(keep_runs=3), now=1e10).runs == 1
    with enginemod.connection(store_url) as conn:
        assert stale(conn) == {"j"}
        report = listed(conn)
        assert [(k.process_index, k.compiles) for k in report.ranks] == [(0, 2), (2, 0)]
        assert report.missing_ranks == [1]
        # Two ranks, one of which compiled nothing yet: a tie, held to the fewer compiles.
        assert (report.divergent_ranks, report.divergences_total) == ([0], 2)


@pytest.mark.parametrize("busy_job_runs", [0, 400])
def test_the_most_recent_jobs_are_those_of_the_newest_runs(store_url, busy_job_runs):
    # Jobs of one to a few ranks, runs in no job between them, and (the second time) one
    # job whose ranks restarted hundreds of times at the end, so that the newest runs
    # hold too few jobs and every run's job is grouped instead.
    import random

    import sqlalchemy as sa

    from cachewatch.fleet import fleet_reads
    from cachewatch.store import engine as enginemod
    from cachewatch.store import models

    rng = random.Random(busy_job_runs)
    starts = rng.sample(range(1, 100_000), 700 + busy_job_runs)
    runs: list[dict[str, Any]] = []
    for i, start in enumerate(starts[:700]):
        job = "" if rng.random() < 0.3 else f"job-{rng.randint(0, 60)}"
        runs.append({"run_id": f"r{i}", "started_at": float(start), "job": job})
    for i in range(busy_job_runs):
        runs.append({"run_id": f"busy{i}", "started_at": 200_000.0 + i, "job": "busy"})
    enginemod.ensure_schema(store_url)
    with enginemod.connection(store_url) as conn:
        conn.execute(sa.insert(models.runs), runs)
        found = {limit: fleet_reads.recent_jobs(conn, limit) for limit in (1, 5, 20, 100)}
    latest: dict[str, float] = {}
    for run in runs:
        if run["job"]:
            latest[run["job"]] = max(latest.get(run["job"], 0.0), run["started_at"])
    ranked = sorted(latest, key=lambda job: -latest[job])
    for limit, jobs in found.items():
        assert jobs == ranked[:limit], limit
    assert ("busy" in found[1]) == bool(busy_job_runs)
