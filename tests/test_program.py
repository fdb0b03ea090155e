"""What was compiled: the program behind each compile, read from JAX's own compile."""

from __future__ import annotations

import functools
import gzip
import json
import os
import zlib
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import serverkit as kit
import sqlalchemy as sa
from cachewatch_server.main import create_app
from cachewatch_server.settings import ServerSettings, load
from fastapi.testclient import TestClient
from jax._src import jaxpr_util
from jax._src.lib import _jax  # jaxlib's pprof codec, what jaxpr_util writes its dumps with

import cachewatch
from cachewatch import cli
from cachewatch.capture import program as programmod
from cachewatch.core.events import Batch, Cause, CompileEvent
from cachewatch.programs import program_reads, program_texts
from cachewatch.record import current, recorder
from cachewatch.store import engine as enginemod
from cachewatch.store import models, writes
from cachewatch.storms import diagnosis

# The line numbers below are found by their text, so editing the file keeps them right.
SOURCE = Path(__file__).read_text().splitlines()


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(SOURCE, 1) if text in line and "line_of" not in line)


@pytest.fixture
def events(sqlite_url, use_store):
    use_store(sqlite_url)
    seen = []

    def listen(event):
        if event.function.module != "jax.op_by_op":
            seen.append(event)

    recorder.add_listener(listen)
    yield seen
    recorder.remove_listener(listen)


def compiled(events, name):
    recorder.flush(10)  # the program's figures are read by the writer's thread
    return [e for e in events if e.function.name == name and e.compiled]


def test_weak_type_flip_is_an_identical_program_and_a_batch_change_is_not(events):
    @cachewatch.jit
    def scale(x, s):
        return jnp.sin(x) * s + 1.0

    x = jnp.ones(8)
    scale(x, 2.0)
    scale(x, jnp.float32(2.0))  # weak type flip: a convert XLA removes
    scale(jnp.ones(16), 2.0)  # batch size: another program
    first, flipped, bigger = compiled(events, "scale")
    assert flipped.cause == Cause.WEAK_TYPE
    assert first.program_fingerprint
    assert flipped.program_fingerprint == first.program_fingerprint
    assert flipped.identical_to == first.event_id
    # The jaxpr and the lowered module differ (the convert), so the persistent cache
    # would not have served the flip.
    assert flipped.eqns_by_primitive != first.eqns_by_primitive
    assert flipped.lowered_fingerprint != first.lowered_fingerprint
    assert bigger.cause == Cause.NEW_SHAPE
    assert bigger.program_fingerprint != first.program_fingerprint
    assert bigger.identical_to is None
    assert first.identical_to is None
    # XLA's figures, from the executable JAX compiled.
    assert first.hlo_ops
    assert first.hlo_ops >= 3
    assert first.fusions is not None
    assert first.flops is not None
    assert first.flops > 0
    assert first.bytes_accessed
    assert first.memory is not None
    assert first.memory["argument"] == 8 * 4 + 4
    assert first.memory["output"] == 8 * 4
    assert bigger.memory is not None
    assert bigger.memory["output"] == 16 * 4


def test_lambda_rejitted_and_an_ignored_context_option_are_identical_programs(events):
    x = jnp.arange(6.0)
    for _ in range(3):
        cachewatch.jit(lambda v: jnp.cos(v) * 2)(x)
    rejitted = compiled(events, "<lambda>")
    assert [e.cause for e in rejitted] == [Cause.FIRST_CALL, Cause.NEW_FUNCTION_OBJECT, Cause.NEW_FUNCTION_OBJECT]
    assert {e.identical_to for e in rejitted[1:]} == {rejitted[0].event_id}
    # The lowered modules match too: a persistent compilation cache would have served them.
    assert {e.lowered_fingerprint for e in rejitted} == {rejitted[0].lowered_fingerprint}

    @cachewatch.jit
    def shift(v):
        return v + 1.0

    shift(x)
    with jax.numpy_rank_promotion("warn"):  # an option shift never depends on
        shift(x)
    first, again = compiled(events, "shift")
    # (Whatever cause the context change is given, the program is the one compiled before.)
    assert again.identical_to == first.event_id
    # Program fingerprints never cross functions: cos*2 and +1 are different programs.
    assert first.program_fingerprint != rejitted[0].program_fingerprint


