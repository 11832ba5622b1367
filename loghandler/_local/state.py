"""What the local service's request handlers share: the store, the tokens, the limits and the
settings (one ``ServiceState`` per server, read by every request), and the record of a request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .access import Access, Annotations
from .limits import FieldLimit, IngestLimit, RateLimiter
from .store import Store

__all__ = ["RequestRecord", "ServiceState"]


@dataclass(frozen=True)
class RequestRecord:
    """One request the service answered (for assertions and the ``serve`` log)."""

    method: str
    path: str
    status: int
    dataset: str | None = None
    events: int = 0
    error: str | None = None
    failed: int = 0  # events of an ingest the service turned down (in its 200 answer)


@dataclass
class ServiceState:
    """The server's state and settings; the handlers read them per request."""

    store: Store
    access: Access
    max_body_bytes: int
    field_limit: FieldLimit
    on_request: Callable[[RequestRecord], None] | None = None
    # True: an ingest into a dataset nobody created creates it; False: 404, as the real
    # service answers.
    create_datasets: bool = False
    rate_limiter: RateLimiter | None = None
    ingest_limit: IngestLimit | None = None
    annotations: Annotations = field(default_factory=Annotations)
    edge_deployments: dict[str, str] = field(default_factory=dict)  # dataset -> as created
