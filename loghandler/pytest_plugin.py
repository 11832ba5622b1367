"""pytest plugin (entry point ``pytest11``): the ``loghandler_service`` fixture.

Loaded by every pytest run in an environment where loghandler is installed, so it imports
nothing heavy until the fixture is used.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .testing import LocalService


@pytest.fixture
def loghandler_service() -> Iterator[LocalService]:
    """A started ``loghandler.testing.LocalService`` (token ``"t"``), stopped after the test.

    Point a handler at it with ``url=loghandler_service.url, token=loghandler_service.token``,
    or use ``loghandler_service.client()``.
    """
    from .testing import LocalService

    with LocalService() as service:
        yield service
