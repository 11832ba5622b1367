"""loghandler in one minute, with no account: everything runs against the local service.

    python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/python examples/quickstart.py

What it does:
 1. starts the local service (the same one `loghandler serve` runs) on a free loopback port;
 2. configures stdlib logging with dictConfig and loghandler.IngestHandler;
 3. logs an info line, a warning with extra fields and an exception;
 4. does the same through structlog with loghandler.IngestProcessor, if structlog is installed;
 5. flushes, and prints what the service received;
 6. lists the saved views and updates one with client.views.update();
 7. counts the events by level with an APL query (client.query);
 8. ends with the command to look at them in a browser and to follow them with `loghandler tail`
    (the data is kept in a SQLite file, so `loghandler serve --db FILE` shows the same events).
"""

from __future__ import annotations

import logging
import logging.config
import os
import shutil
import sys
import tempfile

import loghandler
from loghandler.testing import LocalService

DATASET = "quickstart"
TOKEN = "quickstart"  # a throw-away token for a local service: fine to print


def show_events(events: list[dict]) -> None:
    for event in events:
        level = str(event.get("level", "?")).upper()
        text = event.get("message", event.get("event", ""))
        source = event.get("logger") or "structlog"
        print(f"  {event.get('_time', '')}  {level:<8} {source}: {text}")
        shown = {"_time", "level", "message", "event", "logger", "module", "function", "line",
                 "file", "process", "thread", "exception", "timestamp"}
        fields = {k: v for k, v in event.items() if k not in shown}
        if fields:
            print("      fields: " + ", ".join(f"{k}={v!r}" for k, v in fields.items()))
        if "function" in event:
            print(f"      from {event['function']}() line {event.get('line', '?')}")
        if "exception" in event:
            exc = event["exception"]
            print(f"      exception: {exc['type']}: {exc['message']} "
                  f"(+ a {len(exc['stacktrace'].splitlines())}-line stack trace)")


def _command() -> str:
    """How to run the command line from here: ``loghandler`` when it is on PATH, else the one
    installed beside this Python (a virtual environment that is not activated)."""
    if shutil.which("loghandler"):
        return "loghandler"
    beside = os.path.join(os.path.dirname(sys.executable), "loghandler")
    if os.path.exists(beside):
        rel = os.path.relpath(beside)
        return rel if not rel.startswith("..") else beside
    return f"{sys.executable} -m loghandler"


def main() -> None:
    seed = loghandler.View(name="Checkout errors", datasets=[DATASET],
                           apl_query=f"['{DATASET}'] | where level == 'error'")
    # Kept after the run, so that `loghandler serve --db` can show these events afterwards.
    db = os.path.join(tempfile.mkdtemp(prefix="loghandler-quickstart-"), "events.sqlite")
    with LocalService(token=TOKEN, views=[seed], db=db) as service:
        print(f"1. Local service started at {service.url}\n")

        # The same dictConfig you would use in production: there, url and token come from
        # LOGHANDLER_URL and LOGHANDLER_TOKEN instead of being written here.
        logging.config.dictConfig({
            "version": 1,
            "disable_existing_loggers": False,
            "handlers": {
                "service": {
                    "class": "loghandler.IngestHandler",
                    "dataset": DATASET,
                    "url": service.url,
                    "token": service.token,
                },
            },
            "root": {"level": "INFO", "handlers": ["service"]},
        })
        log = logging.getLogger("shop.checkout")
        log.info("order %s received", "A-1042")
        log.warning("payment slow", extra={"order_id": "A-1042", "provider": "acme-pay",
                                           "duration_ms": 2350})
        try:
            {"A-1042": 3}["A-1043"]
        except KeyError:
            log.exception("order lookup failed")
        print("2. Logged 3 records through logging (info, warning with extras, exception)")

        try:
            import structlog
        except ImportError:
            structlog = None
            print("3. structlog is not installed: skipped the structlog pipeline "
                  "(pip install 'loghandler-ingest[structlog]' to try it)")
        processor = None
        if structlog is not None:
            processor = loghandler.IngestProcessor(DATASET, url=service.url,
                                                   token=service.token)
            structlog.configure(processors=[
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                processor,
                structlog.processors.JSONRenderer(),
            ], logger_factory=structlog.ReturnLoggerFactory())
            structlog.get_logger().info("user signed in", user_id=7, plan="pro")
            print("3. Logged 1 event through structlog with IngestProcessor")

        handler = next(h for h in logging.getLogger().handlers
                       if isinstance(h, loghandler.IngestHandler))
        delivered = handler.flush(timeout=5.0)
        if processor is not None:
            delivered = processor.flush(timeout=5.0) and delivered
        stats = handler.stats()
        print(f"\n4. Flushed: delivered={delivered}; handler stats: {stats.delivered} delivered "
              f"in {stats.batches} request(s), {stats.dropped} dropped, {stats.failed} failed")

        events = service.events(DATASET)
        print(f"\n5. The service received {len(events)} events in dataset {DATASET!r}:")
        show_events(events)

        with service.client() as client:
            views = client.views.list()
            print(f"\n6. Views ({len(views)}):")
            for view in views:
                print(f"  id={view.id}  {view.name!r}  datasets={view.datasets}  "
                      f"query={view.apl_query!r}")
            updated = client.views.update(views[0].id, description="Errors at checkout, "
                                          "for the on-call engineer")
            print(f"   updated view {updated.id}: description={updated.description!r}")

            apl = f"['{DATASET}'] | summarize count() by level"
            print(f"\n7. Query: {apl}")
            for row in client.query(apl):
                print(f"  {row['level']:<8} {row['count_']}")

        # Stop shipping before the service goes away.
        logging.getLogger().removeHandler(handler)
        handler.close()
        if processor is not None:
            processor.close()

    cli = _command()
    print(f"""
8. Look at these events in a browser, and follow new ones from a terminal:
  {cli} serve --db {db} --token {TOKEN} --port 8080
  then open http://127.0.0.1:8080/#token={TOKEN}
  and run
    LOGHANDLER_URL=http://127.0.0.1:8080 LOGHANDLER_TOKEN={TOKEN} {cli} tail {DATASET} -f

What next:
  - point the handler at the real service: set LOGHANDLER_URL and LOGHANDLER_TOKEN
    (and LOGHANDLER_ORG_ID with a personal access token), then drop url=/token= above;
  - run the local service yourself: `loghandler serve --dataset DATASET` (it creates DATASET),
    then `loghandler ingest DATASET FILE`, `loghandler query "['DATASET'] | take 10"` and
    `loghandler views list`;
  - in your tests, use loghandler.testing.LocalService or the `loghandler_service` fixture.""")


if __name__ == "__main__":
    main()
