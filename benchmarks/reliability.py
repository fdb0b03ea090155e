"""Reliability scenarios with figures: a killed training process, stores that go away
during training, many writing processes at once, and load on the service.

    .venv/bin/python benchmarks/reliability.py sigkill      # SIGKILL: events lost against the flush interval
    .venv/bin/python benchmarks/reliability.py outage       # PostgreSQL, service, SQLite lock, spool: nothing lost
    .venv/bin/python benchmarks/reliability.py writers      # 4 processes x 8 threads, fork and spawn: exactly once
    .venv/bin/python benchmarks/reliability.py load         # clients against serve --workers 2 on PostgreSQL
    .venv/bin/python benchmarks/reliability.py all

Each scenario prints a table; RELIABILITY.md holds the figures of a run on this machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import benchkit

ROOT = benchkit.ROOT
HERE = Path(__file__).resolve()


# ------------------------------------------------------------------ helpers


def stored_ids(url: str, run_ids: set[str] | None = None) -> list[str]:
    import sqlalchemy as sa

    from cachewatch.store import engine as enginemod
    from cachewatch.store import models

    e = models.compile_events
    with enginemod.connection(url) as conn:
        query = sa.select(e.c.event_id)
        if run_ids is not None:
            query = query.where(e.c.run_id.in_(sorted(run_ids)))
        return list(conn.execute(query).scalars())


def reported_drops(url: str) -> int:
    import sqlalchemy as sa

    from cachewatch.store import engine as enginemod
    from cachewatch.store import models

    with enginemod.connection(url) as conn:
        return int(conn.execute(sa.select(sa.func.coalesce(sa.func.sum(models.run_drops.c.dropped), 0))).scalar_one())


def tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and its children (uvicorn workers), in MB."""
    total, pids = 0, [pid]
    with contextlib.suppress(OSError):
        for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            pids.append(int(child))
    for p in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


