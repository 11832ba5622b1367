"""The client's settings: its arguments first, then ``LOGHANDLER_*`` environment variables.

``Client``'s signature declares the arguments (names, defaults) once; the ``resolve_*``
functions here check each, with its variable, into ``Settings``, a frozen value object, so a
bad setting fails loudly where the user wrote it instead of quietly inside a background thread.
The checks of a token and of a loopback address are also the local service's.
"""

from __future__ import annotations

import ipaddress
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .._errors import ConfigurationError
from .._output import redact, register_secret

__all__ = ["CLIENT_ARGS_DOC", "CLIENT_ARG_NAMES", "CLIENT_TRANSPORT_DOC", "ENV_EU_URL",
           "ENV_ORG_ID", "ENV_REGION", "ENV_TOKEN", "ENV_URL", "REGIONS", "Settings",
           "check_timeout", "check_token", "env", "in_command_line", "is_loopback",
           "resolve_org_id", "resolve_region", "resolve_token", "resolve_url", "said",
           "speak_command_line"]

ENV_TOKEN = "LOGHANDLER_TOKEN"
ENV_ORG_ID = "LOGHANDLER_ORG_ID"
ENV_URL = "LOGHANDLER_URL"
ENV_EU_URL = "LOGHANDLER_EU_URL"
ENV_REGION = "LOGHANDLER_REGION"

REGIONS = {"us": ENV_URL, "eu": ENV_EU_URL}

# The names of Client's arguments that the front ends take and hand to the Client they build
# (a test holds them equal to Client's signature less ``transport``, which at a front end is
# the shipper's): the front ends tell them apart from the shipping options by these.
CLIENT_ARG_NAMES = frozenset({"token", "org_id", "url", "region", "timeout", "allow_http"})

# Client's arguments, documented once: ``_config.documented`` appends them to the docstrings of
# Client, AsyncClient and the front ends, so help() and editors show every argument in place
# (test_package checks that none is missing).
CLIENT_ARGS_DOC = """\
        token (str): an API token, or a personal access token (then also ``org_id``).
            Default: ``LOGHANDLER_TOKEN``. Sent only as ``Authorization: Bearer``.
        org_id (str): the organization id, needed with a personal access token.
            Default: ``LOGHANDLER_ORG_ID``.
        url (str): the base address, e.g. ``https://api.example.com``. Default:
            ``LOGHANDLER_URL`` (``LOGHANDLER_EU_URL`` with ``region="eu"``).
        region ("us" | "eu"): which default address to use. Default: ``LOGHANDLER_REGION``,
            else "us".
        timeout (float): seconds for one HTTP request. Default 10.
        allow_http (bool): allow plain ``http://`` to a host other than loopback (the token
            would travel in clear text). Default False.

"""

# Client's own argument, not routed from a front end's arguments (there, ``transport=`` is the
# shipper's: SHIPPING_OPTIONS_DOC), so not among CLIENT_ARG_NAMES.
CLIENT_TRANSPORT_DOC = """\
        transport (Transport | None): what carries each of the client's requests (views,
            datasets, queries, ingest, and its shippers' batches) and hands back the
            service's answer: ``send(method, path, body, *, headers, timeout)``. Default
            None: HTTP through the client's own urllib3 pool. In tests,
            ``loghandler.testing.MemoryTransport(answers=[...])`` answers as scripted
            without a socket.

"""


