"""The cachewatch store: SQL schema, engines, sinks and the queries the CLI and server share."""

from .engine import SchemaOutdated, StoreError, ensure_schema, get_engine, upgrade

__all__ = ["SchemaOutdated", "StoreError", "ensure_schema", "get_engine", "upgrade"]
