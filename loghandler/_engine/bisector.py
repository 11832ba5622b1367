"""The split loop: one batch posted, and what the service refuses halved down to single events.

One loop (``bisect``) serves delivery and spool replay alike, and it is bounded: a batch of n
events answered 400 (or 413) to every request costs at most ``give_up_after(n)`` requests, since
that many refusals in a row (with nothing accepted between) mean the batch is refused as a whole.
One or two bad events never make such a streak: each refused request on the way down to a bad
event is followed by its first half, which holds no bad event unless the streak goes on down.
``conclude`` then tells what became of the batch: one line per cause, one ``on_error`` call per
kind of refusal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._errors import Error, PartialIngestError
from .._output import clip, printable
from .batches import Chunk
from .policy import Cause, Outcome, give_up_after
from .reporter import Reporter, answer_of, counted, plural

__all__ = ["Tally", "bisect", "conclude", "partial_error"]

# Posts one piece until it has an outcome (final, or not when the caller is not patient).
Post = Callable[[Chunk], "tuple[Outcome, Error | None]"]
# What bisect does with a piece that reached a final outcome: True to go on with the rest.
Settle = Callable[[Chunk, Outcome, "Error | None"], bool]


class Tally:
    """What became of one batch's events through its split loop, for one report of it."""

    __slots__ = ("delivered", "failures", "gave_up", "gave_up_as", "ingested", "partial_failed",
                 "rejected", "rejected_error", "requests", "size", "streak", "too_large",
                 "too_large_error", "unreadable", "unreadable_error")

    def __init__(self, size: int) -> None:
        self.size = size
        self.requests = self.delivered = self.gave_up = self.streak = 0
        self.gave_up_as: Outcome | None = None
        self.rejected = self.too_large = self.unreadable = 0
        self.rejected_error: Error | None = None
        self.too_large_error: Error | None = None
        self.unreadable_error: Error | None = None
        self.ingested = self.partial_failed = 0
        self.failures: list[Any] = []

    def add(self, chunk: Chunk, outcome: Outcome, error: Error | None) -> None:
        n = len(chunk)
        if outcome is Outcome.DELIVERED:
            self.delivered += n
        elif outcome is Outcome.PARTIAL and isinstance(error, PartialIngestError):
            self.delivered += n - error.failed
            self.ingested += error.ingested
            self.partial_failed += error.failed
            self.failures.extend(error.failures[:100 - len(self.failures)])
        elif outcome is Outcome.TOO_LARGE:
            self.too_large += n
            self.too_large_error = self.too_large_error or error
        elif outcome is Outcome.REJECTED:
            self.rejected += n
            self.rejected_error = self.rejected_error or error
        elif outcome is Outcome.UNREADABLE:
            self.unreadable += n
            self.unreadable_error = self.unreadable_error or error

    def partial(self) -> PartialIngestError | None:
        """The batch's events turned down inside 2xx answers, as one error (or None)."""
        if not self.partial_failed:
            return None
        return partial_error(self.ingested, self.partial_failed, self.failures,
                             self.size if self.size > 1 else None)


def bisect(batch: Chunk, post: Post, settle: Settle,
           track: Callable[[list[Chunk], Chunk | None], None] | None = None,
           ) -> tuple[list[Chunk], Tally]:
    """Post ``batch``; halve what the service refuses by halves (``Outcome.splits``), first
    half first, down to single events, until ``give_up_after(len(batch))`` refusals in a row
    say the batch is refused as a whole. ``settle`` is told each piece's final outcome and
    says whether to go on; the pieces not sent when it says no are returned, in order, with
    the tally of the batch for ``conclude``. ``track(stack, posting)``: told the pieces
    waiting and the one being posted, for a closing thread that may take them over."""
    tally = Tally(len(batch))
    limit = give_up_after(len(batch))
    streak = 0
    stack = [batch]
    while stack:
        chunk = stack.pop()
        if track is not None:
            track(stack, chunk)
        outcome, error = post(chunk)
        if track is not None:
            track(stack, None)
        tally.requests += 1
        streak = streak + 1 if outcome.splits else 0
        if outcome.splits and streak >= limit and len(stack) + len(chunk) > 1:
            # Refused as a whole: fail this piece and the rest untried, splitting no more.
            rest = [chunk, *reversed(stack)]
            stack.clear()
            tally.gave_up = sum(map(len, rest))
            tally.gave_up_as = outcome
            tally.streak = streak
            for piece in rest:
                tally.add(piece, outcome, error)
                settle(piece, outcome, error)
            break
        if outcome.splits and len(chunk) > 1:
            first, second = chunk.halves()
            stack.append(second)
            stack.append(first)
            continue
        tally.add(chunk, outcome, error)
        if not settle(chunk, outcome, error):
            return [chunk, *reversed(stack)], tally
    return [], tally


