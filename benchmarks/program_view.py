"""What recording a compile, with the whole program view, costs the compile path.

    .venv/bin/python benchmarks/program_view.py [--rounds 7] [--small-rounds 41] [--layers 12] [--unrolled 200]
                                                [--only transformer] [--control]

Three programs: a small function, a transformer-like training step (``--layers`` blocks
of attention and MLP, its gradient and an Adam update: over 13,000 jaxpr equations) and
a model whose Python loop unrolls ``--unrolled`` dense layers. Each round compiles each
program afresh (a new function object, so neither JAX's caches nor cachewatch's registry
helps) under plain ``jax.jit`` and under ``cachewatch.jit`` with the defaults, in
alternating order; the figure is the median over rounds of the per-round ratio of
compile-path times (first call: trace, lower, compile, run).

The program's figures are read by the writer's thread after the call returns. The
compile-path ratio is measured with that work done between rounds (``flush``, untimed),
as it is in a training program whose steps run between compiles; its CPU per compile
is reported beside it, and a second ratio with the compiles back to back (the writer
reading the previous program while the next one compiles) shows what it costs when
nothing else runs. Then each part of the program view is timed alone on one compile of
each program, as a share of that compile, with where it runs, and the bytes a store
keeps for it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp

import cachewatch
from cachewatch.capture import program as programmod
from cachewatch.record import recorder


def make_transformer(layers: int, width: int = 64, heads: int = 4):
    """A training step: loss of a pre-norm transformer over a batch, its gradient, and Adam."""

    def layer_norm(x, g):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.var(x, axis=-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * g

    def rotary(a):
        t, half = a.shape[1], a.shape[-1] // 2
        freqs = jnp.arange(t)[:, None] / (10000.0 ** (jnp.arange(half) / half))
        cos, sin = jnp.cos(freqs)[None, :, None], jnp.sin(freqs)[None, :, None]
        a1, a2 = a[..., :half], a[..., half:]
        return jnp.concatenate([a1 * cos - a2 * sin, a1 * sin + a2 * cos], axis=-1)

    def dropout(a, key, rate=0.1):
        keep = jax.random.bernoulli(key, 1 - rate, a.shape)
        return jnp.where(keep, a / (1 - rate), 0.0)

    def block(p, x, key):
        b, t, d = x.shape
        k1, k2 = jax.random.split(key)
        h = layer_norm(x, p["ln1"])
        q, k, v = (h @ p[name] + p["b" + name] for name in ("wq", "wk", "wv"))
        q, k, v = (a.reshape(b, t, heads, d // heads) for a in (q, k, v))
        q, k = rotary(layer_norm(q, 1.0)), rotary(layer_norm(k, 1.0))
        scores = jnp.einsum("bthd,bshd->bhts", q, k) / jnp.sqrt(d // heads)
        mask = jnp.tril(jnp.ones((t, t), bool))
        scores = jnp.where(mask, scores, -1e9)
        att = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(scores, axis=-1), v).reshape(b, t, d)
        x = x + dropout(att @ p["wo"] + p["bwo"], k1)
        h = layer_norm(x, p["ln2"])
        gated = jax.nn.silu(h @ p["w1"] + p["bw1"]) * (h @ p["w3"])
        x = x + dropout(gated @ p["w2"] + p["bw2"], k2)
        # A second, narrower gated MLP (an adapter) with its own norm.
        h = layer_norm(x, p["ln3"])
        x = x + (jax.nn.gelu(h @ p["wq"]) * jax.nn.sigmoid(h @ p["wk"])) @ p["wv"]
        x = layer_norm(x, p["ln1"]) + 0.1 * jnp.tanh(x) + 0.01 * jax.nn.relu(x) * jax.nn.sigmoid(x)
        return x + 0.01 * jnp.cos(x) * jnp.exp(-x * x) + 0.01 * jnp.sin(x) * jnp.log1p(x * x)

    def loss(params, tokens, targets):
        x = params["embed"][tokens]
        for i, p in enumerate(params["blocks"]):
            x = block(p, x, jax.random.fold_in(key, i))
        logits = layer_norm(x, params["lnf"]) @ params["embed"].T
        logits = 30.0 * jnp.tanh(logits / 30.0)  # soft-capped logits
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], axis=-1))

    def step(params, opt, tokens, targets):
        value, grads = jax.value_and_grad(loss)(params, tokens, targets)
        m, v, t = opt
        t = t + 1
        m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, m, grads)
        v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, v, grads)
        params = jax.tree.map(
            lambda p, m, v: p - 1e-3 * (m / (1 - 0.9**t)) / (jnp.sqrt(v / (1 - 0.999**t)) + 1e-8), params, m, v
        )
        return params, (m, v, t), value

    vocab = 256
    key = jax.random.PRNGKey(0)

    def init():
        def dense(i, shape):
            return jax.random.normal(jax.random.fold_in(key, i), shape) * 0.02

        blocks = [
            {
                "ln1": jnp.ones(width),
                "ln2": jnp.ones(width),
                "ln3": jnp.ones(width),
                **{name: dense(10 * i + j, (width, width)) for j, name in enumerate(("wq", "wk", "wv", "wo"))},
                "w1": dense(10 * i + 5, (width, 4 * width)),
                "w3": dense(10 * i + 7, (width, 4 * width)),
                "w2": dense(10 * i + 6, (4 * width, width)),
                **{"b" + name: jnp.zeros(width) for name in ("wq", "wk", "wv", "wo", "w2")},
                "bw1": jnp.zeros(4 * width),
            }
            for i in range(layers)
        ]
        params = {"embed": dense(99999, (vocab, width)), "lnf": jnp.ones(width), "blocks": blocks}
        zeros = jax.tree.map(jnp.zeros_like, params)
        tokens = jnp.zeros((4, 32), jnp.int32)
        return (params, (zeros, zeros, jnp.zeros((), jnp.int32)), tokens, tokens)

    return step, init()


def make_unrolled(layers: int, width: int = 32):
    """A model whose Python loop unrolls ``layers`` dense layers into the program."""

    def model(ws, x):
        for i in range(layers):
            x = jnp.tanh(x @ ws[i % 4] + 0.1 * i)
        return jnp.sum(x)

    args = ([jnp.eye(width) * 0.5 for _ in range(4)], jnp.ones((8, width)))
    return model, args


def fresh(fn):
    # A new function object each round: the same source, a new jit, so no cache helps.
    return type(fn)(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def compile_path(jit, fn, args) -> float:
    jitted = jit(fresh(fn))
    start = time.perf_counter()
    jax.block_until_ready(jitted(*args))
    return time.perf_counter() - start


def hit_path(jitted, args, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        jitted(*args)
    jax.block_until_ready(jitted(*args))
    return (time.perf_counter() - start) / calls


def make_small():
    def small(x, w):
        return jnp.tanh(x @ w).sum()

    return small, (jnp.ones((8, 16)), jnp.ones((16, 4)))


def eqns_of(fn, args) -> int:
    jaxpr = jax.make_jaxpr(fn)(*args)
    total, _, _ = programmod.walk(jaxpr.jaxpr)
    return total


def parts(fn, args) -> dict[str, float]:
    """Each part of the program view alone on one compile of ``fn``, in seconds, with the
    compile and the bytes kept."""
    jitted = jax.jit(fresh(fn))
    lowered = jitted.trace(*args).lower()
    start = time.perf_counter()
    compiled = lowered.compile()
    compile_seconds = time.perf_counter() - start
    executable = compiled._executable.xla_executable  # the LoadedExecutable the wrapper sees
    module = lowered._lowering._hlo  # the ir.Module the wrapper sees
    jaxpr = jitted.trace(*args).jaxpr.jaxpr
    out: dict[str, float] = {"compile": compile_seconds}
    start = time.perf_counter()
    programmod.walk(jaxpr)
    out["walk"] = time.perf_counter() - start
    start = time.perf_counter()
    hlo = programmod._optimised_hlo(executable) or ""
    programmod.fingerprint_of(hlo)
    programmod.hlo_counts(hlo)
    out["fingerprint"] = time.perf_counter() - start
    start = time.perf_counter()
    bytecode = programmod._module_bytecode(module) or b""
    out["lowered_bytecode"] = time.perf_counter() - start
    start = time.perf_counter()
    programmod._read_lowered(bytecode, stablehlo=False)
    out["lowered_fingerprint"] = time.perf_counter() - start
    start = time.perf_counter()
    programmod._cost_figures(executable, programmod.Program())
    out["xla_cost"] = time.perf_counter() - start
    start = time.perf_counter()
    executable.get_compiled_memory_stats()
    out["xla_memory"] = time.perf_counter() - start
    start = time.perf_counter()
    text = str(jaxpr)
    out["jaxpr_text"] = time.perf_counter() - start
    start = time.perf_counter()
    stablehlo = programmod._stablehlo_text(module)
    out["stablehlo_text"] = time.perf_counter() - start
    import zlib

    out["bytes_jaxpr"] = len(zlib.compress(text.encode(), 6))
    out["bytes_hlo"] = len(zlib.compress(hlo.encode(), 6))
    out["bytes_stablehlo"] = len(zlib.compress(stablehlo.encode(), 6))
    return out


# Where each part runs: the compiling thread, or the writer's thread after the call.
PARTS = {
    "lowered_bytecode": "compiling thread",
    "walk": "writer",
    "fingerprint": "writer",
    "lowered_fingerprint": "writer",
    "xla_cost": "writer",
    "xla_memory": "writer",
    "jaxpr_text": "writer",
    "stablehlo_text": "writer, on request",
}


@dataclasses.dataclass
class Rounds:
    """Per round: the cachewatch.jit / jax.jit ratio, the control's jax.jit / jax.jit ratio
    (the method's own spread; empty without ``--control``), jax.jit's compile path, the
    compiling thread's share spent on the program, and the writer's CPU per compile."""

    ratios: list[float] = dataclasses.field(default_factory=list)
    control: list[float] = dataclasses.field(default_factory=list)
    plain_times: list[float] = dataclasses.field(default_factory=list)
    on_path: list[float] = dataclasses.field(default_factory=list)
    writer_cpu: list[float] = dataclasses.field(default_factory=list)


def compare(fn, fn_args, rounds: int, drain: bool, progress: bool = False, control: bool = False) -> Rounds:
    variants = {"jax.jit": jax.jit, "cachewatch.jit": cachewatch.jit}
    if control:  # a second jax.jit in the rotation: what the ratio reads when nothing differs
        variants["jax.jit again"] = jax.jit
    names = list(variants)
    out = Rounds()
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        times = {}
        for name in order:
            on_path_before = programmod.spent["on_compile_path"]
            cpu_before = recorder.program_work().writer_cpu_seconds
            times[name] = compile_path(variants[name], fn, fn_args)
            if name == "cachewatch.jit":
                out.on_path.append((programmod.spent["on_compile_path"] - on_path_before) / times[name])
                if drain:
                    cachewatch.flush(timeout=600)
                    out.writer_cpu.append(recorder.program_work().writer_cpu_seconds - cpu_before)
        out.ratios.append(times["cachewatch.jit"] / times["jax.jit"])
        if control:
            out.control.append(times["jax.jit again"] / times["jax.jit"])
        out.plain_times.append(times["jax.jit"])
        if progress:  # slow compiles (a GPU's): each round's figures as they come
            print(f"  round {r + 1}: jax.jit {times['jax.jit']:.2f} s, ratio {out.ratios[-1]:.4f}", flush=True)
    if not drain:
        cachewatch.flush(timeout=600)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--small-rounds", type=int, default=41)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--unrolled", type=int, default=200)
    parser.add_argument("--hit-calls", type=int, default=2000)
    parser.add_argument("--progress", action="store_true", help="print each round's figures as it ends")
    parser.add_argument(
        "--only", default="", help="time only the programs whose name contains this (small, transformer, loop)"
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="rotate a second jax.jit into the rounds: its ratio to the first is the method's own spread",
    )
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="cachewatch-bench-program-")
    cachewatch.configure(store=f"sqlite:///{scratch}/store.db", sample_every=0)
    print(f"jax {jax.__version__}, python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cpus")

    programs = {
        "small function": (make_small(), args.small_rounds),
        f"transformer step, {args.layers} layers": (make_transformer(args.layers), args.rounds),
        f"python loop, {args.unrolled} layers": (make_unrolled(args.unrolled), args.rounds),
    }
    for name, ((fn, fn_args), rounds) in programs.items():
        if args.only not in name:
            continue
        eqns = eqns_of(fn, fn_args)
        warm = time.perf_counter()
        compile_path(jax.jit, fn, fn_args)  # warm JAX's own caches of library jits
        compile_path(cachewatch.jit, fn, fn_args)
        cachewatch.flush(timeout=600)
        if args.progress:
            print(f"{name}: {eqns} equations, warmed in {time.perf_counter() - warm:.1f} s", flush=True)
        drained = compare(fn, fn_args, rounds, drain=True, progress=args.progress, control=args.control)
        back_to_back = compare(fn, fn_args, rounds, drain=False, progress=args.progress)
        base = statistics.median(drained.plain_times)
        writer_cpu = statistics.median(drained.writer_cpu)
        print(
            f"\n{name}: {eqns} jaxpr equations, compile path {base:.3f} s with jax.jit\n"
            f"  cachewatch.jit / jax.jit = {statistics.median(drained.ratios):.4f} (median of {rounds} paired "
            f"rounds; the writer's work between compiles)"
        )
        if drained.control:
            print(f"  jax.jit / jax.jit (control, same rounds) = {statistics.median(drained.control):.4f}")
        print(
            f"  program view on the compiling thread: {100 * statistics.median(drained.on_path):.3f}% "
            f"of the compile path\n"
            f"  writer's CPU per compile: {writer_cpu * 1e3:.1f} ms ({100 * writer_cpu / base:.2f}% of the compile path)\n"
            f"  back to back (the writer reading the previous program during this compile): "
            f"{statistics.median(back_to_back.ratios):.4f}"
        )
        measured = parts(fn, fn_args)
        xla = measured["compile"]
        for part, where in PARTS.items():
            print(
                f"  {part:20} {measured[part] * 1e3:8.2f} ms  {100 * measured[part] / xla:6.2f}% of the XLA compile"
                f"  ({where})"
            )
        print(
            f"  bytes kept (zlib): jaxpr {measured['bytes_jaxpr']:,}, optimised HLO {measured['bytes_hlo']:,}, "
            f"StableHLO (on request) {measured['bytes_stablehlo']:,}"
        )

    def tiny(x):
        return x + 1

    x = jnp.ones(8)
    plain, watched = jax.jit(tiny), cachewatch.jit(tiny)
    plain(x), watched(x)
    ratios = []
    for r in range(args.rounds * 3):
        pair = [plain, watched] if r % 2 == 0 else [watched, plain]
        times = {id(j): hit_path(j, (x,), args.hit_calls) for j in pair}
        ratios.append(times[id(watched)] / times[id(plain)])
    print(
        f"\ncache-hit call: cachewatch.jit / jax.jit = {statistics.median(ratios):.4f} (median of {len(ratios)} rounds)"
    )
    print(f"program view totals over this process (s): {programmod.spent}")
    print(f"program work: {recorder.program_work()}")
    cachewatch.flush(timeout=60)
    kept_in_store(f"sqlite:///{scratch}/store.db")


def kept_in_store(url: str) -> None:
    """What the store holds for the compiles above, with the defaults: the texts of each
    distinct program (once per fingerprint) and the equation profile."""
    import sqlalchemy as sa

    from cachewatch.store import engine as enginemod
    from cachewatch.store import models

    e, p = models.compile_events, models.programs
    with enginemod.connection(url) as conn:
        compiles = conn.execute(sa.select(sa.func.count()).select_from(e).where(e.c.compiled)).scalar_one()
        rows = conn.execute(sa.select(p.c.jaxpr, p.c.hlo, p.c.stablehlo, p.c.profile, p.c.left_out)).all()
    sizes = {part: sum(len(getattr(r, part) or b"") for r in rows) for part in ("jaxpr", "hlo", "stablehlo", "profile")}
    with_jaxpr = sum(1 for r in rows if r.jaxpr)
    print(
        f"store with the defaults: {compiles} compiles, {len(rows)} distinct programs kept "
        f"({with_jaxpr} with their jaxpr text); bytes (zlib) jaxpr {sizes['jaxpr']:,}, optimised HLO "
        f"{sizes['hlo']:,}, StableHLO {sizes['stablehlo']:,}, equation profiles {sizes['profile']:,}; "
        f"{sum(sizes.values()) / max(compiles, 1):,.0f} bytes of program per compile"
    )


if __name__ == "__main__":
    main()
