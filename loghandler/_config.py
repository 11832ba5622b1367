"""Configuration of the shippers: the dataset, the shipping options, and their documentation.

Everything is validated once, at construction, into frozen value objects, so a bad setting fails
loudly where the user wrote it instead of quietly inside a background thread. The client's own
arguments (token, address, ...) are the wire's: ``_wire/settings.py``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, get_args

from ._documented import documented as documented  # the front ends read it here
from ._errors import ConfigurationError
from ._levels import known_level
from ._output import clip
from ._wire.settings import CLIENT_ARG_NAMES, env

ENV_DATASET = "LOGHANDLER_DATASET"
_OFF = ("0", "false", "no", "off")


def resolve_dataset(dataset: str | None, environ: Mapping[str, str] | None = None) -> str:
    dataset = dataset if dataset is not None else env(ENV_DATASET, environ)
    if not dataset or not isinstance(dataset, str) or not dataset.strip():
        raise ConfigurationError(
            f"no dataset: pass dataset=... or set {ENV_DATASET} to the dataset to ingest into"
        )
    return dataset


ENV_SEND = "LOGHANDLER_SEND"
SEND_VALUES = (True, False, "if-token-present")
_ON = ("1", "true", "yes", "on")


def resolve_send(send: bool | str | None) -> bool | str:
    """A front end's ``send``: True (ship; a missing token is a ConfigurationError), False (ship
    nothing) or ``"if-token-present"`` (ship when a token is configured, else nothing);
    ``LOGHANDLER_SEND`` when not given. Any other value is a ConfigurationError."""
    where = "send="
    if send is None:
        text = env(ENV_SEND)
        if text is None:
            return True
        where = ENV_SEND
        lowered = text.strip().lower()
        send = True if lowered in _ON else False if lowered in _OFF else lowered
    if send is True or send is False or send == "if-token-present":
        return send
    raise ConfigurationError(
        f"{where} must be True (ship; a missing token is an error), False (ship nothing) or "
        f"\"if-token-present\" (ship only when LOGHANDLER_TOKEN or token= is set), not {send!r}")


# --------------------------------------------------------------------------- shipping options

Overflow = Literal["drop_oldest", "drop_newest", "block"]
Compression = Literal["gzip"] | None
OVERFLOW_POLICIES: tuple[str, ...] = get_args(Overflow)
# The service takes at most this many events per ingest request.
MAX_BATCH_SIZE = 10_000
MiB = 1024 * 1024


@dataclass(frozen=True)
class ShipperOptions:
    """Shipping options with their defaults. docs/configuration.md says why."""

    batch_size: int = MAX_BATCH_SIZE
    max_batch_bytes: int = 4 * MiB
    flush_interval: float = 1.0
    max_queue_size: int = 100_000
    max_queue_bytes: int = 64 * MiB
    overflow: Overflow = "drop_oldest"
    block_timeout: float = 0.5
    max_retries: int = 5
    retry_backoff: float = 0.5
    max_retry_delay: float = 30.0
    shutdown_timeout: float = 5.0
    compression: Compression = "gzip"
    compression_level: int = 1
    spool_dir: str | None = None
    max_spool_bytes: int = 256 * MiB
    auth_retry_delay: float = 60.0
    on_error: Callable[[BaseException], Any] | None = None
    handle_sigterm: bool = True
    fields: Mapping[str, Any] | None = None
    trace_context: bool = True
    # What ships (loghandler/_engine/shaping.py, hold.py): each off until configured, but
    # identity and scrubbing by key, which are on. Identity is only checked here: the engine
    # reads who sent it (the environment, the platform) into ``fields`` when a Shipper is
    # built (``identity.with_identity``).
    identity: bool | Mapping[str, Any] = True
    exclude_fields: tuple[str, ...] = ()
    scrub: bool | Literal["keys", "all"] = "keys"
    scrub_keys: tuple[str, ...] = ()
    scrub_patterns: tuple[str, ...] = ()
    sample_levels: Mapping[str, float] | None = None
    sample_loggers: Mapping[str, float] | None = None
    # Stored as the level's number (logging's scale) once checked.
    sample_keep_level: str | int | None = "error"
    repeat_limit: int | None = None
    repeat_window: float = 60.0
    hold_level: str | None = None
    hold_size: int = 200
    hold_total: int = 10_000
    json_default: Callable[[Any], Any] | None = None
    field_names: Mapping[str, str] | None = None
    ingest_params: Mapping[str, str] | None = None

    @property
    def keep_level(self) -> int | None:
        """``sample_keep_level`` as checked: a number on logging's scale, or None."""
        level = self.sample_keep_level
        return level if isinstance(level, int) else None

    def __post_init__(self) -> None:
        if self.fields is not None:
            # A copy, checked once (before identity's fields are merged into it): the flusher
            # adds it to every event as it is.
            object.__setattr__(self, "fields", _check_fields(self.fields) or None)
        _check_shaping(self)
        if not isinstance(self.trace_context, bool):
            raise ConfigurationError(
                f"trace_context must be True or False, not {self.trace_context!r}")
        for name in ("batch_size", "max_batch_bytes", "max_queue_size", "max_queue_bytes",
                     "max_spool_bytes"):
            _check_number(name, getattr(self, name), integer=True, minimum=1)
        if self.batch_size > MAX_BATCH_SIZE:
            raise ConfigurationError(
                f"batch_size must be at most {MAX_BATCH_SIZE:,}, the most events the service "
                f"takes in one request, not {self.batch_size!r}"
            )
        _check_number("max_retries", self.max_retries, integer=True, minimum=0)
        _check_number("compression_level", self.compression_level, integer=True, minimum=0)
        for name in ("flush_interval", "max_retry_delay", "auth_retry_delay"):
            _check_number(name, getattr(self, name), minimum=0.001)
        for name in ("retry_backoff", "shutdown_timeout", "block_timeout"):
            _check_number(name, getattr(self, name), minimum=0)
        if self.overflow not in OVERFLOW_POLICIES:
            raise ConfigurationError(
                f"overflow must be one of {', '.join(OVERFLOW_POLICIES)}, not {self.overflow!r}"
            )
        if self.compression not in (None, "gzip"):
            raise ConfigurationError(
                f"compression must be None or 'gzip', not {self.compression!r}"
            )
        if self.compression_level > 9:
            raise ConfigurationError("compression_level must be between 0 and 9")
        if self.on_error is not None and not callable(self.on_error):
            raise ConfigurationError("on_error must be a callable taking the exception")
        if not isinstance(self.handle_sigterm, bool):
            raise ConfigurationError(
                f"handle_sigterm must be True or False, not {self.handle_sigterm!r}"
            )
        if self.spool_dir is not None and not isinstance(self.spool_dir, (str, os.PathLike)):
            raise ConfigurationError("spool_dir must be a path or None")


