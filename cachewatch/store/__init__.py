"""The cachewatch store: SQL schema and migrations, engines chosen by URL, the one write
path, the sinks and spool, and the reads the CLI, the analysis and the service share.
Imports ``core`` only; ``record``, ``analysis``, the interfaces and the service import it."""

from .engine import SchemaOutdated, StoreError, ensure_schema, get_engine, upgrade

__all__ = ["SchemaOutdated", "StoreError", "ensure_schema", "get_engine", "upgrade"]