def env(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable's value (in ``environ``, default ``os.environ``), None when unset or
    empty."""
    value = (os.environ if environ is None else environ).get(name)
    return value if value else None


def _has_bad_chars(value: str) -> bool:
    # Whitespace or control characters in a header value would either break the request or
    # allow header injection (CR/LF); a pasted token with a trailing newline is the usual cause.
    return any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in value)


# How the user names each argument: in Python (the default) or on the command line, which
# calls ``speak_command_line()`` once. One rule per message, worded for whoever reads it.
_WORDS = {
    "token": ("token=...", "--token"),
    "url": ("url=...", "--url"),
    "url_arg": ("url=", "--url"),
    "allow_http": ("allow_http=True", "--allow-http"),
    "org_id": ("org_id", "--org-id"),
    "region": ("region=", "--region"),
    "timeout": ("timeout=", "--timeout"),
}
_COMMAND_LINE = [False]


def speak_command_line(on: bool = True) -> None:
    """Word configuration errors in the command line's flags instead of Python arguments."""
    _COMMAND_LINE[0] = on


def in_command_line() -> bool:
    """Whether messages are read by a command line user (flags) or a Python one (arguments)."""
    return _COMMAND_LINE[0]


def said(name: str) -> str:
    """How the user passes ``name`` where they are (``token=...`` or ``--token``)."""
    return _WORDS[name][1 if _COMMAND_LINE[0] else 0]


def check_token(token: Any, source: str) -> str:
    """``token`` if it can be sent as a bearer token, else a ConfigurationError naming ``source``
    (where the user wrote it). The one check for every entry point: library, CLI, local service.
    """
    if not token:
        raise ConfigurationError(
            f"no token: pass {source} (an API token, or a personal access token together with "
            f"{said('org_id')} / {ENV_ORG_ID})"
        )
    if not isinstance(token, str):
        raise ConfigurationError(f"the token ({source}) must be a string, not "
                                 f"{type(token).__name__}")
    if _has_bad_chars(token):
        raise ConfigurationError(
            f"the token ({source}) contains whitespace or control characters; check for a "
            "trailing newline or a stray space where it was pasted"
        )
    return token


def is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Settings:
    """Resolved connection settings. ``repr`` hides the token."""

    token: str
    url: str
    org_id: str | None = None
    region: str = "us"
    timeout: float = 10.0

    def __repr__(self) -> str:
        return redact(
            f"Settings(url={self.url!r}, region={self.region!r}, org_id={self.org_id!r}, "
            f"timeout={self.timeout!r}, token=***)"
        )


def resolve_token(token: str | None) -> str:
    """The token to send: ``token``, else ``LOGHANDLER_TOKEN``; registered for redaction."""
    token = token if token is not None else env(ENV_TOKEN)
    if not token:
        raise ConfigurationError(
            f"no token: pass {said('token')} or set {ENV_TOKEN} (an API token, or a personal "
            f"access token together with {said('org_id')} / {ENV_ORG_ID})"
        )
    token = check_token(token, f"{said('token').rstrip('.')} or {ENV_TOKEN}")
    register_secret(token)
    return token


def resolve_org_id(org_id: str | None) -> str | None:
    """``org_id``, else ``LOGHANDLER_ORG_ID``, else None."""
    org_id = org_id if org_id is not None else env(ENV_ORG_ID)
    if org_id is not None and (not isinstance(org_id, str) or not org_id or _has_bad_chars(org_id)):
        raise ConfigurationError(
            f"{said('org_id')} (or {ENV_ORG_ID}) must be a non-empty string without whitespace or "
            "control characters"
        )
    return org_id


def resolve_region(region: str | None) -> tuple[str, bool]:
    """(the region's name, whether one was chosen): ``region``, else ``LOGHANDLER_REGION``,
    else "us"."""
    value = region if region is not None else env(ENV_REGION)
    name = value.strip().lower() if isinstance(value, str) else ""
    if value is None or (isinstance(value, str) and not name):
        name = "us"
    if name not in REGIONS:
        raise ConfigurationError(
            f"unknown region {value!r} ({said('region')} or {ENV_REGION}): use 'us' or 'eu'"
        )
    return name, value is not None


def resolve_url(url: str | None, region: str, region_chosen: bool, allow_http: bool) -> str:
    """The base address: ``url``, else the region's variable; checked (``allow_http``: plain
    http:// to another host than loopback is allowed)."""
    if url is None:
        url = env(REGIONS[region])
        if not url:
            # The region matters only to whoever chose one: for the rest, it is the address.
            which = f"for region {region!r}" if region_chosen else "of the service"
            raise ConfigurationError(
                f"no address {which}: pass {said('url')} or set {REGIONS[region]} "
                "(e.g. https://api.example.com; `loghandler serve` prints one)"
            )
        source = f"{REGIONS[region]}, or {said('url_arg')}"
    else:
        source = f"{said('url_arg')}, which overrides {REGIONS[region]}"
    return _validate_url(url, source, allow_http)


def check_timeout(timeout: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (
        0 < timeout < math.inf
    ):
        raise ConfigurationError(
            f"{said('timeout')} must be a positive, finite number of seconds, not {timeout!r}"
        )
    return float(timeout)


def _validate_url(url: object, source: str, allow_http: bool) -> str:
    if not isinstance(url, str) or not url.strip():
        raise ConfigurationError(f"the base address ({source}) must be a non-empty string")
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(
            f"the base address ({source}) must look like https://host[:port][/prefix], "
            f"not {url!r}"
        )
    if _has_bad_chars(url):
        raise ConfigurationError(
            f"the base address ({source}) contains whitespace or control characters"
        )
    if parts.query or parts.fragment:
        raise ConfigurationError(f"the base address ({source}) must not carry ?query or #fragment")
    if "@" in parts.netloc:
        # Credentials in the address would be printed wherever the address is (repr, errors);
        # the token argument is the one place for a secret.
        raise ConfigurationError(
            f"the base address ({source}) must not carry user:password@; pass the token as "
            f"{said('token')} or {ENV_TOKEN}"
        )
    try:
        parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError:
        raise ConfigurationError(
            f"the base address ({source}) has an invalid port: {url!r}"
        ) from None
    if parts.scheme == "http" and not allow_http and not is_loopback(parts.hostname):
        raise ConfigurationError(
            f"refusing plain http:// to {parts.hostname} ({source}), where the token would "
            f"travel in clear text: use https://, or pass {said('allow_http')}"
        )
    return url.rstrip("/")