class TcpProxy:
    """A loopback TCP forwarder to PostgreSQL that can be cut and restored: the database
    becomes unreachable to the training process (connections reset, new ones refused)."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.port = benchkit.free_port()
        self._server: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def up(self) -> None:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def down(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        with self._lock:
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                    conn.close()
            self._conns.clear()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.close()


# ------------------------------------------------------------------ a training process


def train(args: argparse.Namespace) -> int:
    """A small training loop under cachewatch.jit: a new batch shape every few steps (so
    traces and compiles), every produced event written to ``--log`` as it is recorded."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax.numpy as jnp

    import cachewatch
    from cachewatch.record import current, recorder

    settings = {
        "store": args.store,
        "flush_interval": args.flush_interval,
        "spool_dir": args.spool_dir,
        "sample_every": 1,
    }
    if args.spool_max_bytes:
        settings["spool_max_bytes"] = args.spool_max_bytes
    cachewatch.configure(**settings)
    log = open(args.log, "a", buffering=1)  # noqa: SIM115  (written until the process ends)
    recorder.add_listener(lambda e: log.write(f"{e.event_id} {e.timestamp!r}\n"))

    @cachewatch.jit
    def step(w, x):
        return w - 0.01 * (x @ w).mean() * jnp.ones_like(w)

    w = jnp.ones((16,))
    loss = 0.0
    for i in range(args.steps):
        n = 1 + (i // args.shape_every) % args.shapes
        w = step(w, jnp.ones((n, 16)) * (1 + i % 3))
        loss += float(w.sum())
        time.sleep(args.step_sleep)
    result = cachewatch.flush(args.exit_flush)
    print(
        json.dumps(
            {
                "loss": round(loss, 6),
                "run_id": current.run_id(),
                "dropped": recorder.dropped_events(),
                "stored": result.stored,
                "spooled_batches": result.spooled_batches,
            }
        ),
        flush=True,
    )
    return 0


def train_command(
    store: str,
    log: Path,
    spool: Path,
    *,
    steps: int,
    step_sleep: float = 0.01,
    flush_interval: float = 1.0,
    shape_every: int = 1,
    shapes: int = 10_000,
    spool_max_bytes: int = 0,
    exit_flush: float = 60.0,
) -> list[str]:
    return [
        sys.executable,
        str(HERE),
        "_train",
        "--store",
        store,
        "--log",
        str(log),
        "--spool-dir",
        str(spool),
        "--steps",
        str(steps),
        "--step-sleep",
        str(step_sleep),
        "--flush-interval",
        str(flush_interval),
        "--shape-every",
        str(shape_every),
        "--shapes",
        str(shapes),
        "--spool-max-bytes",
        str(spool_max_bytes),
        "--exit-flush",
        str(exit_flush),
    ]


def produced(log: Path) -> dict[str, float]:
    out = {}
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:  # a line cut by the kill is not an event the store could have
            out[parts[0]] = float(parts[1])
    return out


# ------------------------------------------------------------------ scenarios


def scenario_sigkill(repeats: int) -> list[list[Any]]:
    """Kill -9 a training process mid-run: lost events against the flush interval."""
    rows = []
    for flush_interval in (1.0, 5.0):
        for attempt in range(repeats):
            work = Path(tempfile.mkdtemp(prefix="cachewatch-kill-"))
            store = f"sqlite:///{work}/store.db"
            log = work / "produced.log"
            env = {**os.environ, "JAX_PLATFORMS": "cpu"}
            proc = subprocess.Popen(
                train_command(
                    store,
                    log,
                    work / "spool",
                    steps=100_000,
                    step_sleep=0.02,
                    flush_interval=flush_interval,
                    shape_every=3,
                ),
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd=ROOT,
            )
            time.sleep(6 + random.Random(attempt).random() * 3)
            killed_at = time.time()
            proc.kill()
            proc.wait()
            made = produced(log)
            have = set(stored_ids(store))
            lost = [ts for event_id, ts in made.items() if event_id not in have]
            oldest = killed_at - min(lost) if lost else 0.0
            rows.append(
                [
                    f"{flush_interval:.0f} s",
                    attempt + 1,
                    len(made),
                    len(made) - len(lost),
                    len(lost),
                    f"{oldest:.2f}",
                    "yes" if oldest <= flush_interval + 0.5 else "NO",
                ]
            )
            shutil.rmtree(work, ignore_errors=True)
    return rows


@contextlib.contextmanager
def _pg_store() -> Iterator[str]:
    with benchkit.temp_store("postgresql") as url:
        yield url


def scenario_outage(steps: int) -> list[list[Any]]:
    """Training with the store going away for a while; every event stored once when it is back."""
    rows = []
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}

    def run(name: str, store: str, reader_url: str, outage, spool: Path | None = None, **kw) -> None:
        work = Path(tempfile.mkdtemp(prefix="cachewatch-outage-"))
        log = work / "produced.log"
        proc = subprocess.Popen(
            train_command(store, log, spool or work / "spool", steps=steps, **kw),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
            text=True,
        )
        outage(proc)
        out, _ = proc.communicate(timeout=600)
        result = json.loads(out.strip().splitlines()[-1])
        made = produced(log)
        ids = stored_ids(reader_url, {result["run_id"]})
        dup = len(ids) - len(set(ids))
        missing = len(set(made) - set(ids))
        drops = reported_drops(reader_url)
        rows.append(
            [
                name,
                len(made),
                len(set(ids)),
                dup,
                missing,
                result["dropped"],
                drops,
                result["loss"] == baseline["loss"],
                "stored" if result["stored"] else "spooled",
            ]
        )
        shutil.rmtree(work, ignore_errors=True)

    def pause(seconds_in: float, seconds: float, down, up):
        def outage(proc):
            time.sleep(seconds_in)
            down()
            time.sleep(seconds)
            up()

        return outage

    # The results the training gives with nothing going wrong.
    with tempfile.TemporaryDirectory() as work:
        out = subprocess.run(
            train_command(f"sqlite:///{work}/s.db", Path(work) / "log", Path(work) / "spool", steps=steps),
            env=env,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=600,
        ).stdout
        baseline = json.loads(out.strip().splitlines()[-1])

    with _pg_store() as pg:
        from sqlalchemy.engine import make_url

        target = make_url(pg)
        proxy = TcpProxy((target.host or "127.0.0.1", target.port or 5432))
        proxy.up()
        through = pg.replace(f"{target.host}:{target.port or 5432}", f"127.0.0.1:{proxy.port}")
        run("PostgreSQL unreachable 8 s", through, pg, pause(4, 8, proxy.down, proxy.up))
        proxy.down()

    with _pg_store() as pg:
        port = benchkit.free_port()
        state: dict[str, Any] = {}

        def service_down():
            state["stack"].close()

        def service_up():
            stack = contextlib.ExitStack()
            stack.enter_context(benchkit.serve_process(pg, port=port))
            state["stack"] = stack

        service_up()
        try:
            run("service down 8 s", f"http://127.0.0.1:{port}", pg, pause(4, 8, service_down, service_up))
        finally:
            state["stack"].close()

    with tempfile.TemporaryDirectory() as work:
        path = f"{work}/locked.db"
        url = f"sqlite:///{path}"
        from cachewatch.store import engine as enginemod

        enginemod.upgrade(url)
        holder: dict[str, Any] = {}

        def lock():
            import sqlite3

            conn = sqlite3.connect(path, isolation_level=None)
            conn.execute("BEGIN EXCLUSIVE")
            holder["conn"] = conn

        def unlock():
            holder["conn"].execute("COMMIT")
            holder["conn"].close()

        run("SQLite locked 40 s", url, url, pause(4, 40, lock, unlock), step_sleep=0.02)

    with tempfile.TemporaryDirectory() as work:
        url, restore = _store_away(Path(work))
        run(
            "store down 12 s, spool capped at 20 kB",
            url,
            url,
            pause(4, 8, lambda: None, restore),
            spool_max_bytes=20_000,
        )

    with tempfile.TemporaryDirectory() as work:
        url, restore = _store_away(Path(work))
        not_a_dir = Path(work) / "spool-file"
        not_a_dir.write_text("a file where the spool directory should be")
        run(
            "store down 12 s, spool dir unwritable",
            url,
            url,
            pause(4, 8, lambda: None, restore),
            spool=not_a_dir / "spool",
        )
    return rows


