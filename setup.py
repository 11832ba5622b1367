"""Builds the optional compiled hot path; everything else is in pyproject.toml.

``optional=True``: without a compiler (or Python's headers) the install still succeeds, and the
package runs its pure-Python path (loghandler/_compiled.py).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("loghandler._speedups", ["loghandler/_speedups.c"],
                             optional=True, extra_compile_args=["-O2"])])
