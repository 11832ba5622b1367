"""Whether this interpreter gets the compiled parts (``_speedups.c``, ``_gzip.c``): one rule,
read by setup.py at build time (loaded by path: nothing else of the package is imported there)
and by ``_compiled`` at import (whose ``WHY_PYTHON`` ``loghandler doctor`` prints).

Only the standard library here: setup.py runs before the package's dependencies are installed.
"""

from __future__ import annotations

import sysconfig
from collections.abc import Callable

__all__ = ["why_pure"]


def why_pure(config_var: Callable[[str], object] | None = None) -> str | None:
    """None when the C extensions are built for this interpreter; otherwise why not, in a user's
    words. ``config_var``: ``sysconfig.get_config_var`` unless given (a test passes its own)."""
    if (config_var or sysconfig.get_config_var)("Py_GIL_DISABLED"):
        # The C code relies on the GIL to guard the queue's slots it writes; on a free-threaded
        # build it would re-enable the GIL (or worse), so the Python code runs until the C code
        # is proven safe without it.
        return ("this Python is a free-threaded build, and the compiled part is proven safe "
                "only with the GIL")
    return None