def _store_away(work: Path) -> tuple[str, Any]:
    """A SQLite store that cannot be opened (a file stands where its directory should be),
    and the function that makes room for it."""
    blocker = work / "store-dir"
    blocker.write_text("a file where the store's directory should be")

    def restore() -> None:
        blocker.unlink()
        blocker.mkdir()

    return f"sqlite:///{blocker}/store.db", restore


def _writer_process(store: str, threads: int, events: int, ids_dir: str, spool_dir: str) -> None:
    import cachewatch
    from cachewatch.core.events import CompileEvent, FunctionInfo, new_event_id
    from cachewatch.record import current, recorder

    cachewatch.configure(store=store, flush_interval=0.2, queue_size=1_000_000, spool_dir=spool_dir)
    made: list[list[str]] = [[] for _ in range(threads)]

    def work(t: int) -> None:
        info = FunctionInfo(
            function_hash=f"{os.getpid():08x}{t:04x}".ljust(20, "0"),
            name=f"step_{t}",
            qualname=f"train.step_{t}",
            module="train",
            file="train.py",
            line=t,
        )
        for i in range(events):
            event = CompileEvent(
                event_id=new_event_id(),
                function=info,
                run_id=current.run_id(),
                timestamp=time.time(),
                kind="trace",
                cause="new_shape" if i else "first_call",
                explanation="synthetic",
                diff=(),
                signature=(),
                signature_hash=f"{i:020x}",
                compiled=True,
                nested=False,
                compile_seconds=0.001 * (i % 50),
            )
            recorder.record_event(event)
            made[t].append(event.event_id)

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    result = cachewatch.flush(120)
    Path(ids_dir, f"{os.getpid()}.json").write_text(
        json.dumps(
            {
                "ids": [i for ids in made for i in ids],
                "stored": result.stored,
                "dropped": recorder.dropped_events(),
                "run_id": current.run_id(),
            }
        )
    )


