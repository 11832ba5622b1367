"""loghandler: ship Python logs and structlog events to a dataset of an observability service.

Importing this package is cheap: it starts no thread, opens no connection and imports neither
structlog nor the command line.
"""

from ._client import Client
from ._context import context
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
from ._lifecycle import flushing
from ._processor import IngestProcessor
from ._shipper import Shipper, Stats
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
