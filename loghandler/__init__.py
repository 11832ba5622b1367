"""loghandler: ship Python logs and structlog events to a dataset of an observability service.

Importing this package is cheap: it starts no thread, opens no connection and imports neither
structlog nor the command line.
"""

from ._context import context
from ._version import __version__
from .client import Client
from .errors import (
    ApiError,
    AuthenticationError,
    ConfigurationError,
    Error,
    NotFoundError,
    PartialIngestError,
    RateLimitError,
    TransportError,
)
from .handler import IngestHandler
from .lifecycle import flushing
from .processor import IngestProcessor
from .shipper import Shipper, Stats
from .views import View

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
