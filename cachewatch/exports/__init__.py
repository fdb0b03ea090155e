"""A run taken elsewhere: its compiles as a trace for Perfetto and chrome://tracing
(trace_reads.py, perfetto.py, run_trace.py), and the process's figures as scalars for a
training dashboard (scalars.py)."""