def writers(args: argparse.Namespace) -> int:
    """Run ``--processes`` writer processes (``--start`` fork or spawn), each with ``--threads`` threads."""
    ctx = multiprocessing.get_context(args.start)
    procs = [
        ctx.Process(target=_writer_process, args=(args.store, args.threads, args.events, args.ids_dir, args.spool_dir))
        for _ in range(args.processes)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(600)
    return max((proc.exitcode or 0) for proc in procs)


def run_writers(
    store: str,
    reader_url: str,
    start: str,
    processes: int,
    threads: int,
    events: int,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as ids_dir:
        started = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                str(HERE),
                "_writers",
                "--store",
                store,
                "--start",
                start,
                "--processes",
                str(processes),
                "--threads",
                str(threads),
                "--events",
                str(events),
                "--ids-dir",
                ids_dir,
                "--spool-dir",
                os.path.join(ids_dir, "spool"),
            ],
            check=True,
            cwd=ROOT,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
            timeout=900,
        )
        seconds = time.perf_counter() - started
        reports = [json.loads(p.read_text()) for p in Path(ids_dir).glob("*.json")]
    made = [i for r in reports for i in r["ids"]]
    ids = stored_ids(reader_url, {r["run_id"] for r in reports})
    return {
        "processes": len(reports),
        "produced": len(made),
        "stored": len(set(ids)),
        "duplicates": len(ids) - len(set(ids)),
        "missing": len(set(made) - set(ids)),
        "dropped": sum(r["dropped"] for r in reports),
        "all_flushed": all(r["stored"] for r in reports),
        "seconds": seconds,
    }


def scenario_writers(events: int) -> list[list[Any]]:
    rows = []
    for kind in ("sqlite", "postgresql", "service"):
        for start in ("fork", "spawn"):
            with contextlib.ExitStack() as stack:
                if kind == "sqlite":
                    work = stack.enter_context(tempfile.TemporaryDirectory())
                    store = reader = f"sqlite:///{work}/store.db"
                elif kind == "postgresql":
                    store = reader = stack.enter_context(_pg_store())
                else:
                    reader = stack.enter_context(_pg_store())
                    store, _ = stack.enter_context(benchkit.serve_process(reader, workers=2))
                r = run_writers(store, reader, start, 4, 8, events)
            rows.append(
                [
                    kind,
                    start,
                    r["processes"],
                    f"{r['produced']:,}",
                    f"{r['stored']:,}",
                    r["duplicates"],
                    r["missing"],
                    r["dropped"],
                    f"{r['seconds']:.1f}",
                ]
            )
    return rows


