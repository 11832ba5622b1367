"""Level names as numbers on logging's scale: the one table, a leaf (it imports only
``logging``), read by the options' checks (``_config.py``) and the engine (``_engine/hold.py``).
"""

from __future__ import annotations

import logging

__all__ = ["known_level"]

# Level names beyond the stdlib's: structlog's method names, loguru's.
_OTHER_LEVELS = {"warn": 30, "exception": 40, "fatal": 50, "msg": 20, "trace": 5,
                 "success": 25}


def known_level(name: str) -> int | None:
    """A level name's number (any case; the stdlib's, those registered with
    ``logging.addLevelName``, structlog's and loguru's), or None."""
    n = logging._nameToLevel.get(name.upper())
    return n if n is not None else _OTHER_LEVELS.get(name.lower())
