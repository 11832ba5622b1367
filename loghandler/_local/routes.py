"""The local service's routing: each request's token, organisation header and rate limit
checked, then its path matched against ``ROUTES`` and handed to its endpoint (``ep_*``);
errors answered as the real service answers them, ``{"code": <status>, "message": "..."}``.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from typing import Any
from urllib.parse import SplitResult, parse_qs, unquote, urlsplit

from . import ep_alerts, ep_data, ep_datasets, ep_org, ep_page, ep_saved
from .ingest import HttpError
from .request import Raw, Request
from .state import RequestRecord

__all__ = ["PAT_PREFIX", "ROUTES", "Handler"]

# A personal access token (the service's own prefix): it needs the organization's id header.
PAT_PREFIX = "xapt-"

# An endpoint: (the request, its method, the path's match, the URL's parts) -> (status, answer).
Endpoint = Callable[[Request, str, "re.Match[str]", SplitResult], tuple[int, Any]]


def _query(req: Request, method: str, m: re.Match[str], parts: SplitResult) -> tuple[int, Any]:
    req.allow(method, "POST")
    return 200, ep_data.query(req)


def _ingest(req: Request, method: str, m: re.Match[str], parts: SplitResult) -> tuple[int, Any]:
    dataset = unquote(m.group(1) or m.group(2))
    req.record_dataset = dataset
    req.allow(method, "POST")
    req.may("ingest", method, dataset)
    answer = ep_data.ingest(req, dataset, parse_qs(parts.query))
    req.record_events, req.record_failed = answer["ingested"], answer["failed"]
    return 200, answer


def _otlp(req: Request, method: str, m: re.Match[str], parts: SplitResult) -> tuple[int, Any]:
    req.allow(method, "POST")
    dataset = req.record_dataset = req.service_header("Dataset")
    counts, answer = ep_data.otlp_ingest(req, m.group(1), dataset)
    req.record_events, req.record_failed = counts["ingested"], counts["failed"]
    return 200, answer


def _legacy(req: Request, method: str, m: re.Match[str], parts: SplitResult) -> tuple[int, Any]:
    req.allow(method, "POST")
    req.record_dataset = unquote(m.group(1))
    return 200, ep_data.legacy_query(req, req.record_dataset)


def _datasets(req: Request, method: str, m: re.Match[str], parts: SplitResult
              ) -> tuple[int, Any]:
    if m.group(3) and m.group(2):
        # Trimming deletes a dataset's events: the dataset's own trim capability (update), as
        # the reference names it, not the organisation's datasets.
        req.may("trim", "PUT", unquote(m.group(2)))
    else:
        req.may("datasets", method)
    return ep_datasets.datasets(req, method, m.group(2), m.group(3), m.group(1))


def _fields(req: Request, method: str, m: re.Match[str], parts: SplitResult) -> tuple[int, Any]:
    req.may("datasets", method)
    return ep_datasets.fields(req, method, m.group(1), m.group(2))


def _map_fields(req: Request, method: str, m: re.Match[str], parts: SplitResult
                ) -> tuple[int, Any]:
    req.may("datasets", method)
    return ep_datasets.map_fields(req, method, m.group(1), m.group(2))


def _monitors(req: Request, method: str, m: re.Match[str], parts: SplitResult
              ) -> tuple[int, Any]:
    req.may("monitors", method)
    return ep_alerts.monitors(req, method, m.group(1), m.group(2), parts.query)


def _notifiers(req: Request, method: str, m: re.Match[str], parts: SplitResult
               ) -> tuple[int, Any]:
    req.may("notifiers", method)
    return ep_alerts.notifiers(req, method, m.group(1))


def _starred(req: Request, method: str, m: re.Match[str], parts: SplitResult
             ) -> tuple[int, Any]:
    # Capabilities per dataset (starredQueries), checked by the endpoint.
    return ep_saved.starred_queries(req, method, m.group(1), parts.query)


def _dashboards(req: Request, method: str, m: re.Match[str], parts: SplitResult
                ) -> tuple[int, Any]:
    req.may("dashboards", method)
    return ep_saved.dashboards(req, method, m.group(1), parts.query)


def _user(req: Request, method: str, m: re.Match[str], parts: SplitResult) -> tuple[int, Any]:
    return ep_org.user(req, method, m.group(1))  # any token may read who it belongs to


def _users(req: Request, method: str, m: re.Match[str], parts: SplitResult) -> tuple[int, Any]:
    req.may("users", method)
    return ep_org.users(req, method, m.group(1))


def _orgs(req: Request, method: str, m: re.Match[str], parts: SplitResult) -> tuple[int, Any]:
    return ep_org.orgs(req, method, m.group(1))  # what a token-check reads: any token


def _search(req: Request, method: str, m: re.Match[str], parts: SplitResult) -> tuple[int, Any]:
    req.allow(method, "POST")
    return 200, ep_page.search(req)


def _facets(req: Request, method: str, m: re.Match[str], parts: SplitResult) -> tuple[int, Any]:
    req.allow(method, "POST")
    return 200, ep_page.search_facets(req)


def _page_datasets(req: Request, method: str, m: re.Match[str], parts: SplitResult
                   ) -> tuple[int, Any]:
    req.allow(method, "GET")
    return 200, ep_page.datasets(req)


def _tokens(req: Request, method: str, m: re.Match[str], parts: SplitResult) -> tuple[int, Any]:
    # Regenerating a token's secret is an update of that token (regenerateAPIToken:
    # apiTokens|update), not a create.
    req.may("apiTokens", "PUT" if m.group(2) else method)
    return ep_org.tokens(req, method, m.group(1), m.group(2))


def _annotations(req: Request, method: str, m: re.Match[str], parts: SplitResult
                 ) -> tuple[int, Any]:
    req.may("annotations", method)
    return ep_org.annotations_api(req, method, m.group(1), parts.query)


def _views(req: Request, method: str, m: re.Match[str], parts: SplitResult) -> tuple[int, Any]:
    req.may("views", method)
    if m.group(1) is None:
        return ep_org.views(req, method)
    req.allow(method, "GET", "PUT", "DELETE")
    return ep_org.view(req, method, unquote(m.group(1)))


# First match wins. The query's path is also a dataset's, so it comes before the datasets API.
ROUTES: list[tuple[re.Pattern[str], Endpoint]] = [
    # the query, and the edge endpoint the official SDK uses when configured for one
    (re.compile(r"^/v1/(?:datasets/_apl|query/_apl)$"), _query),
    # ingest, and its edge endpoint
    (re.compile(r"^/v1/(?:datasets/([^/]+)/ingest|ingest/([^/]+))$"), _ingest),
    # the legacy query
    (re.compile(r"^/v1/datasets/([^/]+)/query$"), _legacy),
    # /v1/datasets (and /v2/datasets), /v1/datasets/{name}, /v1/datasets/{name}/trim
    (re.compile(r"^/(v[12])/datasets(?:/([^/]+))?(/trim)?$"), _datasets),
    (re.compile(r"^/v2/datasets/([^/]+)/fields(?:/([^/]+))?$"), _fields),
    (re.compile(r"^/v2/datasets/([^/]+)/mapfields(?:/([^/]+))?$"), _map_fields),
    (re.compile(r"^/v1/(logs|traces)$"), _otlp),  # OTLP/HTTP (otlp.py)
    (re.compile(r"^/local/search$"), _search),  # the page's search box, as APL (search.py)
    (re.compile(r"^/local/facets$"), _facets),  # the page's facets of a search (search.py)
    (re.compile(r"^/local/datasets$"), _page_datasets),  # the page's datasets, with counts
    (re.compile(r"^/v2/tokens(?:/([^/]+)(/regenerate)?)?$"), _tokens),
    (re.compile(r"^/v2/annotations(?:/([^/]+))?$"), _annotations),
    (re.compile(r"^/v2/views(?:/([^/]+))?$"), _views),
    (re.compile(r"^/v2/monitors(?:/([^/]+)(/history)?)?$"), _monitors),
    (re.compile(r"^/v2/notifiers(?:/([^/]+))?$"), _notifiers),
    (re.compile(r"^/v2/apl-starred-queries(?:/([^/]+))?$"), _starred),
    (re.compile(r"^/v2/dashboards(?:/uid/([^/]+))?$"), _dashboards),
    (re.compile(r"^/(v[12])/user$"), _user),
    (re.compile(r"^/v2/users(?:/([^/]+))?$"), _users),
    (re.compile(r"^/v2/orgs(?:/([^/]+))?$"), _orgs),
]


class Handler(Request):
    """The local service's request handler: checks, routing, the answer and its record."""

    def handle_request(self, method: str) -> None:
        parts = urlsplit(self.path)
        path = parts.path
        error: str | None = None
        answer: Any
        self.limit_headers = {}
        self._body = None
        self._body_kind = None
        self.token = None
        self.record_dataset, self.record_events, self.record_failed = None, 0, 0
        try:
            self._body_kind = self._framing()
            if method == "GET" and path in ep_page.STATIC:
                self.discard()
                self.send_static(*ep_page.STATIC[path])
                return
            self._authenticate()
            self._rate_limit()
            for pattern, endpoint in ROUTES:
                m = pattern.match(path)
                if m is not None:
                    status, answer = endpoint(self, method, m, parts)
                    break
            else:
                self.discard()
                raise HttpError(404, f"no such endpoint: {method} {path}")
        except HttpError as exc:
            status, error = exc.status, exc.message
            answer = {"code": exc.status, "message": exc.message,
                      **getattr(exc, "extra", {})}  # a time-out says how long it ran
        except Exception as exc:  # a bug, or the store closing under us: answer, never hang up
            self.close_connection = True
            if not isinstance(exc, sqlite3.ProgrammingError):
                import traceback

                traceback.print_exc()
            status, error = 500, f"internal error: {type(exc).__name__}: {exc}"
            answer = {"code": 500, "message": error}
        # Recorded before answering: when a client has its answer, the record is there.
        on_request = self.state.on_request
        if on_request is not None:
            try:
                on_request(RequestRecord(method, path, status, self.record_dataset,
                                         self.record_events, error, self.record_failed))
            except Exception:
                pass
        if isinstance(answer, Raw):
            self.send_raw(status, answer)
        else:
            self.send_json(status, answer)

    def _authenticate(self) -> None:
        auth = self.headers.get("Authorization")
        self.token = self.state.access.find(auth)
        if self.token is None:
            self.discard()
            raise HttpError(403, "authentication failed: send Authorization: Bearer <token> "
                                 "with a token this service accepts")
        if auth is not None and auth[7:].strip().startswith(PAT_PREFIX) and (
                not self.service_header("Org-Id")):
            self.discard()
            raise HttpError(403, "a personal access token (xapt-...) needs the "
                                 "organization's id in the X-Axiom-Org-Id (or "
                                 "x-service-org-id) header: loghandler sends it from "
                                 "LOGHANDLER_ORG_ID, the official clients from their orgId "
                                 "option (AXIOM_ORG_ID); or use an API token (xaat-...)")

    def _rate_limit(self) -> None:
        limiter = self.state.rate_limiter
        if limiter is None:
            return
        allowed, remaining, reset = limiter.take()
        self.limit_headers = {"X-RateLimit-Scope": "user",
                              "X-RateLimit-Limit": str(limiter.limit),
                              "X-RateLimit-Remaining": str(remaining),
                              "X-RateLimit-Reset": str(reset)}
        if not allowed:
            self.discard()
            raise HttpError(429, f"rate limit exceeded: this service takes {limiter.limit} "
                                 "requests per minute; wait until X-RateLimit-Reset")
