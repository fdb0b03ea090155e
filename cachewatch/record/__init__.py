"""The run this process records (settings, identity, warm-up) and the worker that hands
its batches to a store sink. Imports ``core`` and ``store``; knows nothing of capture,
which registers what the worker collects (call statistics) from above."""
