"""A small service-like structlog pipeline that ships every event to a dataset.

    LOGHANDLER_URL=https://... LOGHANDLER_TOKEN=... python examples/structlog_app.py

With no ``LOGHANDLER_URL`` it starts ``loghandler.testing.LocalService`` on loopback, ships to it
and prints what arrived. ``LOGHANDLER_DATASET`` names the dataset (default ``structlog-example``).

What it shows: a request id bound with ``bind_contextvars`` and merged into every event,
``log.bind()``, an async handler using ``await log.ainfo()``, and an exception logged with
``log.exception()`` arriving as a structured ``exception`` object.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import uuid
from contextlib import ExitStack

import structlog

from loghandler import IngestProcessor

DEFAULT_DATASET = "structlog-example"


def configure(processor: IngestProcessor) -> None:
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            # Before format_exc_info: the processor turns exc_info into a structured
            # {type, message, stacktrace} object; the console still gets the usual text.
            processor,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


class OrderError(Exception):
    pass


def handle_request(path: str, user: str) -> int:
    """One request: every event it logs carries request_id and path (contextvars) and user."""
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(request_id=str(uuid.uuid4()), path=path)
    log = structlog.get_logger("shop").bind(user=user)
    log.info("request.start")
    try:
        if path == "/orders/42":
            raise OrderError("order 42 is locked")
        log.info("request.done", status=200, items=3)
        return 200
    except OrderError:
        log.exception("request.failed", status=500)
        return 500


async def handle_request_async(path: str) -> None:
    structlog.contextvars.bind_contextvars(request_id=str(uuid.uuid4()), path=path)
    log = structlog.get_logger("shop.async")
    await log.ainfo("async.request.done", status=200)


def run(processor: IngestProcessor) -> bool:
    configure(processor)
    handle_request("/orders", "alice")
    handle_request("/orders/42", "bob")
    asyncio.run(handle_request_async("/health"))
    # A short-lived script waits for delivery; a long-running service would not need to
    # (the exit hook flushes within shutdown_timeout).
    return processor.flush(timeout=10)


def main() -> int:
    dataset = os.environ.get("LOGHANDLER_DATASET") or DEFAULT_DATASET
    with ExitStack() as stack:
        if os.environ.get("LOGHANDLER_URL"):
            processor = IngestProcessor(dataset)
            service = None
        else:
            from loghandler.testing import LocalService

            service = stack.enter_context(LocalService(token="example-token"))
            processor = IngestProcessor(dataset, url=service.url, token=service.token)
        stack.callback(processor.close)
        ok = run(processor)
        stats = processor.stats()
        print(f"delivered={stats.delivered} dropped={stats.dropped} failed={stats.failed}",
              file=sys.stderr)
        if service is not None:
            for event in service.events(dataset):
                print(json.dumps(event, sort_keys=True))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
