"""What sending each compile as an OpenTelemetry span costs the compile path.

    .venv/bin/python benchmarks/otel_overhead.py [--shapes 30] [--repeats 7]

(a) One fresh watched function per round, compiled for ``--shapes`` distinct shapes (every
call traces and compiles). Rounds with spans off and on alternate in one process, the
order flipping every round; on, cachewatch's own tracer provider sends every compile's
span to an OTLP/HTTP receiver on 127.0.0.1, in a process of its own (so its work is not
this one's). The writer's thread makes the spans while the next compiles run, and the
SDK's thread sends them: both are inside the times. Each figure is the median over the
rounds; the ratio is set against spans off.

(b) The span work itself, timed directly over the compiles of (a): what the compiling
thread adds (noting the current context) and what the writer's thread spends making each
span and its phases.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")
for _name in [n for n in os.environ if n.startswith("OTEL_")]:
    del os.environ[_name]  # only the receiver below, with cachewatch's own provider

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import cachewatch  # noqa: E402
from cachewatch.core.events import CompileEvent  # noqa: E402
from cachewatch.exports import otel  # noqa: E402
from cachewatch.record import recorder  # noqa: E402

# The receiver: answers every POST to /v1/traces with an empty ExportTraceServiceResponse
# (200, application/x-protobuf), and prints its port once listening.
RECEIVER = """
import http.server
class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def one_round(shapes: int, serial: int) -> float:
    """Seconds per compiling call of a fresh function over ``shapes`` new shapes."""
    namespace: dict = {}
    # A fresh function each round (new source, new hash): nothing cached from before.
    exec(f"def otel_step_{serial}(x):\n    return jnp.tanh(x * 2.0 + 1.0).sum()\n", {"jnp": jnp}, namespace)
    step = cachewatch.jit(namespace[f"otel_step_{serial}"])
    inputs = [jnp.ones(size + 1) for size in range(shapes)]
    jax.block_until_ready(inputs)
    start = time.perf_counter()
    for x in inputs:
        jax.block_until_ready(step(x))
    return (time.perf_counter() - start) / shapes


def per_event(work: Callable[[CompileEvent], object], events: list[CompileEvent], passes: int = 5) -> float:
    """µs per event of ``work``: the median of ``passes`` passes over ``events``."""
    times = []
    for _ in range(passes):
        start = time.perf_counter()
        for event in events:
            work(event)
        times.append((time.perf_counter() - start) / len(events))
    return statistics.median(times) * 1e6


def timed_span_work(events: list[CompileEvent]) -> tuple[float, float, float]:
    """µs per compile: in the compiling thread, in the writer's thread (the span and its
    phases made, handed to the batch processor), and in the exporter's (encoded, sent)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = otel._spans
    assert spans is not None
    assert spans.delivery is not None
    noted = per_event(spans.heard, events)
    made = per_event(spans.completed, events)
    # The same spans kept in memory, then sent in one batch as the batch processor would.
    kept = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(kept))
    in_memory = otel._Spans(spans.target, provider.get_tracer("bench"))
    for event in events:
        in_memory.completed(event)
    finished = kept.get_finished_spans()
    sent = []
    for _ in range(5):
        start = time.perf_counter()
        spans.delivery.export(finished)
        sent.append((time.perf_counter() - start) / len(events))
    return noted, made, statistics.median(sent) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE, text=True)
    assert receiver.stdout is not None
    url = f"http://127.0.0.1:{receiver.stdout.readline().strip()}"
    times: dict[str, list[float]] = {"spans off": [], "spans on": []}
    completed: list[CompileEvent] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cachewatch.configure(store=f"sqlite:///{tmp}/bench.db", spool_dir=os.path.join(tmp, "spool"))
            one_round(3, 0)  # JAX and cachewatch warmed up
            serial = 1
            for round_ in range(args.repeats):
                for on in [False, True] if round_ % 2 == 0 else [True, False]:
                    cachewatch.configure(otel_endpoint=url if on else "off")
                    assert otel.active() == on
                    cachewatch.flush(60)
                    times["spans on" if on else "spans off"].append(one_round(args.shapes, serial))
                    serial += 1
                    cachewatch.flush(60)  # the round's spans made before the next round
            cachewatch.configure(otel_endpoint=url)
            recorder.add_listener(completed.append)
            one_round(args.shapes, serial)
            cachewatch.flush(60)
            recorder.remove_listener(completed.append)
            noted, making, sending = timed_span_work([e for e in completed if otel.spanned(e)])
            cachewatch.configure(otel_endpoint="off")  # sends what is left, then stops
            made, sent, not_sent = otel.spans_made(), otel.spans_sent(), otel.spans_not_sent()
    finally:
        receiver.terminate()
        receiver.wait()

    print(
        f"# {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"jax {jax.__version__} on {jax.default_backend()}"
    )
    print(
        f"(a) one function compiled for {args.shapes} distinct shapes "
        f"(medians of {args.repeats} interleaved repeats; spans sent to {url})"
    )
    base = statistics.median(times["spans off"])
    print(f"    {'variant':<24}{'ms/compile':>12}{'ratio':>9}   rounds (ms/compile)")
    for name, values in times.items():
        median = statistics.median(values)
        rounds = " ".join(f"{v * 1e3:.1f}" for v in values)
        print(f"    {name:<24}{median * 1e3:>12.2f}{median / base:>9.3f}   {rounds}")
    print(f"    compile spans made: {made}; spans sent, phases included: {sent} ({not_sent} not sent)")
    print(f"(b) span work per compile, timed directly over {len(completed)} compiles")
    print(f"    {'where':<56}{'us/compile':>11}{'of a compile':>14}")
    for name, value in (
        ("compiling thread: note the current context", noted),
        ("writer's thread: make the span and its phases", making),
        ("exporter's thread: encode and send them (one batch)", sending),
    ):
        print(f"    {name:<56}{value:>11.1f}{value / (base * 1e6):>13.3%}")


if __name__ == "__main__":
    sys.exit(main())
