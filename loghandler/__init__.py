"""loghandler: ship Python logs and structlog events to a dataset of an observability service.

Importing this package is cheap: it starts no thread, opens no connection and imports neither
structlog nor the command line.
"""

from ._client import Client
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
from ._handler import IngestHandler
from ._processor import IngestProcessor
from ._version import __version__
from ._views import View

__all__ = [
    "ApiError",
    "AuthenticationError",
    "Client",
    "ConfigurationError",
    "Error",
    "IngestHandler",
    "IngestProcessor",
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
