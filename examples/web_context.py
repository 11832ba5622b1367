"""A Flask app whose every log event carries its request: loghandler.context in a middleware.

The handler's ``fields=`` puts the service, environment and version on every event; a small WSGI
middleware enters ``loghandler.context(request_id=..., method=..., path=...)`` around each
request, so every line logged while serving it -- in the view, in a helper, in a library --
carries the request's id. Run it as is: it starts the package's local service and the app on
127.0.0.1, sends three requests and shows what the service stored. (``pip install flask``.)
"""

from __future__ import annotations

import logging
import threading
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask, jsonify
from werkzeug.serving import make_server

import loghandler

log = logging.getLogger("shop.web")


class RequestContext:
    """WSGI middleware: everything logged while a request is served carries its id.

    The id comes from the ``X-Request-ID`` header when a proxy set one, else a new one.
    """

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request_id = environ.get("HTTP_X_REQUEST_ID") or uuid.uuid4().hex[:16]
        with loghandler.context(request_id=request_id, method=environ["REQUEST_METHOD"],
                                path=environ.get("PATH_INFO", "/")):
            # Flask builds the whole response here, so every log line of the request is inside.
            return list(self.app(environ, start_response))


def create_app() -> Flask:
    app = Flask("shop")
    app.wsgi_app = RequestContext(app.wsgi_app)  # type: ignore[method-assign]

    @app.get("/cart/<int:cart_id>")
    def cart(cart_id: int) -> Any:
        log.info("cart viewed", extra={"cart_id": cart_id})
        return jsonify(items=price(cart_id))

    @app.post("/checkout")
    def checkout() -> Any:
        log.info("checkout started")
        log.warning("payment slow", extra={"latency_ms": 850.0})
        return jsonify(ok=True)

    return app


def price(cart_id: int) -> int:
    # A helper far from the request: its line still carries the request id.
    log.info("cart priced", extra={"items": cart_id % 5})
    return cart_id % 5


def main() -> int:
    from loghandler.testing import LocalService

    with LocalService(token="example-token") as svc:
        handler = loghandler.IngestHandler(
            "web", url=svc.url, token=svc.token,
            fields={"service": "shop-web", "env": "dev", "version": "1.4.2"})
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no access log lines here
        server = make_server("127.0.0.1", 0, create_app(), threaded=True)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        base = f"http://127.0.0.1:{server.server_port}"
        try:
            urllib.request.urlopen(f"{base}/cart/7", timeout=10).read()
            urllib.request.urlopen(urllib.request.Request(
                f"{base}/checkout", method="POST", headers={"X-Request-ID": "req-from-proxy"}),
                timeout=10).read()
            urllib.request.urlopen(f"{base}/cart/12", timeout=10).read()
        finally:
            server.shutdown()
            thread.join(10)
        delivered = handler.flush(timeout=5)
        log.removeHandler(handler)
        handler.close()
        events = svc.events("web")

    for e in events:
        print(f"{e['request_id']:>16} {e['method']:4} {e['path']:9} {e['level']:7} "
              f"{e['message']:15} service={e['service']} version={e['version']}")
    requests = {e["request_id"] for e in events}
    print(f"\ndelivered: {delivered}; {len(events)} events from {len(requests)} requests, "
          f"each with its request's id: {all('request_id' in e for e in events)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
