"""Query latency of the service on a big store: p50/p95 per endpoint, SQLite and PostgreSQL.

    .venv/bin/python benchmarks/query.py                       # 1,000,000 events, 2,000 functions
    .venv/bin/python benchmarks/query.py --events 100000       # quick

Each store is seeded (executemany, large chunks), served by a real ``cachewatch serve``
on loopback, and every endpoint is requested sequentially after a warm-up; the target
is p95 < 150 ms.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request

import benchkit

TARGET_MS = 150.0


def timed_get(url: str) -> tuple[float, bytes]:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        body = response.read()
    return (time.perf_counter() - start) * 1000, body


def measure(url: str, requests: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        timed_get(url)
    return [timed_get(url)[0] for _ in range(requests)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="compile events to seed (default 1,000,000)")
    parser.add_argument("--functions", type=int, default=2000, help="functions to seed (default 2,000)")
    parser.add_argument("--requests", type=int, default=30, help="timed requests per endpoint (default 30)")
    parser.add_argument("--stores", default="sqlite,postgresql", help="comma-separated: sqlite, postgresql")
    args = parser.parse_args()

    rows = []
    for kind in args.stores.split(","):
        with benchkit.temp_store(kind) as store:
            print(f"{kind}: seeding {args.events:,} events over {args.functions:,} functions", flush=True)
            seeded = benchkit.seed(store, args.events, args.functions)
            with benchkit.served(store) as base:
                first_page = json.loads(timed_get(f"{base}/api/v1/functions/{seeded['busiest']}/events?limit=100")[1])
                endpoints = [
                    ("GET /api/v1/functions", f"{base}/api/v1/functions"),
                    (
                        f"GET /functions/{{h}}/events (typical, {seeded['typical_events']} ev)",
                        f"{base}/api/v1/functions/{seeded['typical']}/events?limit=100",
                    ),
                    (
                        f"GET /functions/{{h}}/events (busiest, {seeded['busiest_events']:,} ev, page 2)",
                        f"{base}/api/v1/functions/{seeded['busiest']}/events?limit=100&cursor="
                        f"{first_page['next_cursor']}",
                    ),
                    ("GET /api/v1/summary", f"{base}/api/v1/summary"),
                    ("GET /metrics", f"{base}/metrics"),
                ]
                for name, url in endpoints:
                    times = measure(url, args.requests)
                    p50, p95 = benchkit.percentile(times, 0.5), benchkit.percentile(times, 0.95)
                    verdict = "ok" if p95 < TARGET_MS else f"miss x{p95 / TARGET_MS:.1f}"
                    rows.append([kind, f"{seeded['events']:,}", name, f"{p50:.1f}", f"{p95:.1f}", verdict])
                    print(f"  {name}: p50 {p50:.1f} ms, p95 {p95:.1f} ms", flush=True)
    print()
    benchkit.print_table(["store", "events", "endpoint", "p50 ms", "p95 ms", f"p95 < {TARGET_MS:.0f} ms"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
