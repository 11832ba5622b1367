"""Level names as numbers on logging's scale: the one table, a leaf (it imports only
``logging``), read by the options' checks (``_config.py``) and the engine (``_engine/hold.py``).
"""

from __future__ import annotations

import logging
import sys

__all__ = ["known_level", "level_names"]

# Level names beyond the stdlib's: structlog's method names, loguru's.
_OTHER_LEVELS = {"warn": 30, "exception": 40, "fatal": 50, "msg": 20, "trace": 5,
                 "success": 25}


def known_level(name: str) -> int | None:
    """A level name's number (any case; the stdlib's, those registered with
    ``logging.addLevelName``, structlog's and loguru's), or None."""
    # getLevelName answers a registered name with its number, anything else with a text.
    n = logging.getLevelName(name.upper())
    return n if type(n) is int else _OTHER_LEVELS.get(name.lower())


def level_names() -> dict[str, int]:
    """The stdlib's level names (upper case) and their numbers: on 3.11+ with those registered
    with ``logging.addLevelName``; 3.10 has no public table of them, only its own names."""
    if sys.version_info >= (3, 11):
        return logging.getLevelNamesMapping()
    return {name: logging.getLevelName(name) for name in (
        "CRITICAL", "FATAL", "ERROR", "WARN", "WARNING", "INFO", "DEBUG", "NOTSET")}
