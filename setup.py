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


def why_pure(config_var=None):
    # By path: importing the package would import its dependencies, not installed yet here.
    path = Path(__file__).resolve().parent / "loghandler" / "_build.py"
    spec = importlib.util.spec_from_file_location("_loghandler_build", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.why_pure(config_var)


def extensions(config_var=None):
    """The extensions to build; none where loghandler/_build.py says the interpreter gets the
    pure path. ``config_var``: sysconfig.get_config_var unless given (tests/test_infra.py)."""
    reason = why_pure(config_var)
    if reason is not None:
        print(f"loghandler: the C extensions are not built: {reason}", file=sys.stderr)
        return []
    return [
        Extension("loghandler._speedups", ["loghandler/_speedups.c"], optional=True,
                  extra_compile_args=["-O2"]),
        Extension("loghandler._gzip", ["loghandler/_gzip.c"], optional=True,
                  extra_compile_args=["-O2"], libraries=["z"]),
    ]


# setuptools runs this file as __main__; tests/test_infra.py imports it to call extensions().
if __name__ == "__main__":
    setup(ext_modules=extensions())
