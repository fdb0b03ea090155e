"""What a line that calls into a library is told: whether what it calls can be jitted (a
function, not a method of an object the library keeps state in), the name it is called by
and where that name was made, whether functions made anew come from the library, and
whether the call ran once (a first pass, whatever the library compiled inside it)."""

from __future__ import annotations

import types

import jax

from cachewatch.capture import identity
from cachewatch.core.warmup import USER_FRAMES, ran_once
from cachewatch.storms.site_fixes import (
    assigned_before,
    called_at,
    is_plain_function,
    jit_library_function_fix,
    remade_inside,
)


def test_the_library_function_a_line_calls_is_kept_with_its_frame():
    def probe(leaf):
        return identity.call_site()

    (site,) = jax.tree_util.tree_map(probe, [1])
    # The first frame is the probe's own line; the next, this test's, called JAX's tree_map.
    assert "into" not in site.stack[0]
    frame = site.stack[1]
    assert frame["into"].startswith("jax.")
    assert frame["callee"] == "tree_map"


def test_functions_and_closures_can_be_jitted_methods_cannot():
    assert is_plain_function("kinetic_energy")
    assert is_plain_function("pair.<locals>.fn_mapped")
    assert not is_plain_function("MCMC.run")
    assert not is_plain_function("Model.predict")
    assert not is_plain_function("")
    assert not is_plain_function(None)


def test_the_name_called_and_where_it_was_made_are_read_from_the_source(tmp_path):
    program = tmp_path / "md.py"
    program.write_text(
        "from jax import jit\n"
        "neighbor_fn, energy_fn = make()\n"
        "energy_fn = wrap(energy_fn)\n"
        "for i in range(3):\n"
        "  PE += [float(energy_fn(state.position))]\n"
        "  print(len(x), api.energy(R))\n"
    )
    site = f"{program}:5"
    assert called_at(site) == "energy_fn"  # float(...) and other builtins are looked through
    assert called_at(f"{program}:6") == "api.energy"
    assert assigned_before(site, "energy_fn") == (3, 3)
    assert assigned_before(f"{program}:3", "energy_fn") == (2, 2)  # a name in a tuple is assigned too
    assert assigned_before(site, "state") is None
    fix = jit_library_function_fix(site, "jax_md", "pair.<locals>.fn_mapped", "`safe_mask`", "9 more times", "")
    assert "`energy_fn = jit(energy_fn)` right after it is made (line 3)" in fix  # jit as the file imports it
    assert "calls jax_md's function `fn_mapped` (as `energy_fn`)" in fix


def _given(*functions: str) -> list[types.SimpleNamespace]:
    return [
        types.SimpleNamespace(diff=[{"change": "static", "path": "fn", "after": f"<function {f} at 0x7f00{i:04x}>"}])
        for i, f in enumerate(functions)
    ]


def test_functions_made_anew_inside_a_library_are_told_from_the_users_own(tmp_path):
    program = tmp_path / "loop.py"
    program.write_text("def step(x):\n  return x\nfor i in range(3):\n  energy_fn(R)\n")
    site = f"{program}:4"
    # Made by a function the user's file does not define: the library's.
    assert remade_inside(_given("soft_sphere.<locals>.<lambda>", "soft_sphere.<locals>.<lambda>"), site)
    # Made by the user's own function, or a lambda at the top of the user's loop.
    assert not remade_inside(_given("step.<locals>.<lambda>"), site)
    assert not remade_inside(_given("<lambda>"), site)
    assert not remade_inside([types.SimpleNamespace(diff=None)], site)


def test_code_ran_once_only_where_every_frame_is_whole_and_outside_any_loop(tmp_path):
    program = tmp_path / "setup.py"
    program.write_text(
        "def build(model):\n"  # 1
        "  return lib.init(model)\n"  # 2
        "state = build(model)\n"  # 3
        "for i in range(3):\n"  # 4
        "  state = build(model)\n"  # 5
        "states = [build(m) for m in models]\n"  # 6
        "app.run(main)\n"  # 7
        "def main(argv):\n"  # 8
        "  return build(model)\n"  # 9
        "jac = jax.jacfwd(build)(model)\n"  # 10
        "batched = jax.vmap(build)(models)\n"  # 11
        "leaves = jax.tree.map(build, models)\n"  # 12
    )
    at = lambda n, **more: {"site": f"{program}:{n}", **more}  # noqa: E731
    assert ran_once([at(2, into="brax.positional"), at(3)])  # one top-level call into a library
    assert ran_once([at(3, into="brax.positional")])
    assert not ran_once([at(2, into="brax.positional"), at(5)])  # a loop comes round to it
    assert not ran_once([at(2), at(6)])  # a comprehension does too
    # A library calls the user's code back (absl's app.run): it may do so in a loop of its own.
    assert not ran_once([at(2), at(9), at(7, into="absl.app")])
    # JAX's transformations call it back a bounded number of times, over no data: once.
    assert ran_once([at(2, into="brax.positional"), at(10, into="jax._src.api")])
    assert ran_once([at(2, into="brax.positional"), at(11, into="jax._src.traceback_util")])
    assert not ran_once([at(2), at(12, into="jax._src.tree")])  # a map over leaves: once per leaf
    assert not ran_once([at(2), at(9)])  # the outermost frame is no top level: frames missing
    assert not ran_once([at(3)] * USER_FRAMES)  # cut short at the frames kept
    assert not ran_once([{"site": "/nowhere/gone.py:3"}])  # source unread: no telling
    assert not ran_once([])
