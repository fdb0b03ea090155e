"""How a compile is seen: the ``jit`` wrapper and its C cache-hit path, JAX's monitoring
events attributed to calls, compiles of jits cachewatch did not wrap, op-by-op compiles,
the persistent cache, captured globals, call counters, the user's guards, the program
behind each compile (``program``), a function's identity (``identity``), compiling ahead
of time what a run compiled (``warmup``) and ``jax.pmap``'s calls under ``install()``
(``pmapped``).
Imports ``core``, ``explain`` and ``record``; never the store or an errand's reasoning."""