def test_unrolled_python_loop_line_is_the_top_contributor(events):
    @cachewatch.jit
    def unrolled(x):
        for _ in range(50):
            x = jnp.tanh(x) * 0.5  # unrolled-body
        return x

    @cachewatch.jit
    def scanned(x):
        def body(c, _):
            return jnp.tanh(c) * 0.5, None  # scan-body

        return jax.lax.scan(body, x, None, length=50)[0]

    unrolled(jnp.ones(4))
    scanned(jnp.ones(4))
    (u,) = compiled(events, "unrolled")
    top = u.eqns_by_line[0]
    assert top["line"] == line_of("# unrolled-body")
    assert top["function"].endswith("unrolled")
    assert top["eqns"] == 100
    assert not top["loop_body"]
    assert u.eqns_by_primitive == {"tanh": 50, "mul": 50}
    (s,) = compiled(events, "scanned")
    body = next(row for row in s.eqns_by_line if row["line"] == line_of("# scan-body"))
    assert body["eqns"] == 2
    assert body["loop_body"]
    assert s.jaxpr_eqns is not None
    assert s.jaxpr_eqns < 10
    assert s.eqns_by_primitive["scan"] == 1


def test_checkpoint_and_scan_bodies_counted_once_and_marked(events):
    @cachewatch.jit
    def model(w, x):
        @jax.checkpoint
        def layer(h):
            return jnp.tanh(h @ w)  # remat-layer

        def body(h, _):
            return layer(h), None

        return jnp.sum(jax.lax.scan(body, x, None, length=8)[0])

    w, x = jnp.eye(4), jnp.ones((2, 4))
    jax.grad(model.__wrapped__)(w, x)  # not recorded: a plain transformation outside cachewatch
    model(w, x)
    (m,) = compiled(events, "model")
    rows = [row for row in m.eqns_by_line if row["line"] == line_of("# remat-layer")]
    assert rows
    assert rows[0]["loop_body"]
    # One dot_general and one tanh in the one body, however many steps the scan takes.
    assert rows[0]["primitives"] == {"dot_general": 1, "tanh": 1}
    assert [n for name, n in m.eqns_by_primitive.items() if name.startswith(("remat", "checkpoint"))] == [1]


def test_kept_jaxpr_is_what_make_jaxpr_prints(events):
    def body(x, y):
        return jnp.sum(jnp.sin(x) * y, axis=0) + 2.0

    args = (jnp.ones((3, 4)), jnp.full((3, 4), 0.5))
    jitted = cachewatch.jit(body)
    jitted(*args)
    (event,) = compiled(events, "body")
    assert event.program_texts is not None
    assert event.program_texts["texts"]["jaxpr"] == str(jax.make_jaxpr(body)(*args))
    assert "HloModule" in event.program_texts["texts"]["hlo"]
    assert event.program_texts["fingerprint"] == event.program_fingerprint
    # The texts travel once per program: a later identical compile carries none.
    jitted.clear_cache()
    jitted(*args)
    again = compiled(events, "body")[1]
    assert again.identical_to == event.event_id
    assert again.program_texts is None


def test_program_view_off_reads_nothing(sqlite_url, use_store):
    use_store(sqlite_url, program_view=False)
    seen: list[CompileEvent] = []
    recorder.add_listener(seen.append)
    try:
        cachewatch.jit(lambda v: v * 3)(jnp.ones(2))
        recorder.flush(10)
    finally:
        recorder.remove_listener(seen.append)
    (event,) = [e for e in seen if e.compiled and e.function.name == "<lambda>"]
    assert event.program_fingerprint is None
    assert event.eqns_by_line is None
    assert event.memory is None


def test_fingerprint_leaves_names_out():
    a = "HloModule jit_f, is_scheduled=true\n\nENTRY %main.1 (x.1: f32[4]) -> f32[4] {\n  tmp_0 = f32[4]{0} parameter(0)\n}\n"
    b = a.replace("jit_f", "jit_g").replace("x.1:", "y.1:")
    c = a.replace("f32[4]{0} parameter", "f32[8]{0} parameter")
    assert programmod.fingerprint_of(a) == programmod.fingerprint_of(b) != programmod.fingerprint_of(c)
    assert programmod.hlo_counts(a) == (1, 0)


