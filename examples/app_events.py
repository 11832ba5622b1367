"""Application events (not log lines) shipped straight through a Shipper.

Business events -- an order paid, a job finished -- are dicts you build yourself. A Shipper queues
them in O(1) and ships them in the background, batched and retried, exactly like the logging
handler does for records. Runs against the local service unless LOGHANDLER_URL is set.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from datetime import datetime, timezone
from decimal import Decimal

from loghandler import Client, Shipper


def emit_orders(shipper: Shipper, count: int) -> None:
    for _ in range(count):
        shipper.submit({
            "event": "order.paid",
            "order_id": str(uuid.uuid4()),
            "amount": Decimal(random.randint(100, 99_999)) / 100,   # shipped as an exact string
            "currency": "EUR",
            "items": random.randint(1, 5),
            "paid_at": datetime.now(timezone.utc),                   # shipped as ISO 8601
        })
    shipper.submit({"event": "batch.done", "orders": count, "_time": time.time()})


def main() -> int:
    if os.environ.get("LOGHANDLER_URL"):
        shipper = Shipper(Client(), os.environ.get("LOGHANDLER_DATASET", "orders"))
        emit_orders(shipper, 1000)
        ok = shipper.flush(timeout=10)
        print(f"delivered: {ok}; {shipper.stats()}")
        shipper.close()
        return 0 if ok else 1
    from loghandler.testing import LocalService

    with LocalService(token="example-token") as svc:
        shipper = Shipper(Client(svc.token, url=svc.url), "orders")
        t0 = time.perf_counter()
        emit_orders(shipper, 1000)
        queued = time.perf_counter() - t0
        ok = shipper.flush(timeout=10)
        st = shipper.stats()
        print(f"queued 1001 events in {queued * 1000:.1f} ms; delivered: {ok} "
              f"({st.delivered} events in {st.batches} requests, {st.bytes_sent} bytes gzipped)")
        first = svc.events("orders")[0]
        print("first event as stored:", {k: first[k] for k in ("event", "amount", "paid_at")})
        shipper.close()
        return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
