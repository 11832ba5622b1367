"""Builds the optional compiled hot path; everything else is in pyproject.toml.

``optional=True``: without a compiler (or Python's headers) the install still succeeds, and the
package runs its pure-Python path (loghandler/_compiled.py). ``_gzip`` also needs zlib's
headers (Debian: zlib1g-dev); without them only it is skipped.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("loghandler._speedups", ["loghandler/_speedups.c"], optional=True,
              extra_compile_args=["-O2"]),
    Extension("loghandler._gzip", ["loghandler/_gzip.c"], optional=True,
              extra_compile_args=["-O2"], libraries=["z"]),
])
