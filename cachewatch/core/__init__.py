"""The ground floor every layer stands on: the event types and their wire format, the
vocabulary (causes, kinds), the settings table, the one internal guard, and the run-time
histogram. Imports nothing else of cachewatch; everything may import it."""
