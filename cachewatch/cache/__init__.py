"""JAX's caches as a cache: each compiled variant, the calls it served, its memory and release, the persistent cache's audit; and the variants a run compiled, read back for compiling ahead."""
