"""What a shipper tells people: one stderr line per cause, ``on_error``, the exit summary.

A failing service must not turn into a storm of lines: each cause (``auth``, ``not_found``,
``retries_exhausted``, ...) is printed once, until delivery recovers ("delivering again"). Causes
about single events (rejected, too large, turned down in an ingest status) or the service's
normal limits say nothing about an outage, so they are printed once for the shipper's life.
While the exit hook closes shippers, a batch that fails is told in the hook's one summary line
instead (``defer``), so an exit prints at most one line per process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._output import clip, print_line, printable, redact, shown
from .guard import CALLBACK, sending
from .policy import LASTING, Cause
from .stats import Stats

if TYPE_CHECKING:
    from .ledger import Flushing

__all__ = ["Reporter", "answer_of", "counted", "plural", "print_exit_summary"]

# Every line: "loghandler: dataset 'app': <cause>: <action>", one cause and one action, about
# 160 characters at most with a short dataset name. What the service said is clipped to fit.
SERVICE_WORDS = 60


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``1 event``, ``3 events``, ``1,000 events`` (``nouns``: an irregular plural)."""
    return f"{n:,} {noun if n == 1 else (nouns or noun + 's')}"


def answer_of(error: BaseException | None) -> str:
    """An error as a line's parenthesis: ``HTTP 403: invalid token`` for the service's
    answers (its own words clipped), the transport's sentence otherwise."""
    if error is None:
        return "no answer"
    status = getattr(error, "status", None)
    if isinstance(status, int):
        from .._output import service_message

        own = service_message(getattr(error, "body", None))
        return f"HTTP {status}" + (f": {clip_words(own, SERVICE_WORDS)}" if own else "")
    return clip(printable(str(error)), 90)


def clip_words(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters at a space, with a "…" when cut."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:") + "…"


def counted(counter: str) -> str:
    """`` (stats().<counter>)`` for a Python user; nothing on the command line, whose summary
    counts the events."""
    from .._wire.settings import in_command_line

    return "" if in_command_line() else f" (stats().{counter})"


def refusal(cause: Cause, error: BaseException | None, dataset: str, n: int) -> str:
    """The line of a batch the service refused for good, by the answer's kind (not found, a
    redirect, another 4xx)."""
    from .._wire.settings import said

    if cause is Cause.NOT_FOUND:
        name = clip(redact(dataset), 40)
        return (f"the service has no such dataset (HTTP 404): create it (loghandler datasets "
                f"create {name}) or check the name and {said('url_arg')}")
    if cause is Cause.REDIRECTED:
        return (f"the service redirected the request ({answer_of(error)}): check "
                f"{said('url_arg')} (https, no path too many or missing)")
    return (f"the service refused {plural(n, 'event')} ({answer_of(error)}), not sent again"
            f"{counted('failed_client_error')}: see its message")


