"""No event can lose others: a value JAX puts in a signature is recorded in a readable form,
and an event the writer still cannot encode is dropped alone, counted by its reason."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import sqlalchemy as sa

import cachewatch
from cachewatch.core.events import CompileEvent, DropReason
from cachewatch.record import recorder
from cachewatch.store import engine as enginemod
from cachewatch.store import models

# JAX's own example of shape polymorphism (jax.export with a symbolic batch dimension),
# between compiles of plain jits, under install(): every compile is stored, the exported
# trace with its symbolic dimension as text.
PROGRAM = textwrap.dedent("""
    import cachewatch
    cachewatch.install()
    import jax, jax.numpy as jnp
    from jax import export

    def before(x):
        return x * 2.0

    def poly(x):
        return jnp.sin(x).sum(axis=0) * x.shape[0]

    def after(x):
        return x - 1.0

    for n in (3, 4, 5):
        jax.jit(before)(jnp.ones((n, 4)))
    exported = export.export(jax.jit(poly))(jax.ShapeDtypeStruct(export.symbolic_shape("b, 4"), jnp.float32))
    print(exported.in_avals)
    for n in (3, 4, 5):
        jax.jit(after)(jnp.ones((n, 4)))
    assert cachewatch.flush(60)
""")


def test_a_symbolic_dimension_is_recorded_as_its_text_and_loses_no_compile(tmp_path):
    store = f"sqlite:///{tmp_path / 'poly.db'}"
    script = tmp_path / "poly.py"
    script.write_text(PROGRAM)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "CACHEWATCH_STORE": store, "CACHEWATCH_RAISE_INTERNAL_ERRORS": "1"}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    e, f, d = models.compile_events, models.functions, models.run_drops
    with enginemod.connection(store) as conn:
        rows = conn.execute(
            sa.select(f.c.name, e.c.compiled, e.c.signature).join(f, f.c.function_hash == e.c.function_hash)
        ).all()
        dropped = conn.execute(sa.select(d.c.reason, d.c.dropped)).all()
    compiled = sorted(name for name, was_compiled, _ in rows if was_compiled and name in ("before", "after"))
    assert compiled == ["after"] * 3 + ["before"] * 3  # the batch around the export is whole
    (signature,) = [json.loads(s) if isinstance(s, str) else s for name, _, s in rows if name == "poly"]
    assert signature[0]["shape"] == ["b", 4]
    assert not dropped


def test_an_event_the_writer_cannot_encode_is_dropped_alone_and_counted(sqlite_url, use_store):
    use_store(sqlite_url)
    heard: list[CompileEvent] = []
    recorder.add_listener(heard.append, at_once=True)

    @cachewatch.jit
    def step(x):
        return x * 2.0

    for n in (3, 4, 5):
        step(jnp.ones(n))
    steps = [event for event in heard if event.function.name == "step"]
    assert len(steps) == 3
    # The same batch also carries a copy holding an object JSON cannot write.
    broken = dataclasses.replace(
        steps[0], event_id="0" * 32, signature=({"path": "x", "value": object()},), pending=None
    )
    recorder.record_event(broken)
    assert cachewatch.flush(30)
    e, d = models.compile_events, models.run_drops
    with enginemod.connection(sqlite_url) as conn:
        stored = set(conn.execute(sa.select(e.c.event_id)).scalars())
        dropped = conn.execute(sa.select(d.c.reason, d.c.dropped)).all()
    assert stored == {event.event_id for event in heard} - {broken.event_id}  # all but the one
    assert [tuple(row) for row in dropped] == [(DropReason.UNENCODABLE.value, 1)]
