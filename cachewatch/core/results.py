"""What every result type shares: its fields, for the JSON the service and ``--format json`` return."""

from __future__ import annotations

import dataclasses
from typing import Any


def fields_of(found: Any) -> dict[str, Any]:
    """A dataclass's fields, one level deep: what ``dataclasses.asdict`` gives for fields
    of plain values, without its deep copy (a diagnosis holds thousands of these)."""
    return {field.name: getattr(found, field.name) for field in dataclasses.fields(found)}