def conclude(reporter: Reporter, tally: Tally, *, replay: bool) -> None:
    """Report what the service refused of one batch: one line per cause (the reporter prints
    each once), one ``on_error`` call per kind of refusal."""
    report = reporter.report
    n = tally.size
    rejected = "replay_rejected" if replay else "failed_rejected"
    whole = tally.gave_up_as
    if whole is not None:
        code, where, cause = ((400, rejected, Cause.REFUSED_WHOLE)
                              if whole is Outcome.REJECTED else
                              (413, "replay_rejected" if replay else "dropped_too_large",
                               Cause.TOO_LARGE_WHOLE))
        error = tally.rejected_error if whole is Outcome.REJECTED else tally.too_large_error
        said = answer_of(error) if error is not None else f"HTTP {code}"
        report(cause, f"a batch of {plural(n, 'event')} was refused whole ({said}): check for "
                      f"a proxy in front of the service; {n - tally.delivered:,} not delivered"
                      f"{counted(where)}")
    if tally.too_large and whole is not Outcome.TOO_LARGE:
        report(Cause.TOO_LARGE, f"the service refused {plural(tally.too_large, 'event')} as too "
                                f"large (HTTP 413): log smaller events"
                                + counted("replay_rejected" if replay else "dropped_too_large"))
    if tally.rejected and whole is not Outcome.REJECTED:
        said = (answer_of(tally.rejected_error) if tally.rejected_error is not None
                else "HTTP 400")
        report(Cause.REJECTED, f"the service rejected {tally.rejected:,} of "
                               f"{plural(n, 'event')} ({said}): check what "
                               f"{'it holds' if tally.rejected == 1 else 'they hold'}"
                               + counted(rejected))
    if tally.unreadable:
        report(Cause.UNREADABLE, f"{tally.unreadable_error}"
                                 + counted("replay_rejected" if replay else "failed_by_service"))
    partial = tally.partial()
    if partial is not None:
        reason = _first_failure(partial.failures)
        report(Cause.PARTIAL, f"the service turned down {plural(partial.failed, 'event')} "
                              f"({clip(reason, 60) if reason else 'no reason given'}): check "
                              f"what {'it holds' if partial.failed == 1 else 'they hold'}"
                              + counted("replay_rejected" if replay else "failed_by_service"))
    for error in (tally.too_large_error, tally.rejected_error, tally.unreadable_error, partial):
        if error is not None:
            reporter.error(error)


def partial_error(ingested: int, failed: int, failures: list[Any],
                  of: int | None = None) -> PartialIngestError:
    """The error for ``failed`` events turned down in a 2xx ingest status."""
    batch = f" of a batch of {of}" if of else ""
    return PartialIngestError(
        f"the service turned down {plural(failed, 'event')}{batch} in its ingest status "
        f"(ingested {ingested:,}, failed {failed:,})"
        + (f": {clip(reason, 100)}" if (reason := _first_failure(failures)) else ""),
        ingested=ingested, failed=failed, failures=failures)


def _first_failure(failures: list[Any]) -> str:
    """The service's reason for the first event it turned down, or ""."""
    for failure in failures:
        if isinstance(failure, dict) and isinstance(failure.get("error"), str):
            return printable(failure["error"])
    return ""