def test_fingerprint_leaves_out_the_gpu_compilers_stamp_of_the_name():
    # The header XLA's GPU compiler printed for `double` (H100, JAX 0.11.2): the stamp is a
    # hash of the module before scheduling, name included, so `twice` got another one.
    header = (
        "HloModule jit_{name}, is_scheduled=true, entry_computation_layout={{(f32[4]{{0}})->f32[4]{{0}}}}, "
        'frontend_attributes={{fingerprint_before_lhs="{stamp}"}}\n\n'
    )
    body = "ENTRY %main.1 (x.1: f32[4]) -> f32[4] {\n  ROOT tmp_0 = f32[4]{0} parameter(0)\n}\n"
    double = header.format(name="double", stamp="3e195d8da7a75473b12fd2f58bea4f00") + body
    twice = header.format(name="twice", stamp="fcc8d088c3e22797e15dbbd8615d503e") + body
    other = twice.replace("f32[4]{0} parameter", "f32[8]{0} parameter")
    assert programmod.fingerprint_of(double) == programmod.fingerprint_of(twice) != programmod.fingerprint_of(other)
    # Other frontend attributes of the module still count.
    marked = twice.replace('{fingerprint_before_lhs="', '{xla.sdy="1", fingerprint_before_lhs="')
    assert programmod.fingerprint_of(marked) != programmod.fingerprint_of(twice)


# ------------------------------------------------------------------ the store


def _recorded_program(events):
    @cachewatch.jit
    def stored(x, s):
        return jnp.tanh(x) * s

    stored(jnp.ones(4), 2.0)
    stored(jnp.ones(4), jnp.float32(2.0))
    cachewatch.flush(10)
    return compiled(events, "stored")


def _stored(url: str, event_id: str) -> tuple[dict, dict | None]:
    with enginemod.connection(url) as conn:
        e = models.compile_events
        row = dict(conn.execute(sa.select(e).where(e.c.event_id == event_id)).one()._mapping)
        fingerprint = row["program_fingerprint"]
        p = models.programs
        found = conn.execute(sa.select(p).where(p.c.fingerprint == fingerprint)).first()
    return row, dict(found._mapping) if found is not None else None


@pytest.fixture
def store_events(store_url, use_store):
    use_store(store_url)
    seen: list[CompileEvent] = []
    recorder.add_listener(seen.append)
    yield store_url, seen
    recorder.remove_listener(seen.append)


def test_program_fields_and_texts_through_the_library_writer(store_events):
    url, events = store_events
    first, flipped = _recorded_program(events)
    row, program = _stored(url, flipped.event_id)
    assert row["identical_to"] == first.event_id
    assert row["program_fingerprint"] == first.program_fingerprint
    assert row["lowered_fingerprint"] == flipped.lowered_fingerprint
    assert row["eqns_by_primitive"] == flipped.eqns_by_primitive
    assert row["eqns_by_line"] == flipped.eqns_by_line
    assert row["memory"] == flipped.memory
    assert row["fusions"] == flipped.fusions
    assert row["hlo_ops"] == flipped.hlo_ops
    # Stored once per fingerprint, compressed; the jaxpr is the first compile's.
    assert program is not None
    assert program["size_bytes"] > 0
    assert zlib.decompress(program["jaxpr"]).decode() == first.program_texts["texts"]["jaxpr"]
    assert "HloModule" in zlib.decompress(program["hlo"]).decode()
    assert program["stablehlo"] is None
    with enginemod.connection(url) as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(models.programs)).scalar_one() >= 1


def test_program_fields_through_the_service_ingest(store_events, tmp_path):
    lib_url, events = store_events
    recorded = _recorded_program(events)
    served = f"sqlite:///{tmp_path / 'served.db'}"
    with TestClient(create_app(ServerSettings(store=served, write_token=None, read_token=None))) as client:
        body = Batch(run=current.run_info(), events=recorded, stats=[]).to_wire()
        response = client.post("/api/v1/events", json=body)
        assert response.status_code == 200, response.text
        bad = Batch(run=current.run_info(), events=recorded, stats=[]).to_wire()
        bad["events"][0]["memory"] = {"temp": -1}
        assert client.post("/api/v1/events", json=bad).status_code == 422
    row, program = _stored(served, recorded[1].event_id)
    assert row["identical_to"] == recorded[0].event_id
    assert row["eqns_by_line"] == recorded[1].eqns_by_line
    assert program is not None
    assert zlib.decompress(program["jaxpr"]).decode().startswith("{ lambda")


