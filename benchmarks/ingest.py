"""Ingest throughput: events per second into a store, straight and through the service.

    .venv/bin/python benchmarks/ingest.py [--events 20000] [--batch 500] [--repeats 5]
    .venv/bin/python benchmarks/ingest.py --stores sqlite --rounds 9   # the writer against raw sqlite3

Variants: the recorder's SqlSink writing into SQLite and into PostgreSQL, and the
HttpSink posting to a real ``cachewatch serve`` (uvicorn, one worker) that stores into
each of them. Events are clones of a real recompile event (real signature and diff);
every repeat writes ``--events`` new events in batches of ``--batch``; the figure is
the median over the repeats.

With SQLite among the stores, the SqlSink is first set against the floor: the standard
library's ``sqlite3`` ``executemany`` inserting the same events, as ready-made parameter
tuples (JSON columns already serialized, built outside the timed part), into a store of
the same schema and indexes, one transaction per batch. Rounds alternate which goes
first; each round gives the ratio of the two rates, and the figure is the median ratio.
The SqlSink does everything else a write takes: bounds, rows, JSON, the kept totals.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import time

import benchkit
import sqlalchemy as sa

from cachewatch.record.recorder import Batch
from cachewatch.store import engine as enginemod
from cachewatch.store import models, writes
from cachewatch.store.http import HttpSink
from cachewatch.store.sinks import SqlSink

RAW_INSERT = (
    f"INSERT INTO {models.compile_events.name} ({', '.join(models.EVENT_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in models.EVENT_COLUMNS)})"
)


def batches(run, template, events: int, size: int) -> list[Batch]:
    start = time.time()
    clones = benchkit.clone_events(template, run, events, start)
    return [Batch(run=run, events=clones[i : i + size], stats=[]) for i in range(0, events, size)]


def rate(sink, run, template, events: int, size: int) -> float:
    work = batches(run, template, events, size)  # built outside the timed part
    start = time.perf_counter()
    for batch in work:
        sink.write(batch)
    return events / (time.perf_counter() - start)


def raw_params(events) -> list[list]:
    """The events as the driver takes them: column values in order, JSON as text."""
    json_at = [
        i for i, name in enumerate(models.EVENT_COLUMNS) if isinstance(models.compile_events.c[name].type, sa.JSON)
    ]
    rows = []
    for event in events:
        values = list(writes.event_values(event))
        for i in json_at:
            if values[i] is not None:
                values[i] = enginemod.json_dumps(values[i])
        rows.append(values)
    return rows


def raw_connection(url: str, run, template) -> sqlite3.Connection:
    """A plain sqlite3 connection to a migrated store, set up as cachewatch's engine sets
    its own (WAL, synchronous NORMAL, foreign keys), with the run and function stored."""
    with enginemod.connection(url) as conn:
        writes.write_rows(conn, writes.table_rows(Batch(run=run, events=[template], stats=[])))
    enginemod.dispose_engines()
    conn = sqlite3.connect(url[len("sqlite:///") :], isolation_level=None)
    for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON"):
        conn.execute(f"PRAGMA {pragma}")
    return conn


def raw_rate(conn: sqlite3.Connection, run, template, events: int, size: int) -> float:
    params = raw_params(benchkit.clone_events(template, run, events, time.time()))  # outside the timed part
    start = time.perf_counter()
    for i in range(0, events, size):
        conn.execute("BEGIN")
        conn.executemany(RAW_INSERT, params[i : i + size])
        conn.execute("COMMIT")
    return events / (time.perf_counter() - start)


def versus_raw(run, template, events: int, size: int, rounds: int) -> list[list]:
    """SqlSink into SQLite against raw sqlite3 executemany of the same events: paired
    rounds, the order alternating; each store gets the same number of rows per round."""
    ratios, library, raw = [], [], []
    with benchkit.temp_store("sqlite") as lib_url, benchkit.temp_store("sqlite") as raw_url:
        sink = SqlSink(lib_url)
        conn = raw_connection(raw_url, run, template)
        try:
            for k in range(rounds):
                if k % 2:
                    r = raw_rate(conn, run, template, events, size)
                    lib = rate(sink, run, template, events, size)
                else:
                    lib = rate(sink, run, template, events, size)
                    r = raw_rate(conn, run, template, events, size)
                library.append(lib)
                raw.append(r)
                ratios.append(lib / r)
                print(
                    f"  round {k + 1}: SqlSink {lib:,.0f} ev/s, raw sqlite3 {r:,.0f} ev/s, ratio {lib / r:.3f}",
                    flush=True,
                )
        finally:
            conn.close()
    return [
        [
            size,
            f"{events:,}",
            rounds,
            f"{statistics.median(library):,.0f}",
            f"{statistics.median(raw):,.0f}",
            f"{statistics.median(ratios):.3f}",
            f"{min(ratios):.3f}-{max(ratios):.3f}",
        ]
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000, help="events per repeat (default 20,000)")
    parser.add_argument("--batch", type=int, default=500, help="events per batch (default 500)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats per variant (default 5, at least 5)")
    parser.add_argument("--stores", default="sqlite,postgresql", help="comma-separated: sqlite, postgresql")
    parser.add_argument("--rounds", type=int, default=9, help="paired rounds against raw sqlite3 (default 9)")
    args = parser.parse_args()
    repeats = max(5, args.repeats)

    run, template = benchkit.real_event_template()
    if "sqlite" in args.stores.split(","):
        print("SqlSink against raw sqlite3 executemany (same events, same schema):", flush=True)
        paired = versus_raw(run, template, args.events, args.batch, args.rounds)
        print()
        benchkit.print_table(
            [
                "batch",
                "events/round",
                "rounds",
                "SqlSink ev/s",
                "raw sqlite3 ev/s",
                "median ratio",
                "ratio min-max",
            ],
            paired,
        )
        print()
    rows = []
    for kind in args.stores.split(","):
        for via in ("SqlSink", "HTTP (cachewatch serve)"):
            with benchkit.temp_store(kind) as store:
                if via == "SqlSink":
                    sink = SqlSink(store)
                    rates = [rate(sink, run, template, args.events, args.batch) for _ in range(repeats)]
                else:
                    with benchkit.served(store) as url:
                        sink = HttpSink(url, timeout=60)
                        rates = [rate(sink, run, template, args.events, args.batch) for _ in range(repeats)]
            rows.append(
                [
                    via,
                    kind,
                    args.batch,
                    f"{args.events:,}",
                    repeats,
                    f"{statistics.median(rates):,.0f}",
                    f"{min(rates):,.0f}",
                    f"{max(rates):,.0f}",
                ]
            )
            print(f"  {via} -> {kind}: median {statistics.median(rates):,.0f} events/s", flush=True)
    print()
    benchkit.print_table(
        ["path", "store", "batch", "events/repeat", "repeats", "median ev/s", "min ev/s", "max ev/s"], rows
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
