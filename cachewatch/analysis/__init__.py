"""Reasoning over what the store holds: storms and their fixes, whether a jit pays for
itself, the fleet's ranks. Imports ``core``, ``explain`` and ``store``; never capture or
the recorder, so the CLI and the service read a store without a traced program."""
