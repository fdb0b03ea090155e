"""The cachewatch store: what every errand shares. SQL schema and migrations, engines
chosen by URL, the one write path, the kept totals, the sinks and spool, retention, the
reports and listings, which run a name means, and the one rule for kept results
(settling.py). An errand's own reads live in its package (storms/, cache/, ...).
Imports ``core`` only; ``record``, the errands, the interfaces and the service import it."""

from .engine import SchemaOutdated, StoreError, ensure_schema, get_engine, upgrade

__all__ = ["SchemaOutdated", "StoreError", "ensure_schema", "get_engine", "upgrade"]
