"""What a compile record's readings give its event: each group of fields (the host's memory,
the persistent cache) whole when it was read, left to the event's default (None) when not."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from cachewatch.capture import cachestate
from cachewatch.core.events import HOST_MEMORY_FIELDS, PERSISTENT_CACHE_FIELDS, CompileEvent


def _record(compiles: int = 1, memory: bool = True, cache: bool = True) -> SimpleNamespace:
    values: dict[str, str | None] = {name: f"{name}-value" for name in (*HOST_MEMORY_FIELDS, *PERSISTENT_CACHE_FIELDS)}
    if not memory:
        values["host_bytes_before"] = None
    if not cache:
        values["persistent_cache"] = None
    return SimpleNamespace(compiles=compiles, **values)


def test_the_readings_are_event_fields_that_default_to_none():
    defaults = {f.name: f.default for f in dataclasses.fields(CompileEvent)}
    for name in (*HOST_MEMORY_FIELDS, *PERSISTENT_CACHE_FIELDS):
        assert name in defaults
        assert defaults[name] is None


def test_a_record_gives_the_groups_it_read_whole():
    assert cachestate.readings(_record()) == {
        name: f"{name}-value" for name in (*HOST_MEMORY_FIELDS, *PERSISTENT_CACHE_FIELDS)
    }
    assert cachestate.readings(_record(memory=False)) == {name: f"{name}-value" for name in PERSISTENT_CACHE_FIELDS}
    assert cachestate.readings(_record(cache=False)) == {name: f"{name}-value" for name in HOST_MEMORY_FIELDS}


def test_a_record_that_did_not_compile_gives_nothing():
    assert cachestate.readings(_record(compiles=0)) == {}
    assert cachestate.readings(_record(memory=False, cache=False)) == {}
