"""Which run a user means: a run is named by its id, a unique prefix of it, or a run
name or job (its latest run). Every errand that takes a run from the command line or the
API looks it up here, so a name means the same run everywhere.

    with engine.connection(url) as conn:
        run = runs.find_run(conn, "exp-42")   # RunRef; raises RunNotFound
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from . import models


class RunNotFound(LookupError):
    """No run, or more than one, answers to the name given."""


@dataclass(frozen=True)
class RunRef:
    run_id: str
    run_name: str
    job: str
    started_at: float
    jax_version: str
    backend: str = ""
    devices: tuple[str, ...] = ()


def ref_of(row: sa.Row) -> RunRef:
    """A row of :func:`select_runs` as a ``RunRef``."""
    return RunRef(
        row.run_id,
        row.run_name or "",
        row.job or "",
        float(row.started_at),
        row.jax_version or "",
        row.backend or "",
        tuple(row.devices or ()),
    )


def select_runs() -> sa.Select:
    r = models.runs
    return sa.select(r.c.run_id, r.c.run_name, r.c.job, r.c.started_at, r.c.jax_version, r.c.backend, r.c.devices)


def find_run(conn: sa.Connection, name: str) -> RunRef:
    """The run with this id, with this unique id prefix, else the latest run of this run name
    (else of this job)."""
    r = models.runs
    exact = conn.execute(select_runs().where(r.c.run_id == name)).first()
    if exact is not None:
        return ref_of(exact)
    if name and len(name) < 32 and all(c in "0123456789abcdef" for c in name):
        prefix = name.replace("%", "").replace("_", "")
        found = conn.execute(select_runs().where(r.c.run_id.like(prefix + "%")).limit(2)).all()
        if len(found) == 1:
            return ref_of(found[0])
        if len(found) > 1:
            raise RunNotFound(f"more than one run id starts with {name!r}; give more of it")
    for column in (r.c.run_name, r.c.job):
        named = conn.execute(
            select_runs().where(column == name).order_by(r.c.started_at.desc(), r.c.run_id.desc()).limit(1)
        ).first()
        if named is not None:
            return ref_of(named)
    raise RunNotFound(f"no run has the id, run name or job {name!r}")


def latest_run(conn: sa.Connection) -> RunRef | None:
    """The run that started last, or None in an empty store."""
    r = models.runs
    row = conn.execute(select_runs().order_by(r.c.started_at.desc(), r.c.run_id.desc()).limit(1)).first()
    return ref_of(row) if row is not None else None
