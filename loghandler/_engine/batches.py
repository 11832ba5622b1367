"""Batches: events on their way (``Chunk``), and the one rule that cuts them (``cut``).

A request (and a spool file, which is replayed as one request) holds at most ``batch_size``
events and ``max_batch_bytes`` bytes of JSON array, brackets and commas included. ``cut`` applies
that rule to encoded events for the requests and the spool alike; ``Cutter`` takes the next batch
from the ledger for the worker (``worker.py``), with the repeats (``Repeats``) left out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

from .. import _encoding as encoding
from . import compiled
from .events import SIZE, item_events, rfc3339
from .ledger import Fate, Flushing

if TYPE_CHECKING:
    from .shaping import Selector

__all__ = ["Chunk", "Cutter", "Item", "Repeats", "chunks", "cut", "encode_batch", "encode_each",
           "join_array", "whole_batch"]

# An event on its way: a dict, or a wire item, its final JSON already (events.py "Wire items").
Item = dict[str, Any] | bytes


def cut(parts: list[bytes], start: int, max_events: int, max_bytes: int) -> int:
    """Where the batch that starts at ``parts[start]`` ends (an index past ``start``): at least
    one event, then as many as fit in ``max_events`` and a ``max_bytes`` JSON array."""
    end, size = start, 1  # "[" and "]", less the comma the first event does not need
    stop = min(len(parts), start + max_events)
    while end < stop:
        size += len(parts[end]) + 1
        if size > max_bytes and end > start:
            break
        end += 1
    return end


def chunks(parts: list[bytes], max_events: int, max_bytes: int) -> Iterator[list[bytes]]:
    """``parts`` cut into consecutive batches (``cut``)."""
    i = 0
    while i < len(parts):
        end = cut(parts, i, max_events, max_bytes)
        yield parts[i:end]
        i = end


def encode_each(events: list[Item]) -> list[bytes]:
    """Each event encoded on its own (to cut by bytes, to split, to spool); a wire item
    (events.py "Wire items") is its encoding already.

    orjson returns every result in a buffer of at least 4 KiB, whatever its length: 10,000
    events held for a spool write took 39 MiB instead of 2.7 MiB, and the allocator kept that
    peak for reuse (RSS grew by it during an outage). A right-sized copy costs about 50 ns.
    """
    encode = encoding.encode
    if encoding.HAVE_ORJSON:
        return [e if type(e) is bytes else b"%b" % encode(e) for e in events]
    return [e if type(e) is bytes else encode(e) for e in events]


def join_array(parts: list[bytes]) -> bytes:
    """The JSON array of encoded events, copied once: ``b"[" + b",".join(parts) + b"]"``
    copies the whole body twice, and the second copy, a fresh block of a megabyte or more
    while the first is alive, costs its page faults too: 1.3 ms a batch of 5,000 events with
    the interpreter's lock held, against 0.25 ms (docs/performance.md, "Fourth pass")."""
    if len(parts) < 2:
        return b"[" + b"".join(parts) + b"]"
    mid = parts[:]  # the brackets go on the two ends' own (small) copies
    mid[0] = b"[" + mid[0]
    mid[-1] += b"]"
    return b",".join(mid)


def encode_batch(events: list[Item]) -> bytes | None:
    """A JSON array of events in one step: wire items joined, or dicts encoded a slice at a
    time (``encoding.encode_many``); None when they are of both kinds, or a value needs the
    per-event fallback."""
    if events and type(events[0]) is bytes:
        try:
            return join_array(cast("list[bytes]", events))
        except TypeError:  # a dict among them: event by event
            return None
    if bytes in set(map(type, events)):  # the encoder would write a wire item as a string
        return None
    return encoding.encode_many(events)


def whole_batch(events: list[Item], max_bytes: int) -> Chunk | None:
    """``events`` as one request when they fit in ``max_bytes``, else None (they are cut
    event by event). Wire items are only measured (``array_length``, C): their body is joined
    when it is sent, or never, when compressed (``Chunk.wire``)."""
    measure = compiled.array_length
    if measure is not None and events and type(events[0]) is bytes:
        length = measure(events)
        return Chunk(events, wire=True) if 0 <= length <= max_bytes else None
    body = encode_batch(events)
    return Chunk(events, body=body) if body is not None and len(body) <= max_bytes else None


class Chunk:
    """Events on their way: dicts (or wire items) encoded as one body (the fast path), or
    encoded one by one.

    Encoding a whole batch in one call is several times cheaper than event by event; the
    per-event form is needed only to cut by bytes, to split (413 / 400) and to spool.
    ``wire``: the events are wire items (bytes) and their body is not made yet: a compressed
    request writes their array straight into the gzip stream (``compiled.array_gzip``).
    """

    __slots__ = ("_body", "events", "parts", "wire")

    def __init__(self, events: list[Item] | None = None,
                 parts: list[bytes] | None = None, body: bytes | None = None,
                 wire: bool = False) -> None:
        self.events = events
        self.parts = parts
        self._body = body
        self.wire = wire

    def __len__(self) -> int:
        return len(self.parts) if self.parts is not None else len(self.events or ())

    def body(self) -> bytes:
        if self._body is None:
            self._body = join_array(self.as_parts())
        return self._body

    def joined(self) -> bytes:
        """The body, not kept when it is not made yet: a compressor that takes one buffer
        (``posting``'s ISA-L) needs it for one call, and the tries keep the compressed form."""
        return self._body if self._body is not None else join_array(self.as_parts())

    def as_parts(self) -> list[bytes]:
        if self.parts is None:
            self.parts = (cast("list[bytes]", self.events) if self.wire
                          else encode_each(self.events or []))
        return self.parts

    def wire_items(self) -> list[bytes] | None:
        """The wire items whose array is this chunk's body, when it is not made yet."""
        return cast("list[bytes]", self.events) if self.wire and self._body is None else None

    def halves(self) -> tuple[Chunk, Chunk]:
        if self.events is not None:
            mid = len(self.events) // 2
            return (Chunk(self.events[:mid], wire=self.wire),
                    Chunk(self.events[mid:], wire=self.wire))
        parts = self.as_parts()
        mid = len(parts) // 2
        return Chunk(parts=parts[:mid]), Chunk(parts=parts[mid:])


