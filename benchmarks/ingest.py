"""Ingest throughput: events per second into a store, straight and through the service.

    .venv/bin/python benchmarks/ingest.py [--events 20000] [--batch 500] [--repeats 5]

Variants: the recorder's SqlSink writing into SQLite and into PostgreSQL, and the
HttpSink posting to a real ``cachewatch serve`` (uvicorn, one worker) that stores into
each of them. Events are clones of a real recompile event (real signature and diff);
every repeat writes ``--events`` new events in batches of ``--batch``; the figure is
the median over the repeats.
"""

from __future__ import annotations

import argparse
import statistics
import time

import benchkit

from cachewatch.record.recorder import Batch
from cachewatch.store.http import HttpSink
from cachewatch.store.sinks import SqlSink


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000, help="events per repeat (default 20,000)")
    parser.add_argument("--batch", type=int, default=500, help="events per batch (default 500)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats per variant (default 5, at least 5)")
    parser.add_argument("--stores", default="sqlite,postgresql", help="comma-separated: sqlite, postgresql")
    args = parser.parse_args()
    repeats = max(5, args.repeats)

    run, template = benchkit.real_event_template()
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