def test_the_service_keeps_program_texts_under_its_store_cap(store_events, tmp_path, monkeypatch):
    _, events = store_events
    recorded = _recorded_program(events)
    body = Batch(run=current.run_info(), events=recorded, stats=[]).to_wire()
    (payload,) = [e["program_texts"] for e in body["events"] if e.get("program_texts")]
    size = writes.program_row(payload)["size_bytes"]
    assert isinstance(size, int)

    def ingest(cap: int) -> tuple[dict, dict | None]:
        # Read from the environment as `cachewatch serve` reads it: the library's variable.
        monkeypatch.setenv("CACHEWATCH_PROGRAM_STORE_MAX_BYTES", str(cap))
        url = f"sqlite:///{tmp_path / f'cap-{cap}.db'}"
        settings = load(store=url, write_token=None, read_token=None)
        assert settings.program_store_max_bytes == cap
        with TestClient(create_app(settings)) as client:
            response = client.post("/api/v1/events", json=body)
            assert response.status_code == 200, response.text
            assert response.json()["stored_events"] == 2, response.text
        return _stored(url, recorded[0].event_id)

    # One byte short: the events and their figures are stored, the program's texts are not.
    row, program = ingest(size - 1)
    assert program is None
    assert row["program_fingerprint"] == recorded[0].program_fingerprint
    assert row["hlo_ops"] == recorded[0].hlo_ops
    assert row["eqns_by_line"] == recorded[0].eqns_by_line
    # Exactly room for them: kept.
    row, program = ingest(size)
    assert program is not None
    assert program["size_bytes"] == size


def test_store_cap_keeps_figures_and_leaves_texts_out(sqlite_url, use_store):
    use_store(sqlite_url, program_store_max_bytes=10)
    seen: list[CompileEvent] = []
    recorder.add_listener(seen.append)
    try:
        cachewatch.jit(lambda v: jnp.exp(v) - 1)(jnp.ones(3))
        cachewatch.flush(10)
    finally:
        recorder.remove_listener(seen.append)
    (event,) = [e for e in seen if e.compiled and e.function.name == "<lambda>"]
    assert event.program_texts is not None  # made and handed over, then refused by the store's cap
    row, program = _stored(sqlite_url, event.event_id)
    assert row["program_fingerprint"] == event.program_fingerprint
    assert program is None


# ------------------------------------------------- reading back: CLI, API, pprof


def _profile(data: bytes) -> dict[str, Any]:
    """A gzip-compressed pprof Profile read by jaxlib's own protobuf codec (the inverse of
    the one JAX writes its eqn_count_pprof dumps with): its sample types, how many
    locations each sample has, and equations per (file, line, function name, primitive,
    in a loop body) at each sample's leaf location."""
    profile = json.loads(_jax.pprof_profile_to_json(gzip.decompress(data)))
    strings = profile["stringTable"]

    def text(message: dict[str, Any], field: str) -> str:
        # The protobuf JSON mapping: 64-bit integers as strings, fields at zero left out.
        return strings[int(message.get(field, 0))]

    functions = {f["id"]: f for f in profile["function"]}
    locations = {}
    for location in profile["location"]:
        (line,) = location["line"]
        function = functions[line["functionId"]]
        locations[location["id"]] = (text(function, "filename"), int(line.get("line", 0)), text(function, "name"))
    counts: dict[tuple, int] = {}
    for sample in profile["sample"]:
        (value,) = sample["value"]
        labels = {text(label, "key"): text(label, "str") for label in sample["label"]}
        key = (*locations[sample["locationId"][0]], labels["primitive"], labels.get("loop_body") == "true")
        counts[key] = counts.get(key, 0) + int(value)
    return {
        "types": [(text(t, "type"), text(t, "unit")) for t in profile["sampleType"]],
        "depths": {len(sample["locationId"]) for sample in profile["sample"]},
        "counts": counts,
    }


def _per_line_and_primitive(profile: dict[str, Any]) -> dict[tuple[str, int, str], int]:
    out: dict[tuple[str, int, str], int] = {}
    for (file, line, _, primitive, _), n in profile["counts"].items():
        out[(file, line, primitive)] = out.get((file, line, primitive), 0) + n
    return out


@pytest.fixture
def served(sqlite_url, use_store):
    use_store(sqlite_url, program_texts="jaxpr,hlo,stablehlo")
    seen: list[CompileEvent] = []
    recorder.add_listener(seen.append)
    yield sqlite_url, seen
    recorder.remove_listener(seen.append)


