"""Who sent it: ``service``, ``environment``, ``version`` and ``host`` for every event, and where
the process runs (``platforms.py``), from arguments and the environment (``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, the OpenTelemetry SDK's Resource). Read once, when a Shipper is
built (``with_identity``), and added like ``fields=``: nothing per event. The options' checks in
``_config`` only check ``identity=``.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._config import ShipperOptions

__all__ = ["IDENTITY_ENV", "identity_fields", "sdk_resource", "with_identity"]

IDENTITY_ENV = {
    "service": ("LOGHANDLER_SERVICE", "OTEL_SERVICE_NAME"),
    "environment": ("LOGHANDLER_ENVIRONMENT",),
    "version": ("LOGHANDLER_VERSION",),
}
# OpenTelemetry resource attribute names for the same fields.
_OTEL_ATTRS = {"service.name": "service", "deployment.environment": "environment",
               "deployment.environment.name": "environment", "service.version": "version"}


def _otel_resource(text: str) -> dict[str, str]:
    """OTEL_RESOURCE_ATTRIBUTES (``key=value,...``, values percent-encoded) as a dict."""
    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if sep and key and value.strip():
            from urllib.parse import unquote

            out.setdefault(key, unquote(value.strip()))
    return out


def sdk_resource() -> dict[str, Any]:
    """The attributes of the Resource of the OpenTelemetry SDK's global tracer or logger
    provider, when the application set one up (nothing is imported here: only modules it
    imported are read); empty otherwise, or when its ``service.name`` is the SDK's default
    (``unknown_service...``)."""
    if "opentelemetry.sdk.resources" not in sys.modules:
        return {}
    for module, getter in (("opentelemetry.trace", "get_tracer_provider"),
                           ("opentelemetry._logs", "get_logger_provider")):
        try:
            provider = getattr(sys.modules[module], getter)()
            attributes = dict(getattr(getattr(provider, "resource", None), "attributes", None)
                              or {})
        except Exception:  # not imported, a proxy provider, an SDK of another shape
            continue
        name = attributes.get("service.name")
        if isinstance(name, str) and name and not name.startswith("unknown_service"):
            return attributes
    return {}


def with_identity(options: ShipperOptions) -> ShipperOptions:
    """``options`` with who sent it (``identity_fields``) added to ``fields``, which wins on a
    shared name: read once, when a Shipper is built, and shipped as ``fields`` are."""
    who = identity_fields(options.identity)
    if not who:
        return options
    return replace(options, fields={**who, **(options.fields or {})})


def identity_fields(identity: bool | Mapping[str, Any],
                    environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``service``, ``environment``, ``version`` and ``host`` for every event, and where the
    process runs (``_engine/platforms.py``: Kubernetes, AWS Lambda and ECS, Google Cloud Run,
    Azure, Heroku, Fly.io, Render), under OpenTelemetry's names.

    ``identity=True``: from ``LOGHANDLER_SERVICE`` / ``OTEL_SERVICE_NAME``,
    ``LOGHANDLER_ENVIRONMENT``, ``LOGHANDLER_VERSION`` and ``OTEL_RESOURCE_ATTRIBUTES``
    (``service.name``, ``deployment.environment``, ``service.version``, and the platform names
    such as ``k8s.pod.name``, which win over what is detected), the OpenTelemetry SDK's
    Resource when the application set up a provider with one (``sdk_resource``), plus the
    host name.
    A mapping sets fields explicitly (the environment fills the rest); False: none.
    """
    if identity is False:
        return {}
    from .platforms import OTEL_NAMES, detect

    env = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    if isinstance(identity, Mapping):
        out.update({k: v for k, v in identity.items() if v is not None})
    for field, names in IDENTITY_ENV.items():
        if field in out:
            continue
        for name in names:
            value = env.get(name)
            if value:
                out[field] = value
                break
    resource = _otel_resource(env.get("OTEL_RESOURCE_ATTRIBUTES", ""))
    for key, value in resource.items():
        if key in _OTEL_ATTRS:
            out.setdefault(_OTEL_ATTRS[key], value)
    if environ is None:
        # The application's OpenTelemetry Resource (Resource.create({"service.name": ...})),
        # as the SDK's processor path reads it: the same service on every path.
        for key, value in sdk_resource().items():
            if key in _OTEL_ATTRS and isinstance(value, str) and value:
                out.setdefault(_OTEL_ATTRS[key], value)
    platform = detect(env)
    # The application's own name for itself wins over the platform's name for it.
    service = platform.pop("service", None)
    if service and "service" not in out:
        out["service"] = service
    platform.update({k: v for k, v in resource.items() if k in OTEL_NAMES})
    for key, value in platform.items():
        out.setdefault(key, value)
    if "host" not in out:
        try:
            out["host"] = socket.gethostname()
        except OSError:
            pass
    return out
