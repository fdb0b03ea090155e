"""One eager call of a JAX MD energy function at the top level, then a jitted descent: the
energy's six pairs of species each hand JAX MD's jitted `safe_mask` a lambda made anew,
six compiles of one program inside that one call. The line ran once, so that is a first
pass, not a storm; the loop after it is served from the cache."""

import jax
import jax.numpy as jnp
from jax_md import energy, space

displacement, shift = space.free()
R = jax.random.uniform(jax.random.PRNGKey(0), (30, 2)) * 5.0
species = jnp.arange(30) % 3
sigma = jnp.array([[1.0, 1.1, 1.2], [1.1, 1.2, 1.3], [1.2, 1.3, 1.4]])
energy_fn = energy.soft_sphere_pair(displacement, species=species, sigma=sigma)
print(f"energy before: {float(energy_fn(R)):.6f}")

step = jax.jit(lambda R: R - 1e-3 * jax.grad(energy_fn)(R))
for _ in range(50):
    R = step(R)
print(f"energy after: {float(jax.jit(energy_fn)(R)):.6f}")
