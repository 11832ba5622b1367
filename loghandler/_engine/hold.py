"""Hold-until-error: a context's lower-level events ship only if the context logs an error.

With ``hold_level="info"`` (say), an event at info or below logged inside a
``loghandler.context`` is not queued: it waits in memory, in a ring of ``hold_size`` events kept
for that context entry (each thread and asyncio task has its own, as contexts do). An error
(level ERROR or above) logged in the context releases what is held -- in order, before the
error -- into the queue, and so does an exception leaving the context (the framework's own error
line is often logged outside it); when the context ends without one, the held events are dropped and
counted (``dropped_held``). A context nested in another hands its held events to the outer one
when it ends, so an error later in the request still releases them. Outside any context nothing
is held. At most ``hold_total`` events are held at once per shipper; beyond, a new event to be
held is dropped and counted.

Held events are counted as submitted only when they are released (then queued as usual) or
dropped (then ``dropped_held``), so ``stats()`` keeps its invariant at every moment. When the
shipper closes (``close()``, the process's exit) with contexts still open, what they hold is
dropped and counted ``dropped_held`` then: they logged no error, so their events do not ship,
and none goes uncounted (``close``). Events those contexts log later are not held.

Cost: nothing on the plain path. Entering a context pays one list read while no shipper holds
(``ENABLED``), and a front end reaches ``Hold.take`` only inside a context. The compiled path
holds the common case itself (room in a buffer the context entry has already), with no call into
Python, and leaves the rest to ``Hold.take``: ``counts`` is the state both read.
"""

from __future__ import annotations

import logging
from collections import deque
from contextvars import ContextVar, Token
from typing import Any, Protocol

from .._levels import known_level as known_level  # the options' checks share it
from .stats import Fate

__all__ = ["CLOSED", "ENABLED", "HELD", "SIZE", "TOTAL", "Hold", "Queue", "enter", "exit",
           "known_level", "level_number"]


class Queue(Protocol):
    """Where released events go and held ones are counted: the ledger's intake face
    (``Intake``), which satisfies this."""

    def offer(self, item: dict[Any, Any], size: int) -> bool: ...

    def drop(self, fate: Fate) -> bool: ...


ERROR = logging.ERROR
_LEVELS = {"debug": 10, "info": 20, "warning": 30}

# One ``Held`` per context entry (while some shipper holds): its buffers, by shipper.
_HELD: ContextVar[Held | None] = ContextVar("loghandler_held", default=None)
# Set once a shipper with hold_level exists: until then contexts skip this module.
ENABLED = [False]
# The places in ``Hold.counts``: events held now, the two bounds, closed. One list because the
# compiled path holds an event itself (``way_finish``'s common case: room in a buffer that
# exists) and updates the same count, reading it without an attribute look-up.
HELD, TOTAL, SIZE, CLOSED = range(4)


class Held:
    __slots__ = ("buffers", "outer")

    def __init__(self, outer: Held | None) -> None:
        self.outer = outer
        self.buffers: dict[Hold, deque[tuple[dict[Any, Any], int]]] = {}

    def chain(self) -> list[Held]:
        """This entry and the ones it is nested in, innermost first."""
        chain = []
        h: Held | None = self
        while h is not None:
            chain.append(h)
            h = h.outer
        return chain


def enter() -> Token[Held | None]:
    """Called by ``context.__enter__`` while ENABLED: a new entry's buffers."""
    return _HELD.set(Held(_HELD.get()))


def exit(token: Token[Held | None], failed: bool = False) -> None:
    """Called by ``context.__exit__``: hand the held events to the outer entry, or drop them;
    ``failed`` (the context was left by an exception): release them, as an error would."""
    held = _HELD.get()
    _HELD.reset(token)
    if held is None:
        return
    if failed:
        holds = {hold for h in held.chain() for hold in h.buffers}
        for hold in holds:
            hold.release(held)
        return
    for hold, buffer in held.buffers.items():
        hold.end(buffer, held.outer)


