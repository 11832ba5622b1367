"""Builds the optional compiled hot path, and the package index's description; everything else
is in pyproject.toml.

``optional=True``: without a compiler (or Python's headers) the install still succeeds, and the
package runs its pure-Python path (loghandler/_compiled.py). ``_gzip`` also needs zlib's
headers (Debian: zlib1g-dev); without them only it is skipped. On an interpreter the compiled
part is not made for (a free-threaded build: loghandler/_build.py says which), neither is built.
"""

import importlib.util
import re
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


def long_description(root=None):
    """README.md with its relative links made absolute: README links the docs by their paths in
    the repository (so they open on the code host and in a checkout), and on the package index
    a relative link leads nowhere. The repository is pyproject.toml's ``Source`` address;
    images link its raw files."""
    root = Path(__file__).resolve().parent if root is None else Path(root)
    text = (root / "README.md").read_text(encoding="utf-8")
    source = re.search(r'^Source = "(https://github\.com/[^"]+?)/?"',
                       (root / "pyproject.toml").read_text(encoding="utf-8"), re.M).group(1)
    raw = source.replace("https://github.com/", "https://raw.githubusercontent.com/") + "/main/"

    def absolute(match):
        label, target = match.group(1), match.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            return match.group(0)
        base = raw if label.startswith("!") else source + "/blob/main/"
        return f"{label}({base}{target})"

    return re.sub(r"(!?\[[^\]]*\])\(([^)\s]+)\)", absolute, text)


# setuptools runs this file as __main__; tests/test_infra.py imports it to call extensions().
if __name__ == "__main__":
    setup(ext_modules=extensions(), long_description=long_description(),
          long_description_content_type="text/markdown")
