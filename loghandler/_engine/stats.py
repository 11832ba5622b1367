"""``Stats``: the frozen snapshot of a shipper's counters."""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["STAT_FIELDS", "Stats"]


@dataclass(frozen=True)
class Stats:
    """A snapshot of a shipper's counters (events unless the name says otherwise).

    ``submitted == delivered + dropped + failed + spooled + queued`` always holds.
    """

    submitted: int = 0
    delivered: int = 0
    dropped: int = 0
    failed: int = 0
    spooled: int = 0
    queued: int = 0
    retried: int = 0
    batches: int = 0
    bytes_sent: int = 0
    # dropped, by reason
    dropped_queue_full: int = 0
    dropped_too_large: int = 0
    dropped_closed: int = 0
    dropped_shutdown: int = 0
    dropped_invalid: int = 0
    dropped_sampled: int = 0  # sampled out (sample_levels, sample_loggers)
    dropped_repeat: int = 0  # suppressed repeats (repeat_limit); a summary event tells
    dropped_held: int = 0  # held for an error that never came (hold_level)
    # failed, by reason
    failed_rejected: int = 0
    failed_auth: int = 0
    failed_not_found: int = 0
    failed_client_error: int = 0
    failed_retries_exhausted: int = 0
    failed_by_service: int = 0  # turned down inside a 2xx answer (the ingest status's "failed")
    # spool
    replayed: int = 0  # events delivered from the spool (not part of the invariant above)
    replay_rejected: int = 0  # events from the spool the service refused for good
    spool_dropped: int = 0  # spooled events deleted to keep the spool under max_spool_bytes
    spool_corrupt: int = 0  # spool files found damaged and moved aside
    # records the flusher thread (or a thread sending at exit) logged, deliberately not shipped
    suppressed: int = 0


STAT_FIELDS = tuple(f.name for f in fields(Stats))
