"""The service's HTTP status codes, by what they mean: written once, read by the wire client's
errors (``_client.raise_for_status``) and by the engine's delivery policy (``_engine/policy.py``).
"""

from __future__ import annotations

__all__ = ["AUTH", "INGEST_LIMIT", "LIMITS", "NOT_FOUND", "QUERY_LIMIT", "RATE_LIMIT",
           "REJECTED", "RETRYABLE", "THROTTLED", "TOO_LARGE", "is_redirect", "is_retryable",
           "is_success"]

AUTH = frozenset({401, 403})  # the token is refused, or not allowed to do this
NOT_FOUND = frozenset({404})  # no such dataset (or a wrong base address)
REJECTED = frozenset({400})  # the body (some event in it) cannot be taken
TOO_LARGE = frozenset({413})  # the body is too large
RATE_LIMIT = 429  # the service's request rate limit
# 430 is the ingest limit on an ingest request and the query limit on a query: the same code
# for two limits, told apart by the request (and by their reset headers).
INGEST_LIMIT = QUERY_LIMIT = 430
LIMITS = frozenset({RATE_LIMIT, INGEST_LIMIT})
THROTTLED = 503  # with Retry-After: the service asks everyone to wait
RETRYABLE = frozenset({408})  # besides every 5xx and the limits

# The epoch-seconds reset header of each limit.
RESET_HEADERS = {
    "rate": "X-RateLimit-Reset",
    "ingest": "X-IngestLimit-Reset",
    "query": "X-QueryLimit-Reset",
}


def is_success(status: int) -> bool:
    return 200 <= status < 300


def is_redirect(status: int) -> bool:
    """A redirect is never followed: it means a wrong base address (http vs https, a path)."""
    return 300 <= status < 400


def is_retryable(status: int) -> bool:
    """Worth another try of the same request (after a wait)."""
    return status in RETRYABLE or status in LIMITS or status >= 500
