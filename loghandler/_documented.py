"""``documented``: the class decorator that adds argument sections to a public class's
docstring (where ``help()`` shows them). A leaf: the wire, the front ends and the options'
texts use it, and it imports nothing of the package."""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable
from typing import TypeVar

__all__ = ["documented"]

_T = TypeVar("_T")


def documented(*sections: tuple[str, str]) -> Callable[[_T], _T]:
    """Class decorator: add ``(heading, body)`` sections to the class's docstring."""

    def decorate(cls: _T) -> _T:
        doc = inspect.cleandoc(cls.__doc__ or "")
        # Before the docstring's "Raises:", where a reader looks for arguments.
        head, raises, tail = doc.partition("\n\nRaises:")
        for heading, body in sections:
            entries = textwrap.indent(textwrap.dedent(body).rstrip(), "    ")
            head += f"\n\n{heading}\n{entries}"
        cls.__doc__ = head + raises + tail
        return cls

    return decorate
