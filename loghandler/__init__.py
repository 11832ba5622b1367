"""loghandler: ship Python logs and structlog events to a dataset of an observability service.

Importing this package is cheap: it starts no thread, opens no connection and imports neither
structlog nor the command line.
"""

from typing import TYPE_CHECKING

from ._engine.context import context
from ._engine.lifecycle import flushing
from ._engine.shipper import Shipper, Stats
from ._errors import (
    ApiError,
    AuthenticationError,
    ConfigurationError,
    Error,
    NotFoundError,
    PartialIngestError,
    RateLimitError,
    TransportError,
)
from ._front.handler import IngestHandler
from ._front.processor import IngestProcessor
from ._front.sink import IngestSink
from ._version import __version__
from ._wire.client import Client
from ._wire.views import View

if TYPE_CHECKING:
    from ._wire.async_client import AsyncClient

__all__ = [
    "ApiError",
    "AsyncClient",
    "AuthenticationError",
    "Client",
    "ConfigurationError",
    "Error",
    "IngestHandler",
    "IngestProcessor",
    "IngestSink",
    "NotFoundError",
    "PartialIngestError",
    "RateLimitError",
    "Shipper",
    "Stats",
    "TransportError",
    "View",
    "__version__",
    "context",
    "flushing",
]


def __getattr__(name: str) -> object:
    # AsyncClient on first use: asyncio and its thread pool cost an import most applications
    # of this package never need.
    if name == "AsyncClient":
        from ._wire.async_client import AsyncClient

        globals()["AsyncClient"] = AsyncClient
        return AsyncClient
    raise AttributeError(f"module 'loghandler' has no attribute {name!r}")
