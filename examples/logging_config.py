"""A service's logging configuration with loghandler, through dictConfig.

Console output for humans; every record at INFO and above shipped to a dataset, but for health
checks (a filter on the ingest handler), with the service and environment on every event
(``fields``). Run it as is to
try it against the package's local service, or set LOGHANDLER_URL / LOGHANDLER_TOKEN /
LOGHANDLER_DATASET to ship to the real service.
"""

from __future__ import annotations

import logging
import logging.config
import os
import sys


def report_error(exc: BaseException) -> None:
    """on_error hook: runs on loghandler's background thread; its own logs are never shipped."""
    print(f"[log shipping] {type(exc).__name__}: {exc}", file=sys.stderr)


class NoHealthChecks(logging.Filter):
    """Keeps load-balancer health checks out of the dataset (the console still shows them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.args and record.args[0] == "/health")


def configure(dataset: str, **ingest_options: object) -> None:
    logging.config.dictConfig({
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"no_health_checks": {"()": NoHealthChecks}},
        "formatters": {
            "console": {"format": "%(asctime)s %(levelname)-7s %(name)s: %(message)s"},
        },
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": "console",
                        "level": "INFO"},
            "ingest": {
                "class": "loghandler.IngestHandler",
                "level": "INFO",
                "dataset": dataset,
                "filters": ["no_health_checks"],
                # On every event; an event's own extra of the same name wins.
                "fields": {"service": "shop-api", "env": os.environ.get("APP_ENV", "dev")},
                # Token and address come from LOGHANDLER_TOKEN / LOGHANDLER_URL unless given.
                "flush_interval": 1.0,
                "shutdown_timeout": 3.0,
                "on_error": report_error,
                **ingest_options,
            },
        },
        "root": {"handlers": ["console", "ingest"], "level": "INFO"},
        # Chatty libraries: keep their debug noise out of both handlers.
        "loggers": {"urllib3": {"level": "WARNING"}},
    })


def serve_some_requests() -> None:
    log = logging.getLogger("shop.api")
    for n, (path, ms) in enumerate([("/cart", 12.5), ("/checkout", 250.0), ("/health", 0.8)]):
        log.info("GET %s", path, extra={"request_id": f"req-{n}", "latency_ms": ms,
                                        "status": 200})
    log.warning("slow checkout", extra={"request_id": "req-1", "latency_ms": 250.0})
    try:
        {}["sku"]
    except KeyError:
        log.exception("payment failed", extra={"request_id": "req-9", "order_id": "o-17"})


def main() -> int:
    if os.environ.get("LOGHANDLER_URL"):
        configure(os.environ.get("LOGHANDLER_DATASET", "shop"))
        serve_some_requests()
        return 0  # the exit hook delivers what is queued
    from loghandler.testing import LocalService

    with LocalService(token="example-token") as svc:
        configure("shop", url=svc.url, token=svc.token)
        serve_some_requests()
        handler = next(h for h in logging.getLogger().handlers if hasattr(h, "stats"))
        delivered = handler.flush(timeout=5)
        events = svc.events("shop")
        no_health = all(e.get("message") != "GET /health" for e in events)
        print(f"\ndelivered: {delivered}; the service stored {len(events)} events "
              f"(health checks filtered out: {no_health}; "
              f"service={events[0]['service'] if events else None}); "
              f"stats: {handler.stats().delivered} delivered, {handler.stats().dropped} dropped")
        logging.getLogger().removeHandler(handler)
        handler.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
