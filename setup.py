"""Builds the optional compiled hot path; everything else is in pyproject.toml.

``optional=True``: without a compiler (or Python's headers) the install still succeeds, and the
package runs its pure-Python path (loghandler/_compiled.py). ``_gzip`` also needs zlib's
headers (Debian: zlib1g-dev); without them only it is skipped. On an interpreter the compiled
part is not made for (a free-threaded build: loghandler/_build.py says which), neither is built.
"""

import importlib.util
import sys
from pathlib import Path

from setuptools import Extension, setup


def why_pure():
    # By path: importing the package would import its dependencies, not installed yet here.
    path = Path(__file__).resolve().parent / "loghandler" / "_build.py"
    spec = importlib.util.spec_from_file_location("_loghandler_build", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.why_pure()


def extensions():
    reason = why_pure()
    if reason is not None:
        print(f"loghandler: the C extensions are not built: {reason}", file=sys.stderr)
        return []
    return [
        Extension("loghandler._speedups", ["loghandler/_speedups.c"], optional=True,
                  extra_compile_args=["-O2"]),
        Extension("loghandler._gzip", ["loghandler/_gzip.c"], optional=True,
                  extra_compile_args=["-O2"], libraries=["z"]),
    ]


setup(ext_modules=extensions())