def level_number(level: Any) -> int:
    """A level (number, or name of any case) as a number; unknown names rank as info."""
    if type(level) is int:
        return level
    if type(level) is str:
        n = known_level(level)
        return 20 if n is None else n
    return 20


class Hold:
    """One shipper's hold-until-error policy (see the module docstring)."""

    __slots__ = ("__weakref__", "counts", "ledger", "level", "live")

    def __init__(self, level: str, size: int, total: int, ledger: Queue) -> None:
        self.level = _LEVELS[level]
        self.ledger = ledger
        # [HELD, TOTAL, SIZE, CLOSED]: events held now across contexts (approximate under
        # races; a bound), at most ``total`` of them, ``size`` per buffer; closed.
        self.counts: list[Any] = [0, total, size, False]
        # Every buffer holding events, by id: what close() counts (contexts still open, and
        # those never exited, as an abandoned coroutine's).
        self.live: dict[int, deque[tuple[dict[Any, Any], int]]] = {}
        ENABLED[0] = True

    def plan(self) -> tuple[int, Any, Any, Hold, list[Any], type]:
        """What the compiled path reads (fastpath.HoldPlan's fields, in order)."""
        return (self.level, self.take, _HELD, self, self.counts, deque)

    def close(self) -> None:
        """The shipper closes: every event still held is dropped and counted
        (``dropped_held``), and nothing is held from now on."""
        self.counts[CLOSED] = True
        live, self.live = self.live, {}
        n = 0
        for buffer in list(live.values()):
            n += len(buffer)
            buffer.clear()
        self.counts[HELD] = 0
        drop = self.ledger.drop
        for _ in range(n):
            drop(Fate.DROPPED_HELD)

    def take(self, item: dict[Any, Any], size: int, levelno: int) -> bool:
        """True when ``item`` is held (or dropped for the bound): the caller queues nothing.
        An error releases the context's held events into the queue first, and returns False."""
        held = _HELD.get()
        counts = self.counts
        if held is None or counts[CLOSED]:
            return False
        if levelno >= ERROR:
            self.release(held)
            return False
        if levelno > self.level:
            return False
        buffer = held.buffers.get(self)
        if buffer is None:
            buffer = held.buffers[self] = deque()
            self.live[id(buffer)] = buffer
        if counts[HELD] >= counts[TOTAL]:
            self.ledger.drop(Fate.DROPPED_HELD)
            return True
        if len(buffer) >= counts[SIZE]:
            buffer.popleft()
            counts[HELD] -= 1
            self.ledger.drop(Fate.DROPPED_HELD)
        buffer.append((item, size))
        counts[HELD] += 1
        return True

    def release(self, held: Held) -> None:
        """Queue, in order, what ``held`` and the entries it is nested in hold: an error was
        logged in it, or it was left by an exception."""
        offer = self.ledger.offer
        for h in reversed(held.chain()):  # the outermost entry's events are the oldest
            buffer = h.buffers.pop(self, None)
            if buffer is not None:
                self.live.pop(id(buffer), None)
            if buffer and not self.counts[CLOSED]:
                self.counts[HELD] -= len(buffer)
                for item, size in buffer:
                    offer(item, size)

    def end(self, buffer: deque[tuple[dict[Any, Any], int]], outer: Held | None) -> None:
        counts = self.counts
        if not buffer or counts[CLOSED]:  # (closed: counted by close())
            self.live.pop(id(buffer), None)
            return
        if outer is not None:
            target = outer.buffers.get(self)
            if target is None:
                outer.buffers[self] = buffer
                return
            self.live.pop(id(buffer), None)
            target.extend(buffer)
            while len(target) > counts[SIZE]:
                target.popleft()
                counts[HELD] -= 1
                self.ledger.drop(Fate.DROPPED_HELD)
            return
        self.live.pop(id(buffer), None)
        counts[HELD] -= len(buffer)
        for _ in range(len(buffer)):
            self.ledger.drop(Fate.DROPPED_HELD)
        buffer.clear()
