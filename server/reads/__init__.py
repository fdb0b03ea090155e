"""The service's own reads of the store: the paged listings of the API and the dashboard,
and the dashboard's charts. The reports the command line shares live in
cachewatch.store.queries."""
