"""The cachewatch service (FastAPI): ingest, query API and /metrics over a cachewatch store.

from cachewatch_server.main import create_app
app = create_app()            # settings from CACHEWATCH_* variables
"""
