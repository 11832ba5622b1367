"""``Stats``: the frozen snapshot of a shipper's counters; ``Count``, one member per counter;
``Fate``, where an event ends (its total counter and, for a loss, the counter of its reason)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["Count", "Fate", "Stats"]


@dataclass(frozen=True)
class Stats:
    """A snapshot of a shipper's counters (events unless the name says otherwise).

    ``submitted == delivered + dropped + failed + spooled + queued + unconfirmed`` always
    holds.
    """

    submitted: int = 0
    delivered: int = 0
    dropped: int = 0
    failed: int = 0
    spooled: int = 0
    queued: int = 0
    # sent, but the answer had not come when a deadline (close, exit, a worker's SIGTERM)
    # ended the wait: the service may have stored them; neither delivered nor dropped
    unconfirmed: int = 0
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
    # of spooled: events the application's threads wrote to the spool themselves, when the
    # queue was full and the flusher behind (docs/reliability.md, "A burst with a spool")
    spooled_by_caller: int = 0
    # of spooled_by_caller: events written to the spool and not yet synced (the flusher syncs
    # them at once): safe from a crash of the process, not yet from a power loss (computed)
    spool_unsynced: int = 0
    # records the flusher thread (or a thread sending at exit) logged, deliberately not shipped
    suppressed: int = 0


class Count(str, Enum):
    """The counters of ``Stats`` (but ``queued`` and ``spool_unsynced``, which are computed),
    one member each.

    A ``str`` enum: hashed and compared in C, so counting never runs Python code (a signal
    handler's exception can then never land halfway through a count: ledger/intake.py)."""

    SUBMITTED = "submitted"
    DELIVERED = "delivered"
    DROPPED = "dropped"
    FAILED = "failed"
    SPOOLED = "spooled"
    UNCONFIRMED = "unconfirmed"
    RETRIED = "retried"
    BATCHES = "batches"
    BYTES_SENT = "bytes_sent"
    DROPPED_QUEUE_FULL = "dropped_queue_full"
    DROPPED_TOO_LARGE = "dropped_too_large"
    DROPPED_CLOSED = "dropped_closed"
    DROPPED_SHUTDOWN = "dropped_shutdown"
    DROPPED_INVALID = "dropped_invalid"
    DROPPED_SAMPLED = "dropped_sampled"
    DROPPED_REPEAT = "dropped_repeat"
    DROPPED_HELD = "dropped_held"
    FAILED_REJECTED = "failed_rejected"
    FAILED_AUTH = "failed_auth"
    FAILED_NOT_FOUND = "failed_not_found"
    FAILED_CLIENT_ERROR = "failed_client_error"
    FAILED_RETRIES_EXHAUSTED = "failed_retries_exhausted"
    FAILED_BY_SERVICE = "failed_by_service"
    REPLAYED = "replayed"
    REPLAY_REJECTED = "replay_rejected"
    SPOOL_DROPPED = "spool_dropped"
    SPOOL_CORRUPT = "spool_corrupt"
    SPOOLED_BY_CALLER = "spooled_by_caller"
    SUPPRESSED = "suppressed"


class Fate(Enum):
    """Where an event ends: its total counter and, for losses, the counter of its reason."""

    DELIVERED = (Count.DELIVERED, None)
    SPOOLED = (Count.SPOOLED, None)
    UNCONFIRMED = (Count.UNCONFIRMED, None)
    DROPPED_QUEUE_FULL = (Count.DROPPED, Count.DROPPED_QUEUE_FULL)
    DROPPED_TOO_LARGE = (Count.DROPPED, Count.DROPPED_TOO_LARGE)
    DROPPED_CLOSED = (Count.DROPPED, Count.DROPPED_CLOSED)
    DROPPED_SHUTDOWN = (Count.DROPPED, Count.DROPPED_SHUTDOWN)
    DROPPED_INVALID = (Count.DROPPED, Count.DROPPED_INVALID)
    DROPPED_SAMPLED = (Count.DROPPED, Count.DROPPED_SAMPLED)
    DROPPED_REPEAT = (Count.DROPPED, Count.DROPPED_REPEAT)
    DROPPED_HELD = (Count.DROPPED, Count.DROPPED_HELD)
    FAILED_REJECTED = (Count.FAILED, Count.FAILED_REJECTED)
    FAILED_AUTH = (Count.FAILED, Count.FAILED_AUTH)
    FAILED_NOT_FOUND = (Count.FAILED, Count.FAILED_NOT_FOUND)
    FAILED_CLIENT_ERROR = (Count.FAILED, Count.FAILED_CLIENT_ERROR)
    FAILED_RETRIES_EXHAUSTED = (Count.FAILED, Count.FAILED_RETRIES_EXHAUSTED)
    FAILED_BY_SERVICE = (Count.FAILED, Count.FAILED_BY_SERVICE)

    def __init__(self, total: Count, reason: Count | None) -> None:
        self.total = total
        self.reason = reason
        # Dropped by a policy the user configured (sampling, repeats, hold-until-error), or
        # delivered: not a loss (flush() still succeeds). An attribute, read without a call.
        self.chosen = total is Count.DELIVERED or reason in (
            Count.DROPPED_SAMPLED, Count.DROPPED_REPEAT, Count.DROPPED_HELD)
