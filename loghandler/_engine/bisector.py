"""The split loop: one batch posted, and what the service refuses halved down to single events.

One loop (``Bisection``) serves delivery and spool replay alike; its caller posts each piece it
hands out and settles what it returns (it calls nothing back). It is bounded: a batch of n
events answered 400 (or 413) to every request costs at most ``give_up_after(n)`` requests, since
that many refusals in a row (with nothing accepted between) mean the batch is refused as a whole.
One or two bad events never make such a streak: each refused request on the way down to a bad
event is followed by its first half, which holds no bad event unless the streak goes on down.
``conclude`` then tells what became of the batch: one line per cause, one ``on_error`` call per
kind of refusal.
"""

from __future__ import annotations

from typing import Any

from .._errors import Error, PartialIngestError
from .._output import clip, printable
from .batches import Chunk
from .policy import Cause, Outcome, give_up_after
from .reporter import Reporter, answer_of, counted, plural

__all__ = ["Bisection", "Tally", "conclude", "partial_error"]


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


class Bisection:
    """One batch's split loop, driven by its caller, who posts (see the module docstring)::

        split = Bisection(batch)
        while (piece := split.next()) is not None:
            outcome, error = post(piece)
            for done in split.told(outcome, error):
                settle(done, outcome, error)
        conclude(reporter, split.tally, replay=...)

    What the service refuses by halves (``Outcome.splits``) is halved, first half first, down
    to single events, until ``give_up_after(len(batch))`` refusals in a row say the batch is
    refused as a whole. ``held()`` is what the caller holds meanwhile (the piece being posted,
    then the pieces waiting, in order), for a closing thread that may take them over.
    """

    __slots__ = ("limit", "posting", "stack", "streak", "tally")

    def __init__(self, batch: Chunk) -> None:
        self.tally = Tally(len(batch))
        self.limit = give_up_after(len(batch))
        self.streak = 0
        self.stack = [batch]
        self.posting: Chunk | None = None

    def next(self) -> Chunk | None:
        """The next piece to post (``posting`` until it is ``told``), or None: all told."""
        if not self.stack:
            return None
        self.posting = self.stack.pop()
        return self.posting

    def told(self, outcome: Outcome, error: Error | None) -> list[Chunk]:
        """The posted piece's outcome: the pieces that reached it for good, in order, for the
        caller to settle with it (none when the piece is split, all that is left when the
        batch is refused as a whole)."""
        chunk = self.posting
        assert chunk is not None
        self.posting = None
        tally = self.tally
        tally.requests += 1
        stack = self.stack
        self.streak = streak = self.streak + 1 if outcome.splits else 0
        if outcome.splits and streak >= self.limit and len(stack) + len(chunk) > 1:
            # Refused as a whole: this piece and the rest untried fail, split no more.
            rest = [chunk, *reversed(stack)]
            stack.clear()
            tally.gave_up = sum(map(len, rest))
            tally.gave_up_as = outcome
            tally.streak = streak
            for piece in rest:
                tally.add(piece, outcome, error)
            return rest
        if outcome.splits and len(chunk) > 1:
            first, second = chunk.halves()
            stack.append(second)
            stack.append(first)
            return []
        tally.add(chunk, outcome, error)
        return [chunk]

    def waiting(self) -> list[Chunk]:
        """The pieces not posted yet, oldest first."""
        return self.stack[::-1]

    def held(self) -> list[Chunk]:
        """The piece being posted (if any), then the pieces waiting, oldest first."""
        posting = self.posting
        return ([posting] if posting is not None else []) + self.stack[::-1]


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
