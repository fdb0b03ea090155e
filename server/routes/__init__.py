"""One router per resource; each route is a thin layer over a store query."""