ENV_SCRUB = "LOGHANDLER_SCRUB"
ENV_IDENTITY = "LOGHANDLER_IDENTITY"
HOLD_LEVELS = ("debug", "info", "warning")


def _names(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    try:
        out = tuple(value)
    except TypeError:
        out = (value,)
    if not all(isinstance(v, str) and v for v in out):
        raise ConfigurationError(f"{name} must be a list of names, not {value!r}")
    return out


def _rates(name: str, value: Any) -> dict[str, float] | None:
    if value is None:
        return None
    if not _is_mapping(value):
        raise ConfigurationError(
            f"{name} must map names to the fraction of events kept (0 to 1), e.g. "
            f"{{'debug': 0.1}}, not {value!r}")
    out: dict[str, float] = {}
    for key, rate in value.items():
        if not isinstance(key, str) or isinstance(rate, bool) or not isinstance(
                rate, (int, float)) or not 0 <= rate <= 1:
            raise ConfigurationError(
                f"{name}[{key!r}] must be a fraction of events kept, 0 to 1, not {rate!r}")
        out[key.lower() if name == "sample_levels" else key] = float(rate)
    return out or None


def _keep_level(value: Any) -> int | None:
    """sample_keep_level as a number on logging's scale (``"error"``: 40), or None."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    number = known_level(value) if isinstance(value, str) else None
    if number is None:
        raise ConfigurationError(
            "sample_keep_level must be a level name (\"warning\", \"error\", \"critical\"), a "
            f"logging level number, or None (sample every level), not {value!r}")
    return number


def _field_names(value: Any) -> dict[str, str] | None:
    """field_names checked: str to str, no two fields to one name, _time kept."""
    if value is None:
        return None
    if not _is_mapping(value) or not all(
            isinstance(k, str) and isinstance(v, str) and k and v for k, v in value.items()):
        raise ConfigurationError(
            "field_names must map the event's field names to the names to ship them under, "
            f"e.g. {{'message': 'msg', 'level': 'severity'}}, not {value!r}")
    out = {k: v for k, v in value.items() if k != v}
    if "_time" in out:
        raise ConfigurationError(
            "field_names cannot rename _time: the service reads each event's time from it")
    targets = list(out.values())
    twice = sorted({t for t in targets if targets.count(t) > 1})
    if twice:
        raise ConfigurationError(
            f"field_names gives two fields the name {twice[0]!r}: each needs a name of its own")
    return out or None


def _ingest_params(value: Any) -> dict[str, str] | None:
    """ingest_params checked: names and values are non-empty strings."""
    if value is None:
        return None
    if not _is_mapping(value) or not all(
            isinstance(k, str) and isinstance(v, str) and k and v for k, v in value.items()):
        raise ConfigurationError(
            "ingest_params must map query parameter names to values, e.g. "
            f"{{'timestamp-field': 'ts'}}, not {value!r}")
    return dict(value) or None


def _check_shaping(o: ShipperOptions) -> None:
    def put(name: str, value: Any) -> None:
        object.__setattr__(o, name, value)

    env_scrub = os.environ.get(ENV_SCRUB, "").strip().lower()
    if env_scrub in _OFF:
        put("scrub", False)
    elif env_scrub in ("keys", "all"):
        put("scrub", env_scrub)
    if o.scrub is True:
        put("scrub", "all")
    if os.environ.get(ENV_IDENTITY, "").strip().lower() in _OFF and o.identity is True:
        put("identity", False)
    if o.scrub not in (False, "keys", "all"):
        raise ConfigurationError(
            f"scrub must be 'keys' (values under secret keys), 'all' (also secret-looking "
            f"text in every string), True (the same as 'all') or False, not {o.scrub!r}")
    if type(o.identity) is not bool and not _is_mapping(o.identity):
        raise ConfigurationError(
            "identity must be True (from the environment), False (none), or a mapping such "
            f"as {{'service': 'checkout', 'environment': 'prod'}}, not {o.identity!r}")
    if type(o.identity) is not bool and _is_mapping(o.identity):
        put("identity", _check_fields(o.identity, "identity"))
    for name in ("exclude_fields", "scrub_keys", "scrub_patterns"):
        put(name, _names(name, getattr(o, name)))
    import re

    for pattern in o.scrub_patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigurationError(
                f"scrub_patterns: {pattern!r} is not a regular expression ({exc})") from None
    for name in ("sample_levels", "sample_loggers"):
        put(name, _rates(name, getattr(o, name)))
    put("sample_keep_level", _keep_level(o.sample_keep_level))
    put("field_names", _field_names(o.field_names))
    put("ingest_params", _ingest_params(o.ingest_params))
    if o.repeat_limit is not None:
        _check_number("repeat_limit", o.repeat_limit, integer=True, minimum=1)
    _check_number("repeat_window", o.repeat_window, minimum=0.001)
    if o.hold_level is not None:
        level = o.hold_level.lower() if isinstance(o.hold_level, str) else o.hold_level
        if level not in HOLD_LEVELS:
            raise ConfigurationError(
                f"hold_level must be one of {', '.join(HOLD_LEVELS)} (events at that level "
                f"and below are held until an error), or None, not {o.hold_level!r}")
        put("hold_level", level)
    _check_number("hold_size", o.hold_size, integer=True, minimum=1)
    _check_number("hold_total", o.hold_total, integer=True, minimum=1)
    if o.json_default is not None and not callable(o.json_default):
        raise ConfigurationError("json_default must be a callable taking the value to convert")


def _is_mapping(value: Any) -> bool:
    """``isinstance(value, Mapping)``, a dict not asked of the ABC: that would put dict in its
    cache of subclasses, after which every isinstance(x, Mapping) of another type is dearer in
    the whole process (the stdlib's LogRecord asks it of every call's first argument: some 200
    instructions a logging call)."""
    return type(value) is dict or isinstance(value, Mapping)


def _check_fields(fields: Any, name: str = "fields") -> dict[str, Any]:
    if not _is_mapping(fields):
        raise ConfigurationError(
            f"{name}= must be a mapping of field names to plain JSON values, e.g. "
            f"{{'service': 'checkout', 'env': 'prod'}}, not {clip(repr(fields), 60)}")
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if not isinstance(key, str):
            raise ConfigurationError(f"{name}=: every key must be a string, not {key!r}")
        out[key] = _json_value(value, f"{name}[{key!r}]")
    return out


def _json_value(value: Any, where: str) -> Any:
    """A copy of a JSON value (str, finite number, bool, None, lists and str-keyed dicts of
    them); anything else is a ConfigurationError naming where it is."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
    elif isinstance(value, (list, tuple)):
        return [_json_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    elif _is_mapping(value) and all(isinstance(k, str) for k in value):
        return {k: _json_value(v, f"{where}[{k!r}]") for k, v in value.items()}
    raise ConfigurationError(
        f"{where} must be a plain JSON value (str, int, float, bool, None, or lists and dicts "
        f"of them), not {value!r}")


def _check_number(name: str, value: Any, *, integer: bool = False, minimum: float) -> None:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not (
        minimum <= value < math.inf
    ):
        kind = "an integer" if integer else "a number"
        raise ConfigurationError(f"{name} must be {kind} >= {minimum}, not {value!r}")


SHIPPER_OPTION_NAMES = frozenset(f.name for f in fields(ShipperOptions))


def split_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split keyword arguments into (client arguments, shipping options); reject unknown ones."""
    client_args: dict[str, Any] = {}
    shipper_args: dict[str, Any] = {}
    for key, value in options.items():
        if key in CLIENT_ARG_NAMES:
            client_args[key] = value
        elif key in SHIPPER_OPTION_NAMES:
            shipper_args[key] = value
        else:
            import difflib

            close = difflib.get_close_matches(key, SHIPPER_OPTION_NAMES | CLIENT_ARG_NAMES, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigurationError(f"unknown option {key!r}{hint}")
    return client_args, shipper_args


def shipper_options(options: Mapping[str, Any]) -> ShipperOptions:
    """Validated ``ShipperOptions`` from ``Shipper``'s keyword arguments.

    A Client argument among them (``Shipper(client, "ds", token=...)``) is named as such, an
    unknown name gets a suggestion: never a bare ``TypeError`` from the dataclass.
    """
    misplaced = sorted(set(options) & CLIENT_ARG_NAMES)
    if misplaced:
        names = ", ".join(f"{name}=" for name in misplaced)
        verb, it = ("belongs", "it") if len(misplaced) == 1 else ("belong", "them")
        raise ConfigurationError(
            f"{names} {verb} to the Client, not the Shipper: pass {it} to Client(...) and the "
            f"client to the Shipper, e.g. Shipper(Client({misplaced[0]}=...), dataset)"
        )
    _, shipper_args = split_options(dict(options))
    return ShipperOptions(**shipper_args)


# The shipping options, documented once: ``documented`` appends them (and the client's arguments,
# ``_wire.settings.CLIENT_ARGS_DOC``) to the docstrings of Shipper and the front ends, so help()
# and editors that run the code show every argument in place (test_package checks that none is
# missing).
SHIPPING_OPTIONS_DOC = """\
        batch_size (int): events per request at most (the service takes 10,000 at most).
            Default 10,000: the fewer requests while the application logs hard, the less the
            flusher takes the GIL from it; ``flush_interval`` bounds the wait otherwise.
        max_batch_bytes (int): encoded bytes per request at most; one event larger than this
            is dropped and counted in ``stats().dropped_too_large``. Default 4 MiB.
        flush_interval (float): seconds the oldest queued event waits at most. Default 1.0.
        max_queue_size (int): events queued at most. Default 100,000.
        max_queue_bytes (int): estimated memory of the queued events at most. Default 64 MiB.
        overflow ("drop_oldest" | "drop_newest" | "block"): what a full queue does with a new
            event: drop the oldest queued one, drop the new one, or wait for room (at most
            ``block_timeout``). Default "drop_oldest".
        block_timeout (float): the longest ``overflow="block"`` holds the caller. Default 0.5.
        max_retries (int): retries of a failed request after the first try. Default 5.
        retry_backoff (float): the first backoff in seconds, doubled at each retry, with full
            jitter. Default 0.5.
        max_retry_delay (float): the longest single backoff, in seconds. Default 30.
        shutdown_timeout (float): bound of the whole exit (flush and close at exit); what is
            not delivered by then is spooled or counted as dropped. Default 5.0.
        compression ("gzip" | None): compression of the request bodies. Default "gzip".
        compression_level (int): gzip level, 0-9. Default 1.
        spool_dir (str | None): a directory where batches that could not be delivered are
            kept, and delivered later (by this process or the next). Default None.
        max_spool_bytes (int): bound of the spool per dataset; the oldest go first.
            Default 256 MiB.
        auth_retry_delay (float): pause after a 401/403 before the next try, doubled up to
            10 minutes. Default 60.
        on_error (callable | None): called once per batch outcome that is not a delivery (an
            ``ApiError``, a ``TransportError``, or a ``PartialIngestError`` when the service
            turned down some events of a 2xx answer) on the flusher thread; its own logs are
            not shipped. Default None.
        handle_sigterm (bool): on SIGTERM with its default disposition, deliver what is queued
            within ``shutdown_timeout``, then die of SIGTERM as before. Default True
            (``LOGHANDLER_HANDLE_SIGTERM=0`` turns it off).
        fields (Mapping[str, Any] | None): plain JSON values added to every event that lacks
            them, e.g. ``{"service": "checkout", "env": "prod"}``; added on the flusher
            thread. Default None.
        trace_context (bool): add ``trace_id`` and ``span_id`` of the current OpenTelemetry
            span (when the application imported OpenTelemetry). Default True.
        identity (bool | Mapping): add ``service``, ``environment``, ``version`` (from
            ``LOGHANDLER_SERVICE``/``OTEL_SERVICE_NAME``, ``LOGHANDLER_ENVIRONMENT``,
            ``LOGHANDLER_VERSION``, ``OTEL_RESOURCE_ATTRIBUTES``) and ``host`` to every event
            that lacks them; a mapping sets them; False (or ``LOGHANDLER_IDENTITY=0``): none.
            Default True.
        exclude_fields (list[str]): default fields to leave out, e.g. ``["module",
            "function", "file", "thread"]``. Default none.
        scrub ("keys" | "all" | bool): replace secrets before they leave the process.
            "keys": values under secret keys (password, token, authorization, cookie,
            api_key, ...) at any depth; "all" (or True): also secret-looking text (bearer
            tokens, JWTs, cloud keys, card numbers passing Luhn) in the message, fields,
            nested values and exception text; False: nothing. Default "keys"
            (``LOGHANDLER_SCRUB=all|keys|0``).
        scrub_keys (list[str]): more secret key names. Default none.
        scrub_patterns (list[str]): more secret value patterns (regular expressions).
        sample_levels (Mapping[str, float] | None): the fraction of events kept per level,
            e.g. ``{"debug": 0.1}``; an event with a ``trace_id`` is kept exactly when its
            trace is. Default None (keep all).
        sample_loggers (Mapping[str, float] | None): the same per logger name (and its
            children). Default None.
        sample_keep_level (str | int | None): events at this level and above are never
            sampled away (an error in a trace that sampling leaves out ships alone); None:
            every level is sampled as configured. Default "error".
        repeat_limit (int | None): identical events (logger, level, message) shipped per
            ``repeat_window``; the rest are suppressed and one summary event tells how many.
            Default None (no limit).
        repeat_window (float): seconds of a repeat window. Default 60.
        hold_level ("debug" | "info" | "warning" | None): inside a ``loghandler.context``,
            events at this level and below are held in memory and shipped only if the context
            logs an error (then in order, before it); dropped (counted ``dropped_held``) at
            the context's end otherwise. Default None.
        hold_size (int): events held per context at most (the oldest go). Default 200.
        hold_total (int): events held at once across contexts at most. Default 10,000.
        json_default (callable | None): converts values JSON cannot carry (your own types)
            before the built-in rules; runs where the value is copied. Default None.
        field_names (Mapping[str, str] | None): ship fields under other names, e.g.
            ``{"message": "msg", "level": "severity", "logger": "logger.name"}``; applied last
            on the flusher thread (after exclusions and scrubbing, which use the usual
            names). Default None.
        ingest_params (Mapping[str, str] | None): query parameters sent with every ingest
            request, which the service reads there, e.g. ``{"timestamp-field": "ts",
            "timestamp-format": "2006-01-02 15:04:05"}`` (``loghandler ingest``'s
            ``--timestamp-field`` and ``--timestamp-format``). Default None.
        transport (Transport | None): what sends each request and hands back the service's
            answer: ``send(method, path, body, *, headers, timeout)``; with Client
            arguments, the client built here goes through it too. Default None: through
            the client (HTTP through its pool, or its own ``transport=``). In tests,
            ``loghandler.testing.MemoryTransport()`` keeps every request in memory and
            answers as scripted (no token or url needed then).

"""

# The front ends' own option (Shipper has no ``send``: it is given its client or transport).
SEND_DOC = """\
        send (bool | "if-token-present"): True ships, and a missing token is a
            ConfigurationError; "if-token-present" ships when a token is configured, else
            the front end is built and sends nothing (one line on stderr says so, once a
            process); False ships nothing. Default: ``LOGHANDLER_SEND``, else True.
"""