class Repeats:
    """The repeats selector (``shaping.Selector``) of a shipper with ``repeat_limit``, and its
    account: what it drops is settled at once (``dropped_repeat``), a repeat window's summary
    is queued as an event of its own. Its state (the repeat windows) is shared by the flusher
    (``Cutter``, per batch) and application threads that spill a full queue
    (``Worker.spill_from_caller``): locked only for its CPU work, never across I/O."""

    __slots__ = ("ledger", "lock", "selector")

    def __init__(self, selector: Selector, ledger: Flushing) -> None:
        self.selector = selector
        self.ledger = ledger
        self.lock = threading.Lock()

    def select(self, events: list[Item], first: int | None = None,
               settle: Callable[[int, Fate], None] | None = None) -> list[Item]:
        """The events kept. ``first``: the events are an application thread's spill (the run
        that starts at ``first``), settled on its side (``Flushing.settle_side``). ``settle``:
        how the flusher settles what it drops (``Cutter.settle``), when not at once."""
        with self.lock:
            kept, repeats, summaries = self.selector.select(cast("list[dict[str, Any]]", events))
        if repeats:
            if first is None:
                (settle or self.ledger.settle)(repeats, Fate.DROPPED_REPEAT)
            else:
                self.ledger.settle_side(first, repeats, Fate.DROPPED_REPEAT)
        self._queue(summaries)
        return cast("list[Item]", kept)

    def summarize(self, closed: bool) -> None:
        """Queue the summaries of the windows that ended (every flusher pass), or of every
        open window (``closed``: after the last queued events were selected)."""
        with self.lock:
            summaries = (self.selector.flush_all() if closed
                         else self.selector.expired(time.monotonic()))
        self._queue(summaries)

    def _queue(self, summaries: list[dict[str, Any]]) -> None:
        for event in summaries:
            event["_time"] = rfc3339(time.time())
            event[SIZE] = size = 600
            self.ledger.add_own(event, size)


class Cutter:
    """Takes the worker's next batch from the ledger: up to ``batch_size`` events and
    ``max_batch_bytes`` encoded bytes. ``carry`` holds encoded events already taken from the
    queue (in flight) that did not fit in the previous batch; they go first."""

    __slots__ = ("carry", "fields", "finish", "ledger", "max_bytes", "max_events", "repeats",
                 "settle")

    def __init__(self, ledger: Flushing, batch_size: int, max_batch_bytes: int, fields: Any,
                 finish: Callable[..., None] | None = None, repeats: Repeats | None = None,
                 ) -> None:
        self.ledger = ledger
        self.max_events = batch_size
        self.max_bytes = max_batch_bytes
        self.fields = fields
        # What ships (shaping.py): each event finished (exclusions, scrubbing), then the batch
        # selected (repeats), which settles what it drops.
        self.finish = finish
        self.repeats = repeats
        self.carry: list[bytes] = []
        # How what the cut drops (too large, repeats) is settled: None, at once (the oldest
        # events in flight are the batch's); the worker's list while the batch is taken before
        # the previous one is answered (``Worker._prepare``), applied after that one's.
        self.settle: Callable[[int, Fate], None] | None = None

    def next(self, partial: bool, spill: int = 0, spill_bytes: int | None = None
             ) -> Chunk | None:
        """The next batch; None when the queue holds none (or, unless ``partial``, less than a
        full one). An event too large for any request is settled ``dropped_too_large``.

        ``spill``: the events go to the spool, not to the service (an outage is known): take up
        to that many (and ``spill_bytes`` of estimated sizes) at once, unencoded, so that the
        spool's fixed cost per write (system calls, each costing the flusher the GIL) is paid
        once for several batches."""
        ledger = self.ledger
        carry = self.carry
        while True:
            if carry:
                items = ledger.take(self.max_events - len(carry), partial=True) or []
            else:
                taken = (ledger.take(spill, partial, spill_bytes) if spill
                         else ledger.take(self.max_events, partial))
                if taken is None:
                    return None
                items = taken
            events = item_events(items, self.fields, self.finish)
            if self.repeats is not None and events:
                events = self.repeats.select(events, settle=self.settle)
                if not events and not carry:
                    continue
            if spill and not carry:
                return Chunk(events)
            if not carry:
                whole = whole_batch(events, self.max_bytes)
                if whole is not None:
                    return whole
            # Too big for one request, or a value the fast path refused: event by event.
            parts = carry + encode_each(events)
            carry.clear()
            start = 0
            while start < len(parts) and 2 + len(parts[start]) > self.max_bytes:
                # One event bigger than a whole batch: the service could never take it. It
                # is the oldest event in flight, so settling it now keeps the order.
                (self.settle or ledger.settle)(1, Fate.DROPPED_TOO_LARGE)
                start += 1
            if start < len(parts):
                end = cut(parts, start, self.max_events, self.max_bytes)
                carry.extend(parts[end:])
                return Chunk(parts=parts[start:end])
