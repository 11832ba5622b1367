"""The keyword options of the front ends and of ``Shipper``, as ``TypedDict``s, so that editors
complete them and type checkers check them (``**options: Unpack[...]``).

The one list of the options is ``_config.ShipperOptions`` (and the Client's signature for its
arguments); tests/test_first_day.py holds these equal to it, and docs/configuration.md's table
to them. Nothing here runs: the front ends name these types in annotations only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypedDict

if TYPE_CHECKING:
    from ._engine.transport import Transport

__all__ = ["FrontEndOptions", "ShippingOptions"]


class ShippingOptions(TypedDict, total=False):
    """``Shipper``'s options (``_config.ShipperOptions``: defaults and checks)."""

    batch_size: int
    max_batch_bytes: int
    flush_interval: float
    max_queue_size: int
    max_queue_bytes: int
    overflow: Literal["drop_oldest", "drop_newest", "block"]
    block_timeout: float
    max_retries: int
    retry_backoff: float
    max_retry_delay: float
    shutdown_timeout: float
    compression: Literal["gzip"] | None
    compression_level: int
    spool_dir: str | None
    max_spool_bytes: int
    auth_retry_delay: float
    on_error: Callable[[BaseException], Any] | None
    handle_sigterm: bool
    fields: Mapping[str, Any] | None
    trace_context: bool
    identity: bool | Mapping[str, Any]
    exclude_fields: Sequence[str]
    scrub: bool | Literal["keys", "all"]
    scrub_keys: Sequence[str]
    scrub_patterns: Sequence[str]
    sample_levels: Mapping[str, float] | None
    sample_loggers: Mapping[str, float] | None
    sample_keep_level: str | int | None
    repeat_limit: int | None
    repeat_window: float
    hold_level: Literal["debug", "info", "warning"] | None
    hold_size: int
    hold_total: int
    json_default: Callable[[Any], Any] | None
    field_names: Mapping[str, str] | None
    ingest_params: Mapping[str, str] | None


class FrontEndOptions(ShippingOptions, total=False):
    """A front end's options: the shipping options, the Client's arguments, ``transport`` and
    ``send``."""

    token: str | None
    org_id: str | None
    url: str | None
    region: str | None
    timeout: float
    allow_http: bool
    transport: Transport | None
    send: bool | Literal["if-token-present"]
