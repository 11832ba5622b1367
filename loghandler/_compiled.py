"""Where ``loghandler doctor`` reads the compiled path's decision: the decision itself, and
everything it hands out, is ``_engine/compiled.py``'s (read through, never copied)."""

from typing import Any

from ._engine import compiled as _decision


def __getattr__(name: str) -> Any:
    return getattr(_decision, name)
