"""The ground floor every layer stands on: the event types and their wire format, the
vocabulary (causes, kinds), the settings table, the one internal guard, the run-time
histogram, the seam for JAX's internals (``jaxcompat``), shared figures and table cells.
Imports nothing else of cachewatch; everything may import it."""