def test_program_command_and_endpoint_give_the_kept_texts(served, capsys, tmp_path):
    url, events = served

    def layers(x, w):
        for _ in range(3):
            x = jnp.tanh(x @ w)  # layers-line
        return x * 0.5  # layers-scale

    args = (jnp.ones((2, 4)), jnp.eye(4))
    cachewatch.jit(layers)(*args)
    cachewatch.flush(10)
    (event,) = compiled(events, "layers")
    assert cli.main(["program", event.event_id, "--store", url]) == 0
    assert capsys.readouterr().out == str(jax.make_jaxpr(layers)(*args)) + "\n"
    assert cli.main(["program", event.event_id, "--store", url, "--format", "stablehlo"]) == 0
    assert "stablehlo.tanh" in capsys.readouterr().out
    out = tmp_path / "profile.pb.gz"
    assert cli.main(["program", event.event_id, "--store", url, "--format", "pprof", "-o", str(out)]) == 0
    ours = _profile(out.read_bytes())
    # One location per sample: its source line, in a function named file:function.
    assert ours["types"] == [("equations", "count")]
    assert ours["depths"] == {1}
    by_line: dict[tuple[str, int], dict[str, Any]] = {}
    for (file, line, name, primitive, loop), n in ours["counts"].items():
        row = by_line.setdefault((file, line), {"name": name, "eqns": 0, "loop_body": False, "primitives": {}})
        row["eqns"] += n
        row["loop_body"] = row["loop_body"] or loop
        row["primitives"][primitive] = row["primitives"].get(primitive, 0) + n
    assert by_line == {
        (r["file"], r["line"]): {
            "name": f"{r['file']}:{r['function']}",
            "eqns": r["eqns"],
            "loop_body": r["loop_body"],
            "primitives": r["primitives"],
        }
        for r in event.eqns_by_line
    }
    lines = {line: row["primitives"] for (_, line), row in by_line.items()}
    assert lines == {line_of("# layers-line"): {"dot_general": 3, "tanh": 3}, line_of("# layers-scale"): {"mul": 1}}
    # JAX's own eqn_count_pprof dump of the same jaxpr: the same sample type, and the same
    # equations per source line and primitive.
    theirs = _profile(jaxpr_util.pprof_equation_profile(jax.make_jaxpr(layers)(*args).jaxpr))
    assert theirs["types"] == ours["types"]
    assert _per_line_and_primitive(theirs) == _per_line_and_primitive(ours)
    with TestClient(create_app(ServerSettings(store=url, write_token=None, read_token=None))) as client:
        response = client.get(f"/api/v1/events/{event.event_id}/program", params={"format": "hlo"})
        assert response.status_code == 200
        assert response.text.startswith("HloModule")
        response = client.get(f"/api/v1/events/{event.event_id}/program", params={"format": "pprof"})
        assert response.status_code == 200
        assert _profile(response.content) == ours
        missing = client.get("/api/v1/events/nope/program")
        assert missing.status_code == 404
        assert "no event" in missing.json()["detail"]
    assert cli.main(["program", "nope", "--store", url]) == 1


