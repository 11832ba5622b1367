"""loghandler's pytest plugin (entry point ``pytest11``): the ``loghandler_service`` and
``loghandler_capture`` fixtures.

pytest loads every installed ``pytest11`` plugin into every run of every project, so this
module lives outside the ``loghandler`` package: importing ``loghandler.anything`` first runs
the package's ``__init__``, which loads the library (tens of milliseconds). Here nothing is
imported until a test asks for the fixture; a run that never does pays for this one file only.
(Hypothesis ships its plugin the same way, as ``_hypothesis_pytestplugin``.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

    from loghandler.testing import Capture, LocalService

__all__ = ["loghandler_capture", "loghandler_service"]


@pytest.fixture
def loghandler_service() -> Iterator[LocalService]:
    """A started ``loghandler.testing.LocalService`` (token ``"t"``), stopped after the test.

    Point a handler at it with ``url=loghandler_service.url, token=loghandler_service.token``,
    or use ``loghandler_service.client()``.
    """
    from loghandler.testing import LocalService

    with LocalService() as service:
        yield service


@pytest.fixture
def loghandler_capture() -> Iterator[Capture]:
    """An active ``loghandler.testing.capture()``: every loghandler front end of the process
    (those the application's logging configuration built before the test, and those built
    during it) ships into memory; ``loghandler_capture.events()`` flushes and returns what
    they shipped. Each goes back to its own sending after the test.
    """
    from loghandler.testing import capture

    with capture() as shipped:
        yield shipped