def _client(url: str, seconds: float, batch: int, out: Any) -> None:
    import orjson

    from cachewatch.core.events import new_event_id

    run_id = uuid.uuid4().hex
    run = {"run_id": run_id, "started_at": time.time(), "host": "load", "pid": os.getpid()}
    function = {"function_hash": f"{os.getpid():020x}", "name": "step", "qualname": "train.step", "module": "train"}
    latencies, statuses, sent = [], {}, 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        events = [
            {
                "event_id": new_event_id(),
                "function": function,
                "run_id": run_id,
                "timestamp": time.time(),
                "kind": "trace",
                "cause": "new_shape",
                "compiled": True,
                "compile_seconds": 0.01,
                "explanation": "load",
            }
            for _ in range(batch)
        ]
        body = orjson.dumps({"run": run, "events": events})
        request = urllib.request.Request(
            url + "/api/v1/events", data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        start = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                response.read()
                status = response.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except OSError:
            status = 0
        latencies.append((time.perf_counter() - start) * 1000)
        statuses[status] = statuses.get(status, 0) + 1
        if status == 200:
            sent += batch
    out.put({"latencies": latencies, "statuses": statuses, "sent": sent, "run_id": run_id})


def scenario_load(clients: int, seconds: float, batch: int) -> list[list[Any]]:
    rows = []
    with _pg_store() as pg, benchkit.serve_process(pg, workers=2) as (url, proc):
        time.sleep(1)
        rss_before = tree_rss_mb(proc.pid)
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        procs = [ctx.Process(target=_client, args=(url, seconds, batch, out)) for _ in range(clients)]
        started = time.perf_counter()
        for p in procs:
            p.start()
        results = [out.get(timeout=seconds + 300) for _ in procs]
        elapsed = time.perf_counter() - started
        for p in procs:
            p.join(30)
        rss_after = tree_rss_mb(proc.pid)
        latencies = [x for r in results for x in r["latencies"]]
        statuses: dict[int, int] = {}
        for r in results:
            for status, n in r["statuses"].items():
                statuses[status] = statuses.get(status, 0) + n
        sent = sum(r["sent"] for r in results)
        stored = len(set(stored_ids(pg, {r["run_id"] for r in results})))
        errors = sum(n for status, n in statuses.items() if status >= 500 or status == 0)
        rows.append(
            [
                clients,
                batch,
                f"{seconds:.0f} s",
                len(latencies),
                errors,
                f"{sent:,}",
                f"{stored:,}",
                f"{sent / elapsed:,.0f}",
                f"{benchkit.percentile(latencies, 0.5):.1f}",
                f"{benchkit.percentile(latencies, 0.99):.1f}",
                f"{rss_before:.0f} -> {rss_after:.0f}",
            ]
        )
    return rows


# ------------------------------------------------------------------ command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="scenario", required=True)
    for name in ("sigkill", "outage", "writers", "load", "all"):
        p = sub.add_parser(name)
        p.add_argument("--repeats", type=int, default=3, help="sigkill: kills per flush interval")
        p.add_argument("--steps", type=int, default=600, help="outage: training steps")
        p.add_argument("--events", type=int, default=500, help="writers: events per thread")
        p.add_argument("--clients", type=int, default=4, help="load: concurrent clients")
        p.add_argument("--seconds", type=float, default=20.0, help="load: how long")
        p.add_argument("--batch", type=int, default=100, help="load: events per request")
    t = sub.add_parser("_train")  # the training process the scenarios start
    for flag, kind in (
        ("--store", str),
        ("--log", str),
        ("--spool-dir", str),
        ("--steps", int),
        ("--step-sleep", float),
        ("--flush-interval", float),
        ("--shape-every", int),
        ("--shapes", int),
        ("--spool-max-bytes", int),
        ("--exit-flush", float),
    ):
        t.add_argument(flag, type=kind, required=True)
    w = sub.add_parser("_writers")
    for flag, kind in (
        ("--store", str),
        ("--start", str),
        ("--processes", int),
        ("--threads", int),
        ("--events", int),
        ("--ids-dir", str),
        ("--spool-dir", str),
    ):
        w.add_argument(flag, type=kind, required=True)
    args = parser.parse_args(argv)
    if args.scenario == "_train":
        return train(args)
    if args.scenario == "_writers":
        return writers(args)
    chosen = ("sigkill", "outage", "writers", "load") if args.scenario == "all" else (args.scenario,)
    if "sigkill" in chosen:
        print("SIGKILL of a training process (SQLite store), lost events against the flush interval")
        benchkit.print_table(
            ["flush interval", "kill", "produced", "stored", "lost", "oldest lost (s)", "within interval"],
            scenario_sigkill(args.repeats),
        )
        print()
    if "outage" in chosen:
        print(f"The store goes away during training ({args.steps} steps)")
        benchkit.print_table(
            [
                "outage",
                "produced",
                "stored",
                "duplicates",
                "missing",
                "dropped (process)",
                "dropped (store)",
                "same results",
                "final flush",
            ],
            scenario_outage(args.steps),
        )
        print()
    if "writers" in chosen:
        print(f"4 processes x 8 threads x {args.events} events at once")
        benchkit.print_table(
            [
                "store",
                "start",
                "processes",
                "produced",
                "stored",
                "duplicates",
                "missing",
                "dropped",
                "wall s (with start-up)",
            ],
            scenario_writers(args.events),
        )
        print()
    if "load" in chosen:
        print("Concurrent clients against cachewatch serve --workers 2 on PostgreSQL (loopback)")
        benchkit.print_table(
            [
                "clients",
                "events/request",
                "for",
                "requests",
                "5xx/errors",
                "sent",
                "stored",
                "events/s",
                "p50 ms",
                "p99 ms",
                "server RSS MB",
            ],
            scenario_load(args.clients, args.seconds, args.batch),
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