class Reporter:
    """The reports of one shipper of ``dataset``; ``on_error`` is the user's callback or None."""

    __slots__ = ("_exit_cause", "_exit_summary", "_reported", "dataset", "on_error",
                 "told_drops")

    def __init__(self, dataset: str, on_error: Callable[[BaseException], Any] | None) -> None:
        self.dataset = dataset
        self.on_error = on_error
        self.reset()

    def reset(self) -> None:
        self._reported: set[Cause] = set()
        # Set by the exit hook before it closes the shipper: a batch that fails from then on is
        # told in the hook's one summary line (_exit_cause), not in a line of its own.
        self._exit_summary = False
        self._exit_cause: str | None = None
        # Drops at the door the stderr has told of (tell_drops): (queue full, invalid).
        self.told_drops = (0, 0)

    def tell_drops(self, ledger: Flushing, max_queue_size: int, spooled: bool) -> None:
        """Events dropped at the door since the last look are told, once per cause until
        delivery recovers: the caller's thread, which drops them, prints nothing. Asked by the
        flusher between batches and before each retry's wait (the queue may fill meanwhile).
        ``spooled``: the shipper has a ``spool_dir`` (the advice differs)."""
        if self._exit_summary:
            return  # the exit hook's summary line counts them
        full, invalid = ledger.drops()
        told_full, told_invalid = self.told_drops
        if full > told_full:
            what = ("raise max_queue_size / max_queue_bytes" if spooled
                    else "raise max_queue_size or set spool_dir")
            self.report(
                Cause.QUEUE_FULL,
                f"the queue is full (max_queue_size={max_queue_size:,}): "
                f"{plural(full, 'event')} dropped{counted('dropped_queue_full')}: {what}")
        if invalid > told_invalid:
            self.report(
                Cause.DROPPED_INVALID,
                f"an internal error of loghandler lost {plural(invalid, 'event')}"
                f"{counted('dropped_invalid')}: please report it")
        self.told_drops = (full, invalid)

    def invalid_told(self, n: int) -> None:
        """``n`` events counted ``dropped_invalid`` were told with their cause (the flusher
        stopped on an internal error): ``tell_drops`` does not tell them again."""
        full, invalid = self.told_drops
        self.told_drops = (full, invalid + n)

    @property
    def exiting(self) -> bool:
        """The exit hook is closing the shipper: its one summary line tells what was lost."""
        return self._exit_summary

    def report(self, cause: Cause, message: str) -> None:
        """One stderr line per cause, until delivery recovers."""
        if cause not in self._reported:
            self._reported.add(cause)
            print_line(f"loghandler: dataset {shown(self.dataset)}: {message}")

    def report_or_defer(self, cause: Cause, message: str, brief: str | None = None) -> None:
        """``report``, except during the exit hook's close: its summary line says it (in
        ``brief`` words when given)."""
        if self._exit_summary:
            if self._exit_cause is None and cause not in self._reported:
                self._exit_cause = brief or message
        else:
            self.report(cause, message)

    def note_shutdown_error(self, error: BaseException | str) -> None:
        """Why a batch was given up at the close deadline (its last error, or what happened),
        for the exit summary."""
        if self._exit_summary and self._exit_cause is None:
            self._exit_cause = (error if isinstance(error, str)
                                else f"last error: {answer_of(error)}")

    def recovered(self) -> bool:
        """A batch was delivered: outages are over. True when one was reported (and is now
        told to be over)."""
        reported = self._reported
        if reported and not reported <= LASTING:
            self._reported = reported & LASTING
            print_line(f"loghandler: dataset {shown(self.dataset)}: delivering again")
            return True
        return False

    def error(self, error: BaseException) -> None:
        """Hand ``error`` to the user's ``on_error``; what it raises is ignored."""
        callback = self.on_error
        if callback is None:
            return
        try:
            with sending(CALLBACK):  # what it logs is ours: never shipped
                callback(error)
        except BaseException as exc:  # KeyboardInterrupt too: the flusher must live on
            # The application's callback failed: one line (once), never a traceback, and the
            # flusher goes on. A KeyboardInterrupt raised here was meant for the main thread.
            said = clip(printable(str(exc)), 60)
            self.report(Cause.ON_ERROR, f"on_error raised {type(exc).__name__}"
                                        f"{f' ({said})' if said else ''}, which was ignored: "
                                        "make the callback catch its own errors")

    # ------------------------------------------------------------------ at exit

    def begin_exit_summary(self) -> None:
        self._exit_summary = True

    def exit_summary(self, st: Stats, spool_dir: str | None) -> str | None:
        """This shipper's part of the exit line, or None when everything was delivered."""
        # Events a policy dropped (sampled out, repeats, held) were chosen, not lost.
        chosen = st.dropped_sampled + st.dropped_repeat + st.dropped_held
        dropped = st.dropped - chosen
        lost = dropped + st.failed + st.queued
        if not (lost or st.spooled or st.unconfirmed):
            return None
        bits = []
        if dropped:
            reasons = [f"{n:,} {r}" for r, n in (
                ("on a full queue", st.dropped_queue_full), ("at exit", st.dropped_shutdown),
                ("too large", st.dropped_too_large), ("after close", st.dropped_closed),
                ("invalid", st.dropped_invalid)) if n]
            bits.append(f"{dropped:,} dropped ({', '.join(reasons)})")
        if st.failed:
            reasons = [f"{n:,} {r}" for r, n in (
                ("token refused", st.failed_auth), ("dataset not found", st.failed_not_found),
                ("turned down by the service", st.failed_rejected + st.failed_by_service),
                ("client error", st.failed_client_error),
                ("with retries used up", st.failed_retries_exhausted)) if n]
            bits.append(f"{st.failed:,} failed ({', '.join(reasons)})" if reasons
                        else f"{st.failed:,} failed")
        if st.queued:
            bits.append(f"{st.queued:,} still queued")
        if st.spooled:
            bits.append(f"{st.spooled:,} spooled to {spool_dir} for later delivery")
        if st.unconfirmed:
            # Apart from the losses: sent, and the service may well have stored them.
            bits.append(f"{st.unconfirmed:,} unconfirmed (sent, no answer by the deadline: "
                        "the service may have stored them)")
        cause = f"; {clip(self._exit_cause, 100)}" if self._exit_cause else ""
        return (f"dataset {shown(self.dataset)}: {st.delivered:,} of {st.submitted:,} delivered, "
                + ", ".join(bits) + cause)


def print_exit_summary(parts: list[str]) -> None:
    """The exit hook's one line for every shipper that did not deliver everything."""
    if parts:
        print_line("loghandler: at exit: " + "; ".join(parts))
