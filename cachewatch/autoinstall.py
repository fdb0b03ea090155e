"""``CACHEWATCH_INSTALL=1``: ``cachewatch.install()`` at interpreter start, for programs
that cannot be edited or wrapped in ``cachewatch run`` (a launcher starts them).

The wheel ships ``cachewatch-install.pth`` (its source: cachewatch/cachewatch-install.pth)
to the top of site-packages; Python runs its one line at start. The line reads the variable itself, so an interpreter without it set imports
nothing of cachewatch (nor JAX); with it set, this module is imported and :func:`run`
installs. Nothing here may stop the interpreter from starting: a failure is one line on
stderr.
"""

from __future__ import annotations

import sys


def run() -> None:
    try:
        import cachewatch

        from .record import current

        if current.config().install:
            cachewatch.install()
    except Exception as exc:  # nothing may stop the interpreter from starting: one line on stderr
        sys.stderr.write(f"cachewatch: CACHEWATCH_INSTALL is set, but recording did not start: {exc}\n")
