"""The one thing pyproject.toml cannot yet say without a warning: the optional C extension.

The cache-hit path of cachewatch.jit in C (cachewatch/_fastcall.c). Optional: without a
compiler the install goes on and cachewatch uses its pure-Python twin.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("cachewatch._fastcall", sources=["cachewatch/_fastcall.c"], optional=True)])