def test_text_cap_leaves_the_texts_out_and_says_so(sqlite_url, use_store, capsys, tmp_path):
    use_store(sqlite_url, program_text_max_bytes=10)
    seen: list[CompileEvent] = []
    recorder.add_listener(seen.append)
    try:
        cachewatch.jit(lambda v: jnp.exp(v) - 1)(jnp.ones(3))
        cachewatch.flush(10)
    finally:
        recorder.remove_listener(seen.append)
    (event,) = [e for e in seen if e.compiled and e.function.name == "<lambda>"]
    # Every text was over the cap: left out and named, in the order the formats are listed.
    assert event.program_texts is not None
    assert event.program_texts["texts"] == {}
    assert event.program_texts["left_out"] == ["jaxpr", "hlo"]
    assert event.program_texts["profile"]
    # The figures do not depend on the texts.
    assert event.program_fingerprint
    assert event.jaxpr_eqns == 2
    assert event.hlo_ops
    assert event.eqns_by_primitive == {"exp": 1, "sub": 1}
    assert event.eqns_by_line
    assert event.memory
    row, program = _stored(sqlite_url, event.event_id)
    assert row["jaxpr_eqns"] == 2
    assert row["hlo_ops"] == event.hlo_ops
    assert row["memory"] == event.memory
    assert program is not None
    assert program["left_out"] == ["jaxpr", "hlo"]
    assert program["jaxpr"] is None
    assert program["hlo"] is None
    assert program["profile"] is not None
    reason = "left out when recorded, over the per-program text cap (CACHEWATCH_PROGRAM_TEXT_MAX_BYTES)"
    for fmt in ("jaxpr", "hlo"):
        assert cli.main(["program", event.event_id, "--store", sqlite_url, "--format", fmt]) == 1
        captured = capsys.readouterr()
        assert captured.out == ""
        assert f"no {fmt} text kept for event {event.event_id}: {reason}" in captured.err
    # What was never asked for is told apart from what the cap left out.
    assert cli.main(["program", event.event_id, "--store", sqlite_url, "--format", "stablehlo"]) == 1
    assert "not asked for (CACHEWATCH_PROGRAM_TEXTS)" in capsys.readouterr().err
    # The equation profile is kept under the cap.
    out = tmp_path / "capped.pb.gz"
    assert cli.main(["program", event.event_id, "--store", sqlite_url, "--format", "pprof", "-o", str(out)]) == 0
    assert {k[3]: n for k, n in _profile(out.read_bytes())["counts"].items()} == {"exp": 1, "sub": 1}
    with TestClient(create_app(ServerSettings(store=sqlite_url, write_token=None, read_token=None))) as client:
        response = client.get(f"/api/v1/events/{event.event_id}/program", params={"format": "hlo"})
        assert response.status_code == 404
        assert reason in response.json()["detail"]
        response = client.get(f"/api/v1/events/{event.event_id}/program", params={"format": "pprof"})
        assert response.status_code == 200
        assert _profile(response.content)["counts"]


def test_diff_command_and_endpoint_agree(served, capsys):
    url, events = served

    @cachewatch.jit
    def grow(x, s):
        return jnp.sin(x) * s

    grow(jnp.ones(4), 2.0)
    grow(jnp.ones(4), jnp.float32(2.0))  # identical program
    grow(jnp.ones((2, 4)), 2.0)  # another shape
    cachewatch.flush(10)
    first, flipped, reshaped = compiled(events, "grow")
    assert cli.main(["diff", first.event_id, reshaped.event_id, "--store", url, "--format", "json"]) == 0
    from_cli = json.loads(capsys.readouterr().out)
    with TestClient(create_app(ServerSettings(store=url, write_token=None, read_token=None))) as client:
        from_api = client.get(f"/api/v1/events/{reshaped.event_id}/diff", params={"against": first.event_id}).json()
        by_default = client.get(f"/api/v1/events/{flipped.event_id}/diff").json()
    assert from_cli == from_api
    assert from_api["before"] == first.event_id
    assert from_api["cause"] == Cause.NEW_SHAPE
    assert not from_api["same_program"]
    assert from_api["key_diff"]
    assert any(line.startswith("-{ lambda ; a:f32[4]") for line in from_api["jaxpr_diff"])
    assert any(line.startswith("+{ lambda ; a:f32[2,4]") for line in from_api["jaxpr_diff"])
    assert from_api["xla"]["memory_output"] == {"before": 16, "after": 32}
    # By default a wasted recompile is diffed with the compile it repeats.
    assert by_default["before"] == first.event_id
    assert by_default["same_program"]
    assert {"name": "convert_element_type", "before": 1, "after": 0} in by_default["eqns_by_primitive"]
    assert cli.main(["diff", flipped.event_id, "--store", url]) == 0
    text = capsys.readouterr().out
    assert "Same optimised program as before" in text
    assert "convert_element_type" in text


# ------------------------------------------- wasted recompiles and compile cost


def test_report_counts_identical_recompiles_with_their_cost_and_fix(served, capsys):
    url, events = served
    x = jnp.arange(5.0)
    for _ in range(3):
        cachewatch.jit(lambda v: jnp.sqrt(v) + 1)(x)

    @cachewatch.jit
    def flip(v, s):
        return v * s

    flip(x, 2.0)
    flip(x, jnp.float32(2.0))
    for _ in range(3):  # a library's function, made anew and jitted: the user's line or not, told both ways
        cachewatch.jit(functools.partial(optax.l2_loss, targets=None))(x)
    cachewatch.flush(10)
    with enginemod.connection(url) as conn:
        wasted = {(r.qualname.rsplit(".", 1)[-1], r.cause): r for r in program_texts.identical_recompiles(conn)}
    (library,) = [r for (name, cause), r in wasted.items() if "l2_loss" in name and cause == Cause.NEW_FUNCTION_OBJECT]
    assert "hoist jax.jit out of the loop: jit the function once and call that where your code makes it" in library.fix
    assert "where a library, or JAX for eager code under a transformation" in library.fix
    rejit = wasted[("<lambda>", Cause.NEW_FUNCTION_OBJECT)]
    assert "where a library" not in rejit.fix  # the user's own lambda
    lambdas = compiled(events, "<lambda>")
    assert rejit.recompiles == 2
    assert rejit.persistent_cache_would_serve == 2
    assert rejit.seconds == pytest.approx(
        sum((e.trace_seconds or 0) + (e.lower_seconds or 0) + (e.compile_seconds or 0) for e in lambdas[1:])
    )
    assert "hoist jax.jit out of the loop" in rejit.fix
    assert "would have served 2" in rejit.fix
    assert "jax_persistent_cache_min_compile_time_secs" in rejit.fix  # these compiles take well under 1 s
    weak = wasted[("flip", Cause.WEAK_TYPE)]
    assert weak.recompiles == 1
    assert weak.persistent_cache_would_serve == 0
    assert "typed array" in weak.fix
    assert "persistent" not in weak.fix
    assert cli.main(["report", "--store", url]) == 0
    out = capsys.readouterr().out
    assert "produced the program compiled before (5," in out  # two lambdas, two partials, one flip
    assert "hoist jax.jit" in out
    assert cli.main(["report", "--store", url, "--format", "json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["flip"]["identical_recompiles"] == 1
    assert rows["flip"]["identical_seconds"] > 0


def test_compile_profile_names_the_unrolled_loop_and_the_big_constant(served, capsys):
    url, events = served

    @cachewatch.jit
    def deep(x):
        for _ in range(50):
            x = jnp.tanh(x) + 0.5  # fifty-steps
        return x

    @cachewatch.jit
    def rolled(x):
        return jax.lax.fori_loop(0, 50, lambda i, c: jnp.tanh(c) + 0.5, x)

    table = np.linspace(0.0, 1.0, 600_000, dtype=np.float32)  # 2.4 MB, read from the closure

    @cachewatch.jit
    def lookup(i):
        return jnp.asarray(table)[i] * 2

    deep(jnp.ones(3))
    rolled(jnp.ones(3))
    lookup(jnp.arange(3))
    cachewatch.flush(10)
    (d,) = compiled(events, "deep")
    with enginemod.connection(url) as conn:
        deep_profile = program_texts.compile_profile(conn, d.function.function_hash)
        rolled_profile = program_texts.compile_profile(conn, compiled(events, "rolled")[0].function.function_hash)
        lookup_profile = program_texts.compile_profile(conn, compiled(events, "lookup")[0].function.function_hash)
    top = deep_profile.top_lines[0]
    assert top["line"] == line_of("# fifty-steps")
    assert top["eqns"] == 100
    (fix,) = deep_profile.fixes
    assert fix.kind == "unrolled_loop"
    assert fix.where is not None
    assert fix.where.endswith(f":{line_of('# fifty-steps')}")
    assert "jax.lax.scan" in fix.text
    assert "fori_loop" in fix.text
    (growth,) = deep_profile.growth
    assert (growth.event_id, growth.run_id, growth.jaxpr_eqns) == (d.event_id, d.run_id, d.jaxpr_eqns)
    assert growth.seconds == pytest.approx((d.trace_seconds or 0) + (d.lower_seconds or 0) + (d.compile_seconds or 0))
    assert rolled_profile.fixes == []
    assert rolled_profile.top_lines[0]["loop_body"]
    assert [f.kind for f in lookup_profile.fixes] == ["big_constant"]
    assert "Pass the array as an argument" in lookup_profile.fixes[0].text
    assert cli.main(["report", "--store", url]) == 0
    out = capsys.readouterr().out
    assert "jax.lax.scan" in out
    assert "Pass the array as an argument" in out


def test_metrics_program_size_and_identical_recompile_seconds(served):
    url, events = served

    @cachewatch.jit
    def metered(v, s):
        return jnp.log1p(v) * s

    metered(jnp.ones(3), 2.0)
    metered(jnp.ones(3), jnp.float32(2.0))
    cachewatch.flush(10)
    first, flipped = compiled(events, "metered")
    with TestClient(create_app(ServerSettings(store=url, write_token=None, read_token=None))) as client:
        samples = kit.parse_metrics(client.get("/metrics").text)
    wasted = kit.sample(samples, "cachewatch_identical_recompile_seconds_total", function="metered")
    size = kit.sample(samples, "cachewatch_program_eqns", function="metered")
    cost = (flipped.trace_seconds or 0) + (flipped.lower_seconds or 0) + (flipped.compile_seconds or 0)
    assert wasted == pytest.approx(cost)
    assert (wasted or 0) > 0
    assert size == flipped.jaxpr_eqns


def test_a_storm_says_how_many_of_its_recompiles_were_the_same_program(served, capsys):
    url, events = served
    x = jnp.ones(3)
    for _ in range(7):  # a lambda re-jitted in a loop: a storm of identical programs
        cachewatch.jit(lambda v: v * 4 - 1)(x)
    cachewatch.flush(10)
    with enginemod.connection(url) as conn:
        (storm,) = [s for s in diagnosis.detect_storms(conn, threshold=5, window=600) if s.short_name == "<lambda>"]
    lambdas = compiled(events, "<lambda>")
    assert storm.identical_programs == storm.compiles == 6
    assert storm.identical_seconds == pytest.approx(
        sum((e.trace_seconds or 0) + (e.lower_seconds or 0) + (e.compile_seconds or 0) for e in lambdas[1:])
    )
    assert "6 of them produced the program compiled before" in diagnosis.describe_storm(storm)
    with TestClient(create_app(ServerSettings(store=url, write_token=None, read_token=None))) as client:
        (item,) = [s for s in client.get("/api/v1/storms").json()["items"] if s["short_name"] == "<lambda>"]
    assert item["identical_programs"] == 6


def test_an_inner_jit_called_by_a_helper_counts_at_every_call(events):
    """XLA inlines an inner jit at each call: a helper called twelve times puts its
    equations in the program twelve times, though JAX traced it once."""

    @jax.jit
    def helper(h):
        return jnp.tanh(h * 2.0 + 1.0)  # inner-helper

    @cachewatch.jit
    def deep(x):
        for _ in range(12):
            x = helper(x)
        return x

    deep(jnp.ones(3))
    (event,) = compiled(events, "deep")
    (row,) = [row for row in event.eqns_by_line if row["line"] == line_of("# inner-helper")]
    assert row["eqns"] == 12 * 3
    assert row["primitives"] == {"mul": 12, "add": 12, "tanh": 12}
    assert event.eqns_by_primitive["pjit" if "pjit" in event.eqns_by_primitive else "jit"] == 12
    assert event.jaxpr_eqns == 12 + 12 * 3


def test_a_first_compile_is_never_identical_to_an_earlier_one():
    """A compile whose cause is ``first_call`` is no recompile, so no waste, even where the
    program view saw the same function compile the same program before in the run (as
    eager differentiation re-lowers JAX's own helpers); a later recompile still is."""
    from cachewatch.capture import program as program_mod

    made = program_mod.Program(fingerprint="f" * 32)
    run, function = "r" * 32, "h" * 20
    assert "identical_to" not in program_mod.event_fields(made, "e1", run, function)
    again = program_mod.event_fields(made, "e2", run, function, first_compile=True)
    assert "identical_to" not in again
    assert program_mod.event_fields(made, "e3", run, function)["identical_to"] == "e1"


def test_an_unrolled_loop_inside_a_library_is_not_the_users_to_rewrite(tmp_path):
    """A solver's loop unrolled into the user's program (diffrax's fixed step count, say)
    lives in the library's file: no advice to rewrite it with jax.lax.scan."""

    def profiled(file: str) -> program_reads.ProfiledCompile:
        line = {"file": file, "line": 322, "function": "loop", "eqns": 100, "loop_body": False}
        line["primitives"] = {"tanh": 50, "add": 50}
        return program_reads.ProfiledCompile("e", "r", 0.0, 100, None, None, 1.0, [line], None, None)

    library = os.path.join(str(tmp_path), "lib", "python3", "site-packages", "solver", "_integrate.py")
    assert program_texts._unrolled_loop_fixes(profiled(library)) == []
    (fix,) = program_texts._unrolled_loop_fixes(profiled(str(tmp_path / "train.py")))
    assert fix.kind == "unrolled_loop"
    # Flax's train state applying an optimizer's update maps over every leaf: no loop either.
    stepped = tmp_path / "flax_step.py"
    stepped.write_text("\n" * 321 + "    state = state.apply_gradients(grads=grads)\n")
    assert program_texts._unrolled_loop_fixes(profiled(str(stepped))) == []
